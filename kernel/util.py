"""Small helpers every plugin needs: token estimates, atomic writes, bounded reads, file locks.

Token counts come from the API's reported usage; before the first response the kernel
uses :func:`estimate_tokens`, which is offline and CJK-aware (no tokenizer downloads).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["FileTooLargeError", "NotRegularFileError", "atomic_write_text", "atomic_writer",
           "estimate_tokens", "estimate_messages_tokens", "file_lock", "is_cjk", "read_bounded"]

#: A writer's temporary file that is older than this is abandoned whoever wrote it.
_STALE_TEMP_SECONDS = 3600.0


def _stale_temps(directory: Path, name: str) -> Iterator[Path]:
    """Temporary files of killed writers of ``name`` in ``directory``: ``.<name>.<pid>.*.tmp``
    whose process is gone (or that are an hour old), and ``.<name>.*.tmp`` files of the
    older naming without a pid that are that old."""
    prefix = f".{name}."
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
            continue
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > _STALE_TEMP_SECONDS
        except OSError:
            continue
        pid_text = entry.name[len(prefix):].split(".", 1)[0]
        alive = True
        if pid_text.isdigit():
            try:
                os.kill(int(pid_text), 0)
            except ProcessLookupError:
                alive = False
            except OSError:
                pass  # someone else's live process
        if old or not alive:
            yield Path(entry.path)


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (not every filesystem lets a directory be
    opened or synced; then the rename is as durable as the platform allows)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, mode: int | None = None,
                  encoding: str = "utf-8", binary: bool = False) -> Iterator[Any]:
    """A text file handle whose content replaces ``path`` only when the ``with`` block
    ends without an exception: a temporary file in the target's directory, flushed,
    fsynced, renamed over the target, then the directory fsynced. A crash leaves the old
    file or the new one, never a mix; the temporary file of a killed writer is removed by
    the next write to the same target.

    A symlinked target stays a symlink (its target is replaced). The new file keeps the
    old file's mode, or gets ``mode`` (default 0600) when it is new. A target that exists
    and is not a regular file (a device, a FIFO, a directory) is refused with
    :class:`IsADirectoryError` / :class:`OSError`: renaming over it would replace
    ``/dev/stdout`` with a file. With ``binary=True`` the handle takes bytes (archives)."""
    import stat
    import tempfile

    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(f"{target} is a directory")
        raise OSError(f"{target} is not a regular file; refusing to replace it")
    for stale in _stale_temps(target.parent, target.name):
        with contextlib.suppress(OSError):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp",
                               dir=target.parent)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding=encoding, newline="")) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, (info.st_mode & 0o7777) if info is not None else
                 (0o600 if mode is None else mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` atomically and durably; see :func:`atomic_writer`."""
    if not isinstance(text, str):
        raise TypeError(f"atomic_write_text needs str, not {type(text).__name__}")
    with atomic_writer(path, mode=mode) as fh:
        fh.write(text)


class FileTooLargeError(OSError):
    """:func:`read_bounded` found more than ``max_bytes`` in the file (``errno`` EFBIG,
    ``filename`` the path, ``max_bytes`` the limit). Nothing past the limit was read."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int):
        super().__init__(errno.EFBIG, f"larger than {max_bytes:,} bytes", os.fspath(path))
        self.max_bytes = max_bytes


class NotRegularFileError(OSError):
    """:func:`read_bounded` was pointed at a directory, FIFO, device or socket (``errno``
    EISDIR for a directory, else EINVAL; ``filename`` the path; ``strerror`` the kind in
    words: ``"a directory"``, ``"a FIFO"``, ``"a device"``, ``"a socket"``, else ``"a
    special file"``; ``st_mode`` its mode). Nothing was read from it."""

    def __init__(self, path: str | os.PathLike[str], st_mode: int):
        import stat

        kind = ("a directory" if stat.S_ISDIR(st_mode) else "a FIFO" if stat.S_ISFIFO(st_mode)
                else "a device" if stat.S_ISCHR(st_mode) or stat.S_ISBLK(st_mode)
                else "a socket" if stat.S_ISSOCK(st_mode) else "a special file")
        code = errno.EISDIR if stat.S_ISDIR(st_mode) else errno.EINVAL
        super().__init__(code, kind, os.fspath(path))
        self.st_mode = st_mode


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, reading at most ``max_bytes`` + 1 of them
    and never blocking: a FIFO with no writer or a device is refused, not waited on.

    Raises :class:`NotRegularFileError` for anything but a regular file,
    :class:`FileTooLargeError` past ``max_bytes``, and the ordinary :class:`OSError`
    of ``os.open``/``os.read`` otherwise (:class:`FileNotFoundError` for a missing file
    or a dangling symlink, ``ELOOP`` for a symlink loop, :class:`PermissionError`).
    All are :class:`OSError`, so each caller words one line for its own file
    (config.yaml, ``.env``, a memory file); decoding is the caller's too."""
    import stat

    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, mode)
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise FileTooLargeError(path, max_bytes)
    return b"".join(chunks)


def is_cjk(char: str) -> bool:
    """Whether ``char`` is a CJK ideograph, kana, Hangul syllable or CJK punctuation."""
    cp = ord(char)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x3000 <= cp <= 0x30FF
        or 0xAC00 <= cp <= 0xD7AF
        or 0xF900 <= cp <= 0xFAFF
        or 0xFF00 <= cp <= 0xFFEF
    )


def estimate_tokens(text: str | None) -> int:
    """A rough, conservative token count: about four characters per token for Latin
    text and about one token per CJK character (which BPE tokenizers split finely)."""
    if not text:
        return 0
    if text.isascii():  # the common case, without a Python-level loop over characters
        return (len(text) + 3) // 4
    cjk = sum(1 for ch in text if ord(ch) >= 0x3000 and is_cjk(ch))
    other = len(text) - cjk
    return cjk + (other + 3) // 4


def estimate_messages_tokens(messages: Iterable[dict[str, Any]]) -> int:
    """:func:`estimate_tokens` over a transcript, tool calls and a per-message overhead
    included."""
    total = 0
    for msg in messages:
        total += 4
        content = msg.get("content")
        if isinstance(content, str):
            total += estimate_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict):
                    total += estimate_tokens(str(part.get("text") or part.get("content") or ""))
        if msg.get("tool_calls"):
            total += estimate_tokens(json.dumps(msg["tool_calls"], ensure_ascii=False))
    return total


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, timeout: float = 30.0) -> Iterator[None]:
    """An exclusive cross-process lock on ``<path>.lock``, held for the ``with`` block.
    Raises :class:`TimeoutError` naming the file after ``timeout``. Built on
    ``filelock`` (``flock`` on POSIX, ``msvcrt`` locking on Windows), so importing
    Hermes never needs ``fcntl``."""
    import filelock  # imported on first lock: most commands never take one

    lock_path = Path(f"{os.fspath(path)}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # thread_local=False: a lock taken on one thread may be released on another (the
    # with block is one owner), and a second lock object on the same file, in this
    # process or another, waits.
    lock = filelock.FileLock(lock_path, mode=0o600, thread_local=False, preserve_lock_file=True)
    try:
        lock.acquire(timeout=timeout, poll_interval=0.01)
    except filelock.Timeout:
        raise TimeoutError(
            f"could not lock {path} within {timeout:.0f}s; another Hermes process "
            f"holds {lock_path}"
        ) from None
    try:
        yield
    finally:
        lock.release()
