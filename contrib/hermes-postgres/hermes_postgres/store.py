"""The ``postgres`` session store: psycopg 3 with a connection pool.

Concurrency model: no lock in the store. Each write is one transaction on a pooled
connection; an append first updates its session's row (which serializes appends to ONE
session, so their ids follow their order) and then inserts the message, so appends to
different sessions run in parallel, from any number of processes and machines. A
transaction the server aborts for a deadlock or a serialization failure is retried with
jittered sleeps until ``write_timeout``. Reads never wait for writers (MVCC).

Every connection of a store sets ``app.hermes_user`` / ``app.hermes_profile`` when the
pool opens it; the database's row-level security then shows it only that user's rows
(see :mod:`.schema`). The SQL below never names the user: isolation does not depend on
this module getting a WHERE clause right.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import hermes

from . import schema as pgschema
from .search import (
    PREV_CHARS,
    Rendered,
    cjk_grams,
    cjk_runs,
    day_words,
    gram_test,
    grams_query,
    highlight_terms,
    relaxed_query,
    render,
    word_snippet,
    words,
)

log = logging.getLogger("hermes.postgres")
T = TypeVar("T")

#: Ranked searches score at most this many matches (or RANK_SHARE of all messages);
#: a query with more lists the newest matches instead (mode ``…-recent``).
RANK_LIMIT = 3000
RANK_SHARE = 0.005
#: The CJK bigram stage weighs each bigram by its rarity among the newest this-many CJK
#: messages.
GRAM_SAMPLE = 1000
#: A bigram question matching more than rank_limit messages ranks the newest this-many.
GRAM_RECENT = 1000
#: Listing the newest matches reads the newest this-many messages first (then 4x more).
NEWEST_WINDOW = 500
#: A query the planner expects to match this many times rank_limit is listed newest first
#: without counting its matches.
COMMON_ESTIMATE = 2
#: Below this many messages no estimate is asked for: every decision reads (at most
#: rank_limit) matches, exactly as the SQLite store decides.
ESTIMATES_FROM = 100_000
#: In a relaxed query, a term in at least this share of all messages (and at least
#: COMMON_MIN of them) is dropped while a rarer term is left (as in the SQLite store).
COMMON_SHARE = 0.01
COMMON_MIN = 2000
#: Pages a bitmap scan asks the kernel for ahead of reading them (see _configure).
IO_CONCURRENCY = 64
#: A relaxed query ranks the matches of its rarest terms while they number at most this
#: share of the rank cap (see PostgresSessionStore._narrow_relaxed) — if they are at least
#: RELAXED_MIN times the hits asked for.
RELAXED_CANDIDATES = 0.3
RELAXED_MIN = 2
#: What a CJK bigram found only in the previous message counts (the SQLite store's
#: CJK_PREV_WEIGHT: short CJK turns often answer the turn before).
PREV_WEIGHT = 0.8
#: ts_rank's weight of a word found only in the context (the previous message, the date:
#: weight D) against one in the message itself (1.0), and its length normalization
#: (1: divided by 1 + log of the length). 0.65 is what the SQLite store's context column
#: weight of 0.5 amounts to in BM25 (a term frequency of 0.5 against 1 with k1 = 1.2:
#: 0.5 * 2.2 / 1.7); with 0.5 the replies found by their question's words ranked low
#: (recall tuning half: hit@5 0.745 -> 0.770; with PREV_WEIGHT 0.8 0.787).
CONTEXT_WEIGHT = 0.65
RANK_NORMALIZATION = 1
_CONTEXT_CHARS = 200

# -- the write path ------------------------------------------------------------------------
#: Creates a missing session and counts the messages being added; its row lock orders
#: concurrent appends to one session (and only to that one).
_UPSERT_SESSION = (
    "INSERT INTO sessions (id, source, started_at, message_count, tool_call_count, last_active_at) "
    "VALUES (%(sid)s, 'unknown', %(first)s, %(n)s, %(calls)s, %(last)s) "
    "ON CONFLICT (hermes_user, hermes_profile, id) DO UPDATE SET "
    "message_count = sessions.message_count + excluded.message_count, "
    "tool_call_count = sessions.tool_call_count + excluded.tool_call_count, "
    "last_active_at = greatest(coalesce(sessions.last_active_at, 0), excluded.last_active_at)")
#: Inserts one message (parameters: PostgresSessionStore._message_params). Its context
#: (weight D: the previous message's text when that is a user or assistant turn, and the
#: date) is found by the statement itself, from the messages its snapshot holds. When the
#: previous message is the one this process wrote last (``prev_hint``), the words the
#: client computed from it (``ctx``, by the tokenizer ``hermes_words`` mirrors) are used
#: instead of tokenizing it again in the server, which was about half an append's
#: server CPU. ``{after_upsert}`` names the upsert's output when both run as one
#: statement, which makes the insert wait for the upsert's row lock.
_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, tool_text, "
    "timestamp, token_count, finish_reason, reasoning, cjk, prev_cjk, tsv) "
    "SELECT %(sid)s, %(role)s, %(content)s, %(tool_call_id)s, %(tool_calls)s, %(tool_name)s, %(tool_text)s, "
    "%(ts)s, %(tokens)s, %(finish)s, %(reasoning)s, %(cjk)s, "
    "CASE WHEN %(cjk)s AND hermes_has_cjk(p.prev) THEN p.prev END, "
    "setweight(to_tsvector('hermes_words', %(own)s), 'A') || "
    "setweight(to_tsvector('hermes_words', CASE WHEN p.prev_id IS NOT DISTINCT FROM %(prev_hint)s::bigint "
    "THEN %(ctx)s ELSE hermes_words(coalesce(p.prev, '') || ' ' || %(day)s) END), 'D') "
    "FROM {after_upsert}(VALUES (1)) v LEFT JOIN LATERAL (SELECT q.id AS prev_id, CASE WHEN q.role IN "
    f"('user', 'assistant') THEN left(q.content, {PREV_CHARS}) END AS prev FROM messages q "
    "WHERE q.session_id = %(sid)s ORDER BY q.id DESC LIMIT 1) p ON true "
    "RETURNING id")
#: An append as ONE statement (one round trip, its own transaction; about half the client
#: CPU and two thirds of the server CPU of two pipelined statements): upsert, then insert. In READ
#: COMMITTED the statement's snapshot is taken before the upsert waits for the session's
#: row lock, so a message another process appended meanwhile is not in it: ``raced``
#: compares the session's message count in the snapshot (``seen``) with the locked row's,
#: and the store then recomputes the context (:meth:`PostgresSessionStore._checked_context`).
_APPEND_ONE = (
    f"WITH up AS ({_UPSERT_SESSION} RETURNING message_count), "
    "seen AS (SELECT coalesce((SELECT message_count FROM sessions WHERE id = %(sid)s), 0) AS n), "
    f"ins AS ({_INSERT_MESSAGE.format(after_upsert='up, ')}) "
    "SELECT ins.id, up.message_count <> seen.n + 1 AS raced FROM ins, up, seen")
#: Sessions whose last message id and context text a store remembers (it forgets them
#: all past this many: a missing hint only costs the server the tokenizing).
CONTEXT_HINTS = 1024
#: plugins.postgres.synchronous_commit: durable at commit, or flushed in the background.
SYNCHRONOUS_COMMIT = ("on", "off")

_SESSION_SELECT = ", ".join(f"s.{c}" for c in hermes.SESSION_FIELDS)
_MESSAGE_COLUMNS = ", ".join(hermes.MESSAGE_FIELDS)
_SESSION_JOIN = ("JOIN sessions s ON s.hermes_user = m.hermes_user AND s.hermes_profile = m.hermes_profile "
                 "AND s.id = m.session_id")


# Row helpers shared with every store (hermes.session_rows); the private names keep the
# call sites short.
MAX_TITLE_LENGTH = hermes.MAX_TITLE_LENGTH
sanitize_title = hermes.sanitize_title
new_session_id = hermes.new_session_id
_encode_json = hermes.encode_json
_decode_json = hermes.decode_json
_content_text = hermes.stored_content


def _text(value: Any) -> str | None:
    """A string PostgreSQL stores (hermes.stored_text): its text cannot hold NUL."""
    return hermes.stored_text(value, keep_nul=False)


def left_text(content: str | None) -> str | None:
    """What the next message's context reads of a user or assistant message's content
    (its first PREV_CHARS characters, as SQL's ``left`` cuts them)."""
    return None if content is None else content[:PREV_CHARS]


def _tool_text(tool_calls: Any) -> str | None:
    """The searchable text of tool calls: each call's function name and arguments."""
    calls = _decode_json(tool_calls) if isinstance(tool_calls, str) else tool_calls
    if not isinstance(calls, list):
        return None
    parts = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments")
            parts.append(f"{fn.get('name') or ''} {args if isinstance(args, str) else _encode_json(args) or ''}")
    return " ".join(parts) or None


def mask_dsn(dsn: str) -> str:
    """The DSN fit to print: its password replaced (URL or key=value form)."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        if "password" in params:
            params["password"] = "****"
            if "://" not in dsn:
                return make_conninfo(**params)
    except Exception:  # not parseable: the generic redaction still applies
        pass
    return str(hermes.redact_secrets(re.sub(r"(://[^:/@]+:)[^@]*@", r"\1****@", dsn)))


def explain_connect_error(dsn: str, exc: BaseException) -> str:
    """One line naming what is wrong with the server or the DSN and what to do."""
    text = " ".join(str(exc).split())
    where = mask_dsn(dsn)
    if "password authentication failed" in text or "authentication failed" in text:
        fix = "the user or password is wrong: fix plugins.postgres.dsn (or the variable it reads)"
    elif "does not exist" in text and "database" in text:
        fix = "the database does not exist: CREATE DATABASE it (see the hermes-postgres README)"
    elif "role" in text and "does not exist" in text:
        fix = "that role does not exist: CREATE ROLE it (see the hermes-postgres README)"
    elif "No such file" in text or "Connection refused" in text or "could not connect" in text \
            or "timeout" in text.lower() or "could not translate host" in text:
        fix = "the server is not reachable: start PostgreSQL or correct host/port in plugins.postgres.dsn"
    elif 'missing "="' in text or "invalid" in text or "URI" in text:
        fix = "plugins.postgres.dsn is not a valid DSN (postgresql://user@host/db or 'host=… dbname=…')"
    else:
        fix = "check the server and plugins.postgres.dsn"
    return f"cannot connect to PostgreSQL at {where}: {hermes.redact_secrets(text)} — {fix}"


class PostgresSessionStore(hermes.SessionStore):
    """The ``postgres`` session store.

    ``PostgresSessionStore(dsn, *, user, profile="default", schema="hermes", pool_min=1,
    pool_max=8, write_timeout=20.0, connect_timeout=10.0, synchronous_commit="on")``.
    ``user`` and ``profile`` say whose history this store is: the database's row-level
    security shows it nothing else. The schema is created or migrated on first use.

    ``synchronous_commit`` is PostgreSQL's setting for this store's connections: ``"on"``
    (a write returns once the server has flushed it to disk, like SQLite's
    ``synchronous=full``) or ``"off"`` (the server flushes in the background: a server
    crash or power loss can lose the last commits, about 0.6 s at default settings, but
    never corrupts or half-applies one; the class of SQLite's default ``normal``).
    """

    name = "postgres"

    def __init__(self, dsn: str, *, user: str, profile: str = "default", schema: str = "hermes",
                 pool_min: int = 1, pool_max: int = 8, write_timeout: float = 20.0,
                 connect_timeout: float = 10.0, synchronous_commit: str = "on"):
        if not dsn:
            raise hermes.StoreError("plugins.postgres.dsn is not set: give the server's DSN "
                                    "(postgresql://user@host/db, or {$env: HERMES_PG_DSN})")
        if not schema_ok(schema):
            raise hermes.StoreError(f"plugins.postgres.schema {schema!r} is not a plain lower-case SQL name")
        if not user:
            raise hermes.StoreError("the postgres store needs a user (plugins.postgres.user)")
        if synchronous_commit not in SYNCHRONOUS_COMMIT:
            raise hermes.StoreError(f"plugins.postgres.synchronous_commit {synchronous_commit!r} is not one of "
                                    f"{', '.join(SYNCHRONOUS_COMMIT)}")
        self.synchronous_commit = synchronous_commit
        self.dsn, self.user, self.profile, self.schema = dsn, str(user), str(profile), schema
        self.write_timeout = float(write_timeout)
        self._local = threading.local()
        #: session id -> (id, context text) of the last message this store wrote there
        #: (see _INSERT_MESSAGE); a wrong or stale hint is harmless: the server checks it.
        self._hints: dict[str, tuple[int, str | None]] = {}
        self._closed = False
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        with self._probe(connect_timeout) as conn:
            try:
                if pgschema.current_version(conn, self.schema) != pgschema.SCHEMA_VERSION:
                    before, after = pgschema.migrate(conn, self.schema)
                    if before != after:
                        log.info("postgres schema %s: version %s -> %s", self.schema, before, after)
                self._search_path = pgschema.search_path(conn, self.schema)
                #: The database's name (named by the writer lock's refusal).
                self.database: str = conn.execute("SELECT current_database() AS db").fetchone()["db"]
            except RuntimeError as exc:
                raise hermes.StoreError(str(exc)) from exc
            except Exception as exc:
                raise hermes.StoreError(
                    f"cannot prepare the hermes schema in {mask_dsn(dsn)}: {' '.join(str(exc).split())} — "
                    "the role needs CREATE on the database (or run the README's setup SQL as an "
                    "administrator)") from exc
        self._pool = ConnectionPool(
            dsn, min_size=max(0, int(pool_min)), max_size=max(1, int(pool_max)), open=False,
            kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": int(max(1, connect_timeout))},
            configure=self._configure, timeout=max(self.write_timeout, 5.0), name=f"hermes-{self.user}")
        self._pool.open()

    def _probe(self, timeout: float) -> Any:
        """Connect once up front (the connection then runs the migrations), so that a
        wrong DSN or a down server is one clear :class:`hermes.StoreError` instead of a
        pool retrying in the background."""
        import psycopg
        from psycopg.rows import dict_row

        try:
            return psycopg.connect(self.dsn, connect_timeout=int(max(1, timeout)), autocommit=True,
                                   row_factory=dict_row)
        except (psycopg.Error, ValueError) as exc:
            raise hermes.StoreError(explain_connect_error(self.dsn, exc)) from exc

    def _configure(self, conn: Any) -> None:
        # effective_io_concurrency: a search's bitmap scan reads its candidates' rows,
        # random pages; asking for the next ones ahead (the server's default asks for one)
        # read 870 uncached pages in 17 ms instead of 28 (1M-message bench).
        conn.execute("SELECT set_config('app.hermes_user', %s, false), set_config('app.hermes_profile', %s, false), "
                     "set_config('search_path', %s, false), set_config('synchronous_commit', %s, false), "
                     "set_config('effective_io_concurrency', %s, false)",
                     (self.user, self.profile, self._search_path, self.synchronous_commit, str(IO_CONCURRENCY)))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()

    def __repr__(self) -> str:
        return f"<PostgresSessionStore {mask_dsn(self.dsn)!r} user={self.user!r}>"

    # -- transactions ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        if self._closed:
            raise hermes.StoreError("the postgres session store is closed")
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            yield batch
            return
        import psycopg_pool

        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise hermes.StoreError(f"no connection to PostgreSQL at {mask_dsn(self.dsn)} within "
                                    f"{self._pool.timeout:g}s (server down, or every pooled connection busy): "
                                    "check the server, or raise plugins.postgres.pool_max") from exc

    def _read(self, fn: Callable[[Any], T]) -> T:
        import psycopg

        try:
            with self._conn() as conn:
                return fn(conn)
        except psycopg.OperationalError as exc:
            raise hermes.StoreError(explain_connect_error(self.dsn, exc)) from exc

    def _write(self, fn: Callable[[Any], T], *, single: bool = False) -> T:
        """Run ``fn(conn)`` in one transaction (a savepoint inside :meth:`batch`),
        retrying deadlocks and serialization failures until ``write_timeout``.

        ``single=True``: ``fn`` writes with ONE statement, which on the pooled
        (autocommit) connections is a transaction of its own: no BEGIN and COMMIT round
        trips. (Anything ``fn`` runs after it is a transaction of its own too.)"""
        import psycopg
        from psycopg import errors

        started = time.monotonic()
        while True:
            try:
                with self._conn() as conn:
                    if single and getattr(self._local, "batch", None) is None:
                        return fn(conn)
                    with conn.transaction():
                        return fn(conn)
            except (errors.DeadlockDetected, errors.SerializationFailure, errors.LockNotAvailable) as exc:
                if getattr(self._local, "batch", None) is not None:
                    raise  # the batch's transaction is aborted: the batch fails as a whole
                waited = time.monotonic() - started
                if waited >= self.write_timeout:
                    raise hermes.StoreError(f"PostgreSQL kept refusing the write for {waited:.1f}s ({exc}); "
                                            "nothing was written. Try again, or raise "
                                            "plugins.postgres.write_timeout.") from exc
                time.sleep(random.uniform(0.002, 0.05))
            except errors.UniqueViolation:
                raise
            except psycopg.OperationalError as exc:
                raise hermes.StoreError(explain_connect_error(self.dsn, exc)) from exc

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """This thread's writes in one transaction on one connection (imports); reads in
        the block see them. Nested batches join the outer one."""
        if getattr(self._local, "batch", None) is not None:
            yield
            return
        with self._conn() as conn, conn.transaction():
            self._local.batch = conn
            try:
                yield
            finally:
                self._local.batch = None

    # -- sessions ------------------------------------------------------------------------

    def create_session(self, session_id: str | None = None, *, source: str = "cli", model: str | None = None,
                       model_config: dict | None = None, system_prompt: str | None = None,
                       user_id: str | None = None, parent_session_id: str | None = None,
                       cwd: str | None = None, started_at: float | None = None) -> str:
        now = time.time() if started_at is None else float(started_at)
        generated = session_id is None

        def insert(conn: Any) -> str:
            parent = parent_session_id
            if parent is not None and conn.execute("SELECT 1 FROM sessions WHERE id = %s",
                                                   (parent,)).fetchone() is None:
                parent = None
            for _ in range(20):
                sid = new_session_id(now) if generated else _text(session_id) or ""
                cur = conn.execute(
                    "INSERT INTO sessions (id, source, user_id, model, model_config, system_prompt, "
                    "parent_session_id, started_at, cwd) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    (sid, _text(source) or "unknown", _text(user_id), _text(model),
                     _text(_encode_json(model_config)), _text(system_prompt), parent, now, _text(cwd)))
                if cur.rowcount or not generated:
                    return sid
            raise hermes.StoreError("could not generate a unique session id")

        return self._write(insert)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        return hermes.session_row(self._read(lambda c: c.execute(
            f"SELECT {_SESSION_SELECT} FROM sessions s WHERE s.id = %s", (session_id,)).fetchone()))

    def update_system_prompt(self, session_id: str, system_prompt: str) -> None:
        self._write(lambda c: c.execute("UPDATE sessions SET system_prompt = %s WHERE id = %s",
                                        (_text(system_prompt), session_id)))

    def end_session(self, session_id: str, end_reason: str, *, ended_at: float | None = None) -> None:
        when = time.time() if ended_at is None else float(ended_at)
        self._write(lambda c: c.execute(
            "UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s AND ended_at IS NULL",
            (when, _text(end_reason), session_id)))

    def reopen_session(self, session_id: str) -> None:
        self._write(lambda c: c.execute(
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", (session_id,)))

    def split_session(self, parent_id: str, messages: list[hermes.Message], *, end_reason: str = "compression",
                      source: str = "cli", model: str | None = None, model_config: dict | None = None,
                      title: str | None = None, cwd: str | None = None) -> str:
        """End the parent, create the titled child and store its messages in ONE
        transaction (fault point ``compaction-split`` before the commit)."""
        now = time.time()
        try:
            clean = sanitize_title(title)
        except ValueError:
            clean = None
        batch = list(messages)

        def split(conn: Any) -> str:
            conn.execute("UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s AND ended_at IS NULL",
                         (now, _text(end_reason), parent_id))
            known = conn.execute("SELECT 1 FROM sessions WHERE id = %s", (parent_id,)).fetchone()
            for _ in range(20):
                child = new_session_id(now)
                if conn.execute(
                        "INSERT INTO sessions (id, source, model, model_config, parent_session_id, started_at, cwd) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                        (child, _text(source) or "unknown", _text(model), _text(_encode_json(model_config)),
                         parent_id if known else None, now, _text(cwd))).rowcount:
                    break
            else:
                raise hermes.StoreError("could not generate a unique session id")
            if clean:
                conn.execute("UPDATE sessions SET title = %s WHERE id = %s AND NOT EXISTS "
                             "(SELECT 1 FROM sessions WHERE title = %s)", (clean, child, clean))
            self._insert_messages(conn, child, batch)
            hermes.fault_point("compaction-split")
            return child

        return self._write(split)

    def list_sessions(self, *, source: str | None = None, exclude_sources: list[str] | None = None,
                      limit: int = 20, offset: int = 0, roots_only: bool = True) -> list[dict[str, Any]]:
        where, params = [], []
        if roots_only:
            where.append("s.parent_session_id IS NULL")
        if source:
            where.append("s.source = %s")
            params.append(source)
        if exclude_sources:
            where.append("s.source <> ALL(%s)")
            params.append(list(exclude_sources))
        cond = " AND ".join(where) or "true"
        limit, offset = hermes.search_page(limit, offset)
        if roots_only:
            # Seeded from parentless sessions the walk cannot loop (one parent each).
            sql = f"""
                WITH RECURSIVE tree(root, id) AS (
                    SELECT s.id, s.id FROM sessions s WHERE {cond}
                    UNION ALL
                    SELECT tree.root, c.id FROM sessions c JOIN tree ON c.parent_session_id = tree.id
                )
                SELECT tree.root AS root, max(coalesce(d.last_active_at, d.started_at)) AS last_active,
                       count(*) AS lineage_size, sum(d.message_count) AS lineage_messages
                FROM tree JOIN sessions d ON d.id = tree.id
                GROUP BY tree.root ORDER BY last_active DESC, root DESC LIMIT %s OFFSET %s"""
        else:
            sql = f"""
                SELECT s.id AS root, coalesce(s.last_active_at, s.started_at) AS last_active,
                       1 AS lineage_size, s.message_count AS lineage_messages
                FROM sessions s WHERE {cond} ORDER BY last_active DESC, s.id DESC LIMIT %s OFFSET %s"""

        def query(conn: Any) -> list[dict[str, Any]]:
            out = []
            for head in conn.execute(sql, (*params, limit, offset)).fetchall():
                row = hermes.session_row(conn.execute(
                    f"SELECT {_SESSION_SELECT}, (SELECT content FROM messages m WHERE m.session_id = s.id "
                    "AND m.role = 'user' AND m.content IS NOT NULL ORDER BY m.id LIMIT 1) AS first_user "
                    "FROM sessions s WHERE s.id = %s", (head["root"],)).fetchone())
                if row is None:
                    continue
                row.update(preview=hermes.session_preview(row.pop("first_user")), last_active=head["last_active"],
                           lineage_size=int(head["lineage_size"]),
                           lineage_messages=int(head["lineage_messages"] or 0))
                row["tip_id"] = self._tip(conn, row["id"])  # in the same read as the list
                out.append(row)
            return out

        return self._read(query)

    def resolve_session(self, ref: str) -> str | None:
        ref = (ref or "").strip() if isinstance(ref, str) else ""
        if not ref:
            return None
        ref = _text(ref) or ""

        def find(conn: Any) -> str | None:
            if conn.execute("SELECT 1 FROM sessions WHERE id = %s", (ref,)).fetchone():
                return ref
            title = sanitize_title(ref) if len(ref) <= MAX_TITLE_LENGTH else None
            if title:
                base = hermes.title_base(title)
                found = hermes.pick_titled_session(title, ((r["id"], r["title"], r["started_at"]) for r in conn.execute(
                    "SELECT id, title, started_at FROM sessions WHERE title = %s OR left(title, %s) = %s",
                    (title, len(base) + 2, base + " #"))))
                if found is not None:
                    return found
            rows = conn.execute("SELECT id FROM sessions WHERE left(id, %s) = %s LIMIT 2",
                                (len(ref), ref)).fetchall()
            return rows[0]["id"] if len(rows) == 1 else None

        return self._read(find)

    def set_title(self, session_id: str, title: str | None) -> str | None:
        from psycopg import errors

        clean = sanitize_title(title)

        def update(conn: Any) -> str | None:
            if clean is not None:
                other = conn.execute("SELECT id FROM sessions WHERE title = %s AND id <> %s",
                                     (clean, session_id)).fetchone()
                if other is not None:
                    raise ValueError(f"Title {clean!r} is already in use by session {other['id']}.")
            conn.execute("UPDATE sessions SET title = %s WHERE id = %s", (clean, session_id))
            return clean

        try:
            return self._write(update)
        except errors.UniqueViolation as exc:  # a concurrent writer took it first
            raise ValueError(f"Title {clean!r} is already in use.") from exc

    def next_title_in_lineage(self, title: str) -> str:
        clean = sanitize_title(title) or ""
        base = hermes.title_base(clean)
        if not base:
            return clean
        rows = self._read(lambda c: c.execute(
            "SELECT title FROM sessions WHERE title = %s OR left(title, %s) = %s",
            (base, len(base) + 2, base + " #")).fetchall())
        return hermes.next_numbered_title(base, (r["title"] for r in rows))

    def lineage_root(self, session_id: str) -> str:
        def walk(conn: Any) -> str:
            def parent_of(sid: str) -> str | None:
                row = conn.execute("SELECT p.id FROM sessions s JOIN sessions p ON p.id = s.parent_session_id "
                                   "WHERE s.id = %s", (sid,)).fetchone()
                return row["id"] if row else None

            return hermes.follow_parents(session_id, parent_of)

        return self._read(walk)

    def compression_tip(self, session_id: str) -> str:
        return self._read(lambda conn: self._tip(conn, session_id))

    @staticmethod
    def _tip(conn: Any, session_id: str) -> str:
        """compression_tip on ``conn``: list_sessions finds every listed row's tip in its own read."""
        def ending(sid: str) -> tuple[str | None, float | None] | None:
            row = conn.execute("SELECT end_reason, ended_at FROM sessions WHERE id = %s", (sid,)).fetchone()
            return (row["end_reason"], row["ended_at"]) if row else None

        def newest_child_since(sid: str, ended_at: float) -> str | None:
            row = conn.execute("SELECT id FROM sessions WHERE parent_session_id = %s AND started_at >= %s "
                               "ORDER BY started_at DESC, id DESC LIMIT 1", (sid, ended_at)).fetchone()
            return row["id"] if row else None

        # A compaction split and /undo both continue in the newest later child.
        return hermes.follow_continuations(session_id, ending, newest_child_since)

    def children(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._read(lambda c: c.execute(
            f"SELECT {_SESSION_SELECT} FROM sessions s WHERE s.parent_session_id = %s "
            "ORDER BY s.started_at, s.id", (session_id,)).fetchall())
        return [r for r in (hermes.session_row(row) for row in rows) if r is not None]

    def update_token_counts(self, session_id: str, *, input_tokens: int = 0, output_tokens: int = 0,
                            cache_read_tokens: int = 0, cache_write_tokens: int = 0, reasoning_tokens: int = 0,
                            estimated_cost_usd: float | None = None, model: str | None = None,
                            absolute: bool = False) -> None:
        counts = (int(input_tokens or 0), int(output_tokens or 0), int(cache_read_tokens or 0),
                  int(cache_write_tokens or 0), int(reasoning_tokens or 0))
        names = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
        cost_value = None if estimated_cost_usd is None else float(estimated_cost_usd)
        if absolute:
            sets = [f"{n} = %s" for n in names]
            cost = "estimated_cost_usd = coalesce(%s::float8, estimated_cost_usd)"
            cost_params: tuple[Any, ...] = (cost_value,)
        else:
            sets = [f"{n} = {n} + %s" for n in names]
            cost = ("estimated_cost_usd = CASE WHEN %s::float8 IS NULL THEN estimated_cost_usd "
                    "ELSE coalesce(estimated_cost_usd, 0) + %s::float8 END")
            cost_params = (cost_value, cost_value)
        sql = f"UPDATE sessions SET {', '.join(sets)}, {cost}, model = coalesce(model, %s) WHERE id = %s"
        self._write(lambda c: c.execute(sql, (*counts, *cost_params, _text(model), session_id)))

    def delete_session(self, session_id: str) -> bool:
        def delete(conn: Any) -> bool:
            conn.execute("DELETE FROM meta WHERE key = %s", (f"import:{session_id}",))
            return conn.execute("DELETE FROM sessions WHERE id = %s", (session_id,)).rowcount > 0

        return self._write(delete)

    def prune_sessions(self, older_than_days: float = 90, source: str | None = None) -> int:
        cutoff = time.time() - float(older_than_days) * 86400.0
        sql = "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND started_at < %s"
        params: list[Any] = [cutoff]
        if source:
            sql += " AND source = %s"
            params.append(source)
        ids = [r["id"] for r in self._read(lambda c: c.execute(sql, params).fetchall())]
        return sum(1 for sid in ids if self.delete_session(sid))

    # -- messages ------------------------------------------------------------------------

    @staticmethod
    def _message(m: dict[str, Any], now: float) -> dict[str, Any]:
        """One message's columns, every one bindable (bad input cannot fail a write half
        way): text as clean strings, numbers as numbers, anything unusable as ``None``."""
        when, tokens = hermes.message_time(m.get("timestamp"), now), hermes.message_tokens(m.get("token_count"))
        role = _text(str(m.get("role") or "user")) or "user"
        calls = m.get("tool_calls") or None
        content = _text(_content_text(m.get("content")))
        tool_name = _text(m.get("tool_name") or m.get("name"))
        tool_text = _text(_tool_text(calls))
        n_calls = hermes.tool_call_count(role, calls)
        return {
            "role": role, "content": content, "tool_call_id": _text(m.get("tool_call_id")),
            "tool_calls": _text(_encode_json(calls)), "tool_name": tool_name, "tool_text": tool_text,
            "timestamp": when, "token_count": tokens, "finish_reason": _text(m.get("finish_reason")),
            "reasoning": _text(m.get("reasoning")), "n_calls": n_calls,
            "cjk": hermes.has_cjk(content) or hermes.has_cjk(tool_text),
            "own": words(" ".join(x for x in (content, tool_name, tool_text) if x)),
        }

    def _insert_messages(self, conn: Any, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
        """Insert messages into one session (created when missing); returns their ids.
        The session row is updated FIRST: its row lock orders concurrent appends to one
        session, and appends to other sessions never wait. One message is one statement
        (:data:`_APPEND_ONE`); several need the caller's transaction."""
        now = time.time()
        rows = [self._message(m, now) for m in messages]
        if not rows:
            return []
        sid = _text(session_id) or ""
        stamps = [r["timestamp"] for r in rows]
        counts = {"sid": sid, "first": min(stamps), "n": len(rows), "calls": sum(r["n_calls"] for r in rows),
                  "last": max(stamps)}
        # Only the first message can use the hint: the next ones' predecessors are in this write.
        params = [self._message_params(sid, r, self._hints.get(sid) if i == 0 else None) for i, r in enumerate(rows)]
        if len(rows) == 1:
            # One statement: the upsert, then (its output feeding the insert) the message.
            ids = [self._checked_context(conn, conn.execute(_APPEND_ONE, {**counts, **params[0]}).fetchone())]
        else:
            conn.execute(_UPSERT_SESSION, counts)
            ids = []
            with conn.cursor() as cur:
                cur.executemany(_INSERT_MESSAGE.format(after_upsert=""), params, returning=True)
                while True:
                    ids.append(cur.fetchone()["id"])
                    if not cur.nextset():
                        break
        if len(self._hints) >= CONTEXT_HINTS:
            self._hints.clear()
        last = rows[-1]
        self._hints[sid] = (ids[-1], left_text(last["content"]) if last["role"] in ("user", "assistant") else None)
        return ids

    @staticmethod
    def _message_params(sid: str, r: dict[str, Any], hint: tuple[int, str | None] | None) -> dict[str, Any]:
        """One message's parameters for :data:`_INSERT_MESSAGE`; ``hint`` is (id, context
        text) of the message this store wrote last to the session, if any."""
        day = day_words(r["timestamp"])
        return {"sid": sid, "role": r["role"], "content": r["content"], "tool_call_id": r["tool_call_id"],
                "tool_calls": r["tool_calls"], "tool_name": r["tool_name"], "tool_text": r["tool_text"],
                "ts": r["timestamp"], "tokens": r["token_count"], "finish": r["finish_reason"],
                "reasoning": r["reasoning"], "cjk": r["cjk"], "own": r["own"], "day": day,
                # -1 matches no message: without a hint the server tokenizes the context
                "prev_hint": hint[0] if hint else -1,
                "ctx": words(f"{hint[1] or ''} {day}") if hint else None}

    def _checked_context(self, conn: Any, row: dict[str, Any]) -> int:
        """The id of a message :data:`_APPEND_ONE` stored; when another process appended
        to the same session between the statement's start and its row lock (``raced``:
        the statement's snapshot did not hold that message), the context words it read
        are those of the message before, so they are computed again from the committed
        rows (a second, rare round trip; search columns only)."""
        if row["raced"]:
            import psycopg

            try:
                with conn.transaction():  # a failure here must not fail (and retry) the append
                    conn.execute(pgschema.rebuild_sql("x.id = %s"), (row["id"],))
            except psycopg.Error as exc:
                log.warning("message %s: its search context was not recomputed (%s); "
                            "hermes sessions reindex does it", row["id"], exc)
        return int(row["id"])

    def append_message(self, session_id: str, role: str, content: str | None = None, *,
                       tool_name: str | None = None, tool_calls: list[dict] | None = None,
                       tool_call_id: str | None = None, token_count: int | None = None,
                       finish_reason: str | None = None, reasoning: str | None = None,
                       timestamp: float | None = None) -> int:
        message = {"role": role, "content": content, "tool_name": tool_name, "tool_calls": tool_calls,
                   "tool_call_id": tool_call_id, "token_count": token_count, "finish_reason": finish_reason,
                   "reasoning": reasoning, "timestamp": timestamp}
        return self._write(lambda c: self._insert_messages(c, session_id, [message]), single=True)[0]

    #: Messages per transaction in :meth:`append_messages` (bounds a transaction's size).
    BULK_BATCH = 5000

    def append_messages(self, session_id: str, messages: list[hermes.Message]) -> list[int]:
        ids: list[int] = []
        batch = list(messages)
        for start in range(0, len(batch), self.BULK_BATCH):
            chunk = batch[start:start + self.BULK_BATCH]
            ids += self._write(lambda c, chunk=chunk: self._insert_messages(c, session_id, chunk))
        return ids

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._read(lambda c: c.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = %s ORDER BY id", (session_id,)).fetchall())
        return [hermes.message_row(r) for r in rows]

    def iter_session_ids(self) -> Iterable[str]:
        """Every session id, oldest first (for ``export --all``)."""
        rows = self._read(lambda c: c.execute("SELECT id FROM sessions ORDER BY started_at, id").fetchall())
        return [r["id"] for r in rows]

    def count_messages(self) -> int:
        """How many messages this user has (for progress bars)."""
        return int(self._read(lambda c: c.execute("SELECT count(*) AS n FROM messages").fetchone()["n"]))

    # -- search --------------------------------------------------------------------------

    def _search_messages(self, query: Any, *, limit: Any, offset: Any, fallback: bool,
                         **filters: Any) -> list[hermes.SearchHit]:
        """:meth:`hermes.SessionStore.search_messages` without its guard (that catches
        what this raises)."""
        limit, offset = hermes.search_page(limit, offset)
        if not isinstance(query, str) or not query.strip() or limit == 0:
            return []
        query = _text(query) or ""
        stages = [r for s in hermes.plan_search(query, fallback=fallback)
                  if (r := render(s, pgschema.OWN_TEXT)) is not None]
        if not stages:
            return []
        filter_sql, filter_params = _filters(**filters)
        need = offset + limit
        # One session's messages or an end of a time range can leave few of the newest
        # messages to walk through: the planner picks the plan then (see _newest).
        narrow = bool(filters.get("session_id")) or filters.get("until") is not None

        def run(conn: Any) -> list[hermes.SearchHit]:
            hits: list[hermes.SearchHit] = []
            size: float | None = None
            for number, stage in enumerate(stages):
                if (number and len(hits) >= hermes.RELAX_BELOW) or len(hits) >= need:
                    break
                if size is None:
                    size = self._user_messages(conn)
                hits += self._run_stage(conn, stage, filter_sql, filter_params, need - len(hits), size,
                                        [h["id"] for h in hits], narrow=narrow)
            page = hits[offset:need]
            self._decorate(conn, page)
            return page

        return self._read(run)

    @staticmethod
    def _decorate(conn: Any, page: list[hermes.SearchHit]) -> None:
        """Context (one message before and after), position in the session, and the
        called tool of a nameless tool result, for every hit of the page in one query."""
        if not page:
            return
        neighbour = ("(SELECT json_build_object('id', p.id, 'role', p.role, 'content', left(coalesce(p.content, ''), "
                     f"{_CONTEXT_CHARS})) FROM messages p WHERE p.session_id = h.sid AND p.id {{}} h.id "
                     "ORDER BY p.id {} LIMIT 1)")
        rows = conn.execute(
            "SELECT h.id, (SELECT count(*) FROM messages p WHERE p.session_id = h.sid AND p.id <= h.id) AS position, "
            f"{neighbour.format('<', 'DESC')} AS before, {neighbour.format('>', 'ASC')} AS after, "
            "(SELECT tool_call_id FROM messages t WHERE t.id = h.id) AS call_id "
            "FROM unnest(%s::bigint[], %s::text[]) AS h(id, sid)",
            ([h["id"] for h in page], [h["session_id"] for h in page])).fetchall()
        extra = {r["id"]: r for r in rows}
        for hit in page:
            r = extra[hit["id"]]
            hit["context"] = [c for c in (r["before"], r["after"]) if c]
            hit["position"] = int(r["position"])
            if hit["role"] == "tool" and not hit.get("tool_name") and r["call_id"]:
                hit["tool_name"] = PostgresSessionStore._called_tool(conn, hit, r["call_id"])

    @staticmethod
    def _called_tool(conn: Any, hit: hermes.SearchHit, call_id: str) -> str | None:
        """The tool a nameless result answers: the name in the earlier assistant call
        with its ``tool_call_id`` (OpenAI-format imports carry only the id), however far
        back. The walk goes backwards along the session's index (``messages_session``)
        and the server returns only calls whose text holds the id as the store's encoder
        (:func:`hermes.encode_json`) writes it, quoted and escaped, so ``c3`` does not match
        ``c30`` and an id with quotes or backslashes is still found; the JSON is read here,
        where text that is not JSON cannot fail the search."""
        needle = json.dumps(call_id, ensure_ascii=False)
        for row in conn.execute(
                "SELECT tool_calls FROM messages WHERE session_id = %s AND id < %s AND role = 'assistant' "
                "AND strpos(tool_calls, %s) > 0 ORDER BY id DESC", (hit["session_id"], hit["id"], needle)):
            calls = _decode_json(row["tool_calls"])
            for call in calls if isinstance(calls, list) else []:
                if isinstance(call, dict) and call.get("id") == call_id:
                    fn = call.get("function")
                    return fn.get("name") if isinstance(fn, dict) else None
        return None

    def _drop_common_terms(self, conn: Any, stage: Rendered, total: float) -> Rendered:
        """Count each relaxed term's matches (up to a cap; estimated by the planner when
        many, see ESTIMATES_FROM) to weigh the terms by rarity (BM25's inverse document frequency, which ts_rank lacks) and, while a
        rarer term is left, drop the terms in a large share of all messages: they add
        little but would make the query rank mostly unrelated messages (the SQLite
        store's rule)."""
        planned = stage.stage
        if planned is None or planned.kind != "any" or not planned.terms:
            return stage
        cap = max(COMMON_MIN, int(total * COMMON_SHARE))
        single = [relaxed_query(dataclasses.replace(planned, negatives=[]), [t]) for t in planned.terms]
        row = conn.execute("SELECT " + ", ".join(f"to_tsquery('hermes_words', %s)::text AS q{i}"
                                                 for i in range(len(single))), single).fetchone()
        queries = [row[f"q{i}"] for i in range(len(single))]
        if total >= ESTIMATES_FROM:
            counts = self._index_counts(conn, queries, cap)
        else:  # matches up to cap, counted (exact for this user)
            counts = [self._count(conn, query, cap) for query in queries]
        keep = list(range(len(single)))
        rare = [i for i, n in enumerate(counts) if 0 < n < cap]
        if rare and len(rare) != len([n for n in counts if n]):
            keep = rare
        total = max(total, float(max(counts)), 1.0)
        used = [i for i in keep if counts[i] and single[i] is not None]
        weighted = [(str(single[i]), math.log(1.0 + (total - counts[i] + 0.5) / (counts[i] + 0.5))) for i in used]
        query = relaxed_query(planned, [planned.terms[i] for i in keep]) if keep != list(range(len(single))) \
            else stage.tsquery
        return dataclasses.replace(stage, tsquery=query, weighted=weighted,
                                   counts=[(planned.terms[i], counts[i]) for i in used])

    @staticmethod
    def _plan_each(conn: Any, queries: list[str], *, analyze: bool = False) -> list[tuple[float, Any]]:
        """For each tsquery, in one statement: the matches the planner expects among this
        user's messages, and the words index's bitmap scan node of its plan (``None``
        when the planner would not use the index; with ``analyze`` the node holds the
        entries it handed out, the query being run up to its first match)."""
        if not queries:
            return []
        subqueries = ", ".join(f"(SELECT 1 FROM messages m WHERE m.tsv @@ %s::tsquery LIMIT 1) AS t{i}"
                               for i in range(len(queries)))
        options = "ANALYZE, TIMING OFF, FORMAT JSON" if analyze else "FORMAT JSON"
        plan = conn.execute(f"EXPLAIN ({options}) SELECT {subqueries}", queries,
                            prepare=False).fetchone()["QUERY PLAN"][0]["Plan"]
        out = []
        for sub in sorted(plan.get("Plans", []), key=lambda p: int(p["Subplan Name"].split()[1])):
            nodes, scan, index = [sub], None, None
            while nodes:
                node = nodes.pop()
                if scan is None and node["Node Type"] != "Limit":
                    scan = node  # the first node under the LIMIT: its rows as the planner expects them
                if node["Node Type"] == "Bitmap Index Scan" and str(node.get("Index Name", "")).endswith("messages_tsv"):
                    index = node
                nodes += node.get("Plans", [])
            out.append((float(scan["Plan Rows"]) if scan is not None else 0.0, index))
        return out

    @staticmethod
    def _index_counts(conn: Any, queries: list[str], cap: int) -> list[int]:
        """Each tsquery's matches among this user's messages (at most ``cap``), for all of
        them in one statement that reads no message: the words index's entries for it
        (what its bitmap scan hands out; the index holds every user's messages, so
        scaled by this user's share of them as the planner sees it), or the planner's
        estimate when it would not use the index (a common word: its statistics are
        within a few percent there). Counting the matches themselves reads a random
        row each — up to cap of them for a prefix (``'quiva':*``) the planner takes
        for rare — which was most of a question's time on a large table."""
        counts = []
        for query, (expected, index) in zip(queries, PostgresSessionStore._plan_each(conn, queries, analyze=True),
                                            strict=True):
            if index is None and expected < cap / 10:
                # Not through the words index, yet expected rare (a small table, another
                # index preferred): counted, as below ESTIMATES_FROM.
                counts.append(PostgresSessionStore._count(conn, query, cap))
                continue
            found = expected if index is None else \
                float(index["Actual Rows"]) * min(1.0, expected / max(float(index["Plan Rows"]), 1.0))
            # Neither the index nor the statistics know weights: a query of the message's
            # own text (weight A) matches about half the messages its lexemes are in.
            counts.append(min(cap, round(found / (COMMON_ESTIMATE if ":A" in (query or "") else 1))))
        return counts

    @staticmethod
    def _count(conn: Any, query: str, cap: int) -> int:
        """This user's messages matching a tsquery, up to ``cap`` (reads them)."""
        return int(conn.execute("SELECT count(*) AS n FROM (SELECT 1 FROM messages m WHERE m.tsv @@ %s::tsquery "
                                "LIMIT %s) x", (query, cap), prepare=False).fetchone()["n"])

    def _narrow_relaxed(self, stage: Rendered, total: float, count: int,
                        filtered: bool) -> tuple[str | None, float | None]:
        """A relaxed stage's matches as its term counts (:meth:`_drop_common_terms`) tell
        them, and its candidates cut to the messages holding its rarer terms; from
        ESTIMATES_FROM messages on (below, every match is read and ranked, as in the
        SQLite store). Returns (the narrowed tsquery text or ``None``, the expected
        matches or ``None``: ask the planner).

        The counts' sum bounds the matches (and is close to them: different words seldom
        share a message), so the planner is asked only with filters or negative terms,
        which the counts do not include. Ranking reads every candidate's row, a random
        page each (most of a question's time on a large table): when the stage will be
        ranked, the rarest terms are taken first while their matches stay within
        RELAXED_CANDIDATES of the rank cap (at least the rarest), as the bigram stage
        narrows (:meth:`_narrow_grams`). Every term still counts in the score, so a
        message holding a rare term and a common one still ranks first; messages
        holding only the commoner terms are left out. Not narrowed when the rarer
        terms' matches are fewer than RELAXED_MIN times the hits asked for."""
        if total < ESTIMATES_FROM or not stage.counts:
            return None, None
        counts = [n for _, n in stage.counts]
        cap = max(RANK_LIMIT, int(total * RANK_SHARE))
        # Different words seldom share a message: their sum is close to the matches.
        known = None if filtered or stage.stage.negatives else float(sum(counts))
        if known is not None and known >= cap:
            return None, known  # common: the newest are listed (without ranking cap matches first)
        chosen: list[int] = []
        expected = 0
        for i in sorted(range(len(counts)), key=counts.__getitem__):
            if chosen and expected + counts[i] > cap * RELAXED_CANDIDATES:
                break
            chosen.append(i)
            expected += counts[i]
        if len(chosen) == len(counts) or expected < RELAXED_MIN * count:
            return None, known
        return relaxed_query(stage.stage, [stage.counts[i][0] for i in chosen]), known

    def _user_messages(self, conn: Any) -> float:
        """This user and profile's messages as the planner's statistics know them (a count
        would read them all): planning, it evaluates the row-level security condition's
        settings and looks the user and profile up among the columns' most common values.
        A user the statistics do not know yet comes out small: the exact paths are taken."""
        return self._estimate(conn, "true", [])

    def _run_stage(self, conn: Any, stage: Rendered, filter_sql: str, filter_params: list[Any], count: int,
                   total: float, exclude: list[int], *, narrow: bool = False) -> list[hermes.SearchHit]:
        """One stage's hits; ``total``: this user's messages (:meth:`_user_messages`),
        which sets the rank cap and whether the planner's estimates are used; ``narrow``:
        the filters may leave few messages (one session, a range ending in the past)."""
        stage = self._drop_common_terms(conn, stage, total)
        narrowed, known = self._narrow_relaxed(stage, total, count, bool(filter_sql)) \
            if stage.rank == "ts" else (None, None)
        gram_estimate = None
        if stage.rank == "grams" and stage.tsquery is not None:
            stage, gram_estimate = self._narrow_grams(conn, stage, total)
        where, params = [], []
        mode, rank = stage.mode, stage.rank
        tsquery, at = None, 0
        own = pgschema.OWN_TEXT
        if stage.cjk:
            # With a tsquery, coalesce keeps the planner off the CJK messages' index: a
            # bitmap of 5 % of all messages ANDed with the words index's few candidates
            # costs more than it saves (walking the newest CJK messages uses it, _newest).
            where.append("coalesce(m.cjk, false)" if stage.tsquery is not None else "m.cjk")
        if stage.tsquery is not None:
            # The query as a value of type tsquery (normalized by the server first): the
            # planner then sees which lexemes it holds and how common they are, and
            # chooses between the GIN index and walking the newest messages.
            row = conn.execute("SELECT to_tsquery('hermes_words', %s)::text AS q, to_tsquery('hermes_words', %s)::text "
                               "AS n", (stage.tsquery, narrowed or "")).fetchone()
            tsquery, narrowed = row["q"], (row["n"] if narrowed else None)
            where.append("m.tsv @@ %s::tsquery")
            at = len(params)  # where the query is among the parameters (the narrowed one replaces it)
            params.append(tsquery)
        if stage.where:
            where.append(stage.where)
            params += stage.params
        prev_weight = PREV_WEIGHT if rank == "grams" and stage.stage.context else 0.0
        if rank == "grams":
            if stage.tsquery is None:  # only one-character grams: scan the CJK messages for them
                own_or_prev = f"({own} || chr(10) || coalesce(m.prev_cjk, ''))" if prev_weight else own
                where.append("(" + " OR ".join(f"strpos({own_or_prev}, %s) > 0" for _ in stage.grams) + ")")
                params += list(stage.grams)
            for neg in stage.negatives:
                where.append(f"strpos({own}, %s) = 0")
                params.append(neg)
        if filter_sql:
            where.append(filter_sql)
            params += filter_params
        if exclude:
            where.append("m.id <> ALL(%s)")
            params.append(exclude)
        # Ranking reads every match: up to rank_limit matches they are ranked; with more
        # (every term very common) the newest are listed instead and the mode says so, as
        # in the SQLite store. A query the planner expects to match far more than that is
        # common for sure: its newest matches are read straight away. Otherwise the
        # matches are scored as they are read, stopping at rank_limit.
        cond = " AND ".join(where)
        score, score_params, tie = self._score_sql(conn, stage, rank, tsquery, prev_weight)
        newest = count if rank != "grams" else GRAM_RECENT  # the bigram stage ranks its newest candidates
        scored: list[tuple[float, int, int]] = []  # (score, tie-break, id): ascending is best first
        if not rank:
            ids = self._newest(conn, cond, params, stage.cjk, count, walk=not narrow)
            scored = [(0.0, 0, i) for i in ids]
        else:
            cap = max(RANK_LIMIT, int(total * RANK_SHARE))
            if gram_estimate is not None:
                estimate = gram_estimate
            elif known is not None:
                estimate = known  # the relaxed terms' counts bound the matches
            elif total < ESTIMATES_FROM:
                estimate = 0.0  # reading up to cap matches is cheap enough: no estimate needed
            elif stage.cjk and stage.tsquery is not None and not narrow:
                # Bigrams are found in CJK messages only (the planner would take the two
                # conditions as independent), and the bigrams of one word come together
                # (it would multiply their shares): each term is estimated by its rarest
                # bigram, a group by its rarest term, the stage by the sum of its groups.
                estimate = self._cjk_estimate(conn, stage)
            else:
                estimate = self._estimate(conn, cond, params)
            # The statistics know lexemes, not weights: a query of the message's own text
            # (weight A) matches about half the messages its lexemes are in.
            factor = COMMON_ESTIMATE if ":A" in (tsquery or "") and known is None else 1
            common = estimate >= cap * factor
            # The server scores and sorts; only the best `count` come back, with the number
            # of matches read (n).
            def top(condition: str) -> str:
                return (f"SELECT c.*, count(*) OVER () AS n FROM (SELECT m.id, {score} AS score, {tie} AS tie "
                        f"FROM messages m WHERE {condition} LIMIT %s) c ORDER BY score, tie, id DESC LIMIT %s")

            if not common and narrowed is not None:
                # The rarer terms' matches only (see _narrow_relaxed); all of them when
                # those were too few after all (filters, negative terms).
                rows = conn.execute(top(cond), (*score_params, *params[:at], narrowed, *params[at + 1:], cap, count),
                                    prepare=False).fetchall()
                scored = [(float(r["score"]), r["tie"], r["id"]) for r in rows]
            if not common and len(scored) < count:
                rows = conn.execute(top(cond), (*score_params, *params, cap, count), prepare=False).fetchall()
                common = bool(rows) and rows[0]["n"] >= cap
                scored = [(float(r["score"]), r["tie"], r["id"]) for r in rows]
            if common:
                # At least cap matches among the user's messages (or the estimate's share).
                share = max(cap / max(total, 1.0), estimate / factor / max(total, 1.0))
                ids = self._newest(conn, cond, params, stage.cjk, newest, walk=not narrow, share=min(share, 1.0))
                if len(ids) >= count:
                    mode = f"{stage.mode}-recent"
                if rank != "grams" and len(ids) >= count:
                    scored = [(0.0, 0, i) for i in ids]
                else:
                    rows = conn.execute(top("m.id = ANY(%s)"), (*score_params, ids, len(ids), count),
                                        prepare=False).fetchall()
                    scored = [(float(r["score"]), r["tie"], r["id"]) for r in rows]
        if not scored:
            return []
        best = scored[:count]
        # The page's messages by id first, then their sessions (MATERIALIZED: with stale
        # statistics of sessions the planner would loop over every session instead).
        rows = conn.execute(
            "WITH m AS MATERIALIZED (SELECT id, hermes_user, hermes_profile, session_id, role, timestamp, tool_name, "
            "content, tool_text FROM messages WHERE id = ANY(%s)) "
            "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.content, m.tool_text, s.source, s.model, "
            f"s.started_at AS session_started, s.title AS session_title FROM m {_SESSION_JOIN}",
            ([b[2] for b in best],), prepare=False).fetchall()
        by_id = {r["id"]: r for r in rows}
        hits: list[hermes.SearchHit] = []
        exact, prefixes = highlight_terms(stage.stage) if not stage.cjk else ([], [])
        for value, _, message_id in best:
            r = by_id.get(message_id)
            if r is None:  # deleted since
                continue
            text = r["content"] or r["tool_text"] or r["tool_name"] or ""
            if not stage.cjk:
                snippet = word_snippet(text, exact, prefixes)
            else:
                snippet = hermes.substring_snippet(text, stage.highlight)
            hits.append({
                "id": r["id"], "session_id": r["session_id"], "role": r["role"], "snippet": snippet,
                "timestamp": r["timestamp"], "tool_name": r["tool_name"], "source": r["source"],
                "model": r["model"], "session_started": r["session_started"], "session_title": r["session_title"],
                "context": [], "mode": mode, "score": value,
            })
        return hits

    def _score_sql(self, conn: Any, stage: Rendered, rank: str, tsquery: str | None,
                   prev_weight: float) -> tuple[str, list[Any], str]:
        """(score expression, its parameters, tie-break expression) of a stage's ranking;
        lower is better."""
        own = pgschema.OWN_TEXT
        if rank == "ts" and stage.weighted:
            # Each term's rank times its rarity; the context (weight D: the previous
            # message, the date) counts half, like the SQLite store's column weights.
            return ("-(" + " + ".join(f"%s * ts_rank('{{{CONTEXT_WEIGHT}, {CONTEXT_WEIGHT}, {CONTEXT_WEIGHT}, 1.0}}', "
                                      f"m.tsv, (SELECT to_tsquery('hermes_words', %s)), {RANK_NORMALIZATION})"
                                      for _ in stage.weighted) + ")",
                    [v for q, w in stage.weighted for v in (w, q)], "0")
        if rank == "ts":
            return "-ts_rank(m.tsv, %s::tsquery, 1)", [tsquery], "0"
        if rank == "count":
            positives = stage.highlight or [""]
            occurrences = " + ".join(f"(length({own}) - length(replace(lower({own}), lower(%s), ''))) "
                                     "/ greatest(length(%s), 1)" for _ in positives)
            return (f"-({occurrences})::float8 / ln(length({own}) + 2)",
                    [v for t in positives for v in (t, t)], "0")
        if rank == "grams":
            # Distinct bigrams weighted by rarity; one in the previous message counts for
            # less (the question may use the words of the turn before the answer), as in
            # the SQLite store; shorter messages first among equals.
            # (Bigrams are looked up in tsv: cheaper than searching the text for each.)
            weights = self._gram_weights(conn, stage.grams)
            parts, values = [], []
            for gram, weight in zip(stage.grams, weights, strict=True):
                (in_own, own_value), (in_prev, prev_value) = gram_test(gram, "A", own), gram_test(gram, "D", own)
                parts.append(f"({in_own}::int + {prev_weight} * {in_prev}::int) * %s")
                values += [own_value, prev_value, weight]
            return f"-({' + '.join(parts)})", values, f"length({own})"
        return "0.0", [], "0"

    @staticmethod
    def _newest(conn: Any, cond: str, params: list[Any], cjk: bool, n: int, *, walk: bool = True,
                share: float | None = None) -> list[int]:
        """The ids of the newest ``n`` messages meeting ``cond``, walking the id index (the
        CJK messages' index for ``cjk``) backwards in windows of NEWEST_WINDOW rows, each
        next window four times larger. Left to itself, the planner, expecting few matches
        (a prefix, an AND of common words, a CJK phrase), may read every match or every
        CJK message to sort them instead; a window's LIMIT keeps it on the walk.
        ``walk=False`` leaves the plan to the planner (filters such as one session's
        messages have indexes of their own). ``share``: the expected share of messages
        meeting ``cond``; the first window is then sized to hold ``n`` of them twice."""
        if not walk:
            # Newest by time: within a time range the time index leads there directly
            # (ids and times of messages run together).
            return [r["id"] for r in conn.execute(f"SELECT m.id FROM messages m WHERE {cond} "
                                                  "ORDER BY m.timestamp DESC, m.id DESC LIMIT %s", (*params, n),
                                                  prepare=False)]
        found: list[int] = []
        below: int | None = None
        window = NEWEST_WINDOW if not share else int(min(max(NEWEST_WINDOW, 2 * n / share), 1_000_000))
        while len(found) < n:
            inner = "SELECT * FROM messages WHERE " + ("cjk" if cjk else "true") + \
                ("" if below is None else " AND id < %s")
            row = conn.execute(
                f"SELECT array_agg(m.id ORDER BY m.id DESC) FILTER (WHERE {cond}) AS ids, min(m.id) AS low, "
                f"count(*) AS seen FROM ({inner} ORDER BY id DESC LIMIT %s) m",
                (*params, *([] if below is None else [below]), window), prepare=False).fetchone()
            found += (row["ids"] or [])[:n - len(found)]
            if row["seen"] < window:
                break
            below, window = row["low"], window * 4
        return found

    @staticmethod
    def _estimate(conn: Any, cond: str, params: list[Any]) -> float:
        """How many messages the planner expects to meet ``cond`` (from the tsvector's
        statistics; it sees the tsquery's lexemes as it is passed as a value)."""
        row = conn.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM messages m WHERE {cond}", params,
                           prepare=False).fetchone()
        return float(row["QUERY PLAN"][0]["Plan"]["Plan Rows"])

    def _narrow_grams(self, conn: Any, stage: Rendered, total: float) -> tuple[Rendered, float | None]:
        """The bigram stage's candidates narrowed to the messages holding one of its rarer
        bigrams — the rarest first while their expected matches stay under the rank cap
        (a message with only common bigrams would rank low anyway; the SQLite store
        narrows the same way) — and the matches expected. Every bigram still counts in
        the score. When even the rarest bigram is common: the stage unchanged and an
        infinite estimate (its newest candidates are ranked). From ESTIMATES_FROM
        messages on; below, ``(stage, None)``."""
        indexed = [g for g in stage.grams if len(g) >= 2]
        if total < ESTIMATES_FROM or not indexed:
            return stage, None
        cap = max(RANK_LIMIT, int(total * RANK_SHARE))
        share = self._gram_estimates(conn, indexed)
        chosen: list[str] = []
        expected = 0.0
        for gram in sorted(indexed, key=lambda g: share[g]):
            if expected + share[gram] > cap:
                break
            chosen.append(gram)
            expected += share[gram]
        if not chosen:
            return stage, math.inf
        return dataclasses.replace(stage, tsquery=grams_query(chosen, stage.stage.context)), expected

    def _gram_estimates(self, conn: Any, grams: list[str]) -> dict[str, float]:
        """Each CJK bigram's expected number of messages (the planner's statistics)."""
        values = conn.execute("SELECT " + ", ".join(f"to_tsquery('hermes_words', %s)::text AS q{i}"
                                                    for i in range(len(grams))), grams).fetchone()
        planned = self._plan_each(conn, [values[f"q{i}"] for i in range(len(grams))])  # one statement for all
        return {g: expected for g, (expected, _) in zip(grams, planned, strict=True)}

    def _cjk_estimate(self, conn: Any, stage: Rendered) -> float:
        """Messages a CJK stage is expected to match (see :meth:`_run_stage`)."""
        planned = stage.stage
        grams = sorted({g for group in planned.groups for t in group if not t.negated
                        for run in cjk_runs(t.text) if len(run) >= 2 for g in cjk_grams(run)})
        if not grams:
            return 0.0
        share = self._gram_estimates(conn, grams)
        total = 0.0
        for group in planned.groups:
            found = [min(share[g] for run in cjk_runs(t.text) if len(run) >= 2 for g in cjk_grams(run))
                     for t in group if not t.negated and any(len(run) >= 2 for run in cjk_runs(t.text))]
            total += min(found) if found else 0.0
        return total

    @staticmethod
    def _gram_weights(conn: Any, grams: list[str]) -> list[float]:
        """Each bigram's inverse document frequency among the newest GRAM_SAMPLE CJK
        messages (one short scan of the CJK index)."""
        tests = [gram_test(g, "A", pgschema.OWN_TEXT) for g in grams]
        counts = ", ".join(f"count(*) FILTER (WHERE {sql}) AS g{i}" for i, (sql, _) in enumerate(tests))
        row = conn.execute(f"SELECT count(*) AS total, {counts} FROM (SELECT * FROM messages WHERE cjk "
                           "ORDER BY id DESC LIMIT %s) m", (*(v for _, v in tests), GRAM_SAMPLE)).fetchone()
        sample = row["total"]
        return [math.log(1.0 + (sample - row[f"g{i}"] + 0.5) / (row[f"g{i}"] + 0.5)) for i in range(len(grams))]

    #: Messages rebuilt per transaction by :meth:`reindex` (its progress steps; an
    #: interrupted reindex keeps the chunks it committed).
    REINDEX_CHUNK = 20_000

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Compute the search columns (``tsv``, ``cjk``, ``prev_cjk``) of every message
        of this user and profile again from its text, in chunks of REINDEX_CHUNK
        messages each committed on its own — writers are never blocked for long, and an
        interrupted reindex leaves every message searchable (run it again to finish) —
        then rebuild the words index without blocking writers and refresh the planner's
        statistics. ``progress(n)`` after each chunk of ``n`` messages. Returns the
        number of messages."""
        done, after = 0, 0
        update = pgschema.rebuild_sql("x.id > %s AND x.id <= %s")
        while True:
            def chunk(conn: Any, after: int = after) -> tuple[int, int]:
                row = conn.execute("SELECT max(id) AS upto, count(*) AS n FROM (SELECT id FROM messages WHERE id > %s "
                                   "ORDER BY id LIMIT %s) c", (after, self.REINDEX_CHUNK)).fetchone()
                if not row["n"]:
                    return 0, after
                conn.execute(update, (after, row["upto"]))
                return int(row["n"]), int(row["upto"])

            n, after = self._write(chunk)
            if not n:
                break
            done += n
            if progress is not None:
                progress(n)
        self._read(pgschema.rebuild_indexes)
        return done

    def writer_lock(self, session_id: str) -> Any:
        """The one-writer lock of a conversation across machines (an advisory lock; see
        :mod:`hermes_postgres.lock`), which the runtime takes instead of its file lock:
        ``with store.writer_lock(root_id): …``."""
        from .lock import PostgresSessionLock

        return PostgresSessionLock(self, session_id)

    # -- bookkeeping ---------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._read(lambda c: c.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone())
        return row["value"] if row else None

    def set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self._write(lambda c: c.execute("DELETE FROM meta WHERE key = %s", (key,)))
        else:
            self._write(lambda c: c.execute(
                "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (hermes_user, hermes_profile, key) "
                "DO UPDATE SET value = excluded.value", (_text(key), _text(value))))

    def status(self) -> dict[str, Any]:
        """Server version, schema version, role flags, durability settings (the server's
        ``fsync``, this store's ``synchronous_commit``) and this user's row counts (for
        ``hermes doctor``)."""
        def query(conn: Any) -> dict[str, Any]:
            row = conn.execute(
                "SELECT current_setting('server_version') AS server, current_user AS role, "
                "current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit, "
                "r.rolsuper AS superuser, r.rolbypassrls AS bypassrls, "
                "(SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM messages) AS messages "
                "FROM pg_roles r WHERE r.rolname = current_user").fetchone()
            out = dict(row)
            out["schema_version"] = pgschema.current_version(conn, self.schema)
            out["search_indexed"] = pgschema.search_uses_indexes(conn)
            return out

        return self._read(query)


def schema_ok(name: str) -> bool:
    return bool(pgschema.IDENT_RE.match(name or ""))


def _filters(*, source_filter: Any = None, exclude_sources: Any = None, role_filter: Any = None,
             session_id: Any = None, since: Any = None, until: Any = None) -> tuple[str, list[Any]]:
    where: list[str] = []
    params: list[Any] = []

    # Conditions on the message only (sources as a semi-join), so the planner starts
    # from the search index and looks sessions up for the few hits.
    sources, excluded, roles = map(hermes.filter_values, (source_filter, exclude_sources, role_filter))
    for values, cond in ((sources, "f.source = ANY(%s)"), (excluded, "f.source <> ALL(%s)")):
        if values:
            where.append(f"EXISTS (SELECT 1 FROM sessions f WHERE f.id = m.session_id AND {cond})")
            params.append(values)
    if roles:
        where.append("m.role = ANY(%s)")
        params.append(roles)
    if session_id:
        where.append("m.session_id = %s")
        params.append(str(session_id))
    if since is not None:
        where.append("m.timestamp >= %s")
        params.append(float(since))
    if until is not None:
        where.append("m.timestamp <= %s")
        params.append(float(until))
    return " AND ".join(where), params
