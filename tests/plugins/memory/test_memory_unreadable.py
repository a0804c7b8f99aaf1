"""A memory file that exists but cannot be read is refused loudly, never taken for an
empty store and never rewritten: by ``hermes memory``, by the model's ``memory`` tool and
in the frozen prompt snapshot. A UTF-8 BOM is tolerated."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hermes.cli import cli
from hermes.plugins.memory.provider import BuiltinMemoryProvider
from hermes.plugins.memory.store import MAX_FILE_BYTES, MemoryStore


def _bad_bytes(p: Path) -> None:
    p.write_bytes("keep this entry\n§\ncaf".encode() + b"\xe9 au lait")  # latin-1 é


def _directory(p: Path) -> None:
    p.mkdir()


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _loop(p: Path) -> None:
    p.symlink_to(p.name)


def _dangling(p: Path) -> None:
    p.symlink_to("nowhere/MEMORY.md")


def _too_large(p: Path) -> None:
    p.write_bytes(b"x" * (MAX_FILE_BYTES + 1))


BROKEN: dict[str, Callable[[Path], None]] = {
    "invalid-utf8": _bad_bytes, "directory": _directory, "fifo": _fifo,
    "symlink-loop": _loop, "dangling-symlink": _dangling, "too-large": _too_large,
}
REASON = {"invalid-utf8": "not UTF-8", "directory": "directory", "fifo": "FIFO",
          "symlink-loop": "symlink loop", "dangling-symlink": "symlink", "too-large": "larger than"}


def fingerprint(p: Path) -> Any:
    """What must not change: the kind of file and, for a regular file, its bytes."""
    info = os.lstat(p)
    if stat.S_ISREG(info.st_mode):
        return ("file", p.read_bytes())
    if stat.S_ISLNK(info.st_mode):
        return ("link", os.readlink(p))
    return (stat.S_IFMT(info.st_mode), sorted(os.listdir(p)) if p.is_dir() else None)


@pytest.fixture(autouse=True)
def never_block() -> Iterator[None]:
    """Opening a FIFO for reading blocks until a writer comes; fail instead of hanging."""
    def boom(*_: Any) -> None:
        raise TimeoutError("blocked reading a memory file")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def run(home: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--home", str(home), "--no-plugins", "memory", *args])


@pytest.mark.parametrize("kind", list(BROKEN))
def test_cli_refuses_an_unreadable_file_and_never_rewrites_it(hermes_home: Path, kind: str) -> None:
    path = hermes_home / "memories" / "MEMORY.md"
    path.parent.mkdir()
    BROKEN[kind](path)
    before = fingerprint(path)

    shown = run(hermes_home, "show")
    assert shown.exit_code == 1, shown.output
    assert str(path) in shown.output and REASON[kind] in shown.output
    assert "(empty)" not in shown.output.split("USER PROFILE")[0]
    assert "Traceback" not in shown.output

    as_json = run(hermes_home, "show", "--json", "-t", "memory")
    assert as_json.exit_code == 1 and "MEMORY.md" in json.loads(as_json.output)["memory"]["error"]

    for args in (["add", "a new fact"], ["replace", "--old", "keep", "new"], ["remove", "--old", "keep"]):
        result = run(hermes_home, *args)
        assert result.exit_code == 1, (args, result.output)
        assert "MEMORY.md" in result.output and REASON[kind] in result.output
        assert len(result.output.strip().splitlines()) == 1
        assert fingerprint(path) == before

    # The other store is unaffected.
    assert run(hermes_home, "add", "-t", "user", "Name: Ada").exit_code == 0


@pytest.mark.parametrize("kind", list(BROKEN))
def test_tool_and_snapshot_report_an_unreadable_file(tmp_path: Path, kind: str) -> None:
    directory = tmp_path / "memories"
    directory.mkdir()
    path = directory / "USER.md"
    BROKEN[kind](path)
    before = fingerprint(path)
    (directory / "MEMORY.md").write_text("project uses uv", encoding="utf-8")
    provider = BuiltinMemoryProvider(MemoryStore(directory))
    provider.initialize("s1")

    prompt = provider.system_prompt_block()
    assert "project uses uv" in prompt
    assert "USER.md could not be read" in prompt and "UNREADABLE" in prompt
    assert "USER.md" in provider.inventory()

    out = json.loads(provider.handle_tool_call("memory", {"target": "user", "action": "add",
                                                          "content": "Name: Ada"}))
    assert out["success"] is False and "USER.md" in out["error"] and REASON[kind] in out["error"]
    batch = json.loads(provider.handle_tool_call("memory", {"target": "user", "operations": [
        {"action": "remove", "old_text": "x"}, {"action": "add", "content": "y"}]}))
    assert batch["success"] is False and "USER.md" in batch["error"]
    assert fingerprint(path) == before


def _drop_file_override() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    bounding set, so that even root is held to a file's mode bits."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_permission_denied_is_refused(tmp_path: Path) -> None:
    """A real process that may not read MEMORY.md (mode 000; as root, with the capability
    that overrides file modes dropped) refuses to write instead of starting over."""
    home = tmp_path / "home"
    (home / "memories").mkdir(parents=True)
    path = home / "memories" / "MEMORY.md"
    path.write_text("secret fact", encoding="utf-8")
    path.chmod(0)
    demote = _drop_file_override if os.geteuid() == 0 else None
    if demote is not None:
        try:
            subprocess.run([sys.executable, "-c", "pass"], preexec_fn=demote, check=True, timeout=30)
        except (subprocess.SubprocessError, OSError):
            pytest.skip("running as root without CAP_SETPCAP: cannot test permissions")
    code = ("import sys; from hermes.cli import main; "
            "sys.argv=['hermes','--home',sys.argv[1],'--no-plugins','memory','add','new']; main()")
    env = {k: v for k, v in os.environ.items() if k != "HERMES_HOME"}
    proc = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True,
                          timeout=60, preexec_fn=demote, env=env, cwd="/")
    assert proc.returncode == 1, proc.stderr
    assert "MEMORY.md" in proc.stderr and "permission denied" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert path.read_text(encoding="utf-8") == "secret fact"


def test_a_bom_is_tolerated_and_not_flagged(tmp_path: Path) -> None:
    directory = tmp_path / "memories"
    directory.mkdir()
    path = directory / "MEMORY.md"
    path.write_bytes(b"\xef\xbb\xbfalpha\n\xc2\xa7\nbeta")
    provider = BuiltinMemoryProvider(MemoryStore(directory))
    provider.initialize("s1")
    assert provider.store.entries("memory") == ["alpha", "beta"]
    prompt = provider.system_prompt_block()
    assert "alpha" in prompt and "BLOCKED" not in prompt and "\ufeff" not in prompt
    out = json.loads(provider.handle_tool_call("memory", {"target": "memory", "action": "remove",
                                                          "old_text": "alpha"}))
    assert out["success"] is True
    assert path.read_text(encoding="utf-8") == "beta"


def test_adding_text_with_the_entry_delimiter_is_refused(hermes_home: Path) -> None:
    assert run(hermes_home, "add", "first").exit_code == 0
    result = run(hermes_home, "add", "one\n§\ntwo")
    assert result.exit_code == 1 and "§" in result.output and "separately" in result.output
    assert (hermes_home / "memories" / "MEMORY.md").read_text(encoding="utf-8") == "first"
    # A § inside a line is ordinary text.
    assert run(hermes_home, "add", "see § 4.2 of the spec").exit_code == 0
