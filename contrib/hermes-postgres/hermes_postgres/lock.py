"""One writer per conversation across machines: a PostgreSQL advisory lock.

The kernel's :class:`SessionLock` is an ``flock`` on a file in ``$HERMES_HOME``: right for
one machine, blind to an agent on another machine sharing the same Postgres history.
:class:`PostgresSessionLock` takes a session-level advisory lock keyed on (user, profile,
conversation) on a connection of its own, held for as long as the conversation is being
written. A crashed holder cannot keep it: the server drops a backend's advisory locks
when its connection ends — at once when the process dies (its socket closes), and
within about a minute when the whole machine vanishes, because the lock's connection
asks the server for TCP keepalives (idle 20 s, then 3 probes 10 s apart).
"""

from __future__ import annotations

from typing import Any

import hermes


class SessionBusyError(hermes.HermesError):
    """Another live process (on any machine) is writing to this conversation."""

    def __init__(self, message: str, *, session_id: str):
        super().__init__(message)
        self.session_id = session_id


class PostgresSessionLock:
    """An exclusive, non-blocking lock on one conversation (``acquire``/``release``),
    for a :class:`~hermes_postgres.store.PostgresSessionStore`."""

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
        """Take the lock or raise :class:`SessionBusyError`."""
        if self._conn is not None:
            return
        import psycopg

        conn = psycopg.connect(self.store.dsn, autocommit=True, keepalives=1, keepalives_idle=20,
                               keepalives_interval=10, keepalives_count=3)
        try:
            # Server-side keepalives: the server notices a vanished client machine.
            conn.execute("SET tcp_keepalives_idle = 20; SET tcp_keepalives_interval = 10; "
                         "SET tcp_keepalives_count = 3")
            got = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (self.key,)).fetchone()[0]
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            raise SessionBusyError(
                f"session {self.session_id} is being written by another Hermes process (on this or another "
                "machine); wait for it to finish, or continue another session", session_id=self.session_id)
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
