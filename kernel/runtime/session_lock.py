"""One writer per conversation: an OS lock that a crashed process cannot keep.

Two ``hermes chat --continue`` on one conversation would interleave their turns into one
transcript no API accepts. Like git's ``index.lock``, the first process takes a lock
file (``$HERMES_HOME/locks/<root session id>.lock``) and a second one is refused with a
message naming the session and the holder's PID. Unlike ``index.lock`` the lock is an
``flock`` on the file, which the operating system drops when the holder exits in any
way (SIGKILL included), so a stale file never blocks anyone: only a live process holds
the lock.

A store can offer a lock that reaches further than one machine (a database server's
advisory lock, say): :meth:`hermes.SessionStore.writer_lock` returns a :class:`WriterLock`
and the runtime takes it instead of the file. Every lock refuses with the same
:class:`SessionBusyError` message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from ..errors import HermesError

__all__ = ["SessionBusyError", "SessionLock", "WriterLock"]


class SessionBusyError(HermesError):
    """Another live process is writing to this conversation.

    ``SessionBusyError(session_id=…, pid=…, host=…, lock=…)`` builds the standard
    message: the session, the holder as well as the lock knows it (``process PID`` or
    ``process PID@HOST``) and where the lock is (``lock`` names it for the user), then
    what to do. ``pid`` and ``host`` are ``None`` when unknown.
    """

    def __init__(self, message: str | None = None, *, session_id: str, pid: int | None = None,
                 host: str | None = None, lock: str = ""):
        if message is None:
            if pid:
                holder = f"process {pid}@{host}" if host else f"process {pid}"
            else:
                holder = f"a process on {host}" if host else "another process"
            message = (f"session {session_id} is in use by hermes {holder}"
                       f"{f' ({lock})' if lock else ''}. One conversation has one writer: finish that "
                       "chat first, or start a new one without --continue.")
        super().__init__(message)
        self.session_id, self.pid, self.host = session_id, pid, host


class WriterLock(Protocol):
    """The one-writer lock of a conversation, as the runtime uses it: ``acquire()``
    takes it or raises :class:`SessionBusyError` at once (it never waits) and
    ``release()`` gives it up (a no-op when not held). A holder that dies in any way
    must not keep it. :class:`SessionLock` is the file implementation."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


class SessionLock:
    """An exclusive, non-blocking lock on one conversation (``acquire``/``release``)."""

    def __init__(self, home: str | os.PathLike[str], session_id: str):
        self.session_id = session_id
        self.path = Path(home) / "locks" / f"{_safe(session_id)}.lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`SessionBusyError` naming the holder."""
        if self._fd is not None:
            return
        import fcntl  # POSIX only: imported here so that importing Hermes works on Windows

        while True:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                raise HermesError(
                    f"cannot create the session lock {self.path} ({exc.strerror or exc}). "
                    f"Make {self.path.parent} writable.") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                raise SessionBusyError(session_id=self.session_id, pid=pid,
                                       lock=f"lock {self.path}") from None
            # A holder that was releasing may have removed the file after we opened it;
            # then our lock is on a dead inode: open the path again.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock and remove the file (removed while still held, so nobody can
        lock a file that is about to vanish)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _safe(session_id: str) -> str:
    """A file name for any session id (ids are normally ``[0-9a-f_]``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id)[:150] or "_"
