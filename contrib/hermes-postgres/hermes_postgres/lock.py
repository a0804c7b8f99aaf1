"""One writer per conversation across machines: a PostgreSQL advisory lock.

The kernel's file lock (an ``flock`` in ``$HERMES_HOME/locks``) is right for one machine
and blind to an agent on another machine sharing the same Postgres history, so the store
offers :meth:`~hermes_postgres.store.PostgresSessionStore.writer_lock` and the runtime
takes that instead (``hermes.SessionStore.writer_lock``). :class:`PostgresSessionLock`
takes a session-level advisory lock keyed on (user, profile, conversation) on a
connection of its own, held for as long as the conversation is being written.

A crashed holder cannot keep it: the server drops a backend's advisory locks when its
connection ends — at once when the process dies (its socket closes), and within about a
minute when the whole machine vanishes, because the lock's connection asks the server for
TCP keepalives (idle 20 s, then 3 probes 10 s apart).

The lock's connection carries ``application_name = "hermes PID@HOST"``, so a refused
process names the holder: ``pg_locks`` says which backend holds the key and
``pg_stat_activity`` shows that backend's application name to every role.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any

import hermes

#: The kernel's error: the same message whichever lock refuses (kept here for imports).
SessionBusyError = hermes.SessionBusyError

#: PostgreSQL cuts application_name at 63 bytes (NAMEDATALEN - 1).
_APP_NAME_MAX = 63
_APP_NAME_RE = re.compile(r"^hermes (\d+)@(.*)$")

# The holder of an advisory lock taken with a single bigint key: pg_locks splits the key
# into classid (high 32 bits) and objid (low 32 bits), objsubid = 1.
_HOLDER_SQL = """
    WITH k AS (SELECT hashtextextended(%s, 0) AS key)
    SELECT a.application_name, host(a.client_addr) AS addr, a.pid AS backend
    FROM k, pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
    LIMIT 1"""


def application_name(pid: int | None = None, host: str | None = None) -> str:
    """``hermes PID@HOST`` (cut to what PostgreSQL keeps), this process by default."""
    name = f"hermes {pid or os.getpid()}@{host or socket.gethostname()}"
    return name.encode()[:_APP_NAME_MAX].decode("utf-8", "ignore")


class PostgresSessionLock:
    """An exclusive, non-blocking lock on one conversation (``acquire``/``release``),
    for a :class:`~hermes_postgres.store.PostgresSessionStore`; a
    :class:`hermes.WriterLock`."""

    def __init__(self, store: Any, session_id: str):
        self.store, self.session_id = store, session_id
        self._conn: Any = None

    @property
    def key(self) -> str:
        return f"hermes-session\n{self.store.user}\n{self.store.profile}\n{self.session_id}"

    @property
    def held(self) -> bool:
        return self._conn is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`hermes.SessionBusyError` naming the holder."""
        if self._conn is not None:
            return
        import psycopg

        from .store import explain_connect_error

        try:
            conn = psycopg.connect(self.store.dsn, autocommit=True, application_name=application_name(),
                                   connect_timeout=10, keepalives=1, keepalives_idle=20,
                                   keepalives_interval=10, keepalives_count=3)
        except (psycopg.Error, ValueError) as exc:
            raise hermes.StoreError(explain_connect_error(self.store.dsn, exc)) from exc
        try:
            # Server-side keepalives: the server notices a vanished client machine.
            conn.execute("SET tcp_keepalives_idle = 20; SET tcp_keepalives_interval = 10; "
                         "SET tcp_keepalives_count = 3")
            got = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (self.key,)).fetchone()[0]
            holder = None if got else conn.execute(_HOLDER_SQL, (self.key,)).fetchone()
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            pid, host = _holder(holder)
            raise SessionBusyError(session_id=self.session_id, pid=pid, host=host,
                                   lock=f"PostgreSQL advisory lock, database {self.store.database}")
        self._conn = conn

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # ending the connection releases the lock

    def __enter__(self) -> PostgresSessionLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(row: tuple[Any, ...] | None) -> tuple[int | None, str | None]:
    """(pid, host) of the holding process, as well as the server shows it: a Hermes
    holder's application name, else the client's address (the holder released in
    between, or is not Hermes: both unknown)."""
    if row is None:
        return None, None
    app, addr, _backend = row
    m = _APP_NAME_RE.match(app or "")
    if m:
        return int(m.group(1)), m.group(2) or addr
    return None, addr
