"""Test-only fault points: kill this process at a named point of a write path.

``HERMES_FAULT_POINT=<name>`` in the environment makes :func:`fault_point` with that
name send SIGKILL to its own process, the way a crash or an OOM kill would stop it at
exactly that moment. Without the variable (always, outside tests) it does nothing but
one dictionary look-up. Crash-consistency tests use it to prove that a write path
leaves nothing half done. Points: ``compaction-split`` (inside the session split, after
the parent is ended and the child created, before the transaction commits).
"""

from __future__ import annotations

import os
import signal

__all__ = ["FAULT_POINT_ENV", "fault_point"]

#: The environment variable naming the point to die at.
FAULT_POINT_ENV = "HERMES_FAULT_POINT"


def fault_point(name: str) -> None:
    """SIGKILL this process when ``$HERMES_FAULT_POINT`` equals ``name``."""
    if os.environ.get(FAULT_POINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
