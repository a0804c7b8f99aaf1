"""``hermes forget`` (issue 20): the text is found in memory, its history, drift backups,
messages, tool calls, reasoning, titles and system prompts; shown; removed after
confirmation; and afterwards no search, no export and no raw read of any file in the home
(the database and its -wal included) finds it. A component that cannot forget is named."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import hermes
from hermes.cli import cli

SECRET = "Kestrel-7731qz"  # digits alone turned up by chance in cache files (mtimes, sizes)


def run(home: Path, *args: str, plugins: bool = False, input: str | None = None) -> Any:
    base = ["--home", str(home)] + ([] if plugins else ["--no-plugins"])
    return CliRunner().invoke(cli, [*base, *args], input=input)


def raw_hits(home: Path, word: bytes) -> list[str]:
    """Every file under the home whose bytes hold ``word`` (any case)."""
    hits = []
    for path in home.rglob("*"):
        if path.is_file() and word.lower() in path.read_bytes().lower():
            hits.append(str(path.relative_to(home)))
    return hits


def seed(home: Path) -> dict[str, str]:
    assert run(home, "memory", "add", f"The vault codeword is {SECRET}").exit_code == 0
    assert run(home, "memory", "add", "Project uses uv").exit_code == 0
    mem = home / "memories" / "MEMORY.md"
    (home / "memories" / "MEMORY.md.bak.1700000000").write_text(mem.read_text())
    kernel = hermes.Kernel(home=home, check_selection=False)
    try:
        store = kernel.session_store
        old = store.create_session(None, source="cli", model="m",
                                   system_prompt=f"MEMORY\nThe vault codeword is {SECRET}")
        store.append_messages(old, [
            {"role": "user", "content": f"remember {SECRET.lower()} for the vault", "timestamp": 1_600_000_000},
            {"role": "assistant", "content": None, "reasoning": f"the user said {SECRET}",
             "tool_calls": [{"id": "c1", "type": "function", "function": {
                 "name": "memory", "arguments": json.dumps({"action": "add", "content": f"code {SECRET}"})}}],
             "timestamp": 1_600_000_001},
            {"role": "tool", "tool_call_id": "c1", "name": "memory", "content": '{"success": true}',
             "timestamp": 1_600_000_002},
            {"role": "assistant", "content": "Saved the pelican notes.", "timestamp": 1_600_000_003},
        ])
        store.set_title(old, f"vault {SECRET}")
        new = store.create_session(None, source="cli", model="m")
        store.append_messages(new, [{"role": "user", "content": f"is {SECRET} still the code?"},
                                    {"role": "assistant", "content": "Yes, about the albatross plan."}])
        whole = store.create_session(None, source="cli", model="m")
        store.append_messages(whole, [{"role": "user", "content": "my flamingoquartz diary entry"}])
    finally:
        kernel.close()
    return {"old": old, "new": new, "whole": whole}


def searches(home: Path, word: str) -> list[Any]:
    kernel = hermes.Kernel(home=home, check_selection=False)
    try:
        store = kernel.session_store
        return list(store.search_messages(word)) + list(store.search_messages(f'"{word}"'))
    finally:
        kernel.close()


def test_forget_removes_the_text_everywhere(hermes_home: Path) -> None:
    ids = seed(hermes_home)
    assert raw_hits(hermes_home, b"kestrel")  # it is there to begin with
    dry = run(hermes_home, "forget", SECRET)  # not a terminal, no --yes: shows, removes nothing
    assert dry.exit_code == 1 and "confirm with --yes" in dry.output
    assert "MEMORY.md entry" in dry.output and f"session {ids['old']}" in dry.output
    assert searches(hermes_home, "kestrel")

    done = run(hermes_home, "forget", SECRET, "--yes")
    assert done.exit_code == 0, done.output
    assert "CANNOT" not in done.output

    assert searches(hermes_home, "kestrel") == [] and searches(hermes_home, "7731qz") == []
    export = run(hermes_home, "sessions", "export", "--all")
    assert export.exit_code == 0 and "kestrel" not in export.output.lower()
    assert "pelican" in export.output and "albatross" in export.output  # the rest is kept
    shown = run(hermes_home, "memory", "show", "--json").output + run(hermes_home, "memory", "log", "--json").output
    assert "kestrel" not in shown.lower() and "Project uses uv" in shown
    assert raw_hits(hermes_home, b"kestrel") == []
    assert raw_hits(hermes_home, b"7731qz") == []
    kernel = hermes.Kernel(home=hermes_home, check_selection=False)
    try:
        store = kernel.session_store
        messages = store.get_messages(ids["old"])
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]  # shape kept
        assert messages[1]["tool_calls"][0]["id"] == "c1"
        assert store.get_session(ids["old"])["title"] is None
        assert store.check_integrity() == []
    finally:
        kernel.close()


def test_forget_a_whole_session_and_only_before_a_date(hermes_home: Path) -> None:
    ids = seed(hermes_home)
    result = run(hermes_home, "forget", "--session", ids["whole"], "--yes")
    assert result.exit_code == 0, result.output
    assert raw_hits(hermes_home, b"flamingoquartz") == []
    assert run(hermes_home, "sessions", "show", ids["whole"]).exit_code != 0

    result = run(hermes_home, "forget", SECRET, "--before", "2021-01-01", "--yes")
    assert result.exit_code == 0, result.output
    kernel = hermes.Kernel(home=hermes_home, check_selection=False)
    try:
        store = kernel.session_store
        assert all(SECRET.lower() not in (m["content"] or "").lower() for m in store.get_messages(ids["old"]))
        assert SECRET in store.get_messages(ids["new"])[0]["content"]  # newer than the date
    finally:
        kernel.close()


def test_forget_while_a_reader_holds_a_snapshot_still_clears_the_tables(hermes_home: Path) -> None:
    ids = seed(hermes_home)
    reader = sqlite3.connect(hermes_home / "state.db")
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchone()  # a chat mid-read
    try:
        result = run(hermes_home, "forget", SECRET, "--yes")
        assert result.exit_code == 0, result.output
    finally:
        reader.close()
    assert "still reads" in result.output  # the user is told a copy may remain in the -wal
    assert searches(hermes_home, "kestrel") == []
    assert run(hermes_home, "forget", SECRET, "--yes").exit_code == 0  # run again once it ended
    assert raw_hits(hermes_home, b"kestrel") == [] and ids


def test_a_component_that_cannot_forget_is_reported(hermes_home: Path, tmp_path: Path, monkeypatch: Any) -> None:
    site = tmp_path / "site"
    hermes.testing.make_distribution(site, "cloudy", plugins={"cloudy": "cloudy_plugin"}, modules={
        "cloudy_plugin.py": '''
            import hermes
            class Cloudy(hermes.MemoryProvider):
                name = "cloudy"
                def is_available(self): return True
                def initialize(self, session_id, **kw): pass
                def get_tool_schemas(self): return []
            @hermes.hookimpl
            def hermes_register_memory_providers(register):
                register("cloudy", lambda kernel: Cloudy())
        '''})
    monkeypatch.syspath_prepend(str(site))
    (hermes_home / "config.yaml").write_text(yaml.safe_dump({"memory": {"provider": "cloudy"}}))
    seed(hermes_home)
    result = run(hermes_home, "forget", SECRET, "--yes", plugins=True)
    assert result.exit_code == 1
    assert "cloudy: CANNOT FORGET" in result.output or "cloudy" in result.output and "CANNOT" in result.output
    assert raw_hits(hermes_home, b"kestrel") == []  # what could forget, did


def test_usage_errors(hermes_home: Path) -> None:
    assert run(hermes_home, "forget").exit_code == 2
    bad = run(hermes_home, "forget", "x", "--before", "yesterday")
    assert bad.exit_code == 2 and "ISO 8601" in bad.output
    missing = run(hermes_home, "forget", "--session", "nope", "--yes")
    assert missing.exit_code == 1 and "no session" in missing.output


def test_wal_frames_do_not_keep_the_text(hermes_home: Path) -> None:
    """The text written moments ago lives in -wal frames; they are truncated."""
    seed(hermes_home)
    wal = hermes_home / "state.db-wal"
    kernel = hermes.Kernel(home=hermes_home, check_selection=False)
    try:
        sid = kernel.session_store.create_session(None, source="cli", model="m")
        kernel.session_store.append_messages(sid, [{"role": "user", "content": f"fresh {SECRET} in the wal"}])
        assert "state.db-wal" in raw_hits(hermes_home, b"kestrel") or not wal.exists()
        result = run(hermes_home, "forget", SECRET, "--yes")  # while this kernel's store is open
        assert result.exit_code == 0, result.output
    finally:
        kernel.close()
    assert raw_hits(hermes_home, b"kestrel") == [], os.listdir(hermes_home)


def test_at_a_terminal_it_asks_first(hermes_home: Path) -> None:
    """A real process in a pseudo-terminal: answering no removes nothing, yes removes."""
    import sys

    pexpect = pytest.importorskip("pexpect")
    seed(hermes_home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(hermes_home)

    def ask(answer: str) -> str:
        child = pexpect.spawn(sys.executable, ["-m", "hermes.cli", "--no-plugins", "forget", SECRET],
                              env=env, encoding="utf-8", timeout=60)
        child.expect(r"Remove all of this\?")
        before = child.before
        child.sendline(answer)
        child.expect(pexpect.EOF)
        child.close()
        return before + child.before

    shown = ask("n")
    assert "MEMORY.md entry" in shown and "Nothing was removed." in shown
    assert raw_hits(hermes_home, b"kestrel")
    ask("y")
    assert raw_hits(hermes_home, b"kestrel") == []
