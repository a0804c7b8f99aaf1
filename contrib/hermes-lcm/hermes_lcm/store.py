"""The append-only SQLite store: every original message and the summary DAG.

Tables:

* ``conversations`` — one row per conversation (the session that started it).
* ``messages`` — every original message, in order (``seq`` counts from 0 without gaps
  inside a conversation), with its full JSON payload and its searchable text.
* ``nodes`` — summaries. Depth 0 is a *leaf* that summarises a span of messages; depth
  ≥ 1 is a *condensed* node that summarises its child nodes (summaries of summaries).
* ``node_sources`` — the lossless pointers: for each node, in order, the message ids
  (leaves) or child node ids (condensed nodes) it covers.

Nothing is ever updated or deleted: triggers make the database refuse it. A node's
parent is the node whose sources name it; a *root* is a node nobody names yet.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes import estimate_tokens

from .transcript import Message, fingerprint, text_of

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    payload TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    session_id TEXT,
    created_at REAL NOT NULL,
    UNIQUE (conversation_id, seq)
);
CREATE TABLE IF NOT EXISTS nodes (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    depth INTEGER NOT NULL,
    content TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    message_count INTEGER NOT NULL,
    source_tokens INTEGER NOT NULL,
    earliest_at REAL,
    latest_at REAL,
    summarizer TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS node_sources (
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    ord INTEGER NOT NULL,
    message_id INTEGER REFERENCES messages(id),
    child_id INTEGER REFERENCES nodes(id),
    PRIMARY KEY (node_id, ord),
    CHECK ((message_id IS NULL) != (child_id IS NULL))
);
CREATE INDEX IF NOT EXISTS nodes_conversation ON nodes(conversation_id, first_seq);
CREATE UNIQUE INDEX IF NOT EXISTS sources_child ON node_sources(child_id) WHERE child_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS sources_message ON node_sources(message_id) WHERE message_id IS NOT NULL;
"""

# Lossless means the database itself refuses to forget.
_APPEND_ONLY = "".join(
    f"""
CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table}
BEGIN SELECT RAISE(ABORT, 'lcm store is append-only: {op} on {table} refused'); END;"""
    for table in ("messages", "nodes", "node_sources")
    for op in ("UPDATE", "DELETE")
)


@dataclass(frozen=True)
class StoredMessage:
    """One original message as stored."""

    id: int
    conversation_id: int
    seq: int
    role: str
    text: str
    payload: str
    tokens: int
    created_at: float

    def message(self) -> Message:
        """The original OpenAI-style dict, exactly as it was received."""
        return json.loads(self.payload)


@dataclass(frozen=True)
class Node:
    """One summary node of the DAG."""

    id: int
    conversation_id: int
    depth: int
    content: str
    tokens: int
    first_seq: int
    last_seq: int
    message_count: int
    source_tokens: int
    earliest_at: float | None
    latest_at: float | None
    summarizer: str
    created_at: float

    @property
    def kind(self) -> str:
        """``leaf`` (summarises messages) or ``condensed`` (summarises nodes)."""
        return "leaf" if self.depth == 0 else "condensed"


_MESSAGE_COLS = "id, conversation_id, seq, role, text, payload, tokens, created_at"
_NODE_COLS = (
    "id, conversation_id, depth, content, tokens, first_seq, last_seq, message_count, "
    "source_tokens, earliest_at, latest_at, summarizer, created_at"
)


class LCMStore:
    """The SQLite database behind one or more engines (WAL; safe across threads and
    processes). Every write runs in one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        with self._lock:
            # executescript manages its own transactions; every statement is idempotent.
            self._conn.executescript(
                _SCHEMA + _APPEND_ONLY
                + f"\nINSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '{SCHEMA_VERSION}');"
            )

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        """Fold the write-ahead log into the database (best effort) and close."""
        with self._lock:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass  # another connection is busy; SQLite checkpoints later on its own
            self._conn.close()

    # -- conversations --------------------------------------------------------------------

    def conversation(self, session_id: str) -> int:
        """The id of the conversation started by ``session_id``, created on first use."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO conversations(session_id, created_at) VALUES (?, ?)",
                (session_id, time.time()),
            )
            return conn.execute("SELECT id FROM conversations WHERE session_id = ?", (session_id,)).fetchone()[0]

    def conversation_of_nodes(self, node_ids: Sequence[int]) -> int | None:
        """The conversation the given nodes belong to (the first one found)."""
        for node_id in node_ids:
            rows = self._query("SELECT conversation_id FROM nodes WHERE id = ?", (node_id,))
            if rows:
                return rows[0][0]
        return None

    def conversations(self) -> list[dict[str, Any]]:
        """Every conversation with its message and node counts."""
        rows = self._query(
            "SELECT c.id, c.session_id, c.created_at, "
            "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id), "
            "(SELECT COUNT(*) FROM nodes n WHERE n.conversation_id = c.id) "
            "FROM conversations c ORDER BY c.id"
        )
        return [
            {"conversation": r[0], "session_id": r[1], "created_at": r[2], "messages": r[3], "nodes": r[4]}
            for r in rows
        ]

    # -- messages -------------------------------------------------------------------------

    def covered_upto(self, conversation_id: int) -> int:
        """The highest ``seq`` covered by a leaf summary (``-1`` when none)."""
        rows = self._query(
            "SELECT COALESCE(MAX(last_seq), -1) FROM nodes WHERE conversation_id = ? AND depth = 0",
            (conversation_id,),
        )
        return rows[0][0]

    def append(self, conversation_id: int, messages: Sequence[Message], session_id: str | None) -> list[int]:
        """Store ``messages`` after the conversation's last one; returns their ``seq``."""
        if not messages:
            return []
        now = time.time()
        seqs: list[int] = []
        with self._write() as conn:
            seq = conn.execute(
                "SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()[0]
            for msg in messages:
                text = text_of(msg)
                ts = msg.get("timestamp")
                created = float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else now
                conn.execute(
                    "INSERT INTO messages(conversation_id, seq, role, text, payload, fingerprint, tokens, "
                    "session_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation_id, seq, str(msg.get("role", "")), text,
                     json.dumps(msg, ensure_ascii=False, default=str), fingerprint(msg),
                     estimate_tokens(text) + 4, session_id, created),
                )
                seqs.append(seq)
                seq += 1
        return seqs

    # -- forgetting (the one exception to append-only, asked for by the user) ------------

    def forget(self, pattern: re.Pattern[str], replacement: str, *, session_ids: Sequence[str] = (),
               before: float | None = None, dry_run: bool = True) -> list[str]:
        """``hermes forget``: replace every match of ``pattern`` in stored messages (text
        and payload, fingerprint recomputed so the host's scrubbed transcript still
        matches) and in summaries. The append-only triggers are dropped and recreated
        inside the same transaction, so no other writer ever sees them missing; then
        ``secure_delete``, ``VACUUM`` and a WAL truncation take the old text out of the
        file. Returns one line per item found (with ``dry_run``, nothing changes)."""
        where, args = "", []
        if session_ids:
            where += f" AND session_id IN ({','.join('?' * len(session_ids))})"
            args += list(session_ids)
        if before is not None:
            where += " AND created_at < ?"
            args.append(before)
        with self._lock:
            rows = [r for r in self._conn.execute(
                f"SELECT id, conversation_id, seq, payload FROM messages WHERE 1{where}", args)
                if pattern.search(r[3])]
            node_where = "" if not session_ids else (
                " AND conversation_id IN (SELECT conversation_id FROM messages WHERE session_id IN "
                f"({','.join('?' * len(session_ids))}))")
            nodes = [r for r in self._conn.execute(
                f"SELECT id, conversation_id, content FROM nodes WHERE 1{node_where}", list(session_ids))
                if pattern.search(r[2])]
        found = [f"lcm message {r[0]} (conversation {r[1]}, seq {r[2]})" for r in rows]
        found += [f"lcm summary node {r[0]} (conversation {r[1]})" for r in nodes]
        if dry_run or not found:
            return found

        def scrub(value: Any) -> Any:
            if isinstance(value, str):
                return pattern.sub(replacement, value)
            if isinstance(value, dict):
                return {k: scrub(v) for k, v in value.items()}
            if isinstance(value, list):
                return [scrub(v) for v in value]
            return value

        with self._write() as conn:
            conn.execute("PRAGMA secure_delete = ON")
            for table in ("messages", "nodes"):
                conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
            for msg_id, _, _, payload in rows:
                msg = scrub(json.loads(payload))
                text = text_of(msg)
                conn.execute("UPDATE messages SET text = ?, payload = ?, fingerprint = ?, tokens = ? WHERE id = ?",
                             (text, json.dumps(msg, ensure_ascii=False, default=str), fingerprint(msg),
                              estimate_tokens(text) + 4, msg_id))
            for node_id, _, content in nodes:
                new = pattern.sub(replacement, content)
                conn.execute("UPDATE nodes SET content = ?, tokens = ? WHERE id = ?",
                             (new, estimate_tokens(new), node_id))
            for statement in _APPEND_ONLY.split("END;"):
                if "_no_update" in statement and ("ON messages" in statement or "ON nodes" in statement):
                    conn.execute(statement + "END;")
        with self._lock:
            self._conn.execute("VACUUM")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return found

    def last_seq(self, conversation_id: int) -> int:
        """The ``seq`` of the conversation's newest message (``-1`` when it has none)."""
        return self._query("SELECT COALESCE(MAX(seq), -1) FROM messages WHERE conversation_id = ?",
                           (conversation_id,))[0][0]

    def recent(self, conversation_id: int, n: int) -> list[tuple[int, str]]:
        """``(seq, fingerprint)`` of the conversation's ``n`` newest messages, oldest first."""
        rows = self._query(
            "SELECT seq, fingerprint FROM messages WHERE conversation_id = ? ORDER BY seq DESC LIMIT ?",
            (conversation_id, n),
        )
        return [(r[0], r[1]) for r in reversed(rows)]

    def messages_in_range(self, conversation_id: int, after_seq: int, before_seq: int) -> list[StoredMessage]:
        """Messages with ``after_seq < seq < before_seq``, oldest first."""
        rows = self._query(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE conversation_id = ? AND seq > ? AND seq < ? ORDER BY seq",
            (conversation_id, after_seq, before_seq),
        )
        return [StoredMessage(*r) for r in rows]

    def message(self, message_id: int) -> StoredMessage | None:
        """One stored message by id."""
        rows = self._query(f"SELECT {_MESSAGE_COLS} FROM messages WHERE id = ?", (message_id,))
        return StoredMessage(*rows[0]) if rows else None

    def message_count(self, conversation_id: int) -> int:
        """How many originals the conversation holds."""
        return self._query("SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (conversation_id,))[0][0]

    # -- nodes ----------------------------------------------------------------------------

    def add_leaf(self, conversation_id: int, span: Sequence[StoredMessage], content: str, summarizer: str) -> Node:
        """A depth-0 node summarising ``span`` (contiguous, oldest first)."""
        return self._add_node(
            conversation_id, 0, content, summarizer,
            first_seq=span[0].seq, last_seq=span[-1].seq, message_count=len(span),
            source_tokens=sum(m.tokens for m in span),
            earliest=min(m.created_at for m in span), latest=max(m.created_at for m in span),
            sources=[(m.id, None) for m in span],
        )

    def add_condensed(self, conversation_id: int, children: Sequence[Node], content: str, summarizer: str) -> Node:
        """A node one level above the deepest of ``children``, summarising them."""
        times = [t for c in children for t in (c.earliest_at, c.latest_at) if t is not None]
        return self._add_node(
            conversation_id, max(c.depth for c in children) + 1, content, summarizer,
            first_seq=children[0].first_seq, last_seq=children[-1].last_seq,
            message_count=sum(c.message_count for c in children),
            source_tokens=sum(c.source_tokens for c in children),
            earliest=min(times) if times else None, latest=max(times) if times else None,
            sources=[(None, c.id) for c in children],
        )

    def _add_node(self, conversation_id: int, depth: int, content: str, summarizer: str, *,
                  first_seq: int, last_seq: int, message_count: int, source_tokens: int,
                  earliest: float | None, latest: float | None,
                  sources: list[tuple[int | None, int | None]]) -> Node:
        now = time.time()
        with self._write() as conn:
            cur = conn.execute(
                f"INSERT INTO nodes({_NODE_COLS.replace('id, ', '', 1)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, depth, content, estimate_tokens(content), first_seq, last_seq,
                 message_count, source_tokens, earliest, latest, summarizer, now),
            )
            node_id = cur.lastrowid
            conn.executemany(
                "INSERT INTO node_sources(node_id, ord, message_id, child_id) VALUES (?, ?, ?, ?)",
                [(node_id, i, mid, cid) for i, (mid, cid) in enumerate(sources)],
            )
        return Node(node_id, conversation_id, depth, content, estimate_tokens(content), first_seq,
                    last_seq, message_count, source_tokens, earliest, latest, summarizer, now)

    def node(self, node_id: int) -> Node | None:
        """One node by id."""
        rows = self._query(f"SELECT {_NODE_COLS} FROM nodes WHERE id = ?", (node_id,))
        return Node(*rows[0]) if rows else None

    def roots(self, conversation_id: int) -> list[Node]:
        """The nodes no other node condenses yet, oldest span first: what the live
        context shows of the summarised past."""
        rows = self._query(
            f"SELECT {_NODE_COLS} FROM nodes n WHERE conversation_id = ? AND NOT EXISTS "
            "(SELECT 1 FROM node_sources s WHERE s.child_id = n.id) ORDER BY first_seq",
            (conversation_id,),
        )
        return [Node(*r) for r in rows]

    def parent(self, node_id: int) -> int | None:
        """The id of the node that condenses ``node_id``, if any."""
        rows = self._query("SELECT node_id FROM node_sources WHERE child_id = ?", (node_id,))
        return rows[0][0] if rows else None

    def children(self, node_id: int) -> list[int]:
        """Child node ids of a condensed node, in order (``[]`` for a leaf)."""
        rows = self._query(
            "SELECT child_id FROM node_sources WHERE node_id = ? AND child_id IS NOT NULL ORDER BY ord", (node_id,)
        )
        return [r[0] for r in rows]

    def leaf_of(self, message_id: int) -> int | None:
        """The leaf that covers a message (``None`` while it is still unsummarised)."""
        rows = self._query("SELECT node_id FROM node_sources WHERE message_id = ?", (message_id,))
        return rows[0][0] if rows else None

    def lineage(self, node_id: int) -> list[int]:
        """``node_id`` and its ancestors, nearest first."""
        out = [node_id]
        while (parent := self.parent(out[-1])) is not None and parent not in out:
            out.append(parent)
        return out

    def node_messages(self, node: Node, offset: int = 0, limit: int = 50) -> list[StoredMessage]:
        """The original messages a node covers (walking down to its leaves), oldest
        first, from ``offset``. A node covers a contiguous ``seq`` range, so this is one
        indexed range query."""
        rows = self._query(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE conversation_id = ? AND seq BETWEEN ? AND ? "
            "ORDER BY seq LIMIT ? OFFSET ?",
            (node.conversation_id, node.first_seq, node.last_seq, limit, offset),
        )
        return [StoredMessage(*r) for r in rows]

    def source_message_ids(self, node_id: int) -> list[int]:
        """Every message id reachable from a node through its pointers, in order — the
        DAG walk itself, used to check that the pointers and the seq ranges agree."""
        rows = self._query(
            "WITH RECURSIVE sub(id) AS (SELECT ? UNION ALL SELECT s.child_id FROM node_sources s "
            "JOIN sub ON s.node_id = sub.id WHERE s.child_id IS NOT NULL) "
            "SELECT m.id FROM sub JOIN node_sources s ON s.node_id = sub.id AND s.message_id IS NOT NULL "
            "JOIN messages m ON m.id = s.message_id ORDER BY m.seq",
            (node_id,),
        )
        return [r[0] for r in rows]

    # -- search ---------------------------------------------------------------------------

    def grep(self, regex: re.Pattern[str], *, conversation_id: int | None, messages: bool, summaries: bool,
             limit: int, offset: int = 0, literal: str | None = None,
             case_sensitive: bool = False) -> tuple[list[StoredMessage], list[Node], bool]:
        """Messages and nodes whose text matches ``regex``, oldest first: at most
        ``limit`` of each, after skipping ``offset``; the flag says whether more exist.

        ``literal`` (a plain substring search) lets SQLite discard most rows before the
        Python regex sees them: ``instr`` when case matters, ``LIKE`` (which folds ASCII
        case) for an ASCII pattern otherwise."""
        match: Callable[[str | None], bool] = lambda text: text is not None and regex.search(text) is not None  # noqa: E731
        where, params = ("conversation_id = ? AND ", [conversation_id]) if conversation_id is not None else ("", [])

        def prefilter(column: str) -> tuple[str, list[Any]]:
            if literal is None:
                return "", []
            if case_sensitive:
                return f"instr({column}, ?) > 0 AND ", [literal]
            if literal.isascii():
                escaped = literal.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                return f"{column} LIKE ? ESCAPE '\\' AND ", [f"%{escaped}%"]
            return "", []

        found_msgs: list[StoredMessage] = []
        found_nodes: list[Node] = []
        more = False
        with self._lock:
            self._conn.create_function("lcm_match", 1, match, deterministic=True)
            if messages:
                pre, pre_params = prefilter("text")
                rows = self._conn.execute(
                    f"SELECT {_MESSAGE_COLS} FROM messages WHERE {where}{pre}lcm_match(text) "
                    "ORDER BY conversation_id, seq LIMIT ? OFFSET ?", (*params, *pre_params, limit + 1, offset),
                ).fetchall()
                more |= len(rows) > limit
                found_msgs = [StoredMessage(*r) for r in rows[:limit]]
            if summaries:
                pre, pre_params = prefilter("content")
                rows = self._conn.execute(
                    f"SELECT {_NODE_COLS} FROM nodes WHERE {where}{pre}lcm_match(content) "
                    "ORDER BY conversation_id, first_seq, depth LIMIT ? OFFSET ?",
                    (*params, *pre_params, limit + 1, offset),
                ).fetchall()
                more |= len(rows) > limit
                found_nodes = [Node(*r) for r in rows[:limit]]
        return found_msgs, found_nodes, more

    # -- figures --------------------------------------------------------------------------

    def stats(self, conversation_id: int | None = None) -> dict[str, Any]:
        """Counts and sizes for ``lcm_describe()`` and ``hermes lcm status``."""
        where, params = ("WHERE conversation_id = ?", (conversation_id,)) if conversation_id is not None else ("", ())
        msgs, raw = self._query(f"SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM messages {where}", params)[0]
        nodes, depth, summary = self._query(
            f"SELECT COUNT(*), COALESCE(MAX(depth), -1), COALESCE(SUM(tokens), 0) FROM nodes {where}", params
        )[0]
        out = {"messages": msgs, "message_tokens": raw, "nodes": nodes, "max_depth": depth,
               "summary_tokens": summary}
        if conversation_id is None:
            for key, suffix in (("db_bytes", ""), ("wal_bytes", "-wal")):
                try:
                    out[key] = Path(f"{self.path}{suffix}").stat().st_size
                except OSError:
                    out[key] = 0
        return out
