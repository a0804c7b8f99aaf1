"""``hermes sessions export -o FILE`` never destroys data: Hermes' own files are refused
(by real path), the target is replaced atomically (nothing truncated before it is read),
exports are 0600, and a missing directory or a full device is one line, exit 1."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes.cli import cli


def run(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A real ``hermes`` process (so that /dev/stdout and exit codes are the real ones)."""
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "hermes.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or home, timeout=120)


@pytest.fixture
def home(hermes_home: Path, tmp_path: Path) -> Path:
    source = tmp_path / "chat.jsonl"
    source.write_text('{"role": "user", "content": "remember the blue door"}\n'
                      '{"role": "assistant", "content": "noted"}\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["--home", str(hermes_home), "sessions", "import", str(source)])
    assert result.exit_code == 0, result.output
    (hermes_home / "config.yaml").write_text("model:\n  name: kept-model\n", encoding="utf-8")
    (hermes_home / ".env").write_text("OPENAI_API_KEY=sk-kept\n", encoding="utf-8")
    memories = hermes_home / "memories"
    memories.mkdir()
    (memories / "MEMORY.md").write_text("kept entry", encoding="utf-8")
    (memories / "USER.md").write_text("kept user", encoding="utf-8")
    return hermes_home


def snapshot(home: Path) -> dict[str, bytes]:
    """The bytes of every file but the database (SQLite checkpoints it on every open; the
    test checks its content through `sessions list`)."""
    return {p.name: p.read_bytes() for p in [*home.iterdir(), *(home / "memories").iterdir()]
            if p.is_file() and not p.name.startswith("state.db")}


# A hermes process per target: the fast target keeps the database, the config and a
# symlink; the other targets run in the full run.
SLOW = pytest.mark.slow
@pytest.mark.parametrize("target", [
    "state.db", pytest.param("state.db-wal", marks=SLOW), pytest.param("state.db-shm", marks=SLOW),
    "config.yaml", pytest.param(".env", marks=SLOW), pytest.param("memories/MEMORY.md", marks=SLOW),
    pytest.param("memories/USER.md", marks=SLOW),
    pytest.param("./memories/../config.yaml", marks=SLOW), "LINK",
])
def test_hermes_own_files_are_refused(home: Path, target: str, tmp_path: Path) -> None:
    if target == "LINK":
        link = tmp_path / "innocent.jsonl"
        link.symlink_to(home / "state.db")
        target = str(link)
    before = snapshot(home)
    result = run(home, "sessions", "export", "--all", "-o", target)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes: error: refusing to export over ")
    assert snapshot(home) == before
    listed = run(home, "sessions", "list", "--json")
    assert json.loads(listed.stdout)[0]["message_count"] == 2, "history is intact"


def test_export_file_is_private_complete_and_replaces_atomically(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    assert run(home, "sessions", "export", "--all", "-o", str(out)).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    first = out.read_text(encoding="utf-8")
    assert "remember the blue door" in first
    # Exporting again over the same file: written beside it and renamed, nothing left over.
    assert run(home, "sessions", "export", "--all", "-o", str(out)).returncode == 0
    assert out.read_text(encoding="utf-8") == first
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    # And it imports again into another home, losslessly.
    other = tmp_path / "other"
    other.mkdir()
    assert run(other, "sessions", "import", str(out)).returncode == 0
    assert "remember the blue door" in run(other, "sessions", "export", "--all").stdout


def test_missing_directory_and_full_device_are_one_line(home: Path, tmp_path: Path) -> None:
    missing = run(home, "sessions", "export", "--all", "-o", str(tmp_path / "no" / "such" / "x.jsonl"))
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [missing.stderr.strip()]
    assert "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    assert not (tmp_path / "no").exists()
    if Path("/dev/full").exists():
        full = run(home, "sessions", "export", "--all", "-o", "/dev/full")
        assert full.returncode == 1 and "Traceback" not in full.stderr
        assert full.stderr.strip().splitlines() == [
            "hermes: error: cannot write /dev/full: No space left on device. Nothing was exported; "
            "choose another file or free some space."]
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode), "the device was not replaced"


def test_streams_into_devices_and_pipes(home: Path) -> None:
    result = run(home, "sessions", "export", "--all", "-o", "/dev/stdout")
    assert result.returncode == 0 and "remember the blue door" in result.stdout
    assert run(home, "sessions", "export", "--all", "-o", "/dev/null").returncode == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
