"""Summaries through the real OpenAI client against the fake LLM server: the prompt, the
budget, iterative updates, focus topics, memory-provider context, and what each kind of
summarizer failure does (abort with the transcript unchanged, or the local fallback),
with cooldowns visible in ``should_compress_info`` (reference §2.6, §2.7, §10 issues 1, 5)."""

from __future__ import annotations

import re

import pytest

import hermes
from hermes.testing.conformance.context import make_conversation, transcript_problems
from hermes.testing.fakellm import Reply

SECTIONS = ("## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress",
            "### Blocked", "## Key Decisions", "## Relevant Files", "## Next Steps", "## Critical Context")


def prompt_of(request) -> str:
    messages = request.body["messages"]
    assert len(messages) == 1 and messages[0]["role"] == "user"
    return messages[0]["content"]


def summary_of(messages) -> str:
    found = [m["content"] for m in messages if hermes.is_compaction_summary(m)]
    assert len(found) == 1
    return found[0]


def test_structured_summary_request_and_result(llm_engine, fake_llm):
    engine = llm_engine(window=400_000)
    fake_llm.queue(Reply(text="## Goal\nShip the parser.\n## Progress\n### Done\n- wrote parser.py"))
    msgs = make_conversation(40, seed=1)
    out = engine.compress(msgs)
    assert not transcript_problems(out)
    (request,) = fake_llm.requests
    prompt = prompt_of(request)
    assert "TURNS TO SUMMARIZE:" in prompt and "PREVIOUS SUMMARY" not in prompt
    for heading in SECTIONS:
        assert heading in prompt
    target = int(re.search(r"Target ~(\d+) tokens", prompt).group(1))
    assert 2_000 <= target <= min(int(400_000 * 0.05), 12_000)
    assert request.body.get("max_tokens") == 2 * target  # room for the whole checkpoint
    assert not request.body.get("tools")
    assert "Ship the parser." in summary_of(out)
    info = engine.last_compression
    assert info["committed"] and not info["fallback"] and info["summary_model"] == "fake-model"
    assert info["messages_after"] == len(out) <= info["messages_before"]
    assert info["tokens_after"] < info["tokens_before"] and info["summary_tokens"] > 0


def test_budget_is_a_fifth_of_the_content_within_bounds(llm_engine, fake_llm):
    engine = llm_engine(window=8_000)
    fake_llm.handler = lambda req: Reply(text="## Goal\nsmall")
    engine.compress(make_conversation(30, seed=2))
    target = int(re.search(r"Target ~(\d+) tokens", prompt_of(fake_llm.requests[-1])).group(1))
    assert target == 2_000  # the floor wins over 5% of a small window


def test_iterative_update_folds_the_previous_summary(llm_engine, fake_llm):
    engine = llm_engine(window=8_000)
    fake_llm.queue(Reply(text="## Goal\nFIRST-CHECKPOINT"), Reply(text="## Goal\nSECOND-CHECKPOINT"))
    out = engine.compress(make_conversation(30, seed=3), force=True)
    more = out + make_conversation(12, seed=4, system=None, start_id=9000)
    out2 = engine.compress(more, force=True)
    prompt = prompt_of(fake_llm.requests[-1])
    assert "PREVIOUS SUMMARY:\nFIRST-CHECKPOINT" in prompt.replace("## Goal\n", "")
    assert "NEW TURNS TO INCORPORATE:" in prompt
    assert "FIRST-CHECKPOINT" not in prompt.split("NEW TURNS TO INCORPORATE:")[1]  # not re-sent as a turn
    body = summary_of(out2)
    assert "SECOND-CHECKPOINT" in body and "FIRST-CHECKPOINT" not in body
    assert not transcript_problems(out2)


def test_focus_topic_and_memory_context(llm_engine, fake_llm):
    engine = llm_engine(window=8_000)
    fake_llm.handler = lambda req: Reply(text="## Goal\nok")
    memory = "User likes <b>bold</b> & terse answers. key sk-ant-api03-" + "q" * 40 + "\n" + "m" * 9_000
    out = hermes.call_compress(engine, make_conversation(30, seed=5), focus_topic="database migrations",
                               memory_context=memory, force=True)
    assert out
    prompt = prompt_of(fake_llm.requests[-1])
    assert "FOCUS TOPIC: 'database migrations'" in prompt
    block = re.search(r"<memory-provider-context>(.*)</memory-provider-context>", prompt, re.S).group(1)
    assert "\\u003cb\\u003ebold\\u003c/b\\u003e \\u0026 terse" in block  # escaped, one JSON string
    assert "q" * 40 not in block and "[REDACTED]" in block
    assert "memory provider context truncated" in block and len(block) < 7_000


def test_reasoning_blocks_are_stripped_from_the_summary(llm_engine, fake_llm):
    engine = llm_engine(window=8_000)
    fake_llm.queue(Reply(text="<think>private chain of thought</think>\n## Goal\nVisible goal"))
    out = engine.compress(make_conversation(30, seed=6))
    body = summary_of(out)
    assert "Visible goal" in body and "private chain of thought" not in body


def test_summarizer_input_is_fitted_to_a_smaller_summarizer(llm_engine, fake_llm):
    # The main model has 400K tokens, the summarizer (gpt-4) only 8K: the serialized
    # turns are cut to fit instead of failing with a context-length error.
    fake_llm.context_window = 8_192
    engine = llm_engine(window=400_000, config={"auxiliary": {"compression": {"model": "gpt-4"}}})
    fake_llm.handler = lambda req: Reply(text="## Goal\nfitted")
    out = engine.compress(make_conversation(80, seed=7), force=True)
    assert "fitted" in summary_of(out)
    assert fake_llm.requests[0].model == "gpt-4"
    assert hermes.estimate_tokens(prompt_of(fake_llm.requests[0])) < 8_192


# -- failures ----------------------------------------------------------------------------------


def test_auth_failure_aborts_with_history_kept_and_a_cooldown(llm_engine, fake_llm, clock):
    engine = llm_engine(window=8_000)
    fake_llm.handler = lambda req: Reply(error=401)
    msgs = make_conversation(30, seed=8)
    out = engine.compress(msgs)
    assert out == msgs  # unchanged: an auth problem must never drop history (#29559)
    info = engine.last_compression
    assert not info["committed"] and "auth" in info["aborted"] and "history kept" in info["aborted"]
    assert engine.should_compress_info(10**6) == (False, "cooldown:600")
    status = engine.get_status()
    assert status["blocked"] == "cooldown:600" and "auth" in status["cooldown_error"]
    # an automatic attempt during the cooldown does not even call the model
    calls = len(fake_llm.requests)
    assert engine.compress(msgs) == msgs and len(fake_llm.requests) == calls
    assert engine.last_compression["aborted"].startswith("cooldown:")
    # a forced compaction (context overflow, /compress) falls back to the local summary
    forced = engine.compress(msgs, force=True)
    assert engine.last_compression["fallback"] and engine.last_compression["fallback_reason"] == "auth"
    assert "Summary generation was unavailable (auth" in summary_of(forced)
    assert not transcript_problems(forced)


def test_transient_failures_escalate_the_cooldown(llm_engine, fake_llm, clock):
    engine = llm_engine(window=8_000)
    fake_llm.handler = lambda req: Reply(error=503)
    msgs = make_conversation(30, seed=9)
    for expected in (60, 300, 900, 900):
        assert engine.compress(msgs) == msgs
        assert "unavailable" in engine.last_compression["aborted"]
        assert engine.should_compress_info(10**6) == (False, f"cooldown:{expected}")
        clock.advance(expected)
    fake_llm.handler = lambda req: Reply(text="## Goal\nrecovered")
    out = engine.compress(msgs)
    assert engine.last_compression["committed"] and "recovered" in summary_of(out)
    assert engine.get_status()["cooldown_error"] is None
    engine.update_from_response({"prompt_tokens": 100, "completion_tokens": 1})
    fake_llm.handler = lambda req: Reply(error=503)
    engine.compress(msgs)
    assert engine.should_compress_info(10**6) == (False, "cooldown:60")  # the ladder restarted


def test_timeout_aborts(llm_engine, fake_llm):
    engine = llm_engine(window=8_000, config={"compression": {"summary_timeout": 0.5}})
    fake_llm.queue(Reply(error="timeout"))
    msgs = make_conversation(30, seed=10)
    assert engine.compress(msgs) == msgs
    assert "timeout" in engine.last_compression["aborted"]
    assert engine.should_compress_info(10**6) == (False, "cooldown:60")


def test_summarizer_too_small_falls_back(llm_engine, fake_llm):
    fake_llm.context_window = 1_000  # every summary request is too long for it
    engine = llm_engine(window=8_000)
    out = engine.compress(make_conversation(30, seed=11))
    info = engine.last_compression
    assert info["committed"] and info["fallback"] and info["fallback_reason"] == "too_small"
    assert engine.get_status()["cooldown_remaining_s"] == 0  # nothing to wait for
    assert not transcript_problems(out)


def test_empty_summary_is_a_failure_not_an_empty_summary(llm_engine, fake_llm):
    engine = llm_engine(window=8_000)
    fake_llm.queue(Reply(text="   "))
    out = engine.compress(make_conversation(30, seed=12))
    info = engine.last_compression
    assert info["fallback"] and info["fallback_reason"] == "empty"
    assert "## Goal" in summary_of(out)


def test_abort_on_summary_failure_never_falls_back(llm_engine, fake_llm):
    engine = llm_engine(window=8_000, config={"compression": {"abort_on_summary_failure": True}})
    fake_llm.handler = lambda req: Reply(error="context_length")
    msgs = make_conversation(30, seed=13)
    assert engine.compress(msgs, force=True) == msgs
    assert "too_small" in engine.last_compression["aborted"]


def test_a_failing_auxiliary_model_is_retried_on_the_main_model(llm_engine, fake_llm):
    engine = llm_engine(window=8_000, config={"auxiliary": {"compression": {"model": "broken-aux"}}})
    fake_llm.handler = lambda req: (Reply(error=404) if req.model == "broken-aux"
                                    else Reply(text="## Goal\nfrom the main model"))
    out = engine.compress(make_conversation(30, seed=14))
    assert [r.model for r in fake_llm.requests] == ["broken-aux", "fake-model"]
    assert "from the main model" in summary_of(out)
    assert engine.last_compression["summary_model"] == "fake-model"


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_both_wire_formats(llm_engine, fake_llm, provider):
    engine = llm_engine(window=8_000, provider=provider)
    fake_llm.handler = lambda req: Reply(text=f"## Goal\nvia {req.api}")
    out = engine.compress(make_conversation(30, seed=15))
    assert f"via {provider}" in summary_of(out)
