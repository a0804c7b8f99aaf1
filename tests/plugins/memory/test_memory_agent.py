"""Memory inside real turns: the runtime agent, the real OpenAI SDK client and the
loopback fake LLM server."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import hermes
from hermes.testing.fakellm import Reply
from hermes.testing.stubs import StubMemoryProvider, memory_provider_plugin

FENCE = "<memory-context>"


class Recall(StubMemoryProvider):
    name = "recall"  # type: ignore[assignment]

    def __init__(self) -> None:
        self.synced: list[tuple[str, str]] = []
        self.mirrored: list[tuple[str, str, str]] = []

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        return "The user's cat is called Miso."

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "") -> None:
        self.synced.append((user_content, assistant_content))

    def on_memory_write(self, action: str, target: str, content: str, metadata: Any = None) -> None:
        self.mirrored.append((action, target, content))


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("provider backend is down")


class Broken(hermes.MemoryProvider):
    name = "broken"  # type: ignore[assignment]

    def is_available(self) -> bool:
        return True

    initialize = get_tool_schemas = system_prompt_block = prefetch = queue_prefetch = _raise
    sync_turn = handle_tool_call = shutdown = on_turn_start = on_session_end = _raise
    on_session_switch = on_pre_compress = on_delegation = on_memory_write = _raise


@pytest.fixture
def agent_factory(agent_factory: Any) -> Any:
    """hermes' ``agent_factory``, taking the external memory provider to select:
    ``agent_factory(Recall())`` registers that instance and selects it."""

    def make(provider: hermes.MemoryProvider | None = None, **kwargs: Any) -> Any:
        if provider is None:
            return agent_factory(**kwargs)
        return agent_factory({"memory": {"provider": provider.name}},
                             plugins=[memory_provider_plugin(provider)], **kwargs)

    return make


def _request_text(request: Any) -> str:
    return json.dumps(request.body.get("messages", []), ensure_ascii=False)


def test_a_memory_write_reaches_disk_but_not_the_current_prompt(agent_factory: Any, fake_llm: Any) -> None:
    provider = Recall()
    agent = agent_factory(provider)
    fake_llm.queue(Reply(tool_calls=[{"name": "memory", "arguments": {
        "target": "user", "action": "add", "content": "Name: Ada, prefers metric units"}}]))
    fake_llm.queue(Reply(text="Noted."))
    prompt_before = agent.ensure_system_prompt()
    result = agent.run_turn("Please remember my name is Ada and I like metric units.")
    assert result.status == "ok"
    tool = json.loads([m for m in agent.messages if m["role"] == "tool"][0]["content"])
    assert tool["success"] is True
    assert (agent.kernel.home / "memories" / "USER.md").read_text() == "Name: Ada, prefers metric units"
    assert agent.system_prompt == prompt_before
    assert "Name: Ada" not in agent.system_prompt
    agent.memory.flush(5)
    assert provider.mirrored == [("add", "user", "Name: Ada, prefers metric units")]
    # The next session's prompt has it.
    from hermes.runtime.agent import Agent

    nxt = Agent(agent.kernel)
    try:
        assert "Name: Ada, prefers metric units" in nxt.ensure_system_prompt()
        assert "USER PROFILE (who the user is)" in nxt.ensure_system_prompt()
    finally:
        nxt.close()


def test_recall_is_fenced_for_the_call_only_and_never_stored(agent_factory: Any, fake_llm: Any) -> None:
    provider = Recall()
    agent = agent_factory(provider)
    fake_llm.queue(Reply(text="Your cat is Miso."))
    agent.run_turn("What is my cat called?")
    sent = _request_text(fake_llm.requests[-1])
    assert FENCE in sent and "Miso" in sent
    stored = json.dumps(agent.store.get_conversation(agent.session_id))
    assert FENCE not in stored and "called Miso" not in stored
    agent.memory.flush(5)
    assert provider.synced == [("What is my cat called?", "Your cat is Miso.")]


def test_model_echoing_a_fence_is_scrubbed_in_stream_and_store(agent_factory: Any, fake_llm: Any) -> None:
    agent = agent_factory()
    fake_llm.queue(Reply(text=f"Sure.\n{FENCE}\nleaked recall\n</memory-context>\nDone."))
    shown: list[str] = []
    result = agent.run_turn("hi there friend", on_text=shown.append)
    assert "".join(shown) == "Sure.\nDone."
    assert result.answer == "Sure.\nDone."
    assert "leaked recall" not in json.dumps(agent.store.get_conversation(agent.session_id))


def test_turns_complete_with_a_provider_failing_everywhere(agent_factory: Any, fake_llm: Any,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hermes.memory"):
        agent = agent_factory(Broken())
        for i in range(3):
            fake_llm.queue(Reply(text=f"answer {i}"))
            assert agent.run_turn(f"question number {i}?").status == "ok"
        agent.close()
    failures = [r.getMessage() for r in caplog.records if "failed in" in r.getMessage()]
    assert failures, "the failures must be logged"
    methods = [m.split("failed in ")[1].split(":")[0] for m in failures]
    assert len(methods) == len(set(methods)), methods  # each failing call logged once
