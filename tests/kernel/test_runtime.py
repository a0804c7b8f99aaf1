"""The turn loop, driven through the real OpenAI SDK against the loopback fake server."""

from __future__ import annotations

import json
import threading

import hermes
from hermes.runtime.agent import IterationBudget
from hermes.testing.fakellm import Reply


def last_user_text(req) -> str:
    for msg in reversed(req.body.get("messages", [])):
        if msg.get("role") == "user":
            content = msg.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def test_plain_answer_is_stored(agent_factory, fake_llm):
    fake_llm.queue(Reply(text="Hello there."))
    agent = agent_factory()
    result = agent.run_turn("hi")
    assert result.status == "ok"
    assert result.answer == "Hello there."
    stored = agent.store.get_conversation(agent.session_id)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["content"] == "Hello there."
    row = agent.store.get_session(agent.session_id)
    assert row["system_prompt"] == agent.system_prompt
    assert row["output_tokens"] > 0


def test_tool_call_round_trip_and_unknown_tool(agent_factory, fake_llm, register_plugin):
    seen = []

    class Plugin:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(
                name="lookup", schema={"description": "look up", "parameters": {
                    "type": "object", "properties": {"key": {"type": "string"}}}},
                handler=lambda args, ctx: (seen.append((args, ctx.session_id)) or json.dumps({"value": 42}))))

    agent = agent_factory()
    register_plugin(Plugin(), "lookup-plugin", kernel=agent.kernel)
    fake_llm.queue(Reply(tool_calls=[{"name": "lookup", "arguments": {"key": "x"}},
                                     {"name": "nope", "arguments": {}}]))
    fake_llm.queue(Reply(text="It is 42."))
    result = agent.run_turn("what is x?")
    assert result.answer == "It is 42."
    assert seen == [({"key": "x"}, agent.session_id)]
    tool_msgs = [m for m in agent.messages if m["role"] == "tool"]
    assert json.loads(tool_msgs[0]["content"]) == {"value": 42}
    assert "Unknown tool" in json.loads(tool_msgs[1]["content"])["error"]
    # the second request carried both tool results right after the assistant's calls
    second = fake_llm.requests[-1].body["messages"]
    roles = [m["role"] for m in second]
    assert roles[-3:] == ["assistant", "tool", "tool"]


def test_parallel_safe_batch_runs_concurrently(agent_factory, fake_llm, register_plugin):
    barrier = threading.Barrier(2, timeout=10)

    def wait(args, ctx):
        barrier.wait()  # only returns if both calls run at the same time
        return json.dumps({"ok": args["n"]})

    class Plugin:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(name="slow", schema={"description": "s"}, handler=wait, parallel_safe=True))

    agent = agent_factory()
    register_plugin(Plugin(), "slow-plugin", kernel=agent.kernel)
    fake_llm.queue(Reply(tool_calls=[{"name": "slow", "arguments": {"n": 1}},
                                     {"name": "slow", "arguments": {"n": 2}}]))
    fake_llm.queue(Reply(text="done"))
    result = agent.run_turn("go")
    assert result.answer == "done"
    contents = [json.loads(m["content"]) for m in agent.messages if m["role"] == "tool"]
    assert contents == [{"ok": 1}, {"ok": 2}]


def test_tool_exception_becomes_json_error(agent_factory, fake_llm, register_plugin):
    def boom(args, ctx):
        raise RuntimeError("disk on fire")

    class Plugin:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(name="boom", schema={"description": "b"}, handler=boom))

    agent = agent_factory()
    register_plugin(Plugin(), "boom-plugin", kernel=agent.kernel)
    fake_llm.queue(Reply(tool_calls=[{"name": "boom", "arguments": {}}]))
    fake_llm.queue(Reply(text="sorry"))
    assert agent.run_turn("x").answer == "sorry"
    tool = [m for m in agent.messages if m["role"] == "tool"][0]
    assert "disk on fire" in json.loads(tool["content"])["error"]


def test_failed_model_call_keeps_the_user_message(agent_factory, fake_llm):
    agent = agent_factory(config={"model": {"max_retries": 0}})
    fake_llm.queue(Reply(error=401))
    result = agent.run_turn("remember this please")
    assert result.status == "failed"
    assert result.error
    stored = agent.store.get_conversation(agent.session_id)
    assert stored[0] == {"role": "user", "content": "remember this please"}


def test_budget_nudges_go_inside_tool_results():
    budget = IterationBudget(10)
    nudges = []
    for _ in range(10):
        assert budget.consume()
        nudges.append(budget.due_nudge())
    assert not budget.consume()
    texts = [n for n in nudges if n]
    assert len(texts) == 2 and "70%" in texts[0] and "90%" in texts[1]


def test_budget_exhaustion_stops_the_loop(agent_factory, fake_llm, register_plugin):
    class Plugin:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(name="again", schema={"description": "a"},
                                 handler=lambda a, c: json.dumps({"more": True})))

    agent = agent_factory(config={"agent": {"max_iterations": 4}})
    register_plugin(Plugin(), "again-plugin", kernel=agent.kernel)
    fake_llm.handler = lambda req: Reply(tool_calls=[{"name": "again", "arguments": {}}])
    result = agent.run_turn("loop forever")
    assert result.status == "budget_exhausted"
    assert result.api_calls == 4
    tool_results = [json.loads(m["content"]) for m in agent.messages if m["role"] == "tool"]
    assert any("_budget_warning" in r for r in tool_results)
    # no new message was invented for the nudge: every tool message answers a call
    call_ids = {c["id"] for m in agent.messages if m["role"] == "assistant" for c in m.get("tool_calls", [])}
    assert {m["tool_call_id"] for m in agent.messages if m["role"] == "tool"} <= call_ids


def test_delegate_task_runs_a_child_session_sharing_the_budget(agent_factory, fake_llm):
    def handler(req):
        text = last_user_text(req)
        if "count the files" in text and "Context from the parent" not in text and req.body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[{"name": "delegate_task", "arguments": {"task": "count the files", "context": "in /tmp"}}])
        if "Context from the parent" in text:
            return Reply(text="there are 3 files")
        return Reply(text="The sub-agent says 3.")

    fake_llm.handler = handler
    agent = agent_factory()
    result = agent.run_turn("please count the files")
    assert result.answer == "The sub-agent says 3."
    tool = [m for m in agent.messages if m["role"] == "tool"][0]
    payload = json.loads(tool["content"])
    assert payload["answer"] == "there are 3 files"
    child = agent.store.get_session(payload["session_id"])
    assert child["parent_session_id"] == agent.session_id
    assert child["end_reason"] == "delegation"
    assert agent.budget.used == 3  # parent 2 calls + child 1 call, one shared budget
    # the child was not offered delegate_task itself
    child_req = [r for r in fake_llm.requests if "Context from the parent" in last_user_text(r)][0]
    assert "delegate_task" not in json.dumps(child_req.body.get("tools", []))


def test_a_third_party_tool_kept_from_sub_agents(agent_factory, fake_llm):
    """Tool.subagents=False is the contract, not the name delegate_task: a third-party
    tool that sets it is neither offered to a sub-agent nor run for one."""
    from hermes.runtime.agent import Agent

    class Plugin:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(name="hand_off", schema={"description": "hand off"},
                                 handler=lambda args, ctx: "handed off", subagents=False))

    parent = agent_factory(plugins=[Plugin()])
    child = Agent(parent.kernel, source="subagent", parent=parent, skip_context_files=True,
                  skip_memory=True, memory_review=False)
    try:
        assert "hand_off" in {s["name"] for s in parent.tool_schemas()}
        assert parent.call_tool("hand_off", {}) == "handed off"
        offered = {s["name"] for s in child.tool_schemas()}
        assert "hand_off" not in offered and "delegate_task" not in offered
        assert "Unknown tool" in json.loads(child.call_tool("hand_off", {}))["error"]
    finally:
        child.close()


def test_context_length_error_compacts_and_retries(agent_factory, fake_llm):
    agent = agent_factory(config={"model": {"max_retries": 0}})
    for i in range(6):
        fake_llm.queue(Reply(text=f"answer {i}"))
        agent.run_turn(f"question {i} " + "filler " * 50)
    first_session = agent.session_id
    fake_llm.queue(Reply(error="context_length"))
    # The agent's own calls carry tools; the summarizer's call does not.
    fake_llm.handler = lambda req: (Reply(text="final after compaction") if req.body.get("tools")
                                    else Reply(text="## Goal\nsummary of earlier work"))
    result = agent.run_turn("question 6")
    assert result.status == "ok", result.error
    assert result.compacted
    assert agent.session_id != first_session
    old = agent.store.get_session(first_session)
    assert old["end_reason"] == "compression"
    assert agent.store.get_session(agent.session_id)["parent_session_id"] == first_session


def test_background_memory_review_saves_without_touching_the_conversation(agent_factory, fake_llm):
    reviews = []

    def handler(req):
        last = last_user_text(req)
        if "Review the conversation above" in last:
            reviews.append(req)
            if req.body["messages"][-1]["role"] == "user":
                return Reply(tool_calls=[{"name": "memory", "arguments": {
                    "action": "add", "target": "user", "content": "Lives in Lisbon"}}])
            return Reply(text="Saved.")
        return Reply(text="ok")

    fake_llm.handler = handler
    agent = agent_factory(config={"memory": {"nudge_interval": 2}})
    agent.run_turn("I moved to Lisbon last year")
    assert agent._review_thread is None  # not yet: one turn of two
    agent.run_turn("anyway, what's the weather like there?")
    agent.wait_for_review()
    assert agent.last_review and agent.last_review.startswith("memory updated:")
    assert "Lives in Lisbon" in agent.last_review
    assert "Lives in Lisbon" in (agent.kernel.home / "memories" / "USER.md").read_text()
    # the review saw the current inventory, offered only the memory tool, and left the
    # main conversation alone
    tools = [t.get("function", t)["name"] for t in reviews[0].body.get("tools", [])]
    assert tools == ["memory"]
    stored = agent.store.get_conversation(agent.session_id)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert not any("Review the conversation" in (m.get("content") or "") for m in agent.messages)
    assert len({id(r) for r in reviews}) == 2  # one review: its tool call and its closing call


def test_a_third_party_builtin_memory_gets_the_review(kernel_factory, fake_llm):
    """The review follows MemoryProvider.memory_tool, not the name ``memory``: a
    replacement built-in provider whose curated-memory tool is ``notes`` is reviewed."""
    from hermes.runtime.agent import Agent
    from hermes.testing.stubs import StubMemoryProvider, memory_provider_plugin

    class Notes(StubMemoryProvider):
        name = "builtin"
        memory_tool = "notes"

        def __init__(self):
            self.calls: list[tuple[str, dict]] = []

        def get_tool_schemas(self):
            return [{"name": "notes", "description": "keep a note",
                     "parameters": {"type": "object", "properties": {"content": {"type": "string"}}}}]

        def handle_tool_call(self, tool_name, args, **kwargs):
            self.calls.append((tool_name, dict(args)))
            return json.dumps({"success": True})

    reviews = []

    def handler(req):
        if "Review the conversation above" in last_user_text(req):
            reviews.append(req)
            if req.body["messages"][-1]["role"] == "user":
                return Reply(tool_calls=[{"name": "notes", "arguments": {
                    "target": "user", "content": "Lives in Lisbon"}}])
            return Reply(text="Saved.")
        return Reply(text="ok")

    fake_llm.handler = handler
    provider = Notes()
    cfg = fake_llm.config(provider="openai")
    cfg["memory"] = {"nudge_interval": 1}
    kernel = kernel_factory(config=cfg, plugins=[memory_provider_plugin(provider)],
                            disable_plugins=["builtin-memory"], check_selection=True)
    agent = Agent(kernel)
    try:
        agent.run_turn("I moved to Lisbon last year")
        agent.wait_for_review()
        assert [t.get("function", t)["name"] for t in reviews[0].body.get("tools", [])] == ["notes"]
        assert provider.calls == [("notes", {"target": "user", "content": "Lives in Lisbon"})]
        assert agent.last_review == "memory updated: ? user: Lives in Lisbon"
    finally:
        agent.close()


def test_interrupt_mid_stream_keeps_what_was_shown(agent_factory, fake_llm):
    fake_llm.queue(Reply(text="one two three four five six seven eight nine ten " * 20))
    agent = agent_factory()
    interrupt = threading.Event()
    shown = []

    def on_text(chunk):
        shown.append(chunk)
        interrupt.set()  # the user presses Ctrl-C after the first chunk

    result = agent.run_turn("tell me a long story", on_text=on_text, interrupt=interrupt)
    assert result.status == "interrupted"
    assert result.answer == "".join(shown)
    assert 0 < len(result.answer) < len("one two three four five six seven eight nine ten " * 20)
    stored = agent.store.get_conversation(agent.session_id)
    assert stored[-1] == {"role": "assistant", "content": result.answer}


def test_streamed_text_is_scrubbed_of_memory_fences(agent_factory, fake_llm):
    # A model echoing an injected fence (the tag opens a line; prose that merely
    # mentions the tag is left alone, see hermes.runtime.fencing).
    leaked = "Sure.\n<memory-context>\nsecret recalled note\n</memory-context>\nHere you go."
    fake_llm.queue(Reply(text=leaked))
    agent = agent_factory()
    chunks = []
    result = agent.run_turn("hi", on_text=chunks.append)
    assert "secret recalled note" not in "".join(chunks)
    assert "secret recalled note" not in result.answer
    assert "Here you go." in result.answer
