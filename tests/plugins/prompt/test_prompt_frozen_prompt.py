"""The frozen system prompt: built once per session with the real memory manager, sent
byte for byte on each of 50 turns while memory is written, skills are added and
AGENTS.md is edited mid-session — and a rebuild after a compaction reflects it all.

This follows the runtime's protocol (``Agent.ensure_system_prompt``): build once, store
the text, send it through ``apply_ephemeral`` every turn; rebuild only on compaction.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes import PromptBuilder, PromptContext, prompt_hash
from hermes.runtime.memory_manager import MemoryManager

SESSION_START = 1_767_225_600.0


@pytest.fixture
def memory(kernel):
    manager = MemoryManager(kernel, platform="cli")
    manager.initialize("session-1", hermes_home=str(kernel.home))
    yield manager
    manager.shutdown()


def context(kernel, memory, cwd: Path, session_id: str, **extra) -> PromptContext:
    tools = {t.name for t in kernel.tools()} | {s["name"] for s in memory.tool_schemas()}
    return PromptContext(kernel=kernel, session_id=session_id, home=kernel.home, cwd=cwd,
                         model="test-model", platform="cli", tool_names=frozenset(tools),
                         memory=memory, now=SESSION_START, extra=extra)


def system_text(message: dict) -> str:
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


def add_skill(home: Path, n: int) -> None:
    path = home / "skills" / "generated" / f"skill-{n}" / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nname: skill-{n}\ndescription: Generated skill number {n}\n---\nSteps.\n")


def test_prompt_is_frozen_for_50_turns_and_rebuilt_after_compaction(kernel, memory, tmp_path: Path):
    home = kernel.home
    project = tmp_path / "project"
    project.mkdir()
    (project / "AGENTS.md").write_text("Original project rules.")
    add_skill(home, 0)
    first = memory.handle_tool_call("memory", {"target": "memory", "action": "add",
                                               "content": "Prefers tabs over spaces"})
    assert json.loads(first)["success"]
    # The snapshot was frozen at initialize: this write waits for the next session.
    builder = PromptBuilder(kernel)
    built = builder.build(context(kernel, memory, project, "session-1"))
    stored, stored_hash = built.text, built.hash  # what the runtime stores with the session
    assert "Original project rules." in stored and "skill-0" in stored
    assert "Prefers tabs" not in stored

    transcript: list[dict] = []
    sent_hashes = set()
    rebuilt_differs = 0
    for turn in range(1, 51):
        # Mid-session changes of every kind.
        result = memory.handle_tool_call("memory", {"target": "memory", "action": "add",
                                                    "content": f"Fact number {turn} about the project"})
        assert json.loads(result)["success"], result
        if turn % 5 == 0:
            memory.handle_tool_call("memory", {"target": "user", "action": "add",
                                               "content": f"User detail {turn}"})
        if turn % 3 == 0:
            add_skill(home, turn)
        if turn % 7 == 0:
            (project / "AGENTS.md").write_text(f"Project rules, revision {turn}.")

        transcript.append({"role": "user", "content": f"question {turn}"})
        ctx = context(kernel, memory, project, "session-1",
                      recalled=f"<memory-context>recall {turn}</memory-context>")
        request = builder.apply_ephemeral([{"role": "system", "content": stored}, *transcript], ctx)
        sent = system_text(request[0])
        assert sent == stored  # byte for byte
        sent_hashes.add(prompt_hash(sent))
        assert request[-1]["content"].endswith(f"recall {turn}</memory-context>")
        assert transcript[-1]["content"] == f"question {turn}"  # never persisted
        transcript.append({"role": "assistant", "content": f"answer {turn}"})

        # The memory snapshot stays frozen even for a rebuild within the session …
        fresh = builder.build(ctx)
        assert "Fact number" not in fresh.text and "User detail" not in fresh.text
        # … but a per-turn rebuild would see skills and AGENTS.md edits: only the frozen
        # text keeps the provider's prefix cache valid.
        rebuilt_differs += fresh.hash != stored_hash

    assert sent_hashes == {stored_hash}
    assert rebuilt_differs >= 45  # from turn 3 on, the live files differ from the frozen text

    # Compaction: the runtime switches the memory manager to the child session and
    # rebuilds. Skills, AGENTS.md and the session line reflect the changes at once.
    memory.on_session_switch("session-2", parent_session_id="session-1")
    after = builder.build(context(kernel, memory, project, "session-2"))
    assert after.hash != stored_hash
    assert "skill-48" in after.text
    assert "Project rules, revision 49." in after.text and "Original project rules." not in after.text
    assert "Session: session-2" in after.text
    # The memory snapshot is re-frozen when the memory manager re-initialises (a new
    # session; whether a compaction continuation does is the memory manager's policy).
    memory.on_session_switch("session-3", parent_session_id="session-2", reset=True)
    fresh_session = builder.build(context(kernel, memory, project, "session-3"))
    assert "Prefers tabs over spaces" in fresh_session.text
    assert "Fact number 50 about the project" in fresh_session.text
    assert "User detail 50" in fresh_session.text


def test_stored_prompt_is_reused_after_continue(kernel, memory, tmp_path: Path):
    """``--continue``: a new builder (new process) sends the stored text unchanged even
    though everything on disk moved on."""
    (tmp_path / "AGENTS.md").write_text("v1")
    stored = PromptBuilder(kernel).build(context(kernel, memory, tmp_path, "s")).text
    (tmp_path / "AGENTS.md").write_text("v2")
    add_skill(kernel.home, 1)
    resumed = PromptBuilder(kernel)  # as after a restart
    request = resumed.apply_ephemeral([{"role": "system", "content": stored}, {"role": "user", "content": "hi"}],
                                      context(kernel, memory, tmp_path, "s"))
    assert request[0]["content"] == stored
    assert "v2" not in stored
