"""The system breakpoint sits on the frozen prompt, not on ephemeral additions."""

from hermes.plugins.llm.caching import apply_cache_control, count_cache_markers


def test_breakpoint_on_frozen_block_of_a_split_system_message():
    system = {"role": "system", "content": [{"type": "text", "text": "FROZEN"},
                                            {"type": "text", "text": "ephemeral, changes per call"}]}
    out = apply_cache_control([system, {"role": "user", "content": "hi"}])
    assert "cache_control" in out[0]["content"][0]
    assert "cache_control" not in out[0]["content"][1]
    assert "cache_control" not in system["content"][0]  # input untouched
    assert count_cache_markers(out) == 2
    assert apply_cache_control(out) == out  # idempotent
