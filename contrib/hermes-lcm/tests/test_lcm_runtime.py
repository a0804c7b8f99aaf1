"""End to end through the real runtime: ``hermes.runtime.Agent`` with ``context.engine:
lcm``, the real OpenAI SDK client and the loopback fake LLM server. A long session
compacts several times (the runtime splits the session each time); then the model, asked
about a fact from the third turn, calls ``lcm_grep`` and ``lcm_expand`` through the
runtime's tool routing and answers from the restored original."""

from __future__ import annotations

import json

import pytest
from lcm_helpers import FACT

from hermes.testing.fakellm import Reply

QUESTION = "Which day is the staging database password rotation?"


def is_summarizer(request) -> bool:
    return not request.body.get("tools")  # the runtime's turns always offer tools


def model(request):
    """The fake main model: chats, and answers QUESTION by searching its lossless store."""
    if is_summarizer(request):
        return Reply(text="The user and the assistant discussed many routine platform items.")
    messages = request.body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        result = json.loads(last["content"])
        if "messages" in result and result.get("pattern"):  # an lcm_grep answer
            hit = result["messages"][0]
            return Reply(tool_calls=[{"name": "lcm_expand", "arguments": {**hit["expand"], "max_chars": 400}}])
        restored = result["messages"][0]["content"]  # an lcm_expand answer
        return Reply(text=f"From the record: {restored}")
    if last["role"] == "user" and last["content"].endswith(QUESTION):
        return Reply(tool_calls=[{"name": "lcm_grep", "arguments": {"pattern": "password rotation"}}])
    return Reply(text="Understood. " + "Noted the details and the follow-ups for the team. " * 6)


@pytest.fixture
def agent_kernel(lcm_kernel, fake_llm):
    config = fake_llm.config(provider="openai")
    config["model"]["context_length"] = 4_096
    kernel = lcm_kernel({"fresh_tail_count": 6}, **config, context={"engine": "lcm"},
                        memory={"nudge_interval": 0})
    if "sqlite" not in kernel.registries.session_stores:
        pytest.skip("the runtime needs the sqlite session store plugin")
    return kernel


@pytest.mark.slow  # a long agent session; test_lcm_showcase covers the recovery in the fast target
def test_the_agent_recovers_a_compacted_fact_with_lcm_tools(agent_kernel, fake_llm):
    from hermes.runtime.agent import Agent

    fake_llm.handler = model
    agent = Agent(agent_kernel, skip_memory=True, memory_review=False)
    try:
        assert agent.engine.name == "lcm"
        first_session = agent.session_id
        agent.run_turn("Hello, let us plan the platform work for this quarter.")
        agent.run_turn("Two things to track: the deploy freeze and the billing export.")
        agent.run_turn(f"Note for later: {FACT}. Please remember it.")
        for i in range(40):
            agent.run_turn(f"Item {i}: " + "please review the runbook, the alerts and the dashboards. " * 5)
        assert agent.engine.compression_count >= 2
        assert agent.session_id != first_session  # the runtime split the session at compaction
        assert not any(FACT in json.dumps(m) for m in agent.messages)
        result = agent.run_turn(QUESTION)
    finally:
        agent.close()

    assert result.status == "ok" and result.tool_calls == 2
    assert result.answer == f"From the record: Note for later: {FACT}. Please remember it."
    offered = {t["function"]["name"] for t in fake_llm.requests[-1].body["tools"]}
    assert {"lcm_grep", "lcm_describe", "lcm_expand"} <= offered
    store = agent_kernel.session_store
    assert store.get_session(first_session)["end_reason"] == "compression"
