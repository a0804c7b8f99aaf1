"""``hermes.atomic_write_text`` / ``hermes.atomic_writer``: temp file in the target's
directory, fsync, rename, directory fsync; a killed writer's temp file is cleaned by the
next write; symlinks, modes and non-regular targets."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import hermes
from hermes import atomic_write_text, atomic_writer


def test_the_file_and_its_directory_are_fsynced(tmp_path: Path, monkeypatch: Any) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    atomic_write_text(tmp_path / "a.txt", "text")
    assert synced == ["file", "dir"], "the data, then the rename, reach the disk"
    assert (tmp_path / "a.txt").read_text() == "text"


KILLED = textwrap.dedent("""
    import sys, time
    from hermes import atomic_writer
    with atomic_writer(sys.argv[1]) as fh:
        fh.write("half of the new text")
        fh.flush()
        print("writing", flush=True)
        time.sleep(60)
""")


def test_a_killed_writers_temp_file_is_cleaned_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    target.write_text("old: 1\n")
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and leftovers[0].startswith(".config.yaml.")
    assert target.read_text() == "old: 1\n", "the killed writer changed nothing"
    atomic_write_text(target, "new: 2\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
    assert target.read_text() == "new: 2\n"


def test_an_old_style_leftover_is_cleaned_when_stale(tmp_path: Path) -> None:
    target = tmp_path / "MEMORY.md"
    stale = tmp_path / ".MEMORY.md.k3j2l1.tmp"  # the naming before writers recorded a pid
    stale.write_text("partial")
    os.utime(stale, (1_000_000, 1_000_000))
    atomic_write_text(target, "entry")
    assert not stale.exists()


def test_a_live_writers_temp_file_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f".f.txt.{sleeper.pid}.abc123.tmp"
        busy.write_text("being written")
        atomic_write_text(target, "mine")
        assert busy.exists(), "another process is still writing it"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_symlinked_target_stays_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "MEMORY.md"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "MEMORY.md"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["MEMORY.md"]


def test_new_files_are_private_and_old_modes_are_kept(tmp_path: Path) -> None:
    atomic_write_text(tmp_path / "new.txt", "x")
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o600
    shared = tmp_path / "shared.txt"
    shared.write_text("x")
    shared.chmod(0o644)
    atomic_write_text(shared, "y")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644
    atomic_write_text(tmp_path / "open.txt", "z", mode=0o644)
    assert stat.S_IMODE((tmp_path / "open.txt").stat().st_mode) == 0o644


def test_a_non_regular_target_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        atomic_write_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path, "x")
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"], "no temp file left behind"


def test_an_error_inside_the_block_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "export.jsonl"
    target.write_text("complete old export\n")
    with pytest.raises(RuntimeError), atomic_writer(target) as fh:
        fh.write("half")
        raise RuntimeError("the store went away")
    assert target.read_text() == "complete old export\n"
    assert [p.name for p in tmp_path.iterdir()] == ["export.jsonl"]


#: Writes that must not go through a rename, each with why.
ALLOWED = {
    # `sessions export -o /dev/stdout` (or a FIFO): streamed; a rename would replace the device.
    ("plugins/sessions/cli.py", 'with open(output, "w", encoding="utf-8") as out:'),
}


def test_every_writer_goes_through_the_helper() -> None:
    """No module of the kernel or its plugins opens a user file for writing by hand."""
    import re

    root = Path(hermes.__file__).parent.parent
    writes = re.compile(r"""\.write_text\(|\.write_bytes\(|open\([^)]*["'][wa]b?["']|safe_dump\([^)]*,\s*(fh|f|out)\b""")
    offenders = []
    for folder in ("kernel", "plugins", "contrib"):
        for path in (root / folder).rglob("*.py"):
            if "testing" in path.parts or "tests" in path.parts or path.name == "util.py":
                continue
            rel = str(path.relative_to(root))
            for line in path.read_text(encoding="utf-8").splitlines():
                if writes.search(line) and (rel, line.strip()) not in ALLOWED:
                    offenders.append(f"{rel}: {line.strip()}")
    assert not offenders
