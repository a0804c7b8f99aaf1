"""Helpers: token estimates (CJK-aware), atomic writes, cross-process file locks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes import atomic_write_text, estimate_messages_tokens, estimate_tokens, file_lock, is_cjk


def test_estimate_tokens_latin_and_empty():
    assert estimate_tokens("") == 0 and estimate_tokens(None) == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2, "rounds up: an estimate must not undercount"
    assert estimate_tokens("x" * 400) == 100


def test_estimate_tokens_counts_cjk_per_character():
    assert estimate_tokens("你好世界") == 4
    assert estimate_tokens("こんにちは") == 5
    assert estimate_tokens("안녕하세요") == 5
    assert estimate_tokens("hi 你好") == 2 + 1  # 3 latin chars -> 1, 2 CJK -> 2


def test_is_cjk():
    assert all(is_cjk(c) for c in "漢かカ한。")
    assert not any(is_cjk(c) for c in "aé1 -ß")


@given(st.text(), st.text())
def test_estimate_is_additive_within_rounding(a, b):
    whole = estimate_tokens(a + b)
    assert estimate_tokens(a) + estimate_tokens(b) - 1 <= whole <= estimate_tokens(a) + estimate_tokens(b)
    assert whole >= 0


@given(st.text(min_size=1))
def test_estimate_never_undercounts_cjk_heavy_text(text):
    cjk = sum(1 for ch in text if is_cjk(ch))
    assert estimate_tokens(text) >= cjk + (len(text) - cjk) / 4


def test_estimate_messages_tokens():
    messages = [
        {"role": "system", "content": "x" * 40},
        {"role": "user", "content": [{"type": "text", "text": "y" * 40}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "ok"},
    ]
    total = estimate_messages_tokens(messages)
    assert total == 4 * 4 + 10 + 10 + estimate_tokens(
        '[{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]') + 1
    assert estimate_messages_tokens([]) == 0


def test_atomic_write_replaces_and_keeps_mode(tmp_path):
    path = tmp_path / "f.txt"
    atomic_write_text(path, "one")
    path.chmod(0o600)
    atomic_write_text(path, "two")
    assert path.read_text() == "two" and path.stat().st_mode & 0o777 == 0o600
    atomic_write_text(tmp_path / "new" / "dir" / "g.txt", "created")
    assert (tmp_path / "new" / "dir" / "g.txt").read_text() == "created"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt", "new"]


def test_atomic_write_failure_leaves_the_old_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")

    with pytest.raises(TypeError):
        atomic_write_text(path, 12345)  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"], "the temporary file is removed"


HOLDER = """
import sys, time
from hermes import file_lock
with file_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_file_lock_excludes_another_process(tmp_path):
    target = tmp_path / "state.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(target), "30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(TimeoutError) as info:
            with file_lock(target, timeout=0.2):
                pass
        assert str(target) in str(info.value) and f"{target}.lock" in str(info.value)
    finally:
        holder.kill()
        holder.wait()
    with file_lock(target, timeout=5):  # released when the holder died
        pass


def test_file_lock_serializes_processes(tmp_path):
    """Each process appends start/end marks under the lock: no two sections overlap."""
    log = tmp_path / "log.txt"
    script = f"""
import sys, time
from hermes import file_lock
for _ in range(3):
    with file_lock({str(tmp_path / 'x')!r}):
        with open({str(log)!r}, 'a') as f:
            f.write('start ' + sys.argv[1] + '\\n'); f.flush()
            time.sleep(0.01)
            f.write('end ' + sys.argv[1] + '\\n')
"""
    procs = [subprocess.Popen([sys.executable, "-c", script, tag]) for tag in "ab"]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    lines = log.read_text().split("\n")[:-1]
    assert len(lines) == 12
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.split()[0] == "start" and end == start.replace("start", "end")


def test_file_lock_creates_its_directory(tmp_path):
    with file_lock(tmp_path / "deep" / "f"):
        assert (tmp_path / "deep" / "f.lock").exists()
    assert os.listdir(tmp_path / "deep") == ["f.lock"]


# -- read_bounded: the one bounded, non-blocking file read (config.yaml, .env, memory files)


def test_read_bounded_reads_a_file_up_to_the_limit(tmp_path):
    from hermes import FileTooLargeError, read_bounded

    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    with pytest.raises(FileTooLargeError) as info:
        read_bounded(path, 99)
    assert isinstance(info.value, OSError) and info.value.filename == str(path)
    assert info.value.max_bytes == 99 and "larger than 99 bytes" in str(info.value)


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=300))
def test_read_bounded_returns_the_file_or_refuses_it(tmp_path_factory, data, limit):
    from hermes import FileTooLargeError, read_bounded

    path = tmp_path_factory.mktemp("rb") / "f"
    path.write_bytes(data)
    if len(data) <= limit:
        assert read_bounded(path, limit) == data
    else:
        with pytest.raises(FileTooLargeError):
            read_bounded(path, limit)


def test_read_bounded_refuses_a_fifo_without_blocking_and_a_directory(tmp_path):
    """Opening a FIFO with no writer blocks forever; the read must refuse it at once. A
    child process runs it so that a regression fails the test instead of hanging it."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = ("import sys, hermes\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        hermes.read_bounded(p, 10)\n"
            "    except hermes.NotRegularFileError as exc:\n"
            "        print(exc.strerror, exc.errno, isinstance(exc, OSError))\n")
    out = subprocess.run([sys.executable, "-c", code, str(fifo), str(tmp_path), "/dev/null"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import errno

    assert out.stdout.splitlines() == [f"a FIFO {errno.EINVAL} True", f"a directory {errno.EISDIR} True",
                                       f"a device {errno.EINVAL} True"]


def test_read_bounded_missing_file_is_file_not_found(tmp_path):
    from hermes import read_bounded

    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing", 10)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "dangling", 10)
