"""Token accounting, preflight, and the guards that keep compaction from misfiring:
cooldowns, the anti-thrash counter with its recovery path, the fallback streak and the
frequency guard — each visible through ``should_compress_info`` and ``get_status``
(reference §2.3, §2.4, §2.8, §9.1, §9.2; #36718, #40803, #14694, #117574)."""

from __future__ import annotations

import json

import hermes
from hermes.testing.conformance.context import make_conversation


def usage(prompt: int, completion: int = 10) -> dict:
    return hermes.Usage(input_tokens=prompt, output_tokens=completion).as_dict()


def test_gate_at_the_threshold(engine_factory):
    engine = engine_factory(window=100_000, threshold_percent=0.85, small_window_floor=0)
    assert engine.threshold_tokens == 85_000
    assert engine.should_compress(50_000) is False
    assert engine.should_compress(85_000) is True   # exactly at the trigger fires
    assert engine.should_compress(90_000) is True
    engine.update_from_response(usage(90_000))
    assert engine.should_compress() is True
    assert engine.should_compress(10) is False      # an explicit count overrides state


def test_update_from_response_copies_counters(engine_factory):
    engine = engine_factory()
    engine.update_from_response({"prompt_tokens": 1200, "completion_tokens": 30})
    assert (engine.last_prompt_tokens, engine.last_completion_tokens, engine.last_total_tokens) == (1200, 30, 1230)
    engine.update_from_response({})
    assert engine.last_prompt_tokens == 0  # missing counts are zero: back to rough estimates


def test_status_keys_and_percent(engine_factory):
    engine = engine_factory(window=100_000)
    engine.update_from_response(usage(50_000))
    status = engine.get_status()
    assert status["usage_percent"] == 50.0
    for key in ("engine", "threshold_percent", "tail_token_budget", "max_summary_tokens", "blocked",
                "cooldown_remaining_s", "cooldown_error", "ineffective_strikes", "fallback_streak",
                "recent_compactions", "awaiting_real_usage", "previous_summary_tokens",
                "last_compression"):
        assert key in status
    json.dumps(status)


def test_preflight_uses_a_rough_estimate_before_any_usage(engine_factory):
    engine = engine_factory(window=8_000)
    small = make_conversation(1, seed=1)
    big = make_conversation(30, seed=1)
    assert engine.should_compress_preflight(small) is False
    assert engine.should_compress_preflight(big) is True


def test_preflight_counts_cjk_text(engine_factory):
    engine = engine_factory(window=8_000)
    text = "压缩上下文" * 1_500  # 7,500 CJK characters ≈ 7,500 tokens, not 1,900
    assert engine.should_compress_preflight([{"role": "user", "content": text}]) is True


def test_preflight_projects_real_usage_plus_growth(engine_factory):
    engine = engine_factory(window=100_000, small_window_floor=0)  # trigger 64,000
    msgs = [{"role": "user", "content": "x" * 40_000}]              # rough ≈ 10,000
    assert engine.should_compress_preflight(msgs) is False
    engine.update_from_response(usage(60_000))  # the provider counts far more (tools, system)
    grown = [*msgs, {"role": "assistant", "content": "y" * 8_000}]  # +2,000 rough
    assert engine.should_compress_preflight(grown) is False         # 62,000 projected
    grown.append({"role": "user", "content": "z" * 12_000})          # +3,000 more
    assert engine.should_compress_preflight(grown) is True          # 65,000 projected
    assert engine.should_defer_preflight_to_real_usage(10) is False


def test_no_second_compaction_before_real_usage_arrives(engine_factory):
    engine = engine_factory(window=8_000)
    msgs = make_conversation(30, seed=2)
    assert engine.should_compress_preflight(msgs)
    out = engine.compress(msgs)
    assert engine.last_compression["committed"]
    assert engine.last_prompt_tokens == -1 and engine.get_status()["last_prompt_tokens"] == 0
    # even a rough estimate over the trigger waits for the provider's count (#36718)
    assert engine.should_compress_preflight(msgs) is False
    assert engine.should_defer_preflight_to_real_usage(10**6) is True
    assert engine.should_compress() is False
    engine.update_from_response(usage(3_000))
    assert engine.get_status()["awaiting_real_usage"] is False
    assert engine.should_compress_preflight(out) is False


def test_ineffective_compactions_block_then_recover(engine_factory):
    engine = engine_factory(window=100_000, small_window_floor=0)  # trigger 64,000
    msgs = make_conversation(60, seed=3)
    for _ in range(2):
        engine.update_from_response(usage(70_000))
        assert engine.should_compress_info() == (True, None)
        engine.compress(msgs, current_tokens=70_000)
        assert engine.last_compression["committed"]
        # the system prompt and tools alone keep the prompt over the trigger
        engine.update_from_response(usage(70_000))
    assert engine.get_status()["ineffective_strikes"] == 2
    assert engine.should_compress_info() == (False, "ineffective")
    assert engine.get_status()["blocked"] == "ineffective"
    # recovery: once the prompt has grown enough since the last attempt, one more try
    recovery = max(4_096, int(64_000 * 0.10))
    assert engine.should_compress_info(70_000 + recovery - 1) == (False, "ineffective")
    assert engine.should_compress_info(70_000 + recovery) == (True, None)


def test_an_effective_compaction_resets_strikes(engine_factory):
    engine = engine_factory(window=100_000, small_window_floor=0)
    engine.compress(make_conversation(60, seed=4), current_tokens=70_000)
    engine.update_from_response(usage(70_000))
    assert engine.get_status()["ineffective_strikes"] == 1
    engine.update_from_response(usage(20_000))  # any reading under the trigger
    assert engine.get_status()["ineffective_strikes"] == 0


def test_nothing_to_compress_is_a_strike_and_unchanged(engine_factory):
    engine = engine_factory()
    msgs = make_conversation(1, seed=5)
    out = engine.compress(msgs)
    assert out == msgs
    assert engine.last_compression["aborted"].startswith("nothing to compress")
    assert engine.get_status()["ineffective_strikes"] == 1
    assert engine.has_content_to_compress(msgs) is False
    assert engine.has_content_to_compress(make_conversation(30, seed=5)) is True


def test_fallback_streak_blocks_automatic_compaction(engine_factory):
    engine = engine_factory(window=8_000)  # no summarizer: every summary is the fallback
    msgs = make_conversation(30, seed=6)
    for _ in range(2):
        engine.compress(msgs, current_tokens=20_000)
        assert engine.last_compression["fallback"]
        engine.update_from_response(usage(3_000))  # fitting responses do not reset the streak
    assert engine.get_status()["fallback_streak"] == 2
    assert engine.should_compress_info(20_000) == (False, "ineffective")
    # a forced compaction (overflow, /compress) still runs
    out = engine.compress(msgs, force=True)
    assert engine.last_compression["committed"] and out != msgs


def test_frequency_guard(engine_factory, clock):
    engine = engine_factory(window=8_000)
    engine.STRIKE_LIMIT = 99  # isolate the frequency guard from the fallback streak
    msgs = make_conversation(30, seed=7)
    for _ in range(engine.FREQUENCY_LIMIT):
        engine.compress(msgs)
        engine.update_from_response(usage(3_000))
        clock.advance(10)
    ok, reason = engine.should_compress_info(20_000)
    assert not ok and reason.startswith("frequency:")
    assert int(reason.split(":")[1]) == 600 - 50
    clock.advance(600)
    assert engine.should_compress_info(20_000) == (True, None)


def test_disabled_is_a_visible_reason(engine_factory):
    engine = engine_factory(enabled=False)
    assert engine.should_compress_info(10**6) == (False, "disabled")
    assert engine.should_compress_info(0) == (False, None)


def test_reset_and_session_end_clear_state(engine_factory):
    engine = engine_factory(window=8_000)
    engine.compress(make_conversation(30, seed=8))
    engine.update_from_response(usage(7_000))
    assert engine.compression_count == 1 and engine.get_status()["previous_summary_tokens"] > 0
    engine.on_session_reset()
    status = engine.get_status()
    assert (engine.last_prompt_tokens, engine.compression_count) == (0, 0)
    assert status["previous_summary_tokens"] == 0 and status["fallback_streak"] == 0
    assert status["last_compression"] is None
    engine.compress(make_conversation(30, seed=9))
    engine.on_session_end("s1", [])
    assert engine.get_status()["previous_summary_tokens"] == 0


def test_model_switch_resets_guards(engine_factory, clock):
    engine = engine_factory(window=8_000)
    engine._cooldown_until = clock() + 100
    engine._fallback_streak = 2
    engine.update_model("m", 8_000)           # same route: the cooldown stays
    assert engine.get_status()["cooldown_remaining_s"] == 100
    engine.update_model("other-model", 8_000)  # a new route: the failure was not its
    status = engine.get_status()
    assert status["cooldown_remaining_s"] == 0 and status["fallback_streak"] == 0


def test_automatic_status_message(engine_factory):
    engine = engine_factory()
    msg = hermes.automatic_compaction_status_message(engine, phase="compress", default_message=" compacting ")
    assert msg == "compacting"
    engine.emit_automatic_compaction_status = False
    assert hermes.automatic_compaction_status_message(engine, phase="compress", default_message="x") is None
