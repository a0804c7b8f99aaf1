"""Summaries through the real OpenAI SDK client against the loopback fake LLM server
(``kernel.auxiliary("compression")``), and the deterministic fallback when there is no
summarizer or it fails."""

from __future__ import annotations

import re

import pytest
from lcm_helpers import SYSTEM, conversation

from hermes.testing.fakellm import Reply

SETTINGS = {"fresh_tail_count": 4, "leaf_fanout": 2, "summary_max_tokens": 300}


def flat(turns):
    return [m for turn in turns for m in turn]


def summary_handler(request):
    """A deterministic summarizer: names the span it was given."""
    text = request.last_user_text
    spans = re.findall(r"^\[(\d+) ", text, flags=re.M)
    if spans:
        return Reply(text=f"LLM leaf summary of messages {spans[0]}-{spans[-1]}.")
    return Reply(text=f"LLM condensed summary of {text.count('[summary n')} summaries.")


@pytest.fixture
def llm_engine(make_engine, fake_llm):
    def make(settings=None):
        return make_engine({**SETTINGS, **(settings or {})}, **fake_llm.config(provider="openai"))
    return make


def compact_twice(engine):
    """Two compactions, so that two leaves exist and (fanout 2) get condensed."""
    messages = [SYSTEM, *flat(conversation(12, seed=21))]
    out = engine.compress(messages)
    return engine.compress([*out, *flat(conversation(8, seed=22))])


def test_summaries_come_from_the_auxiliary_model(llm_engine, fake_llm):
    fake_llm.handler = summary_handler
    engine = llm_engine()
    out = compact_twice(engine)
    store = engine.store
    roots = store.roots(engine.conversation_id)
    assert len(roots) == 1 and roots[0].depth == 1
    assert roots[0].content == "LLM condensed summary of 2 summaries."
    assert roots[0].summarizer == "llm:fake-model"
    leaves = [store.node(c) for c in store.children(roots[0].id)]
    assert leaves[0].content == f"LLM leaf summary of messages 1-{leaves[0].last_seq + 1}."
    assert "LLM condensed summary of 2 summaries." in out[1]["content"]
    assert engine.last_compression["fallback"] is False and engine.last_compression["model_calls"] == 2
    chats = [r for r in fake_llm.requests if r.api == "openai"]
    assert len(chats) == 3
    first = chats[0]
    assert first.model == "fake-model" and first.body["max_tokens"] == 300
    assert "summarise one span" in first.system
    # The leaf request quotes the span verbatim (the first user message of the conversation).
    assert flat(conversation(1, seed=21))[0]["content"] in first.last_user_text
    assert "[summary n" in chats[2].last_user_text


def test_focus_topic_and_memory_context_reach_the_prompt_without_secrets(llm_engine, fake_llm):
    fake_llm.handler = summary_handler
    engine = llm_engine()
    messages = [SYSTEM, {"role": "user", "content": "my key is api_key=sk-proj-abcdefghijklmnopqrstuvwxyz"},
                *flat(conversation(10, seed=23))]
    engine.compress(messages, focus_topic="database migrations", memory_context="User prefers terse answers.")
    request = fake_llm.requests[-1]
    assert "database migrations" in request.system
    assert "User prefers terse answers." in request.last_user_text
    assert "abcdefghijklmnopqrstuvwxyz" not in str(request.body)
    # The original is stored untouched: redaction applies to what leaves the machine.
    [hit] = engine.store.grep(re.compile("abcdefghijklmnop"), conversation_id=engine.conversation_id,
                              messages=True, summaries=False, limit=5)[0]
    assert hit.role == "user"


def test_a_failing_summarizer_falls_back_once_per_pass(llm_engine, fake_llm):
    fake_llm.handler = lambda request: Reply(error=500)
    engine = llm_engine()
    out = compact_twice(engine)
    lc = engine.last_compression
    assert lc["fallback"] is True and lc["summarizer_failures"] and lc["model_calls"] == 1
    roots = engine.store.roots(engine.conversation_id)
    assert all(r.summarizer == "fallback" for r in roots)
    assert roots[0].content.startswith("Messages 1-")
    assert out[1]["content"].count("<lcm-summary") == 1
    # The server recovers: the next pass asks the model again.
    fake_llm.handler = summary_handler
    engine.compress([*out, *flat(conversation(8, seed=24))])
    assert engine.last_compression["fallback"] is False


def test_an_empty_answer_falls_back(llm_engine, fake_llm):
    fake_llm.handler = lambda request: Reply(text="")
    engine = llm_engine()
    engine.compress([SYSTEM, *flat(conversation(12, seed=25))])
    assert engine.last_compression["fallback"] is True
    assert "empty" in engine.last_compression["summarizer_failures"][0]


def test_deterministic_mode_never_calls_a_model(llm_engine, fake_llm):
    engine = llm_engine({"summarizer": "deterministic"})
    compact_twice(engine)
    assert engine.compression_count == 2 and engine.last_compression["fallback"] is True
    assert fake_llm.requests == []


def test_no_summarizer_available(make_engine):
    # An auxiliary provider nobody registered: kernel.auxiliary() answers None.
    engine = make_engine(SETTINGS, auxiliary={"compression": {"provider": "nobody", "model": "x"}})
    out = engine.compress([SYSTEM, *flat(conversation(12, seed=26))])
    assert engine.last_compression["fallback"] is True
    assert "no summarizer" in engine.last_compression["summarizer_failures"][0]
    assert out[1]["content"].count("<lcm-summary") == 1


def test_fallback_summaries_are_deterministic(make_engine):
    texts = []
    for run in range(2):
        engine = make_engine({**SETTINGS, "summarizer": "deterministic"})
        engine.on_session_start(f"run-{run}")
        compact_twice(engine)
        texts.append([re.sub(r"\d{4}-\d\d-\d\dT[\d:]+Z", "T", r.content)
                      for r in engine.store.roots(engine.conversation_id)])
    assert texts[0] == texts[1]
