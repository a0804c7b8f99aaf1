"""The ``ContextEngine`` ABC's defaults and the public compaction helpers
(reference §1, §9.4)."""

from __future__ import annotations

import json

import hermes


class Minimal(hermes.ContextEngine):
    """An engine implementing only the abstract methods."""

    name = "minimal"

    def update_from_response(self, usage):
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)

    def should_compress(self, prompt_tokens=None):
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return tokens >= self.threshold_tokens > 0

    def compress(self, messages, current_tokens=None, focus_topic=None, force=False, memory_context=""):
        return [dict(m) for m in messages]


class Legacy(Minimal):
    """An engine written before ``focus_topic``/``memory_context`` existed."""

    def compress(self, messages, current_tokens=None):  # noqa: D102 - an old signature on purpose
        self.seen = {"current_tokens": current_tokens}
        return list(messages)


class Open(Minimal):
    def compress(self, messages, **kwargs):
        self.seen = kwargs
        return list(messages)


def test_abc_defaults():
    engine = Minimal()
    assert (engine.threshold_percent, engine.protect_first_n, engine.protect_last_n) == (0.75, 3, 6)
    assert engine.emit_automatic_compaction_status is True
    engine.update_model("m", 100_000)
    assert engine.threshold_tokens == 75_000
    assert engine.should_compress_info(80_000) == (True, None)
    assert engine.should_compress_preflight([]) is False
    assert engine.should_defer_preflight_to_real_usage(10**6) is False
    assert engine.pending_compression_operation([]) is None
    msgs = [{"role": "user", "content": "x"}]
    assert engine.prune_tool_results_only(msgs) == (msgs, 0)
    assert engine.prune_tool_results_only(msgs)[0] is msgs
    assert engine.select_context(msgs, budget_tokens=10) is None
    assert engine.has_content_to_compress(msgs) is True
    assert engine.get_tool_schemas() == []
    assert json.loads(engine.handle_tool_call("lcm_grep", {})) == {"error": "Unknown context engine tool: lcm_grep"}
    assert engine.get_automatic_compaction_status_message(phase="compress", default_message="hi") == "hi"
    assert engine.last_compression is None


def test_status_clamps_and_reset_zeroes():
    engine = Minimal()
    engine.update_model("m", 1_000)
    engine.last_prompt_tokens = -1
    engine.compression_count = 3
    status = engine.get_status()
    assert status == {"last_prompt_tokens": 0, "threshold_tokens": 750, "context_length": 1_000,
                      "usage_percent": 0.0, "compression_count": 3}
    engine.last_prompt_tokens = 5_000
    assert engine.get_status()["usage_percent"] == 100.0
    engine.on_session_reset()
    assert (engine.last_prompt_tokens, engine.compression_count) == (0, 0)  # 0, not -1
    assert Minimal().get_status()["usage_percent"] == 0.0  # no window yet


def test_call_compress_filters_by_signature():
    msgs = [{"role": "user", "content": "x"}]
    legacy = Legacy()
    hermes.call_compress(legacy, msgs, current_tokens=5, focus_topic="f", force=True, memory_context="m")
    assert legacy.seen == {"current_tokens": 5}
    open_ = Open()
    hermes.call_compress(open_, msgs, current_tokens=5, focus_topic="f", brand_new=1)
    assert open_.seen == {"current_tokens": 5, "focus_topic": "f", "brand_new": 1}


def test_sanitize_memory_context():
    assert hermes.sanitize_memory_context("  hello  ") == "hello"
    text = "password=hunter2hunter2 " + "a" * 10_000 + "THE-END"
    out = hermes.sanitize_memory_context(text)
    assert len(out) <= hermes.MEMORY_CONTEXT_MAX_CHARS
    assert "hunter2hunter2" not in out and out.endswith("THE-END")
    assert "[memory provider context truncated]" in out


def test_status_message_helper_without_the_hook():
    class Bare:
        pass

    assert hermes.automatic_compaction_status_message(Bare(), phase="preflight", default_message="x") == "x"

    class Empty:
        emit_automatic_compaction_status = True

        def get_automatic_compaction_status_message(self, **kw):
            return "   "

    assert hermes.automatic_compaction_status_message(Empty(), phase="compress", default_message="x") is None


def test_is_compaction_summary():
    assert hermes.is_compaction_summary({"role": "user", "content": hermes.SUMMARY_PREFIX + "\n\nbody"})
    assert hermes.is_compaction_summary({"role": "user", "content": "[CONTEXT SUMMARY]: old"})
    assert not hermes.is_compaction_summary({"role": "user", "content": "hello"})
    assert not hermes.is_compaction_summary({"role": "assistant", "content": None})
