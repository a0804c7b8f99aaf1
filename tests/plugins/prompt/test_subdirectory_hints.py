"""Subdirectory hints come from the prompt plugin through ``hermes_tool_result``: real
agent turns (real OpenAI SDK against the loopback fake server), real files."""

from __future__ import annotations

import json

import hermes
from hermes.testing.fakellm import Reply


class ReadTool:
    @hermes.hookimpl
    def hermes_register_tools(self, register):
        register(hermes.Tool(name="read_file", schema={"description": "read a file"},
                             handler=lambda args, ctx: json.dumps({"read": args["path"]})))


def project(tmp_path):
    (tmp_path / "AGENTS.md").write_text("Top-level rules.", encoding="utf-8")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "AGENTS.md").write_text("API rules: run make api-test.", encoding="utf-8")
    (tmp_path / "api" / "app.py").write_text("x = 1\n", encoding="utf-8")
    return tmp_path


def tool_results(agent):
    return [m["content"] for m in agent.messages if m["role"] == "tool"]


def read_twice(fake_llm):
    for _ in range(2):
        fake_llm.queue(Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "api/app.py"}}]))
        fake_llm.queue(Reply(text="done"))


def test_a_subdirectory_context_file_is_added_once(agent_factory, fake_llm, tmp_path):
    cwd = project(tmp_path)
    read_twice(fake_llm)
    agent = agent_factory(plugins=[ReadTool()], cwd=cwd)
    agent.run_turn("read the app")
    agent.run_turn("read it again")
    first, second = tool_results(agent)
    assert first.startswith('{"read": "api/app.py"}\n\n[Subdirectory context discovered: api/AGENTS.md]')
    assert "API rules: run make api-test." in first
    assert second == '{"read": "api/app.py"}'  # once per directory per agent
    # the model saw it with the result, and the system prompt was not touched
    assert "API rules" in json.dumps(fake_llm.requests[1].body["messages"][-1])
    assert "API rules" not in agent.system_prompt


def test_sub_agents_and_a_disabled_prompt_plugin_get_no_hints(agent_factory, kernel_factory,
                                                             fake_llm, tmp_path):
    cwd = project(tmp_path)
    fake_llm.queue(Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "api/app.py"}}]))
    fake_llm.queue(Reply(text="done"))
    skipping = agent_factory(plugins=[ReadTool()], cwd=cwd, skip_context_files=True)
    skipping.run_turn("read the app")
    assert tool_results(skipping) == ['{"read": "api/app.py"}']

    from hermes.runtime.agent import Agent

    cfg = fake_llm.config(provider="openai")
    kernel = kernel_factory(config=cfg, plugins=[ReadTool()], disable_plugins=["prompt-layers"])
    agent = Agent(kernel, cwd=cwd)
    try:
        assert agent.call_tool("read_file", {"path": "api/app.py"})  # the tool itself works
        assert agent._run_tool_calls([{"id": "c1", "function": {
            "name": "read_file", "arguments": '{"path": "api/app.py"}'}}]) == ['{"read": "api/app.py"}']
    finally:
        agent.close()


def test_a_third_party_note_joins_the_hints(agent_factory, fake_llm, tmp_path):
    """A plugin of its own name gets the same hook the prompt plugin uses."""
    cwd = project(tmp_path)

    class Reminder:
        @hermes.hookimpl
        def hermes_tool_result(self, tool_name, result):
            return f"Reminder for {tool_name}: keep diffs small." if "read" in result else None

    fake_llm.queue(Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "api/app.py"}}]))
    fake_llm.queue(Reply(text="done"))
    agent = agent_factory(plugins=[ReadTool(), Reminder()], cwd=cwd)
    agent.run_turn("read the app")
    (result,) = tool_results(agent)
    assert "API rules" in result
    assert result.endswith("\n\nReminder for read_file: keep diffs small.")
