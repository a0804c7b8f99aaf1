"""The default session store: one SQLite database (``$HERMES_HOME/state.db``).

Concurrency model: one write connection per store, guarded by a lock, and one read-only
connection per thread. WAL journaling lets readers run while another process writes.
Every write transaction starts with ``BEGIN IMMEDIATE`` so it takes the write lock up
front (a deferred transaction that upgrades later can deadlock and fail instead of
waiting); when the lock is busy the store sleeps a random, growing while and tries again
until its write timeout, because SQLite's own busy handler backs off deterministically
and several processes retrying in step starve each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import hermes

from . import schema
from .query import GLUE_BREAK, OWN_COLUMNS, RELAX_BELOW, Stage, loosen, parse, plan, relaxed_match

log = logging.getLogger("hermes.sessions")

T = TypeVar("T")

#: Ranked searches score at most this many matches (or RANK_SHARE of all messages, if
#: more); a query with more matches lists the newest (see ``_run_stage``).
RANK_LIMIT = 3000
RANK_SHARE = 0.005
#: In a relaxed query, a term in at least this share of all messages (and in at least
#: COMMON_MIN of them) is dropped when a rarer term is left.
COMMON_SHARE = 0.01
COMMON_MIN = 2000
#: A two-character CJK term that starts more trigrams than this is scanned for.
MAX_PAIR_TRIGRAMS = 300
#: Weight of a CJK bigram found in the previous message (1 = in the message itself).
#: Higher than the words index's: short CJK turns often carry the answer one turn after
#: the words of the question (0.3-1.0 tried on the recall corpus' tuning half; 0.8 best).
CJK_PREV_WEIGHT = 0.8
#: At most this many trigrams narrow the CJK bigram stage; a question of only common
#: bigrams ranks the newest MAX_GRAM_CANDIDATES CJK messages instead. (400 OR-ed trigrams
#: cost ~14 ms at 1M messages; 200 gave the same recall, at 20k and 200k noise messages.)
MAX_GRAM_TRIGRAMS = 200
#: The CJK bigram stage scores at most this many candidate messages (the newest): at 1M
#: messages scoring 20,000 took ~100 ms on an idle machine, 5,000 ~20 ms.
MAX_GRAM_CANDIDATES = 5000
_CONTEXT_CHARS = 200
_SNIPPET_TOKENS = 24


_SESSION_SELECT = ", ".join(f"s.{c}" for c in hermes.SESSION_FIELDS)
_MESSAGE_COLUMNS = ", ".join(hermes.MESSAGE_FIELDS)


# Row helpers shared with every store (hermes.session_rows); the private names keep the
# call sites short.
MAX_TITLE_LENGTH = hermes.MAX_TITLE_LENGTH
sanitize_title = hermes.sanitize_title
new_session_id = hermes.new_session_id
_encode_json = hermes.encode_json
_decode_json = hermes.decode_json
_content_text = hermes.stored_content


def _is_busy(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


class SQLiteSessionStore(hermes.SessionStore):
    """The ``sqlite`` session store (see :mod:`hermes.plugins.sessions`).

    ``SQLiteSessionStore(path, *, write_timeout=20.0, read_timeout=5.0,
    synchronous="normal")``. ``write_timeout`` bounds how long a write waits for a busy
    database before raising :class:`hermes.StoreError`. ``synchronous="normal"`` (the
    WAL default of most applications) survives any process crash; ``"full"`` also
    survives power loss at the cost of an fsync per write.
    """

    name = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        write_timeout: float = 20.0,
        read_timeout: float = 5.0,
        synchronous: str = "normal",
    ):
        self.path = Path(path)
        self.write_timeout = float(write_timeout)
        self.read_timeout = float(read_timeout)
        if synchronous.lower() not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.synchronous = synchronous.upper()
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._readers: dict[threading.Thread, sqlite3.Connection] = {}
        self._conns_lock = threading.Lock()
        self._closed = False
        self._precheck()
        self._writer = self._open(write=True)
        self._ensure_schema()

    # -- connections ---------------------------------------------------------------------

    def _fail(self, exc: BaseException) -> hermes.StoreError:
        """A :class:`hermes.StoreError` that names the file and what to do."""
        text = str(exc)
        if "not a database" in text or "malformed" in text or "file is encrypted" in text:
            return hermes.StoreError(
                f"{self.path} is not a usable SQLite database ({text}). Move it aside "
                f"(mv '{self.path}' '{self.path}.broken') and Hermes starts a fresh one; "
                "if it is an older Hermes state.db, bring its sessions back with "
                f"`hermes sessions import '{self.path}.broken'`."
            )
        if "unable to open" in text or "readonly" in text or "disk i/o" in text.lower():
            return hermes.StoreError(
                f"cannot open {self.path} ({text}). Check that its directory exists and is "
                "writable, and that the disk is not full."
            )
        return hermes.StoreError(f"{self.path}: {text}")

    def _precheck(self) -> None:
        """Refuse a foreign or newer database before anything writes to it (switching to
        WAL alone rewrites the file header)."""
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.read_timeout)
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version == 0 and tables:
                raise hermes.StoreError(self._foreign_message(conn, tables))
            if version > schema.SCHEMA_VERSION:
                raise hermes.StoreError(self._newer_message(version))
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise self._fail(exc) from exc
        except sqlite3.DatabaseError as exc:
            raise self._fail(exc) from exc
        finally:
            conn.close()

    def _newer_message(self, version: int) -> str:
        return (f"{self.path} has schema version {version}, newer than this Hermes understands "
                f"({schema.SCHEMA_VERSION}). Upgrade hermes-kernel, or point HERMES_HOME elsewhere.")

    def _open(self, *, write: bool) -> sqlite3.Connection:
        if self.path.exists() and not self.path.is_file():
            raise hermes.StoreError(
                f"{self.path} is not a file. Move it aside so Hermes can create its session "
                "database there."
            )
        if write and not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Conversations are private: create the file 0600 (SQLite gives its -wal and
            # -shm files the same permissions).
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            conn = sqlite3.connect(
                self.path, timeout=0.05 if write else self.read_timeout,
                isolation_level=None, check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc
        try:
            conn.row_factory = sqlite3.Row
            if write:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
            else:
                conn.execute("PRAGMA query_only=1")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            conn.close()
            if _is_busy(exc):
                raise hermes.StoreError(
                    f"{self.path} is locked by another process that keeps it busy; try again."
                ) from exc
            raise self._fail(exc) from exc
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _reader(self) -> sqlite3.Connection:
        if self._closed:
            raise hermes.StoreError(f"the session store on {self.path} is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open(write=False)
            self._local.conn = conn
            with self._conns_lock:
                # Tool calls run on short-lived threads: close the read connections of
                # threads that have finished, so file handles do not pile up.
                for thread, old in list(self._readers.items()):
                    if not thread.is_alive():
                        del self._readers[thread]
                        self._conns.remove(old)
                        old.close()
                self._readers[threading.current_thread()] = conn
        return conn

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        # Inside a batch this thread reads through the writer, so it sees its own
        # uncommitted writes (an importer checking what it has already written).
        conn = self._writer if self._batch_start() is not None else self._reader()
        try:
            return fn(conn)
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise hermes.StoreError(f"{self.path} stayed locked for reading: {exc}") from exc
            raise
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
                raise
            raise self._fail(exc) from exc

    def _batch_start(self) -> int | None:
        return getattr(self._local, "batch", None)

    def _unwritable(self, exc: BaseException) -> hermes.StoreError | None:
        """The one-line error for a write the file system refused (a read-only
        state.db or home, a full disk), or ``None`` for any other error."""
        text = str(exc).lower()
        if "readonly" in text or "read-only" in text:
            return hermes.StoreError(
                f"cannot write {self.path}: it is read-only ({exc}); nothing was changed. Make the "
                f"file and its directory {self.path.parent} writable, then try again.")
        if "disk is full" in text or "disk i/o" in text:
            return hermes.StoreError(
                f"cannot write {self.path} ({exc}); nothing was changed. Free some disk space, "
                "then try again.")
        return None

    def _locked_out(self, exc: BaseException, waited: float, patience: float) -> hermes.StoreError:
        return hermes.StoreError(
            f"{self.path} stayed locked by another process for {waited:.1f}s (write timeout "
            f"{patience:g}s); the write was not made. Try again, or raise "
            "plugins.sqlite-sessions.write_timeout.")

    @staticmethod
    def _pause(waited: float, patience: float) -> None:
        # Short random sleeps at first, longer ones once it is clearly a long holder (a
        # checkpoint, a big import), never past the deadline.
        pause = random.uniform(0.002, 0.03) if waited < 2.0 else random.uniform(0.05, 0.3)
        time.sleep(max(0.0, min(pause, patience - waited)))

    def _write(self, fn: Callable[[sqlite3.Connection], T], *, timeout: float | None = None,
               savepoint: bool = True) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction, retrying on a busy
        database with jittered sleeps until ``timeout`` (default ``write_timeout``).

        Inside :meth:`batch` it runs in the batch's transaction, under a savepoint so a
        failing write leaves nothing behind. Appends skip the savepoint (it copies every
        page they touch, a quarter of an import's time): their parameters are checked
        before any statement runs, and a database error aborts the whole batch.
        """
        if self._closed:
            raise hermes.StoreError(f"the session store on {self.path} is closed")
        conn = self._writer
        if self._batch_start() is not None and not savepoint:
            try:
                return fn(conn)
            except sqlite3.Error:
                self._local.batch_failed = True
                raise
        if self._batch_start() is not None:
            conn.execute("SAVEPOINT hermes_write")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK TO hermes_write")
                conn.execute("RELEASE hermes_write")
                raise
            conn.execute("RELEASE hermes_write")
            return result
        patience = self.write_timeout if timeout is None else timeout
        started = time.monotonic()
        with self._write_lock:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        result = fn(conn)
                        conn.execute("COMMIT")
                        return result
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                except sqlite3.OperationalError as exc:
                    waited = time.monotonic() - started
                    if not _is_busy(exc):
                        unwritable = self._unwritable(exc)
                        if unwritable is None:
                            raise
                        raise unwritable from exc
                    if waited >= patience:
                        raise self._locked_out(exc, waited, patience) from exc
                    self._pause(waited, patience)
                except sqlite3.DatabaseError as exc:
                    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
                        raise
                    raise self._fail(exc) from exc

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group this thread's writes into one transaction (imports).

        The write lock is taken once, indexing is deferred and done for the whole batch
        in one statement per index at the end, and everything commits together (or
        nothing does, if the block raises). Other writers wait meanwhile, so keep
        batches to a few thousand messages. Nested batches join the outer one.
        """
        if self._batch_start() is not None:
            yield
            return
        if self._closed:
            raise hermes.StoreError(f"the session store on {self.path} is closed")
        conn = self._writer
        with self._write_lock:
            started, patience = time.monotonic(), self.write_timeout
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as exc:
                    waited = time.monotonic() - started
                    if not _is_busy(exc):
                        unwritable = self._unwritable(exc)
                        if unwritable is None:
                            raise
                        raise unwritable from exc
                    if waited >= patience:
                        raise self._locked_out(exc, waited, patience) from exc
                    self._pause(waited, patience)
            try:
                self._local.batch = conn.execute(
                    "SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
                conn.execute("INSERT INTO state_meta (key, value) VALUES ('fts_deferred', '1')")
                self._local.batch_failed = False
                yield
                if self._local.batch_failed:
                    raise hermes.StoreError(
                        f"a write to {self.path} failed inside a batch; the batch was rolled back")
                self._flush_pending(conn)
                conn.execute("DELETE FROM state_meta WHERE key = 'fts_deferred'")
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                unwritable = self._unwritable(exc)
                if unwritable is None:
                    raise
                raise unwritable from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                self._local.batch = None

    def _flush_pending(self, conn: sqlite3.Connection) -> None:
        """Index the rows this batch wrote so far (before a delete must see them)."""
        start = self._batch_start()
        if start is None:
            return
        last = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        if last > start:
            schema.index_range(conn, start + 1, last)
            self._local.batch = last

    def _ensure_schema(self) -> None:
        def setup(conn: sqlite3.Connection) -> None:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version == 0 and not tables:
                schema.create(conn)
                conn.execute("INSERT OR REPLACE INTO state_meta VALUES ('created_by', ?)",
                             (f"hermes-kernel {hermes.__version__}",))
            elif version == 0:
                raise hermes.StoreError(self._foreign_message(conn, tables))
            elif version > schema.SCHEMA_VERSION:
                raise hermes.StoreError(self._newer_message(version))
            elif version < schema.SCHEMA_VERSION:
                schema.migrate(conn, version)
                log.info("migrated %s from schema v%d to v%d", self.path, version, schema.SCHEMA_VERSION)

        try:
            self._write(setup, timeout=max(self.write_timeout, 30.0))
        except BaseException:
            self.close()
            raise

    def _foreign_message(self, conn: sqlite3.Connection, tables: set[str]) -> str:
        moved = f"{self.path}.hermes-agent"
        if "schema_version" in tables and "sessions" in tables:
            try:
                upstream = conn.execute("SELECT version FROM schema_version").fetchone()[0]
            except sqlite3.Error:
                upstream = "?"
            return (
                f"{self.path} is a Hermes agent state.db (schema v{upstream}), not a Hermes "
                f"kernel one. Move it aside (mv '{self.path}' '{moved}') and bring its "
                f"sessions over with `hermes sessions import '{moved}'`."
            )
        return (
            f"{self.path} is a SQLite database of some other program (tables: "
            f"{', '.join(sorted(tables)[:5])}). Move it aside or point HERMES_HOME elsewhere."
        )

    def close(self) -> None:
        """Close every connection (a best-effort WAL checkpoint first)."""
        if self._closed:
            return
        self._closed = True
        with self._write_lock:
            try:
                self._writer.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error:
                pass
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def __repr__(self) -> str:
        return f"<SQLiteSessionStore {str(self.path)!r}>"

    # -- sessions ------------------------------------------------------------------------

    def create_session(
        self,
        session_id: str | None = None,
        *,
        source: str = "cli",
        model: str | None = None,
        model_config: dict | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        cwd: str | None = None,
        started_at: float | None = None,
    ) -> str:
        now = time.time() if started_at is None else float(started_at)
        generated = session_id is None

        def insert(conn: sqlite3.Connection) -> str:
            parent = parent_session_id
            if parent is not None and conn.execute(
                    "SELECT 1 FROM sessions WHERE id = ?", (parent,)).fetchone() is None:
                parent = None
            for _ in range(20):
                sid = new_session_id(now) if generated else str(session_id)
                cur = conn.execute(
                    "INSERT OR IGNORE INTO sessions (id, source, user_id, model, model_config, "
                    "system_prompt, parent_session_id, started_at, cwd) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (sid, source or "unknown", user_id, model, _encode_json(model_config),
                     system_prompt, parent, now, cwd),
                )
                if cur.rowcount or not generated:
                    return sid
            raise hermes.StoreError("could not generate a unique session id")

        return self._write(insert)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        row = self._read(lambda c: c.execute(
            f"SELECT {_SESSION_SELECT} FROM sessions s WHERE s.id = ?", (session_id,)).fetchone())
        return hermes.session_row(row)

    def update_system_prompt(self, session_id: str, system_prompt: str) -> None:
        self._write(lambda c: c.execute(
            "UPDATE sessions SET system_prompt = ? WHERE id = ?", (system_prompt, session_id)))

    def end_session(self, session_id: str, end_reason: str, *, ended_at: float | None = None) -> None:
        when = time.time() if ended_at is None else float(ended_at)
        self._write(lambda c: c.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
            (when, end_reason, session_id)))

    def reopen_session(self, session_id: str) -> None:
        self._write(lambda c: c.execute(
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", (session_id,)))

    def split_session(
        self,
        parent_id: str,
        messages: list[hermes.Message],
        *,
        end_reason: str = "compression",
        source: str = "cli",
        model: str | None = None,
        model_config: dict | None = None,
        title: str | None = None,
        cwd: str | None = None,
    ) -> str:
        """End the parent, create the child (titled when the title is free) and store
        its messages in ONE transaction: a crash anywhere leaves the parent live and
        unchanged or the complete continuation. The test-only fault point
        ``compaction-split`` (:mod:`hermes.testing.faults`) fires before the commit."""
        now = time.time()
        try:
            clean = sanitize_title(title)
        except ValueError:
            clean = None
        batch = list(messages)

        def split(conn: sqlite3.Connection) -> str:
            conn.execute("UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
                         (now, end_reason, parent_id))
            known = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (parent_id,)).fetchone()
            for _ in range(20):
                child = new_session_id(now)
                if conn.execute(
                    "INSERT OR IGNORE INTO sessions (id, source, model, model_config, "
                    "parent_session_id, started_at, cwd) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (child, source or "unknown", model, _encode_json(model_config),
                     parent_id if known else None, now, cwd),
                ).rowcount:
                    break
            else:
                raise hermes.StoreError("could not generate a unique session id")
            if clean and conn.execute("SELECT 1 FROM sessions WHERE title = ?", (clean,)).fetchone() is None:
                conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, child))
            self._insert_messages(conn, child, batch, bulk=True)
            hermes.fault_point("compaction-split")
            return child

        return self._write(split)

    def list_sessions(
        self,
        *,
        source: str | None = None,
        exclude_sources: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        roots_only: bool = True,
    ) -> list[dict[str, Any]]:
        where, params = [], []
        if roots_only:
            where.append("s.parent_session_id IS NULL")
        if source:
            where.append("s.source = ?")
            params.append(source)
        if exclude_sources:
            where.append(f"s.source NOT IN ({','.join('?' * len(exclude_sources))})")
            params += list(exclude_sources)
        cond = " AND ".join(where) or "1"
        limit, offset = hermes.search_page(limit, offset)
        if roots_only:
            # Seeded from parentless sessions, the walk cannot loop: every session has one
            # parent, so a session in a cycle is never a descendant of a root.
            sql = f"""
                WITH RECURSIVE tree(root, id) AS (
                    SELECT s.id, s.id FROM sessions s WHERE {cond}
                    UNION ALL
                    SELECT tree.root, c.id FROM sessions c JOIN tree ON c.parent_session_id = tree.id
                )
                SELECT tree.root AS root,
                       max(coalesce(d.last_active_at, d.started_at)) AS last_active,
                       count(*) AS lineage_size, sum(d.message_count) AS lineage_messages
                FROM tree JOIN sessions d ON d.id = tree.id
                GROUP BY tree.root ORDER BY last_active DESC, root DESC LIMIT ? OFFSET ?"""
        else:
            sql = f"""
                SELECT s.id AS root, coalesce(s.last_active_at, s.started_at) AS last_active,
                       1 AS lineage_size, s.message_count AS lineage_messages
                FROM sessions s WHERE {cond}
                ORDER BY last_active DESC, s.id DESC LIMIT ? OFFSET ?"""

        def query(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            heads = conn.execute(sql, (*params, limit, offset)).fetchall()
            out = []
            for head in heads:
                row = hermes.session_row(conn.execute(
                    f"SELECT {_SESSION_SELECT} FROM sessions s WHERE s.id = ?", (head["root"],)
                ).fetchone())
                if row is None:
                    continue
                first = conn.execute(
                    "SELECT content FROM messages WHERE session_id = ? AND role = 'user' "
                    "AND content IS NOT NULL ORDER BY id LIMIT 1", (row["id"],)).fetchone()
                row.update(preview=hermes.session_preview(first[0] if first else None),
                           last_active=head["last_active"],
                           lineage_size=head["lineage_size"],
                           lineage_messages=head["lineage_messages"] or 0)
                row["tip_id"] = self._tip(conn, row["id"])  # in the same read as the list
                out.append(row)
            return out

        return self._read(query)

    def resolve_session(self, ref: str) -> str | None:
        ref = (ref or "").strip()
        if not ref:
            return None

        def find(conn: sqlite3.Connection) -> str | None:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (ref,)).fetchone():
                return ref
            title = sanitize_title(ref) if len(ref) <= MAX_TITLE_LENGTH else None
            if title:
                base = hermes.title_base(title)
                found = hermes.pick_titled_session(title, (tuple(r) for r in conn.execute(
                    "SELECT id, title, started_at FROM sessions WHERE title = ? OR "
                    "(substr(title, 1, ?) = ? AND title GLOB ?)",
                    (title, len(base) + 2, base + " #", _glob_escape(base) + " #[0-9]*"))))
                if found is not None:
                    return found
            rows = conn.execute(
                "SELECT id FROM sessions WHERE substr(id, 1, ?) = ? LIMIT 2", (len(ref), ref)
            ).fetchall()
            return rows[0][0] if len(rows) == 1 else None

        return self._read(find)

    def set_title(self, session_id: str, title: str | None) -> str | None:
        clean = sanitize_title(title)

        def update(conn: sqlite3.Connection) -> str | None:
            if clean is not None:
                other = conn.execute("SELECT id FROM sessions WHERE title = ? AND id != ?",
                                     (clean, session_id)).fetchone()
                if other is not None:
                    raise ValueError(f"Title {clean!r} is already in use by session {other[0]}.")
            conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id))
            return clean

        try:
            return self._write(update)
        except sqlite3.IntegrityError as exc:  # a concurrent writer took it first
            raise ValueError(f"Title {clean!r} is already in use.") from exc

    def next_title_in_lineage(self, title: str) -> str:
        clean = sanitize_title(title) or ""
        base = hermes.title_base(clean)
        if not base:
            return clean
        rows = self._read(lambda c: c.execute(
            "SELECT title FROM sessions WHERE title = ? OR (substr(title, 1, ?) = ?)",
            (base, len(base) + 2, base + " #")).fetchall())
        return hermes.next_numbered_title(base, (r[0] for r in rows))

    def lineage_root(self, session_id: str) -> str:
        def walk(conn: sqlite3.Connection) -> str:
            def parent_of(sid: str) -> str | None:
                row = conn.execute("SELECT p.id FROM sessions s JOIN sessions p ON p.id = s.parent_session_id "
                                   "WHERE s.id = ?", (sid,)).fetchone()
                return row[0] if row else None

            return hermes.follow_parents(session_id, parent_of)

        return self._read(walk)

    def compression_tip(self, session_id: str) -> str:
        return self._read(lambda conn: self._tip(conn, session_id))

    @staticmethod
    def _tip(conn: sqlite3.Connection, session_id: str) -> str:
        """compression_tip on ``conn``: list_sessions finds every listed row's tip in its own read."""
        def ending(sid: str) -> tuple[str | None, float | None] | None:
            row = conn.execute("SELECT end_reason, ended_at FROM sessions WHERE id = ?", (sid,)).fetchone()
            return (row[0], row[1]) if row else None

        def newest_child_since(sid: str, ended_at: float) -> str | None:
            row = conn.execute("SELECT id FROM sessions WHERE parent_session_id = ? AND started_at >= ? "
                               "ORDER BY started_at DESC, id DESC LIMIT 1", (sid, ended_at)).fetchone()
            return row[0] if row else None

        # A compaction split and /undo both continue in the newest later child.
        return hermes.follow_continuations(session_id, ending, newest_child_since)

    def children(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._read(lambda c: c.execute(
            f"SELECT {_SESSION_SELECT} FROM sessions s WHERE s.parent_session_id = ? "
            "ORDER BY s.started_at, s.id", (session_id,)).fetchall())
        return [r for r in (hermes.session_row(row) for row in rows) if r is not None]

    def update_token_counts(
        self,
        session_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        model: str | None = None,
        absolute: bool = False,
    ) -> None:
        counts = (int(input_tokens or 0), int(output_tokens or 0), int(cache_read_tokens or 0),
                  int(cache_write_tokens or 0), int(reasoning_tokens or 0))
        names = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                 "reasoning_tokens")
        if absolute:
            sets = [f"{n} = ?" for n in names]
            cost = "estimated_cost_usd = coalesce(?, estimated_cost_usd)"
        else:
            sets = [f"{n} = {n} + ?" for n in names]
            cost = ("estimated_cost_usd = CASE WHEN ? IS NULL THEN estimated_cost_usd "
                    "ELSE coalesce(estimated_cost_usd, 0) + ? END")
        cost_params: tuple[Any, ...] = (estimated_cost_usd,) if absolute else (estimated_cost_usd, estimated_cost_usd)
        sql = f"UPDATE sessions SET {', '.join(sets)}, {cost}, model = coalesce(model, ?) WHERE id = ?"
        self._write(lambda c: c.execute(sql, (*counts, *cost_params, model, session_id)))

    def delete_session(self, session_id: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            self._flush_pending(conn)  # inside a batch: index first, so the delete sees it
            # Messages first, explicitly: their triggers take them out of both indexes.
            conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM state_meta WHERE key = ?", (f"import:{session_id}",))
            return conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0

        return self._write(delete)

    def prune_sessions(self, older_than_days: float = 90, source: str | None = None) -> int:
        cutoff = time.time() - float(older_than_days) * 86400.0
        sql = "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND started_at < ?"
        params: list[Any] = [cutoff]
        if source:
            sql += " AND source = ?"
            params.append(source)
        ids = [r[0] for r in self._read(lambda c: c.execute(sql, params).fetchall())]
        return sum(1 for sid in ids if self.delete_session(sid))

    # -- messages ------------------------------------------------------------------------

    @staticmethod
    def _message_params(session_id: str, m: dict[str, Any], now: float) -> tuple[Any, ...]:
        """The INSERT parameters of one message, every one of them bindable (so a write
        cannot fail half way on bad input): text fields as clean strings, numbers as
        numbers, anything unusable as ``None``."""
        when, tokens = hermes.message_time(m.get("timestamp"), now), hermes.message_tokens(m.get("token_count"))
        return (
            str(session_id), _text(str(m.get("role") or "user")), _text(_content_text(m.get("content"))),
            _text(m.get("tool_call_id")), _text(_encode_json(m.get("tool_calls") or None)),
            _text(m.get("tool_name") or m.get("name")), when, tokens,
            _text(m.get("finish_reason")), _text(m.get("reasoning")),
        )

    def _insert_messages(
        self, conn: sqlite3.Connection, session_id: str, messages: list[dict[str, Any]], *, bulk: bool
    ) -> list[int]:
        now = time.time()
        rows = [self._message_params(session_id, m, now) for m in messages]
        if not rows:
            return []
        first_ts = min(r[6] for r in rows)
        conn.execute(
            "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, 'unknown', ?)",
            (session_id, first_ts),
        )
        insert = ("INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, "
                  "tool_name, timestamp, token_count, finish_reason, reasoning) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        if self._batch_start() is not None:  # the batch indexes everything when it ends
            conn.executemany(insert, rows)
            last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
            ids = list(range(last - len(rows) + 1, last + 1))
        elif bulk:
            conn.execute("INSERT INTO state_meta (key, value) VALUES ('fts_deferred', '1')")
            conn.executemany(insert, rows)
            last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
            first = last - len(rows) + 1
            schema.index_range(conn, first, last)
            conn.execute("DELETE FROM state_meta WHERE key = 'fts_deferred'")
            ids = list(range(first, last + 1))
        else:
            ids = [int(conn.execute(insert, row).lastrowid or 0) for row in rows]
            schema.index_split(conn, ids[0], ids[-1])  # the triggers index the rest
        calls = sum(hermes.tool_call_count(r[1], m.get("tool_calls")) for r, m in zip(rows, messages, strict=True))
        conn.execute(
            "UPDATE sessions SET message_count = message_count + ?, "
            "tool_call_count = tool_call_count + ?, "
            "last_active_at = max(coalesce(last_active_at, 0), ?) WHERE id = ?",
            (len(rows), calls, max(r[6] for r in rows), session_id),
        )
        return ids

    def append_message(
        self,
        session_id: str,
        role: str,
        content: str | None = None,
        *,
        tool_name: str | None = None,
        tool_calls: list[dict] | None = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        timestamp: float | None = None,
    ) -> int:
        message = {
            "role": role, "content": content, "tool_name": tool_name, "tool_calls": tool_calls,
            "tool_call_id": tool_call_id, "token_count": token_count,
            "finish_reason": finish_reason, "reasoning": reasoning, "timestamp": timestamp,
        }
        return self._write(lambda c: self._insert_messages(c, session_id, [message], bulk=False),
                           savepoint=False)[0]

    #: Messages per transaction in :meth:`append_messages` (bounds lock hold time).
    BULK_BATCH = 5000

    def append_messages(self, session_id: str, messages: list[hermes.Message]) -> list[int]:
        ids: list[int] = []
        batch = list(messages)
        for start in range(0, len(batch), self.BULK_BATCH):
            chunk = batch[start:start + self.BULK_BATCH]
            ids += self._write(partial(self._insert_messages, session_id=session_id, messages=chunk,
                                       bulk=True), savepoint=False)
        return ids

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._read(lambda c: c.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? ORDER BY id",
            (session_id,)).fetchall())
        return [hermes.message_row(r) for r in rows]

    def iter_session_ids(self) -> Iterable[str]:
        """Every session id, oldest first (for ``export --all``)."""
        rows = self._read(lambda c: c.execute(
            "SELECT id FROM sessions ORDER BY started_at, id").fetchall())
        return [r[0] for r in rows]

    # -- search --------------------------------------------------------------------------

    def explain_search(self, query: str, *, fallback: bool = True, limit: int = 20) -> list[dict[str, Any]]:
        """Each planned stage of ``query`` run on its own, none skipped: a list of
        ``{"mode", "index", "match", "hits"}`` (hit message ids), to see which stage finds
        what. Unlike :meth:`search_messages` a stage the database rejects raises."""
        stages = plan(query, fallback=fallback)

        def run(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            return [{"mode": stage.mode, "index": stage.index, "match": stage.match,
                     "hits": [h["id"] for h in self._run_stage(conn, stage, query, "", [], limit, [], {})]}
                    for stage in stages]

        return self._read(run)

    def _search_messages(self, query: Any, *, limit: Any, offset: Any, fallback: bool,
                         **filters: Any) -> list[hermes.SearchHit]:
        """:meth:`hermes.SessionStore.search_messages` without its guard (that catches
        what this raises)."""
        limit, offset = hermes.search_page(limit, offset)
        if not isinstance(query, str) or not query.strip() or limit == 0:
            return []
        stages = plan(query, fallback=fallback)
        if not stages:
            return []
        filter_sql, filter_params = _filters(**filters)
        need = offset + limit

        def run(conn: sqlite3.Connection) -> list[hermes.SearchHit]:
            hits: list[hermes.SearchHit] = []
            seen: dict[str, int] = {}
            for number, stage in enumerate(stages):
                if number and len(hits) >= RELAX_BELOW:
                    break
                if len(hits) >= need:
                    break
                exclude = [h["id"] for h in hits]
                hits += self._run_stage(conn, stage, query, filter_sql, filter_params,
                                        need - len(hits), exclude, seen)
            page = hits[offset:need]
            for hit in page:
                hit["context"] = _context(conn, hit["session_id"], hit["id"])
                # The message's number in its session (1 = first), not its global row id.
                hit["position"] = conn.execute(
                    "SELECT count(*) FROM messages WHERE session_id = ? AND id <= ?",
                    (hit["session_id"], hit["id"])).fetchone()[0]
                if hit["role"] == "tool" and not hit.get("tool_name"):
                    hit["tool_name"] = _called_tool(conn, hit["session_id"], hit["id"])
            return page

        return self._read(run)

    def _drop_common_terms(self, conn: sqlite3.Connection, stage: Stage,
                           seen: dict[str, int]) -> Stage:
        """A word as common as "database" matches a large share of all messages and adds
        little to a relaxed query, yet it would make the query rank mostly unrelated
        messages. Probe each term (at most ``cap`` postings; ``seen`` caches the answers
        for one search) and, as long as a rarer term is left, drop the common ones."""
        if stage.combine != "any" or len(stage.terms) < 2:
            return stage
        total = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        cap = max(COMMON_MIN, int(total * COMMON_SHARE))
        exprs = [loosen(term) for term in stage.terms]
        todo = list(dict.fromkeys(e for e in exprs if e not in seen))
        if todo:  # one statement for every term (each count stops at cap)
            probe = ", ".join("(SELECT count(*) FROM (SELECT rowid FROM messages_fts "
                              "WHERE messages_fts MATCH ? LIMIT ?))" for _ in todo)
            row = conn.execute(f"SELECT {probe}", [v for e in todo for v in (e, cap)]).fetchone()
            seen.update(zip(todo, row, strict=True))
        counts = [seen[e] for e in exprs]
        # A term that matches nothing is not a rarer term to keep instead of the others.
        rare = [t for t, n in zip(stage.terms, counts, strict=True) if 0 < n < cap]
        if not rare or len(rare) == len([n for n in counts if n]):
            return stage
        return dataclasses.replace(stage, match=relaxed_match(rare, stage.negatives, context=stage.context),
                                   terms=rare)

    @staticmethod
    def _gram_stats(conn: sqlite3.Connection, grams: list[str]) -> tuple[list[float], list[list[str] | None]]:
        """For each CJK bigram: its BM25 inverse document frequency among the CJK
        messages, and the trigrams that start with it (``None`` when more than
        MAX_PAIR_TRIGRAMS), both from the trigram vocabulary — every occurrence of a
        bigram starts a trigram, thanks to the newline at the end of each text."""
        total = conn.execute("SELECT count(*) FROM messages_fts_trigram_docsize").fetchone()[0]
        weights: list[float] = []
        trigrams: list[list[str] | None] = []
        # One statement for every bigram's trigrams (each list stops past the cap).
        union = " UNION ALL ".join(
            f"SELECT * FROM (SELECT {i} AS g, term, doc FROM messages_fts_trigram_vocab "
            "WHERE term >= ? AND term < ? LIMIT ?)" for i in range(len(grams)))
        found: dict[int, list[tuple[str, int]]] = {i: [] for i in range(len(grams))}
        for g, term, doc in conn.execute(union, [v for gram in grams
                                                 for v in (gram, gram + "\U0010ffff", MAX_PAIR_TRIGRAMS + 1)]):
            found[g].append((term, doc))
        for i, gram in enumerate(grams):
            rows = found[i]
            if len(rows) > MAX_PAIR_TRIGRAMS:
                df = conn.execute("SELECT coalesce(sum(doc), 0) FROM messages_fts_trigram_vocab "
                                  "WHERE term >= ? AND term < ?", (gram, gram + "\U0010ffff")).fetchone()[0]
                trigrams.append(None)
            else:
                df = sum(r[1] for r in rows)
                trigrams.append([r[0] for r in rows])
            df = min(df, total)
            weights.append(math.log(1.0 + (total - df + 0.5) / (df + 0.5)))
        return weights, trigrams

    @staticmethod
    def _rank_limit(conn: sqlite3.Connection) -> int:
        total = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        return max(RANK_LIMIT, int(total * RANK_SHARE))

    def _narrow_pairs(self, conn: sqlite3.Connection, stage: Stage) -> Stage:
        """A two-character CJK term is too short for the trigram index, but every place
        it occurs starts a trigram (the CJK table's texts end with a newline): the
        trigrams that start with it, read from the index's vocabulary, become an OR-ed
        MATCH that narrows the LIKE scan to the rows holding one of them. The rarest
        pair is used; a pair that starts more than MAX_PAIR_TRIGRAMS different trigrams
        is common enough that the newest-first scan stops early on its own."""
        best: list[str] | None = None
        for pair in stage.pairs:
            terms = [r[0] for r in conn.execute(
                "SELECT term FROM messages_fts_trigram_vocab WHERE term >= ? AND term < ? LIMIT ?",
                (pair, pair + "\U0010ffff", MAX_PAIR_TRIGRAMS + 1))]
            if best is None or len(terms) < len(best):
                best = terms
        if best is None or len(best) > MAX_PAIR_TRIGRAMS:
            return stage
        if not best:
            return dataclasses.replace(stage, match='""', ranked=False)  # matches nothing
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in best)
        return dataclasses.replace(stage, match=f"{OWN_COLUMNS} : ({match})", ranked=False)

    def _run_stage(self, conn: sqlite3.Connection, stage: Stage, query: str, filter_sql: str,
                   filter_params: list[Any], count: int, exclude: list[int],
                   seen: dict[str, int]) -> list[hermes.SearchHit]:
        table = "messages_fts" if stage.index == "words" else "messages_fts_trigram"
        stage = self._drop_common_terms(conn, stage, seen)
        if stage.pairs and stage.match is None:
            stage = self._narrow_pairs(conn, stage)
        hits = self._run_table(conn, stage, table, query, filter_sql, filter_params, count, exclude)
        if stage.index != "words":
            return hits
        # Messages where CJK text touches a Latin word hold that word glued to the CJK run
        # in messages_fts; their split copy is searched with the same expression.
        more = self._run_table(conn, stage, "messages_fts_split", query, filter_sql, filter_params, count,
                               exclude + [h["id"] for h in hits])
        if not more:
            return hits
        merged = hits + more
        if stage.ranked and all(h["mode"] == stage.mode for h in merged):
            merged.sort(key=lambda h: (h["score"], -h["id"]))  # bm25: lower is better
        else:
            merged.sort(key=lambda h: -h["id"])
        return merged[:count]

    def _run_table(self, conn: sqlite3.Connection, stage: Stage, table: str, query: str, filter_sql: str,
                   filter_params: list[Any], count: int, exclude: list[int]) -> list[hermes.SearchHit]:
        if stage.combine == "grams":
            return self._run_grams(conn, stage, query, filter_sql, filter_params, count, exclude)
        where, params = _stage_where(stage, table, filter_sql, filter_params, exclude)
        joins = f"JOIN messages m ON m.id = {table}.rowid JOIN sessions s ON s.id = m.session_id"
        mode = stage.mode
        if stage.match is not None and stage.ranked:
            # BM25 scores every match (and counts every message holding each term): a
            # query matching tens of thousands of messages costs hundreds of milliseconds
            # over a million. Walking the matches newest-first without scoring is cheap,
            # so count at most rank_limit of them that way: fewer, and they are ranked by
            # relevance; more (every term is very common), and the newest matches are
            # listed instead — the hits' mode says so ("strict-recent").
            limit = self._rank_limit(conn)
            newest = conn.execute(
                f"SELECT {table}.rowid FROM {table} {joins if (filter_sql or exclude) else ''} "
                f"WHERE {' AND '.join(where)} ORDER BY {table}.rowid DESC LIMIT ?", (*params, limit)).fetchall()
            if not newest:
                return []
            if len(newest) >= limit:
                # The probe already walked the newest matches, filters applied: read those
                # messages directly instead of matching the terms a second time.
                return self._hits(_rows_by_id(conn, [r[0] for r in newest[:count]]), stage, query,
                                  f"{stage.mode}-recent")
        if stage.match is None or not stage.ranked:
            # newest first: the index walks its rows in that order and stops early
            score, order = "0.0", f"{table}.rowid DESC"
        else:
            score = order = f"{table}.rank"
        sql = (
            f"SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.content, "
            f"s.source, s.model, s.started_at AS session_started, s.title AS session_title, "
            f"{_snippet_sql(stage, table)} AS snippet, {score} AS score "
            f"FROM {table} {joins} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?"
        )
        rows = conn.execute(sql, (*params, count)).fetchall()
        return self._hits(rows, stage, query, mode)

    def _run_grams(self, conn: sqlite3.Connection, stage: Stage, query: str, filter_sql: str,
                   filter_params: list[Any], count: int, exclude: list[int]) -> list[hermes.SearchHit]:
        """The CJK bigram stage: the CJK messages ranked by the distinct bigrams of the
        question they contain, each weighted by its rarity; a bigram in the previous
        message counts for less (the question may use the words of the turn before the
        answer).

        Cost is bounded three ways: a bigram no message holds is left out (a question
        about something never discussed reads nothing at all); only the messages holding
        one of the rarer bigrams are candidates (their trigrams, OR-ed), at most
        MAX_GRAM_CANDIDATES of them, newest first; and each candidate's score is computed
        once, in a subquery, before the ordering (in one flat query SQLite computed it for
        the filter, the ordering and the result alike)."""
        table = "messages_fts_trigram"
        mode = stage.mode
        prev_weight = CJK_PREV_WEIGHT if stage.context else 0.0
        weights, trigrams = self._gram_stats(conn, stage.grams)
        kept = [(g, w, t) for g, w, t in zip(stage.grams, weights, trigrams, strict=True) if t is None or t]
        if not kept:
            return []
        counts = " + ".join(f"((instr({table}.content, ?) > 0) + {prev_weight} * "
                            f"(instr(coalesce({table}.prev, ''), ?) > 0)) * ?" for _ in kept)
        params: list[Any] = [v for g, w, _ in kept for v in (g, g, w)]
        # Read only the messages holding one of the bigrams rare enough to list (their
        # trigrams, OR-ed): a message with only common bigrams would rank low anyway.
        narrow: list[str] = []
        for _, _, listed in sorted(kept, key=lambda x: -x[1]):
            if listed is not None and len(narrow) + len(listed) <= MAX_GRAM_TRIGRAMS:
                narrow += listed  # rarest bigrams first, while the OR stays small
        where: list[str] = []
        if narrow:
            where.append(f"{table} MATCH ?")
            params.append("{content prev} : (" + " OR ".join('"' + t.replace('"', '""') + '"' for t in narrow) + ")")
        else:  # only common bigrams: rank the newest CJK messages (the cap below), and say so
            mode = f"{stage.mode}-recent"
        for term in stage.negatives:
            where.append(f"instr({table}.content, ?) = 0")
            params.append(term.text)
        joins = ""
        if filter_sql or exclude:  # filter before the cap, or a narrow filter could find too little
            scoring = 3 * len(kept)  # the SELECT's parameters come first
            where, where_args = _stage_where(Stage(mode, "trigram", where=" AND ".join(where), params=params[scoring:]),
                                             table, filter_sql, filter_params, exclude)
            params = params[:scoring] + where_args
            joins = f"JOIN messages m ON m.id = {table}.rowid JOIN sessions s ON s.id = m.session_id"
        params.append(MAX_GRAM_CANDIDATES)
        sql = (
            f"SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.content, "
            f"s.source, s.model, s.started_at AS session_started, s.title AS session_title, "
            f"NULL AS snippet, c.score AS score FROM ("
            f"SELECT {table}.rowid AS id, ({counts}) AS score, length({table}.content) AS len "
            f"FROM {table} {joins} WHERE {' AND '.join(where) or 'true'} ORDER BY {table}.rowid DESC LIMIT ?) c "
            f"JOIN messages m ON m.id = c.id JOIN sessions s ON s.id = m.session_id "
            f"WHERE c.score >= ? ORDER BY c.score DESC, c.len, c.id DESC LIMIT ?"
        )
        rows = conn.execute(sql, (*params, min(w for _, w, _ in kept), count)).fetchall()
        return self._hits(rows, stage, query, mode)

    @staticmethod
    def _hits(rows: list[sqlite3.Row], stage: Stage, query: str, mode: str) -> list[hermes.SearchHit]:
        terms = stage.highlight or [t.text for t in parse(query).terms if not t.negated]
        hits: list[hermes.SearchHit] = []
        for r in rows:
            snip = r["snippet"]
            if snip is None:
                snip = hermes.substring_snippet(r["content"] or "", terms)
            snip = snip.replace(GLUE_BREAK, "") if snip else snip  # the split index's word breaks
            if stage.index == "trigram" and r["snippet"] is not None:  # the CJK copy's end-of-text newline
                snip = snip[:-4] + "<<<" if snip.endswith("\n<<<") else snip.removesuffix("\n")
            hits.append({
                "id": r["id"], "session_id": r["session_id"], "role": r["role"],
                "snippet": snip or "", "timestamp": r["timestamp"], "tool_name": r["tool_name"],
                "source": r["source"], "model": r["model"], "session_started": r["session_started"],
                "session_title": r["session_title"], "context": [], "mode": mode,
                "score": float(r["score"] or 0.0),
            })
        return hits

    # -- bookkeeping ---------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._read(lambda c: c.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone())
        return row[0] if row else None

    def set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self._write(lambda c: c.execute("DELETE FROM state_meta WHERE key = ?", (key,)))
        else:
            self._write(lambda c: c.execute(
                "INSERT OR REPLACE INTO state_meta (key, value) VALUES (?, ?)", (key, str(value))))

    def forget(self, request: hermes.ForgetRequest) -> hermes.ForgetReport:
        """See :mod:`hermes.plugins.sessions.forget` (``hermes forget``)."""
        from .forget import forget

        return forget(self, request)

    def check_integrity(self, *, budget: float | None = None) -> list[str]:
        """Problems found by SQLite's and FTS5's own integrity checks and by comparing
        both search indexes with the messages row by row (``[]`` when sound). ``budget``
        bounds the seconds of the comparison (see :meth:`compare_indexes`)."""
        problems: list[str] = []

        def check(conn: sqlite3.Connection) -> None:
            for (line,) in conn.execute("PRAGMA quick_check"):
                if line != "ok":
                    problems.append(line)
            for table in ("messages_fts", "messages_fts_trigram", "messages_fts_split"):
                try:
                    conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
                except sqlite3.DatabaseError as exc:
                    problems.append(f"{table}: {exc}")

        self._write(check)
        if not problems:  # a damaged file can fail the comparison's queries themselves
            problems.extend(self.compare_indexes(budget=budget).problems)
        return problems

    def compare_indexes(self, *, budget: float | None = None) -> Any:
        """Whether the search indexes hold exactly the rows the messages call for
        (:func:`hermes.plugins.sessions.integrity.compare_indexes`: streamed over one
        read snapshot, stopped after ``budget`` seconds); an ``IndexReport``."""
        from .integrity import compare_indexes

        return self._read(lambda c: compare_indexes(c, budget=budget))

    def count_messages(self) -> int:
        """How many messages are stored (for progress bars)."""
        return int(self._read(lambda c: c.execute("SELECT count(*) FROM messages").fetchone()[0]))

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Build both full-text indexes again from the messages, in one transaction (other
        writers wait); ``progress(n)`` after each chunk of ``n`` messages. Returns the
        number of messages indexed. A leaked ``fts_deferred`` flag (it stops the
        triggers from indexing) is removed first: outside a batch no write holds it."""
        def rebuild(c: sqlite3.Connection) -> int:
            if self._batch_start() is None:
                c.execute("DELETE FROM state_meta WHERE key = 'fts_deferred'")
            return schema.rebuild_index(c, progress=progress)

        return self._write(rebuild, timeout=max(self.write_timeout, 120.0))

    def optimize(self) -> None:
        """Merge the full-text indexes' segments (after a big import searches get faster)."""
        for table in ("messages_fts", "messages_fts_trigram", "messages_fts_split"):
            def merge(c: sqlite3.Connection, t: str = table) -> None:
                c.execute(f"INSERT INTO {t}({t}) VALUES ('optimize')")
            self._write(merge, timeout=max(self.write_timeout, 120.0))


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


_text = hermes.stored_text  # SQLite keeps NUL characters


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _filters(
    *,
    source_filter: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    role_filter: list[str] | None = None,
    session_id: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> tuple[str, list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    for column, values, negate in (("s.source", hermes.filter_values(source_filter), False),
                                   ("s.source", hermes.filter_values(exclude_sources), True),
                                   ("m.role", hermes.filter_values(role_filter), False)):
        if values:
            where.append(f"{column} {'NOT ' if negate else ''}IN ({','.join('?' * len(values))})")
            params += values
    if session_id:
        where.append("m.session_id = ?")
        params.append(str(session_id))
    if since is not None:
        where.append("m.timestamp >= ?")
        params.append(float(since))
    if until is not None:
        where.append("m.timestamp <= ?")
        params.append(float(until))
    return " AND ".join(where), params


def _context(conn: sqlite3.Connection, session_id: str, message_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM (SELECT id, role, content FROM messages WHERE session_id = ? AND id < ? "
        "ORDER BY id DESC LIMIT 1) UNION ALL SELECT * FROM (SELECT id, role, content FROM "
        "messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT 1)",
        (session_id, message_id, session_id, message_id),
    ).fetchall()
    return [{"id": r["id"], "role": r["role"], "content": (r["content"] or "")[:_CONTEXT_CHARS]}
            for r in rows]


def _stage_where(stage: Stage, table: str, filter_sql: str, filter_params: list[Any],
                 exclude: list[int]) -> tuple[list[str], list[Any]]:
    """The WHERE conditions and parameters of a stage: its MATCH and extra SQL, the
    caller's filters, and the hits earlier stages found."""
    where: list[str] = []
    params: list[Any] = []
    if stage.match is not None:
        where.append(f"{table} MATCH ?")
        params.append(stage.match)
    if stage.where:
        where.append(stage.where)
        params += stage.params
    if filter_sql:
        where.append(filter_sql)
        params += filter_params
    if exclude:
        where.append(f"m.id NOT IN ({','.join('?' * len(exclude))})")
        params += exclude
    return where, params


def _snippet_sql(stage: Stage, table: str) -> str:
    """FTS5's snippet of the message's own text (column 0), or of its tool call when it
    has no text — never of the index-only columns (the previous message, the date).
    ``NULL`` when the store builds the snippet itself (scans, CJK bigrams)."""
    if stage.match is None or stage.highlight:
        return "NULL"
    tokens = _SNIPPET_TOKENS if stage.index == "words" else _SNIPPET_TOKENS * 3
    return (f"CASE WHEN coalesce(m.content, '') = '' THEN snippet({table}, 2, '>>>', '<<<', '...', {tokens}) "
            f"ELSE snippet({table}, 0, '>>>', '<<<', '...', {tokens}) END")


def _rows_by_id(conn: sqlite3.Connection, ids: list[int]) -> list[sqlite3.Row]:
    """Hit rows (no snippet, no score) of messages by id, newest first."""
    return conn.execute(
        "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.content, s.source, s.model, "
        "s.started_at AS session_started, s.title AS session_title, NULL AS snippet, 0.0 AS score "
        "FROM messages m JOIN sessions s ON s.id = m.session_id "
        f"WHERE m.id IN ({','.join('?' * len(ids))}) ORDER BY m.id DESC", ids).fetchall()


def _called_tool(conn: sqlite3.Connection, session_id: str, message_id: int) -> str | None:
    """The tool a result answers, when the result itself has no name (OpenAI-format
    tool messages carry only ``tool_call_id``): the name in the earlier assistant call
    with that id."""
    row = conn.execute(
        "SELECT (SELECT json_extract(j.value, '$.function.name') FROM messages a, json_each(a.tool_calls) j "
        "WHERE a.session_id = t.session_id AND a.id < t.id AND a.role = 'assistant' "
        "AND json_valid(a.tool_calls) AND json_extract(j.value, '$.id') = t.tool_call_id "
        "ORDER BY a.id DESC LIMIT 1) FROM messages t WHERE t.id = ?", (message_id,)).fetchone()
    return row[0] if row else None
