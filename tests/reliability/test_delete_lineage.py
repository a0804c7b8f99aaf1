"""``hermes sessions delete`` of a compressed conversation: naming any part deletes the
whole lineage (earlier parts, continuations, sub-agents) and says which ids;
``--only-this-part`` deletes one part and says which parts were kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes.cli import cli
from hermes.plugins.sessions.store import SQLiteSessionStore


@pytest.fixture
def chain(hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """root → (compaction) → middle → (compaction) → tip, a sub-agent of middle, and an
    unrelated session."""
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "")
    store = SQLiteSessionStore(hermes_home / "state.db")
    ids = {}
    ids["root"] = store.create_session("20260101_090000_aaaaaa", started_at=1000)
    store.append_message(ids["root"], "user", "first part", timestamp=1001)
    store.end_session(ids["root"], "compression", ended_at=1100)
    ids["middle"] = store.create_session("20260101_091500_bbbbbb", parent_session_id=ids["root"],
                                         started_at=1100)
    store.append_message(ids["middle"], "user", "second part", timestamp=1101)
    ids["agent"] = store.create_session("20260101_091600_dddddd", parent_session_id=ids["middle"],
                                        source="subagent", started_at=1150)
    store.end_session(ids["middle"], "compression", ended_at=1200)
    ids["tip"] = store.create_session("20260101_093000_cccccc", parent_session_id=ids["middle"],
                                      started_at=1200)
    store.set_title(ids["tip"], "Live end")
    store.append_message(ids["tip"], "user", "third part", timestamp=1201)
    ids["other"] = store.create_session("20260102_100000_eeeeee", started_at=900)
    store.close()
    return ids


def remaining(home: Path) -> set[str]:
    store = SQLiteSessionStore(home / "state.db")
    try:
        return {row["id"] for row in store.list_sessions(limit=100, roots_only=False)}
    finally:
        store.close()


@pytest.mark.parametrize("part", ["tip", "middle", "root"])
def test_deleting_any_part_deletes_the_whole_conversation(hermes_home: Path, chain: dict[str, str],
                                                          part: str) -> None:
    result = CliRunner().invoke(cli, ["sessions", "delete", chain[part], "--yes"])
    assert result.exit_code == 0, result.output
    gone = {chain[k] for k in ("root", "middle", "agent", "tip")}
    assert remaining(hermes_home) == {chain["other"]}
    assert "deleted 4 session(s): " in result.stdout
    assert all(sid in result.stdout for sid in gone)


def test_by_title_of_the_live_end(hermes_home: Path, chain: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["sessions", "delete", "Live end", "--yes"])
    assert result.exit_code == 0 and remaining(hermes_home) == {chain["other"]}


def test_only_this_part_keeps_the_rest_and_says_so(hermes_home: Path, chain: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["sessions", "delete", chain["tip"], "--only-this-part", "--yes"])
    assert result.exit_code == 0, result.output
    assert remaining(hermes_home) == {chain[k] for k in ("root", "middle", "agent", "other")}
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"deleted 1 session(s): {chain['tip']}"
    assert lines[1].startswith("kept the other 3 part(s) of the conversation: ")
    assert chain["root"] in lines[1] and chain["middle"] in lines[1]


def test_the_confirmation_names_the_whole_conversation(hermes_home: Path, chain: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["sessions", "delete", chain["tip"]], input="n\n")
    assert result.exit_code != 0 and "4 session(s), the whole conversation" in result.output
    assert len(remaining(hermes_home)) == 5
