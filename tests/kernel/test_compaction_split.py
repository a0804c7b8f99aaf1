"""The compaction split tells everyone, as Hermes Agent does: the context engine gets
``on_session_start`` of the continuation with ``boundary_reason='compression'``, memory
providers get ``on_session_switch`` with ``reason='compression'``, and the rebuilt
system prompt shows memory written during the session (reloaded from disk)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes.runtime.agent import Agent
from hermes.testing.fakellm import Reply
from hermes.testing.stubs import StubMemoryProvider, memory_provider_plugin


class SwitchRecorder(StubMemoryProvider):
    """An external provider that records the session switches it is told about."""

    name = "switchrec"  # type: ignore[assignment]

    def __init__(self) -> None:
        self.switches: list[tuple[str, dict[str, Any]]] = []

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "",
                          reset: bool = False, **kwargs: Any) -> None:
        self.switches.append((new_session_id, {"parent_session_id": parent_session_id,
                                               "reset": reset, **kwargs}))


@pytest.fixture
def agent(agent_factory):
    recorder = SwitchRecorder()
    agent = agent_factory({"memory": {"provider": "switchrec"}},
                          plugins=[memory_provider_plugin(recorder)])
    agent.recorder = recorder
    return agent


def _chat(agent: Agent, fake_llm: Any, turns: int = 4) -> None:
    fake_llm.handler = lambda req: (Reply(text="ok") if req.body.get("tools")
                                    else Reply(text="## Goal\nsummary of earlier work"))
    for i in range(turns):
        agent.run_turn(f"question {i} " + "filler " * 40)


def test_engine_is_told_of_the_continuation(agent, fake_llm):
    _chat(agent, fake_llm)
    calls: list[tuple[str, dict[str, Any]]] = []
    original = agent.engine.on_session_start

    def record(session_id: str, **kwargs: Any) -> None:
        calls.append((session_id, kwargs))
        original(session_id, **kwargs)

    agent.engine.on_session_start = record
    old = agent.session_id
    assert agent.compact(reason="manual")
    assert [c[0] for c in calls] == [agent.session_id]
    kwargs = calls[0][1]
    assert kwargs["boundary_reason"] == "compression"
    assert kwargs["old_session_id"] == old
    assert kwargs["hermes_home"] == str(agent.kernel.home)


def test_engine_without_kwargs_still_gets_the_call(agent, fake_llm):
    """An engine written against the old signature (no ``**kwargs``) is called with the
    arguments it accepts, not failed."""
    _chat(agent, fake_llm)
    seen: list[str] = []
    agent.engine.on_session_start = lambda session_id: seen.append(session_id)
    assert agent.compact(reason="manual")
    assert seen == [agent.session_id]


def test_memory_providers_get_the_reason(agent, fake_llm):
    _chat(agent, fake_llm)
    old = agent.session_id
    assert agent.compact(reason="manual")
    agent.memory.flush()
    switches = agent.recorder.switches
    assert switches == [(agent.session_id, {"parent_session_id": old, "reset": False,
                                            "reason": "compression"})]


def test_new_session_switch_has_its_reason(agent, fake_llm):
    _chat(agent, fake_llm, turns=1)
    agent.new_session()
    agent.memory.flush()
    assert agent.recorder.switches[-1][1]["reason"] == "new_session"
    assert agent.recorder.switches[-1][1]["reset"] is True


def test_rebuilt_prompt_reloads_memory_from_disk(agent, fake_llm):
    _chat(agent, fake_llm)
    frozen = agent.system_prompt
    out = json.loads(agent.call_tool("memory", {"action": "add", "target": "memory",
                                                "content": "The deploy key lives in vault path ops/deploy"}))
    assert out.get("success", True), out
    # the frozen prompt of this session does not change mid-session (prompt cache)
    assert "ops/deploy" not in agent.ensure_system_prompt()
    assert agent.ensure_system_prompt() == frozen
    # written by another process while the session runs: reaches the next prompt too
    memfile = agent.kernel.home / "memories" / "MEMORY.md"
    memfile.write_text(memfile.read_text() + "\n§\nWritten by a second terminal", encoding="utf-8")
    assert agent.compact(reason="manual")
    assert "ops/deploy" in agent.system_prompt
    assert "Written by a second terminal" in agent.system_prompt
    stored = agent.store.get_session(agent.session_id)["system_prompt"]
    assert "ops/deploy" in stored


def test_an_engine_that_fails_to_hear_of_the_split_does_not_break_the_turn(agent, fake_llm, caplog):
    _chat(agent, fake_llm)

    def boom(session_id: str, **kwargs: Any) -> None:
        raise RuntimeError("engine bookkeeping broke")

    agent.engine.on_session_start = boom
    assert agent.compact(reason="manual")
    assert agent.system_prompt and agent.store.get_session(agent.session_id)["system_prompt"]
    assert "engine bookkeeping broke" in caplog.text
    assert agent.run_turn("and now?").status == "ok"
