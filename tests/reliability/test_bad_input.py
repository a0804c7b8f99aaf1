"""Bad input never becomes a traceback: one line naming the file and what to do, exit
status 2 for a configuration or usage error, 1 for a failure. Real ``hermes`` processes.
What is read is bounded in bytes (checked with the kernel's own read counter)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes.config import read_yaml


def _drop_file_override() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so that
    even root is held to file modes (read-only files and directories)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def hermes(home: Path, *args: str | bytes, unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(home)}
    demote: Callable[[], None] | None = _drop_file_override if unprivileged and os.geteuid() == 0 else None
    if demote is not None:
        try:
            subprocess.run([sys.executable, "-c", "pass"], preexec_fn=demote, check=True, timeout=30)
        except (subprocess.SubprocessError, OSError):
            pytest.skip("running as root without CAP_SETPCAP: cannot test permissions")
    return subprocess.run([sys.executable, "-m", "hermes.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60, preexec_fn=demote, cwd=str(home.parent))


def one_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.strip().splitlines() if line]
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def read_bytes_during(fn: Callable[[], Any]) -> int:
    """Bytes this process read through read(2) while ``fn`` ran (Linux /proc/self/io)."""
    def rchar() -> int:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
        raise AssertionError("no rchar")

    before = rchar()
    fn()
    return rchar() - before


needs_proc_io = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")

BROKEN_CONFIGS = {
    "invalid-utf8": (b"model:\n  name: caf\xe9\n", "line 2: not valid UTF-8"),
    "alias-bomb": (b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                   + b"".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n".encode()
                              for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
                   "expand to more than"),
    "self-reference": (b"model: &m\n  name: x\n  loop: *m\n", "refers to the value that contains it"),
}


@pytest.mark.parametrize("kind", list(BROKEN_CONFIGS))
@pytest.mark.parametrize("command", [("config", "show"), ("config", "validate"), ("sessions", "list"),
                                     ("memory", "show")])
def test_broken_config_is_one_line_exit_2(hermes_home: Path, kind: str, command: tuple[str, ...]) -> None:
    text, why = BROKEN_CONFIGS[kind]
    (hermes_home / "config.yaml").write_bytes(text)
    one_line(hermes(hermes_home, *command), 2, str(hermes_home / "config.yaml"), why)


@needs_proc_io
def test_a_huge_config_is_refused_after_a_bounded_read(hermes_home: Path) -> None:
    path = hermes_home / "config.yaml"
    with open(path, "wb") as fh:  # 20 MB of comments: sparse, costs no disk
        fh.truncate(20 << 20)
    one_line(hermes(hermes_home, "config", "validate"), 2, str(path), "larger than")
    from hermes import ConfigError

    def load() -> None:
        with pytest.raises(ConfigError, match="larger than"):
            read_yaml(path)

    assert read_bytes_during(load) < 2 << 20


@pytest.mark.slow  # a hermes process per command; test_broken_config_is_one_line_exit_2 stays fast
def test_commands_still_work_with_a_broken_config(hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text("model:\n  name: [oops\n", encoding="utf-8")
    helped = hermes(hermes_home, "--help")
    assert helped.returncode == 0
    for name in ("sessions", "memory", "plugins", "doctor"):
        assert f"  {name} " in helped.stdout, name
    assert hermes(hermes_home, "sessions", "--help").returncode == 0
    # A plugin command says what is wrong with the config, not "No such command".
    one_line(hermes(hermes_home, "sessions", "list"), 2, "config.yaml, line 3", "malformed YAML")
    listed = hermes(hermes_home, "plugins", "list", "--all")
    assert listed.returncode == 0 and "builtin-memory" in listed.stdout
    assert "malformed YAML" in listed.stderr
    doctor = hermes(hermes_home, "doctor")
    assert doctor.returncode == 1 and "problem: " in doctor.stdout and "malformed YAML" in doctor.stdout


def test_an_argument_that_is_not_utf8_is_one_line(hermes_home: Path) -> None:
    result = hermes(hermes_home, "memory", "add", b"caf\xe9 au lait")
    one_line(result, 2, "argument 3", "not valid UTF-8")
    assert not (hermes_home / "memories" / "MEMORY.md").exists()


@pytest.mark.parametrize("command", [("memory", "add", "fact"), ("sessions", "list"), ("memory", "show")])
def test_a_read_only_home_is_one_line(hermes_home: Path, command: tuple[str, ...]) -> None:
    hermes_home.chmod(0o555)
    try:
        one_line(hermes(hermes_home, *command, unprivileged=True), 2, str(hermes_home), "not writable")
    finally:
        hermes_home.chmod(0o755)


@pytest.mark.slow  # several hermes processes; the other one-line checks stay fast
def test_a_read_only_state_db_is_one_line_and_still_readable(hermes_home: Path, tmp_path: Path) -> None:
    source = tmp_path / "chat.jsonl"
    source.write_text('{"role": "user", "content": "hello"}\n', encoding="utf-8")
    assert hermes(hermes_home, "sessions", "import", str(source)).returncode == 0
    db = hermes_home / "state.db"
    db.chmod(0o444)
    listed = hermes(hermes_home, "sessions", "list", unprivileged=True)
    assert listed.returncode == 0 and "hello" in listed.stdout
    more = tmp_path / "more.jsonl"
    more.write_text('{"role": "user", "content": "second"}\n', encoding="utf-8")
    for command in (("sessions", "import", str(more)), ("sessions", "rename", "jsonl", "A title")):
        one_line(hermes(hermes_home, *command, unprivileged=True), 1, str(db), "read-only")


def test_importing_a_fifo_or_a_device_is_one_line(hermes_home: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    one_line(hermes(hermes_home, "sessions", "import", str(fifo)), 2, str(fifo), "not a regular file")
    one_line(hermes(hermes_home, "sessions", "import", "/dev/null"), 2, "/dev/null", "not a regular file")


@needs_proc_io
def test_context_files_are_read_in_bounded_bytes(tmp_path: Path) -> None:
    from hermes.runtime.context_files import CONTEXT_FILE_MAX_BYTES, discover_context_files

    (tmp_path / ".git").mkdir()
    agents = tmp_path / "AGENTS.md"
    with open(agents, "wb") as fh:
        fh.write(b"# Build with make\n")
        fh.truncate(256 << 20)  # a 256 MB generated file (sparse)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\nLAST LINE\n")
    found: list[Any] = []
    read = read_bytes_during(lambda: found.extend(discover_context_files(tmp_path)))
    assert read < 2 * CONTEXT_FILE_MAX_BYTES
    assert found and "Build with make" in found[0].text and "LAST LINE" in found[0].text


def test_a_file_reference_with_bad_bytes_is_one_line(hermes_home: Path) -> None:
    (hermes_home / "key.txt").write_bytes(b"sk-\xff\xfe")
    (hermes_home / "config.yaml").write_text("model:\n  api_key: {$file: key.txt}\n", encoding="utf-8")
    result = hermes(hermes_home, "config", "validate")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "model.api_key: " in result.stderr and "key.txt" in result.stderr and "UTF-8" in result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("command", [("sessions", "list"), ("memory", "show", "--json"), ("config", "show")])
def test_output_to_a_full_device_is_one_line(hermes_home: Path, command: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:  # the child's standard output
        proc = subprocess.run([sys.executable, "-m", "hermes.cli", *command], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60,
                              env={**os.environ, "HERMES_HOME": str(hermes_home)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "hermes: error: cannot write the output: No space left on device. Free some space or "
        "write somewhere else, then try again."]
