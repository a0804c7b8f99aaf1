"""Where a conversation continues (``compression_tip``, the ``tip_id`` of ``hermes
sessions list`` and of the MCP session list) after a compaction and an ``/undo`` in
either order: ``/undo`` ends its session too (``end_reason='undo'``) and continues in a
child, so a tip that follows only compactions stopped on the abandoned branch, and a
client resuming there would carry on from the dropped exchange. Real agent turns
against the fake server, real SQLite store."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from hermes.cli import cli
from hermes.testing.fakellm import Reply


def answer(req: Any) -> Reply:
    return Reply(text="ok") if req.body.get("tools") else Reply(text="## Goal\nsummary of earlier work")


def chat(agent: Any, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        assert agent.run_turn(f"question {i} " + "filler " * 40).status == "ok"


@pytest.mark.parametrize("order", ["compact-then-undo", "undo-then-compact"])
def test_the_tip_follows_compactions_and_undo(order, agent_factory, fake_llm, hermes_home, monkeypatch):
    fake_llm.handler = answer
    agent = agent_factory()
    store = agent.store
    root = agent.session_id
    chat(agent, 4)
    steps = ["compact", "undo"] if order == "compact-then-undo" else ["undo", "compact"]
    for step in steps:
        before = agent.session_id
        if step == "compact":
            assert agent.compact(reason="manual")
        else:
            assert agent.undo() is not None  # drops the last exchange (past the compaction)
        assert agent.session_id != before
        assert store.get_session(before)["end_reason"] == ("compression" if step == "compact" else "undo")
    chat(agent, 1, start=10)  # continue in the live session
    live = agent.session_id
    assert store.compression_tip(root) == live
    assert all(store.compression_tip(sid) == live for sid in store.lineage(root)
               if store.get_session(sid)["source"] != "subagent")
    row = next(r for r in store.list_sessions() if r["id"] == root)
    assert row["tip_id"] == live
    # what a script reads
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "")
    listed = json.loads(CliRunner().invoke(cli, ["sessions", "list", "--json"]).stdout)
    assert next(r for r in listed if r["id"] == root)["tip_id"] == live
