"""The layout of ``state.db`` and its forward migrations.

The schema version lives in ``PRAGMA user_version`` (in the file header, so it is read
without touching a table and changes atomically with the DDL of a migration). A database
with tables but version 0 was not written by this store (for example the Hermes agent's
own ``state.db``); it is refused with advice rather than altered.

Full-text search uses two FTS5 tables kept in sync by triggers:

* ``messages_fts`` (unicode61, diacritics folded) indexes every message: its content,
  tool name and the names and arguments of its tool calls. It is an *external content*
  table over the view ``messages_fts_source``, so the text is stored once (in
  ``messages``) and the index adds only its posting lists.
* ``messages_fts_trigram`` (trigram) holds **only messages that contain CJK text**
  (ideographs, kana, Hangul). unicode61 glues a run of such characters into one token, so
  word search cannot find a word inside a sentence; trigrams can. A trigram index costs
  about 6-7x a word index and slows every insert, so Latin-only messages never enter it:
  the insert trigger's ``WHEN`` clause checks for a non-ASCII byte first (cheap) and then
  for a CJK character. The table keeps its own copy of the (few) CJK messages, which lets
  one- and two-character CJK terms, too short for trigrams, be found with a LIKE scan
  over that small table instead of over every message.

* ``messages_fts_split`` (unicode61, like ``messages_fts``) holds **only messages where a
  CJK character touches a Latin letter or digit** ("迁移到Postgres完成", "API키를"): unicode61
  reads such a stretch as one token, so ``messages_fts`` cannot find "Postgres" in it.
  This table keeps its own copy of those texts with a zero-width space put at each such
  boundary, which SQLite cannot do in SQL, so the store fills it from Python
  (:func:`index_split`) after writing the messages; the delete and update triggers remove
  a message's row (an edited message is indexed again by whoever edits it, or by
  ``hermes sessions reindex``). Word searches look in both tables.

Both insert triggers skip rows while ``state_meta`` holds ``fts_deferred``: a bulk write
sets it inside its own ``BEGIN IMMEDIATE`` transaction, inserts the rows, indexes them
with one ``INSERT … SELECT`` per index and clears it before committing. No other
connection can ever see the flag set (it is written and removed in one write
transaction), and indexing a batch in one statement is about three times faster than
row by row (FTS5 flushes its pending terms at every statement boundary).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from .query import CJK_GLOB, GLUED_GLOBS, split_glued

SCHEMA_VERSION = 5


def _tool_args(col: str) -> str:
    """SQL for the searchable text of a ``tool_calls`` JSON column: each call's function
    name and arguments (the ids and JSON keys of the envelope are noise). Malformed JSON
    or non-object items yield nothing instead of failing the write."""
    return (
        f"(CASE WHEN {col} IS NOT NULL AND json_valid({col}) THEN "
        f"(SELECT group_concat(coalesce(json_extract(j.value, '$.function.name'), '') || ' ' || "
        f"coalesce(json_extract(j.value, '$.function.arguments'), ''), ' ') "
        f"FROM json_each({col}) AS j WHERE j.type = 'object') END)"
    )


def _has_cjk(col: str) -> str:
    # length() counts characters and the BLOB cast counts bytes: equal means pure ASCII,
    # which settles nearly every Latin message before the slower GLOB scan.
    return (f"({col} IS NOT NULL AND length(CAST({col} AS BLOB)) > length({col}) "
            f"AND {col} GLOB '{CJK_GLOB}')")


def _glued(col: str) -> str:
    """SQL: whether ``col`` has a CJK character touching a Latin letter or digit (the
    ASCII test first, as in :func:`_has_cjk`)."""
    return (f"({col} IS NOT NULL AND length(CAST({col} AS BLOB)) > length({col}) "
            f"AND ({col} GLOB '{GLUED_GLOBS[0]}' OR {col} GLOB '{GLUED_GLOBS[1]}'))")


_DEFERRED = "(SELECT 1 FROM state_meta WHERE key = 'fts_deferred') IS NULL"
_NEW_CJK = f"({_has_cjk('new.content')} OR {_has_cjk('new.tool_calls')})"

TABLES = """
CREATE TABLE IF NOT EXISTS state_meta (
    key   TEXT PRIMARY KEY,
    value TEXT
);

CREATE TABLE IF NOT EXISTS sessions (
    id                 TEXT PRIMARY KEY,
    source             TEXT NOT NULL DEFAULT 'cli',
    user_id            TEXT,
    model              TEXT,
    model_config       TEXT,
    system_prompt      TEXT,
    parent_session_id  TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    started_at         REAL NOT NULL,
    ended_at           REAL,
    end_reason         TEXT,
    last_active_at     REAL,
    message_count      INTEGER NOT NULL DEFAULT 0,
    tool_call_count    INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL,
    title              TEXT,
    cwd                TEXT
);
CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title)
    WHERE title IS NOT NULL;

CREATE TABLE IF NOT EXISTS messages (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    role          TEXT NOT NULL,
    content       TEXT,
    tool_call_id  TEXT,
    tool_calls    TEXT,
    tool_name     TEXT,
    timestamp     REAL NOT NULL,
    token_count   INTEGER,
    finish_reason TEXT,
    reasoning     TEXT
);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, id);
"""

#: Characters of the previous message indexed with a message (bounds the index cost of
#: long tool output and pasted files; the question's words are near the start anyway).
PREV_CHARS = 1000
_MONTHS = '["January","February","March","April","May","June","July","August","September","October","November","December"]'
_WEEKDAYS = '["Sunday","Monday","Tuesday","Wednesday","Thursday","Friday","Saturday"]'


def _prev_of(role: str, content: str) -> str:
    """The ``prev`` text a message contributes to its successor: user and assistant
    text only (a tool result is output, not what the user was talking about)."""
    return f"(CASE WHEN {role} IN ('user', 'assistant') THEN substr({content}, 1, {PREV_CHARS}) END)"


def _prev(session: str, message_id: str) -> str:
    """SQL for the ``prev`` column of message ``message_id``: its predecessor's text."""
    return (f"(SELECT {_prev_of('p.role', 'p.content')} FROM messages p WHERE p.session_id = {session} "
            f"AND p.id < {message_id} ORDER BY p.id DESC LIMIT 1)")


def _day(ts: str) -> str:
    """SQL for the ``day`` column: 'Tuesday 5 March 2024' (UTC: the indexed value must
    not change with the process's time zone, or deleting the row would not find it)."""
    return (f"(CASE WHEN typeof({ts}) IN ('integer', 'real') THEN "
            f"json_extract('{_WEEKDAYS}', '$[' || strftime('%w', {ts}, 'unixepoch') || ']') || ' ' || "
            f"CAST(strftime('%d', {ts}, 'unixepoch') AS INTEGER) || ' ' || "
            f"json_extract('{_MONTHS}', '$[' || (CAST(strftime('%m', {ts}, 'unixepoch') AS INTEGER) - 1) || ']') "
            f"|| ' ' || strftime('%Y', {ts}, 'unixepoch') END)")


_WORD_COLS = "content, tool_name, tool_args, prev, day"


def _sentinel(content: str) -> str:
    """The CJK table's copy of a message's text ends with a newline, so every pair of
    characters in it starts a trigram (a two-character term is then found through the
    trigram vocabulary instead of a scan of every CJK message)."""
    return f"(CASE WHEN {content} IS NULL THEN NULL ELSE {content} || char(10) END)"
# A message's row in the words index is (its text, tool name, tool-call arguments, the
# previous message's text, its date). ``prev`` and ``day`` are index-only: snippets come
# from ``content`` alone. The row of the message AFTER a deleted or edited one changes
# too (its ``prev``), so the delete and update triggers re-index that successor: the
# index always holds, for every message, the text of its current predecessor (FTS5's
# integrity check verifies exactly that against the view).
_SUCCESSOR = "(SELECT min(id) FROM messages WHERE session_id = old.session_id AND id > old.id)"
_DELETE_SUCCESSOR = (
    f"INSERT INTO messages_fts(messages_fts, rowid, {_WORD_COLS}) "
    f"SELECT 'delete', s.id, s.content, s.tool_name, s.tool_args, {_prev_of('old.role', 'old.content')}, s.day "
    f"FROM messages_fts_source s WHERE s.id = {_SUCCESSOR};")
_REINDEX_SUCCESSOR = (
    f"INSERT INTO messages_fts(rowid, {_WORD_COLS}) SELECT id, {_WORD_COLS} FROM messages_fts_source "
    f"WHERE id = {_SUCCESSOR};")
_DELETE_OLD = (
    f"INSERT INTO messages_fts(messages_fts, rowid, {_WORD_COLS}) VALUES ('delete', old.id, old.content, "
    f"old.tool_name, {_tool_args('old.tool_calls')}, {_prev('old.session_id', 'old.id')}, {_day('old.timestamp')});")

FTS = f"""
CREATE VIEW IF NOT EXISTS messages_fts_source AS
    SELECT m.id, m.content, m.tool_name, {_tool_args('m.tool_calls')} AS tool_args,
           {_prev('m.session_id', 'm.id')} AS prev, {_day('m.timestamp')} AS day
    FROM messages m;

CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    {_WORD_COLS},
    content = 'messages_fts_source', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2', prefix = '3'
);

CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content, tool_name, tool_args, prev, tokenize = 'trigram'
);

CREATE TRIGGER IF NOT EXISTS messages_fts_ai AFTER INSERT ON messages WHEN {_DEFERRED} BEGIN
    INSERT INTO messages_fts(rowid, {_WORD_COLS})
        VALUES (new.id, new.content, new.tool_name, {_tool_args('new.tool_calls')},
                {_prev('new.session_id', 'new.id')}, {_day('new.timestamp')});
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_ad AFTER DELETE ON messages BEGIN
    {_DELETE_OLD}
    {_DELETE_SUCCESSOR}
    {_REINDEX_SUCCESSOR}
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_au AFTER UPDATE OF content, tool_name, tool_calls, role, timestamp
ON messages BEGIN
    {_DELETE_OLD}
    INSERT INTO messages_fts(rowid, {_WORD_COLS}) SELECT id, {_WORD_COLS} FROM messages_fts_source
        WHERE id = new.id;
    {_DELETE_SUCCESSOR}
    {_REINDEX_SUCCESSOR}
END;

-- Term statistics of both indexes, read by the planner's probes (no data of their own).
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_vocab USING fts5vocab('messages_fts', 'row');
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram_vocab USING fts5vocab('messages_fts_trigram', 'row');

CREATE TRIGGER IF NOT EXISTS messages_trigram_ai AFTER INSERT ON messages
WHEN {_DEFERRED} AND {_NEW_CJK} BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_args, prev)
        VALUES (new.id, {_sentinel('new.content')}, new.tool_name, {_tool_args('new.tool_calls')},
                {_prev('new.session_id', 'new.id')});
END;
CREATE TRIGGER IF NOT EXISTS messages_trigram_ad AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
END;
CREATE TRIGGER IF NOT EXISTS messages_trigram_au AFTER UPDATE OF content, tool_name, tool_calls
ON messages BEGIN
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
    INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_args, prev)
        SELECT new.id, {_sentinel('new.content')}, new.tool_name, {_tool_args('new.tool_calls')},
               {_prev('new.session_id', 'new.id')}
        WHERE {_NEW_CJK};
END;

CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_split USING fts5(
    content, tool_name, tool_args, tokenize = 'unicode61 remove_diacritics 2', prefix = '3'
);
CREATE TRIGGER IF NOT EXISTS messages_split_ad AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts_split WHERE rowid = old.id;
END;
CREATE TRIGGER IF NOT EXISTS messages_split_au AFTER UPDATE OF content, tool_name, tool_calls
ON messages BEGIN
    DELETE FROM messages_fts_split WHERE rowid = old.id;
END;
"""

#: Relevance: a hit in the message text counts twice a hit in a tool name or arguments;
#: the previous message's text and the date count less (they say what the message is
#: about, not what it says).
PREV_WEIGHT = 0.5
DAY_WEIGHT = 0.3
RANK = f"bm25(1.0, 0.5, 0.5, {PREV_WEIGHT}, {DAY_WEIGHT})"
SPLIT_RANK = "bm25(1.0, 0.5, 0.5)"


def index_range_sql(first: int, last: int) -> list[tuple[str, tuple[int, int]]]:
    """Statements that index the messages with ids ``first..last`` (the bulk path)."""
    src_cjk = f"({_has_cjk('s.content')} OR {_has_cjk('m.tool_calls')})"
    return [
        (f"INSERT INTO messages_fts(rowid, {_WORD_COLS}) "
         f"SELECT id, {_WORD_COLS} FROM messages_fts_source "
         "WHERE id BETWEEN ? AND ?", (first, last)),
        ("INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_args, prev) "
         f"SELECT s.id, {_sentinel('s.content')}, s.tool_name, s.tool_args, s.prev FROM messages_fts_source s "
         f"JOIN messages m ON m.id = s.id WHERE s.id BETWEEN ? AND ? AND {src_cjk}",
         (first, last)),
    ]


def split_wanted(m: str) -> str:
    """SQL: whether the message row ``m`` belongs in ``messages_fts_split``."""
    return f"({_glued(f'{m}.content')} OR {_glued(f'{m}.tool_calls')} OR {_glued(f'{m}.tool_name')})"


def index_split(conn: sqlite3.Connection, first: int, last: int) -> int:
    """Put the messages with ids ``first..last`` whose CJK text touches a Latin word into
    ``messages_fts_split`` (their text split at those boundaries; rows already there are
    replaced). Returns how many. Run after every write of messages: a trigger cannot
    split text, SQLite has no function for it."""
    rows = conn.execute(
        f"SELECT m.id, m.content, m.tool_name, {_tool_args('m.tool_calls')} FROM messages m "
        f"WHERE m.id BETWEEN ? AND ? AND {split_wanted('m')}", (first, last)).fetchall()
    if rows:
        conn.executemany("DELETE FROM messages_fts_split WHERE rowid = ?", [(r[0],) for r in rows])
        conn.executemany("INSERT INTO messages_fts_split(rowid, content, tool_name, tool_args) VALUES (?, ?, ?, ?)",
                         [(i, split_glued(c), split_glued(n), split_glued(a)) for i, c, n, a in rows])
    return len(rows)


def index_range(conn: sqlite3.Connection, first: int, last: int) -> None:
    """Index the messages with ids ``first..last`` in every search table (the bulk path)."""
    for sql, params in index_range_sql(first, last):
        conn.execute(sql, params)
    index_split(conn, first, last)


def create(conn: sqlite3.Connection) -> None:
    """Create the current schema in an empty database (inside the caller's transaction)."""
    for statement in _split(TABLES + FTS):
        conn.execute(statement)
    _configure_fts(conn)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


#: FTS5 write settings of every search table. A write batch's postings fit in memory
#: (hashsize; the default 1 MB flushed a 5,000-message batch as several small segments
#: that were then merged again), and segments are merged 16 at a time rather than 4
#: (automerge; crisismerge raised with it), so each posting is rewritten fewer times.
#: CPU time of indexing the 100k benchmark corpus in 5,000-message batches: 2.9 s with
#: the defaults, 2.2 s with hashsize alone, 1.7 s with both; search time unchanged.
FTS_SETTINGS = (("automerge", 16), ("crisismerge", 64), ("hashsize", 8 << 20))


def _configure_fts(conn: sqlite3.Connection) -> None:
    for table in ("messages_fts", "messages_fts_trigram"):
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('rank', ?)", (RANK,))
    conn.execute("INSERT INTO messages_fts_split(messages_fts_split, rank) VALUES ('rank', ?)", (SPLIT_RANK,))
    for table in ("messages_fts", "messages_fts_trigram", "messages_fts_split"):
        for key, value in FTS_SETTINGS:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES (?, ?)", (key, value))


def _split(script: str) -> list[str]:
    """Split a DDL script into statements (``sqlite3.complete_statement`` knows where
    trigger bodies end)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


# --------------------------------------------------------------------------------------
# Migrations: MIGRATIONS[n] takes a database from version n to n + 1, inside one write
# transaction, without losing a row.
# --------------------------------------------------------------------------------------


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _v1_to_v2(conn: sqlite3.Connection) -> None:
    """v1 (the first layout) indexed message content only, had no CJK index, no
    ``state_meta``, no ``cwd`` and no ``last_active_at``. v2 indexes tool names and
    tool-call arguments too and adds the CJK trigram index."""
    for column, decl in (("cwd", "TEXT"), ("last_active_at", "REAL")):
        if column not in _columns(conn, "sessions"):
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {column} {decl}")
    conn.execute(
        "UPDATE sessions SET last_active_at = (SELECT max(timestamp) FROM messages "
        "WHERE messages.session_id = sessions.id) WHERE last_active_at IS NULL"
    )
    for trigger in ("messages_fts_ai", "messages_fts_ad", "messages_fts_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS messages_fts")
    for statement in _split(TABLES + FTS):
        conn.execute(statement)
    _configure_fts(conn)
    last = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
    index_range(conn, 0, last)


def _recreate_fts(conn: sqlite3.Connection) -> None:
    """Drop both full-text indexes, their view and triggers, create the current layout
    and index every message again."""
    for trigger in ("messages_fts_ai", "messages_fts_ad", "messages_fts_au", "messages_trigram_ai",
                    "messages_trigram_ad", "messages_trigram_au", "messages_split_ad", "messages_split_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for table in ("messages_fts_vocab", "messages_fts_trigram_vocab", "messages_fts", "messages_fts_trigram",
                  "messages_fts_split"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute("DROP VIEW IF EXISTS messages_fts_source")
    for statement in _split(TABLES + FTS):
        conn.execute(statement)
    _configure_fts(conn)
    rebuild_index(conn)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    """v3 indexes each message with the previous message's text and its date (two
    index-only columns), adds a 3-character prefix index and keeps the previous
    message's text beside each CJK message: both indexes are built again from the
    messages (nothing else changes)."""
    if "messages_fts_trigram_vocab" not in _tables(conn):  # else v1 → v2 built it already
        _recreate_fts(conn)


def _v3_to_v4(conn: sqlite3.Connection) -> None:
    """v4 ends the CJK table's copy of each text with a newline (every character pair
    then starts a trigram) and adds the vocabulary tables the planner probes."""
    if "messages_fts_trigram_vocab" not in _tables(conn):
        _recreate_fts(conn)


def _v4_to_v5(conn: sqlite3.Connection) -> None:
    """v5 adds ``messages_fts_split`` (the words of messages where CJK text touches a
    Latin word, split apart) and fills it, and sets :data:`FTS_SETTINGS` on every search
    table; the other two indexes keep their rows."""
    if "messages_fts_split" not in _tables(conn):  # else an earlier step built it already
        for statement in _split(TABLES + FTS):
            conn.execute(statement)  # IF NOT EXISTS: only the new table and its triggers
        _configure_fts(conn)
        index_split(conn, 0, conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])


#: Messages indexed per statement by :func:`rebuild_index` (progress granularity).
REINDEX_CHUNK = 20_000


def rebuild_index(conn: sqlite3.Connection, *, progress: Callable[[int], None] | None = None,
                  words_only: bool = False) -> int:
    """Empty the full-text indexes and index every message again (inside the caller's
    transaction); ``progress(n)`` is called after each chunk of ``n`` messages. Returns
    the number of messages."""
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    if not words_only:
        conn.execute("DELETE FROM messages_fts_trigram")
        conn.execute("DELETE FROM messages_fts_split")
    first, last = conn.execute("SELECT coalesce(min(id), 0), coalesce(max(id), 0) FROM messages").fetchone()
    total = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    start = first
    while start and start <= last:
        end = start + REINDEX_CHUNK - 1
        statements = index_range_sql(start, end)
        for sql, params in statements[:1] if words_only else statements:
            conn.execute(sql, params)
        if not words_only:
            index_split(conn, start, end)
        if progress is not None:
            progress(conn.execute("SELECT count(*) FROM messages WHERE id BETWEEN ? AND ?",
                                  (start, end)).fetchone()[0])
        start = end + 1
    return total


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4,
                                                               4: _v4_to_v5}

def migrate(conn: sqlite3.Connection, version: int) -> int:
    """Run every migration from ``version`` up to :data:`SCHEMA_VERSION` (inside the
    caller's transaction); returns the new version."""
    while version < SCHEMA_VERSION:
        MIGRATIONS[version](conn)
        version += 1
        conn.execute(f"PRAGMA user_version = {version}")
    return version
