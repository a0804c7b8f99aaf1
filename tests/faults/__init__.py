"""Fault injection: real hermes processes killed with SIGKILL, then invariants checked."""
