"""`hermes sessions …` through the real click group, and the console script where the
process matters (a broken state.db must give one line, not a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes.cli import cli
from hermes.plugins.sessions.store import SQLiteSessionStore

HERMES = Path(sys.executable).with_name("hermes")


@pytest.fixture(autouse=True)
def only_defaults(hermes_home, monkeypatch):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "")
    # The table fits the terminal: a known width, not the one pytest runs in (an
    # 80-column terminal, or a pytest-xdist worker, cut the titles these tests read).
    monkeypatch.setenv("COLUMNS", "120")


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input)


@pytest.fixture
def populated(hermes_home: Path) -> dict[str, str]:
    store = SQLiteSessionStore(hermes_home / "state.db")
    root = store.create_session("20260101_090000_aaaaaa", source="cli", model="m1", started_at=1000)
    store.set_title(root, "Database migration")
    store.append_message(root, "user", "move the staging database to Postgres", timestamp=1001)
    store.append_message(root, "assistant", "Done with pg_dump and pg_restore.", timestamp=1002)
    store.end_session(root, "compression", ended_at=1100)
    cont = store.create_session("20260101_091500_bbbbbb", parent_session_id=root, started_at=1100)
    store.set_title(cont, store.next_title_in_lineage("Database migration"))
    store.append_message(cont, "user", "now the indexes", timestamp=1101)
    other = store.create_session("20260102_100000_cccccc", source="telegram", started_at=900)
    store.append_message(other, "user", "recipe for 麻婆豆腐", timestamp=901)
    store.end_session(other, "user_exit", ended_at=902)
    store.close()
    return {"root": root, "cont": cont, "other": other}


def test_list(populated: dict[str, str]) -> None:
    result = run("sessions", "list")
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.strip().splitlines()
    assert header.split() == ["ID", "LAST", "ACTIVE", "SOURCE", "MSGS", "TITLE"]
    assert lines[0].startswith(populated["root"]) and "2 parts" in lines[0]
    assert "Database migration" in lines[0] and lines[1].startswith(populated["other"])
    # columns line up under the header, and a narrow terminal cuts titles, never ids
    at = header.index("LAST ACTIVE")
    assert all(line[at - 2:at] == "  " and line[at:at + 4].isdigit() for line in lines), lines
    narrow = CliRunner(env={"COLUMNS": "72"}).invoke(cli, ["sessions", "list"]).stdout.splitlines()
    assert all(len(line) <= 72 for line in narrow), narrow
    assert narrow[1].startswith(populated["root"]) and "…" in narrow[1]


def test_ambiguous_id_prefix_lists_candidates(populated: dict[str, str]) -> None:
    result = run("sessions", "show", "2026010")
    assert result.exit_code == 1
    assert "ambiguous" in result.stderr and populated["root"] in result.stderr
    assert "Traceback" not in result.output
    rows = json.loads(run("sessions", "list", "--json").stdout)
    assert [r["id"] for r in rows] == [populated["root"], populated["other"]]
    assert rows[0]["tip_id"] == populated["cont"]
    every = json.loads(run("sessions", "list", "--all", "--json").stdout)
    assert {r["id"] for r in every} == set(populated.values())
    assert [r["id"] for r in json.loads(run("sessions", "list", "--source", "telegram", "--json").stdout)] == [populated["other"]]


def test_list_empty(hermes_home: Path) -> None:
    result = run("sessions", "list")
    assert result.exit_code == 0 and "No sessions yet." in result.stdout


def test_show(populated: dict[str, str]) -> None:
    result = run("sessions", "show", "20260102")  # a unique id prefix
    assert result.exit_code == 0, result.output
    assert "麻婆豆腐" in result.stdout and "telegram" in result.stdout
    data = json.loads(run("sessions", "show", "Database migration", "--json").stdout)
    assert data["session"]["id"] == populated["cont"]  # a title resolves to its newest part
    assert [m["content"] for m in data["messages"]] == ["now the indexes"]
    missing = run("sessions", "show", "nothing-like-this")
    assert missing.exit_code == 1 and "no session matches" in missing.stderr
    assert "Traceback" not in missing.output


def test_search(populated: dict[str, str]) -> None:
    hits = json.loads(run("sessions", "search", "pg_dump", "--json").stdout)
    assert [h["session_id"] for h in hits] == [populated["root"]] and hits[0]["mode"] == "strict"
    question = json.loads(run("sessions", "search", "when", "did", "we", "move", "the", "database?",
                              "--json").stdout)
    assert question and question[0]["mode"] == "relaxed"
    assert json.loads(run("sessions", "search", "when did we move the database?", "--strict",
                          "--json").stdout) == []
    cjk = json.loads(run("sessions", "search", "麻婆豆腐", "--json").stdout)
    assert cjk[0]["mode"] == "trigram"
    human = run("sessions", "search", "postgres", "--role", "user")
    assert human.exit_code == 0 and "[strict]" in human.stdout  # the match marked [so] off a terminal
    assert "[Postgres]" in human.stdout and ">>>" not in human.stdout
    scoped = json.loads(run("sessions", "search", "indexes", "--session", populated["cont"], "--json").stdout)
    assert len(scoped) == 1
    assert run("sessions", "search", "xylophone").stdout.strip() == "No matches."
    assert run("sessions", "search", '"(', "--json").exit_code == 0


def test_export_and_import_round_trip(populated: dict[str, str], hermes_home: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "all.jsonl"
    result = run("sessions", "export", "--all", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "exported 3 session(s)" in result.stderr
    md = run("sessions", "export", populated["root"], "--format", "md")
    assert md.stdout.startswith("# Database migration") and "pg_dump" in md.stdout
    lineage = run("sessions", "export", populated["root"], "--lineage")
    assert lineage.stdout.count("hermes_session") == 2
    assert run("sessions", "export").exit_code == 1

    other_home = tmp_path / "elsewhere"
    other_home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(other_home))
    result = run("sessions", "import", str(out), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["sessions_added"] == 3 and report["messages_added"] == 4 and report["problems"] == []
    again = run("sessions", "import", str(out))
    assert "imported 0 new session(s)" in again.stdout and "3 unchanged" in again.stdout
    rows = json.loads(run("sessions", "list", "--json").stdout)
    assert [r["id"] for r in rows] == [populated["root"], populated["other"]]


def test_import_reports_bad_lines_and_shows_progress(hermes_home: Path, tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl"
    lines = [json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i}"})
             for i in range(2500)]
    lines[10] = "{broken"
    src.write_text("\n".join(lines) + "\n")
    result = run("sessions", "import", str(src))
    assert result.exit_code == 0, result.output
    assert "imported 1 new session(s), 2499 message(s)" in result.stdout
    assert f"{src}:11: not valid JSON" in result.stderr
    assert "importing" in result.stderr  # the progress bar went to stderr


def test_rename_delete_prune(populated: dict[str, str]) -> None:
    result = run("sessions", "rename", populated["other"], "Tofu", "night")
    assert result.exit_code == 0 and "Tofu night" in result.stdout
    clash = run("sessions", "rename", populated["root"], "Tofu night")
    assert clash.exit_code == 1 and "already in use" in clash.stderr and "Traceback" not in clash.output
    assert "title cleared" in run("sessions", "rename", populated["other"]).stdout

    aborted = run("sessions", "delete", populated["root"], input="n\n")
    assert aborted.exit_code != 0
    result = run("sessions", "delete", populated["root"], "--yes")
    assert result.exit_code == 0 and "deleted 2 session(s)" in result.stdout  # with its continuation
    assert {r["id"] for r in json.loads(run("sessions", "list", "--all", "--json").stdout)} == {populated["other"]}

    result = run("sessions", "prune", "--older-than", "1", "--yes")
    assert result.exit_code == 0 and "pruned 1 session(s)" in result.stdout
    assert json.loads(run("sessions", "list", "--json").stdout) == []


def test_corrupt_database_is_one_line_not_a_traceback(hermes_home: Path) -> None:
    (hermes_home / "state.db").write_bytes(b"definitely not sqlite " * 500)
    proc = subprocess.run([str(HERMES), "sessions", "list"], capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "HERMES_HOME": str(hermes_home)})
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(hermes_home / "state.db") in lines[0] and "Move it aside" in lines[0]
