"""End to end, through the real SDKs and the loopback fake server: a multi-session story.

1. Session 1: the user states a preference (saved with the memory tool) and a fact.
2. Session 2: the preference is in the frozen system prompt of the first request.
3. Session 3: ``session_search`` finds session 1's fact.
4. A long tool-heavy session compacts and continues in a child session; no request ever
   carries an orphan tool call or result; the system prompt is byte-identical between
   compactions and changes after one — all proven from the recorded requests.
"""

from __future__ import annotations

import json

import pytest

import hermes
from hermes.runtime.agent import Agent
from hermes.testing.fakellm import Reply

FACT = "The staging database moved to Postgres on March 3rd"


def system_of(req) -> str:
    if req.api == "anthropic":
        system = req.body.get("system")
        if isinstance(system, list):
            return "".join(block.get("text", "") for block in system)
        return system or ""
    msgs = req.body.get("messages", [])
    return msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else ""


def assert_no_orphans(messages: list[dict]) -> None:
    """OpenAI wire format: every tool result follows its call; every call gets a result."""
    pending: set[str] = set()
    for msg in messages:
        if msg["role"] == "tool":
            assert msg["tool_call_id"] in pending, f"orphan tool result {msg['tool_call_id']}"
            pending.discard(msg["tool_call_id"])
            continue
        assert not pending, f"tool calls without results: {pending}"
        for call in msg.get("tool_calls") or []:
            pending.add(call["id"])
    assert not pending, f"tool calls without results: {pending}"


@pytest.fixture
def make_kernel(kernel_factory, fake_llm):
    def make(**sections):
        cfg = fake_llm.config(provider="openai")
        cfg.setdefault("memory", {})["nudge_interval"] = 0
        for key, value in sections.items():
            cfg.setdefault(key, {}).update(value)
        return kernel_factory(config=cfg, check_selection=True)

    return make


def test_multi_session_story(make_kernel, fake_llm):
    kernel = make_kernel()

    # Session 1: a preference goes to USER.md through the memory tool; a fact is said.
    def session1(req):
        last = req.body["messages"][-1]
        if last["role"] == "user" and "tabs" in last["content"]:
            return Reply(tool_calls=[{"name": "memory", "arguments": {
                "action": "add", "target": "user", "content": "Prefers tabs over spaces"}}])
        return Reply(text="Noted.")

    fake_llm.handler = session1
    with Agent(kernel) as one:
        assert one.run_turn("I always use tabs, never spaces.").answer == "Noted."
        assert one.run_turn(FACT + ".").status == "ok"
        first_prompt = one.system_prompt
        s1 = one.session_id
    assert "Prefers tabs over spaces" not in first_prompt  # a write never changes the live prompt

    # Session 2: the preference is frozen into the new session's system prompt.
    fake_llm.handler = None
    fake_llm.reset()
    with Agent(kernel) as two:
        two.run_turn("hello again")
    assert "Prefers tabs over spaces" in system_of(fake_llm.requests[0])

    # Session 3: session_search recalls session 1's fact (raw snippets or a summary).
    fake_llm.reset()

    def session3(req):
        last = req.body["messages"][-1]
        if last["role"] == "user" and "staging" in last["content"] and req.body.get("tools"):
            return Reply(tool_calls=[{"name": "session_search", "arguments": {"query": "staging database Postgres"}}])
        if req.body.get("tools"):
            return Reply(text="It moved on March 3rd.")
        # the auxiliary summarizer: summarise what it was shown
        shown = json.dumps(req.body["messages"])
        return Reply(text="Summary: " + ("moved to Postgres on March 3rd" if "March 3rd" in shown else "nothing"))

    fake_llm.handler = session3
    with Agent(kernel) as three:
        result = three.run_turn("When did the staging database move?")
        tool_results = [m["content"] for m in three.messages if m["role"] == "tool"]
    assert result.answer == "It moved on March 3rd."
    assert tool_results and "March 3rd" in tool_results[0]
    assert s1 in tool_results[0]  # the hit names the session it came from


@pytest.mark.slow  # a long session; test_multi_session_story stays fast
def test_long_tool_heavy_session_compacts_without_orphans(make_kernel, fake_llm, register_plugin):
    kernel = make_kernel(model={"context_length": 6000}, compression={"protect_last_n": 4})

    class Files:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(
                name="read_file", schema={"description": "read a file", "parameters": {
                    "type": "object", "properties": {"path": {"type": "string"}}}},
                handler=lambda args, ctx: json.dumps({"path": args["path"], "content": "x = 1\n" * 120}),
                parallel_safe=True))

    register_plugin(Files(), "files", kernel=kernel)
    calls = {"n": 0}

    def handler(req):
        if not req.body.get("tools"):
            return Reply(text="## Goal\nRead many files.\n## Progress\nRead files 0..n")
        last = req.body["messages"][-1]
        if last["role"] == "user":
            calls["n"] += 1
            n = calls["n"]
            return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": f"f{n}a.py"}},
                                     {"name": "read_file", "arguments": {"path": f"f{n}b.py"}}])
        return Reply(text=f"read them ({calls['n']})")

    fake_llm.handler = handler
    agent = Agent(kernel)
    sessions = [agent.session_id]
    for i in range(24):
        result = agent.run_turn(f"read the next files please, batch {i}")
        assert result.status == "ok", result.error
        if agent.session_id != sessions[-1]:
            sessions.append(agent.session_id)
    agent.close()

    assert len(sessions) >= 3, "the session should have compacted at least twice"
    store = kernel.session_store
    for parent, child in zip(sessions, sessions[1:], strict=False):
        assert store.get_session(parent)["end_reason"] == "compression"
        assert store.get_session(child)["parent_session_id"] == parent

    agent_requests = [r for r in fake_llm.requests if r.body.get("tools")]
    for req in agent_requests:
        assert_no_orphans(req.body["messages"])
    # Byte-stable system prompt between compactions, a new one after each.
    prompts = [system_of(r) for r in agent_requests]
    distinct = [p for i, p in enumerate(prompts) if i == 0 or p != prompts[i - 1]]
    assert len(distinct) == len(sessions)
    assert len(set(distinct)) == len(distinct)
    # The engine's one-time compaction note survives every rebuild of the prompt.
    assert "compacted" not in distinct[0].lower()
    for prompt in distinct[1:]:
        assert prompt.lower().count("compact") >= 1


def test_prompt_is_byte_stable_across_turns_with_memory_writes(make_kernel, fake_llm):
    kernel = make_kernel()

    def handler(req):
        last = req.body["messages"][-1]
        if last["role"] == "user":
            n = last["content"].split()[-1]
            return Reply(tool_calls=[{"name": "memory", "arguments": {
                "action": "add", "target": "memory", "content": f"note number {n}"}}])
        return Reply(text="saved")

    fake_llm.handler = handler
    with Agent(kernel) as agent:
        for i in range(8):
            assert agent.run_turn(f"remember note {i}").status == "ok"
    prompts = {system_of(r) for r in fake_llm.requests if r.body.get("tools")}
    assert len(prompts) == 1
    assert "note number" not in next(iter(prompts))


def test_anthropic_caching_reads_the_cached_prefix(kernel_factory, fake_llm):
    cfg = fake_llm.config(provider="anthropic", model="claude-sonnet-4-6")
    cfg.setdefault("memory", {})["nudge_interval"] = 0
    kernel = kernel_factory(config=cfg, check_selection=True)
    with Agent(kernel) as agent:
        assert agent.caching_enabled
        usages = [agent.run_turn(f"turn {i} " + "words " * 1000).usage for i in range(4)]
    assert usages[0].cache_write_tokens > 0
    assert all(u.cache_read_tokens > 0 for u in usages[1:])
    for req in fake_llm.requests:
        marks = json.dumps(req.body).count('"cache_control"')
        assert 1 <= marks <= 4
