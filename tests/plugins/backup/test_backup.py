"""``hermes backup`` / ``hermes restore`` (issue 20): one archive, taken while a real chat
process writes, restored elsewhere with the same sessions, search results and memory;
checked before anything is touched; never over a non-empty home without --force."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import hermes
from hermes.cli import cli
from hermes.testing.fakellm import FakeLLMServer, Reply

SCRUB = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
         "HERMES_LOAD_PLUGINS", "HERMES_DISABLE_PLUGINS", "HERMES_NO_PLUGINS")


def hermes_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def seed_home(home: Path, server: FakeLLMServer | None = None) -> None:
    config: dict[str, Any] = {"memory": {"nudge_interval": 0}}
    if server is not None:
        config["model"] = {"provider": "openai", "name": "fake-model", "api_key": "fake-key",
                           "base_url": server.openai_url, "max_retries": 1, "timeout": 20.0}
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    (home / "SOUL.md").write_text("You are terse.")
    (home / ".env").write_text("OPENAI_API_KEY=sk-very-secret-value\n")
    skill = home / "skills" / "deploy" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: deploy\ndescription: how we deploy\n---\nRun make deploy.\n")
    assert hermes_cli("--home", str(home), "memory", "add", "Project uses uv").exit_code == 0
    assert hermes_cli("--home", str(home), "memory", "add", "-t", "user", "Name: Ada").exit_code == 0
    kernel = hermes.Kernel(home=home, check_selection=False)
    try:
        store = kernel.session_store
        for i in range(5):
            sid = store.create_session(None, source="cli", model="fake-model")
            store.append_messages(sid, [
                {"role": "user", "content": f"question {i} about the pelican migration"},
                {"role": "assistant", "content": f"answer {i}: pelicans fly south in winter"},
            ])
    finally:
        kernel.close()


def sessions_of(home: Path) -> dict[str, list[tuple[str, Any]]]:
    kernel = hermes.Kernel(home=home, check_selection=False)
    try:
        store = kernel.session_store
        return {sid: [(m["role"], m.get("content")) for m in store.get_messages(sid)]
                for sid in store.iter_session_ids()}
    finally:
        kernel.close()


def search(home: Path, query: str) -> list[str]:
    kernel = hermes.Kernel(home=home, check_selection=False)
    try:
        # bm25 scores depend on the whole corpus (the running chat added to it); the hits must match
        return sorted(json.dumps({k: v for k, v in h.items() if k != "score"}, sort_keys=True, default=str)
                      for h in kernel.session_store.search_messages(query))
    finally:
        kernel.close()


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    env["HERMES_HOME"] = str(home)
    return env


@pytest.mark.slow
def test_backup_during_a_running_chat_restores_the_same_home(tmp_path: Path) -> None:
    source, restored = tmp_path / "source", tmp_path / "restored"
    source.mkdir()
    rounds = 12
    with FakeLLMServer() as server:
        calls = {"n": 0}

        def handle(req: Any) -> Reply:
            calls["n"] += 1
            if calls["n"] > rounds:
                return Reply(text="All saved.")
            return Reply(delay=0.15, tool_calls=[{"name": "memory", "arguments": {
                "action": "add", "target": "memory", "content": f"running fact {calls['n']}"}}])

        server.handler = handle
        seed_home(source, server)
        before = sessions_of(source)
        chat = subprocess.Popen([sys.executable, "-m", "hermes.cli", "chat", "-q", "save twelve facts"],
                                env=env_for(source), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while calls["n"] < 4 and time.monotonic() < deadline:  # the chat is mid-run
                time.sleep(0.05)
            assert chat.poll() is None, chat.stderr.read() if chat.stderr else ""
            archive = tmp_path / "home.tar.gz"
            result = hermes_cli("--home", str(source), "backup", str(archive), "--json")
            assert result.exit_code == 0, result.output
            assert calls["n"] < rounds, "the chat had finished before the backup; slow it down"
        finally:
            out, err = chat.communicate(timeout=60)
        assert chat.returncode == 0, err.decode()

    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names[0] == "manifest.json" and ".env" not in names
    assert {"state.db", "memories/MEMORY.md", "memories/USER.md", "memories/history.jsonl",
            "skills/deploy/SKILL.md", "SOUL.md", "config.yaml"} <= set(names)

    result = hermes_cli("restore", str(archive), "--home", str(restored))
    assert result.exit_code == 0, result.output
    # Same sessions: the untouched ones exactly; the running one as a prefix of its end state.
    after, back = sessions_of(source), sessions_of(restored)
    for sid, messages in before.items():
        assert back[sid] == messages
    running = set(back) - set(before)
    assert len(running) == 1
    sid = running.pop()
    assert back[sid] == after[sid][:len(back[sid])] and 0 < len(back[sid]) < len(after[sid])
    assert search(restored, "pelican migration") == search(source, "pelican migration")
    assert search(restored, "pelican migration")
    # Same memory, and the file agrees with its history at the moment of the backup.
    mem = restored / "memories"
    assert (mem / "USER.md").read_text() == (source / "memories" / "USER.md").read_text()
    records = [json.loads(x) for x in (mem / "history.jsonl").read_text().splitlines()]
    full = [json.loads(x) for x in (source / "memories" / "history.jsonl").read_text().splitlines()]
    assert records == full[:len(records)]
    shown = json.loads(hermes_cli("--home", str(restored), "memory", "show", "--json").output)
    added = [r["new"] for r in records if r["action"] == "add" and r["target"] == "memory"]
    assert shown["memory"]["entries"] == added
    assert (mem / ".history" / "MEMORY.md").read_text() == (mem / "MEMORY.md").read_text()
    assert (restored / "SOUL.md").read_text() == "You are terse."
    assert not (restored / ".env").exists()
    with sqlite3.connect(restored / "state.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_secrets_only_on_request_and_restore_refuses_a_non_empty_home(tmp_path: Path) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    seed_home(home)
    with sqlite3.connect(home / "lcm.db") as lcm:  # the lossless engine's store, when present
        lcm.execute("CREATE TABLE nodes (content TEXT)")
        lcm.execute("INSERT INTO nodes VALUES ('summary of the pelican migration')")
    plain, secret = tmp_path / "plain.tar.gz", tmp_path / "secret.tar.gz"
    assert hermes_cli("--home", str(home), "backup", str(plain)).exit_code == 0
    assert hermes_cli("--home", str(home), "backup", str(secret), "--with-secrets").exit_code == 0
    with tarfile.open(secret) as tar:
        assert ".env" in tar.getnames()

    other.mkdir()
    (other / "SOUL.md").write_text("mine")
    refused = hermes_cli("restore", str(plain), "--home", str(other))
    assert refused.exit_code != 0 and "not empty" in refused.output and "--force" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert (other / "SOUL.md").read_text() == "mine" and sorted(os.listdir(other)) == ["SOUL.md"]

    # --force replaces what the backup holds; a stale WAL of the old database is dropped.
    (other / "state.db-wal").write_bytes(b"stale wal from another database")
    forced = hermes_cli("restore", str(secret), "--home", str(other), "--force")
    assert forced.exit_code == 0, forced.output
    assert (other / "SOUL.md").read_text() == "You are terse."
    assert not (other / "state.db-wal").exists()
    assert (other / ".env").read_text().startswith("OPENAI_API_KEY=")
    assert sessions_of(other) == sessions_of(home)
    with sqlite3.connect(other / "lcm.db") as lcm:
        assert lcm.execute("SELECT content FROM nodes").fetchall() == [("summary of the pelican migration",)]


def _rewrite(src: Path, dest: Path, change: Any) -> None:
    """A copy of the archive ``src`` with ``change(name, data) -> data`` applied."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz") as tout:
        for member in tin:
            data = tin.extractfile(member).read()
            data = change(member.name, data)
            member.size = len(data)
            import io
            tout.addfile(member, io.BytesIO(data))


@pytest.mark.parametrize("damage", ["checksum", "newer-format", "extra-member", "not-an-archive", "truncated"])
def test_a_bad_archive_is_refused_and_the_home_left_untouched(tmp_path: Path, damage: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    seed_home(home)
    good, bad = tmp_path / "good.tar.gz", tmp_path / "bad.tar.gz"
    assert hermes_cli("--home", str(home), "backup", str(good)).exit_code == 0
    if damage == "checksum":
        _rewrite(good, bad, lambda n, d: d.replace(b"Project uses uv", b"Project uses pip")
                 if n == "memories/MEMORY.md" else d)
    elif damage == "newer-format":
        def newer(n: str, d: bytes) -> bytes:
            if n != "manifest.json":
                return d
            m = json.loads(d)
            m["format_version"] = 99
            return json.dumps(m).encode()
        _rewrite(good, bad, newer)
    elif damage == "extra-member":
        with tarfile.open(good) as tin, tarfile.open(bad, "w:gz") as tout:
            for member in tin:
                tout.addfile(member, tin.extractfile(member))
            info = tarfile.TarInfo("../escape.txt")
            info.size = 2
            import io
            tout.addfile(info, io.BytesIO(b"hi"))
    elif damage == "not-an-archive":
        bad.write_text("just text")
    else:
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    target = tmp_path / "target"
    result = hermes_cli("restore", str(bad), "--home", str(target))
    assert result.exit_code != 0
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert str(bad) in result.output
    assert not target.exists() or os.listdir(target) == []
    assert not (tmp_path / "escape.txt").exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".target.restore-")]
    assert leftovers == []
