"""The store's tables in PostgreSQL and their versioned migrations.

Every object lives in one schema (``plugins.postgres.schema``, default ``hermes``). The
version is the single row of ``hermes_schema``; :func:`migrate` brings a database up to
:data:`SCHEMA_VERSION` on first use. Two processes starting at once both call it: a
transaction-scoped advisory lock makes the second wait until the first has committed,
after which it finds the version current and does nothing.

**Isolation.** Every row carries ``hermes_user`` and ``hermes_profile`` (filled from the
connection's settings ``app.hermes_user`` / ``app.hermes_profile`` by default), and
row-level security — ENABLEd and FORCEd, so it binds the tables' owner too — shows a
connection only the rows of its own user and profile, for SELECT, INSERT, UPDATE and
DELETE alike. A connection that set neither sees nothing. Only a superuser or a role
with BYPASSRLS escapes it: the store's role must be neither (``hermes doctor`` says so).

**Search.** ``tsv`` is the words index of a message: its own text (content, tool name,
tool-call names and arguments) with weight A and its context (the previous message's
text, the message's date) with weight D, so the strict stage matches weight A only and
the relaxed stage both. Tokens are split by the store, not by PostgreSQL's parser, so
that ``my-app.config.ts`` is the same four words here and in the query; since v2 a CJK
run is written as its character bigrams, so CJK words go through the same GIN index
(v1 had a pg_trgm index of CJK messages' text instead). Messages with CJK text are
flagged (``cjk``, with an index of their ids) and keep the previous message's text when
it has CJK (``prev_cjk``) for the bigram stage's scores.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import hermes

from .search import PREV_CHARS

log = logging.getLogger("hermes.postgres")

SCHEMA_VERSION = 2
#: The advisory lock key that serializes migrations (any constant unlikely elsewhere).
MIGRATION_LOCK = 0x48_45_52_4D  # "HERM"
IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

#: The expression of a message's own text for substring (CJK) search; the trigram index
#: is built on exactly this expression, so queries must use it verbatim.
OWN_TEXT = ("(coalesce(m.content, '') || chr(10) || coalesce(m.tool_name, '') || chr(10) || "
            "coalesce(m.tool_text, ''))")
_OWN_TEXT_INDEX = OWN_TEXT.replace("m.", "")

_TENANT = ("hermes_user = current_setting('app.hermes_user', true) "
           "AND hermes_profile = current_setting('app.hermes_profile', true)")
_TENANT_COLUMNS = """
    hermes_user    text NOT NULL DEFAULT current_setting('app.hermes_user'),
    hermes_profile text NOT NULL DEFAULT current_setting('app.hermes_profile'),"""


def _rls(table: str) -> str:
    return (f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;\n"
            f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY;\n"
            f"CREATE POLICY {table}_owner ON {table} USING ({_TENANT}) WITH CHECK ({_TENANT});\n")


EXTENSIONS = ("pg_trgm", "unaccent")
#: The CJK ranges of hermes' planner as a regular-expression class.
CJK_CLASS = "[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in hermes.CJK_RANGES) + "]"

V1 = f"""
-- A text as the word tokens the store and its queries use (hermes_postgres.search.words):
-- CJK runs split off, every other non-alphanumeric character a separator.
CREATE FUNCTION hermes_words(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT regexp_replace(regexp_replace(left(t, 200000), '({CJK_CLASS}+)', ' \\1 ', 'g'),
                          '[^[:alnum:]]+', ' ', 'g')
$$;
CREATE FUNCTION hermes_has_cjk(t text) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t ~ '{CJK_CLASS}'
$$;
CREATE TEXT SEARCH CONFIGURATION hermes_words (COPY = pg_catalog.simple);
ALTER TEXT SEARCH CONFIGURATION hermes_words
    ALTER MAPPING FOR asciiword, word, numword, asciihword, hword, numhword,
                      hword_asciipart, hword_part, hword_numpart
    WITH unaccent, simple;

CREATE TABLE sessions ({_TENANT_COLUMNS}
    id                 text NOT NULL,
    source             text NOT NULL DEFAULT 'cli',
    user_id            text,
    model              text,
    model_config       text,
    system_prompt      text,
    parent_session_id  text,
    started_at         double precision NOT NULL,
    ended_at           double precision,
    end_reason         text,
    last_active_at     double precision,
    message_count      integer NOT NULL DEFAULT 0,
    tool_call_count    integer NOT NULL DEFAULT 0,
    input_tokens       bigint NOT NULL DEFAULT 0,
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    reasoning_tokens   bigint NOT NULL DEFAULT 0,
    estimated_cost_usd double precision,
    title              text,
    cwd                text,
    PRIMARY KEY (hermes_user, hermes_profile, id),
    FOREIGN KEY (hermes_user, hermes_profile, parent_session_id)
        REFERENCES sessions (hermes_user, hermes_profile, id) ON DELETE SET NULL (parent_session_id)
);
CREATE INDEX sessions_parent ON sessions (hermes_user, hermes_profile, parent_session_id);
CREATE INDEX sessions_started ON sessions (hermes_user, hermes_profile, started_at);
CREATE UNIQUE INDEX sessions_title ON sessions (hermes_user, hermes_profile, title)
    WHERE title IS NOT NULL;

CREATE TABLE messages (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,{_TENANT_COLUMNS}
    session_id     text NOT NULL,
    role           text NOT NULL,
    content        text,
    tool_call_id   text,
    tool_calls     text,
    tool_name      text,
    tool_text      text,
    timestamp      double precision NOT NULL,
    token_count    integer,
    finish_reason  text,
    reasoning      text,
    cjk            boolean NOT NULL DEFAULT false,
    prev_cjk       text,
    tsv            tsvector,
    FOREIGN KEY (hermes_user, hermes_profile, session_id)
        REFERENCES sessions (hermes_user, hermes_profile, id) ON DELETE CASCADE
);
CREATE INDEX messages_session ON messages (hermes_user, hermes_profile, session_id, id);
CREATE INDEX messages_tsv ON messages USING gin (tsv);
CREATE INDEX messages_cjk ON messages (id) WHERE cjk;
CREATE INDEX messages_cjk_trgm ON messages USING gin ({_OWN_TEXT_INDEX} gin_trgm_ops) WHERE cjk;

CREATE TABLE meta ({_TENANT_COLUMNS}
    key   text NOT NULL,
    value text,
    PRIMARY KEY (hermes_user, hermes_profile, key)
);

{_rls("sessions")}
{_rls("messages")}
{_rls("meta")}
"""

#: A message's context words (weight D): the previous message's text when that is a user
#: or assistant turn (its first PREV_CHARS characters) and the message's date, as
#: :func:`hermes_postgres.search.day_words` writes it. ``x`` is the message.
_PREV_TEXT = (f"(SELECT CASE WHEN q.role IN ('user', 'assistant') THEN left(q.content, {PREV_CHARS}) END "
              "FROM messages q "
              "WHERE q.hermes_user = x.hermes_user AND q.hermes_profile = x.hermes_profile "
              "AND q.session_id = x.session_id AND q.id < x.id ORDER BY q.id DESC LIMIT 1)")
_DAY = ("CASE WHEN x.timestamp BETWEEN -1e11 AND 9e12 THEN "  # to_timestamp's range (Python's is wider)
        "to_char(to_timestamp(x.timestamp) AT TIME ZONE 'UTC', 'FMDay FMDD FMMonth YYYY') ELSE '' END")


def rebuild_sql(where: str) -> str:
    """An UPDATE that computes the search columns (``tsv``, ``cjk``, ``prev_cjk``) of the
    messages ``x`` matching ``where`` again, from their text alone — what the store
    writes on insert, done by the server (for migrations and ``hermes sessions reindex``)."""
    own = "(coalesce(x.content, '') || ' ' || coalesce(x.tool_name, '') || ' ' || coalesce(x.tool_text, ''))"
    return (
        "UPDATE messages m SET cjk = r.cjk, prev_cjk = CASE WHEN r.cjk AND hermes_has_cjk(r.prev) THEN r.prev END, "
        "tsv = setweight(to_tsvector('hermes_words', hermes_words(r.own)), 'A') || "
        "setweight(to_tsvector('hermes_words', hermes_words(coalesce(r.prev, '') || ' ' || r.day)), 'D') "
        f"FROM (SELECT x.id, {own} AS own, {_PREV_TEXT} AS prev, {_DAY} AS day, "
        "coalesce(hermes_has_cjk(x.content) OR hermes_has_cjk(x.tool_text), false) AS cjk "
        f"FROM messages x WHERE {where}) r WHERE m.id = r.id")


#: v2: CJK runs enter the words index as their character bigrams (``hermes_words``), so
#: CJK terms of two or more characters and the bigram stage use the GIN index of ``tsv``
#: like words do; the pg_trgm index (which could not serve two-character words, and
#: ranked every match of a common one) goes. Every message's ``tsv`` is computed again:
#: row-level security is lifted for the owner inside this transaction (ALTER TABLE locks
#: the table until commit) so every user's rows are rebuilt, then FORCEd again.
V2 = f"""
CREATE FUNCTION hermes_cjk_grams(run text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN length(run) < 2 THEN run ELSE
        (SELECT string_agg(substr(run, i, 2), ' ' ORDER BY i) FROM generate_series(1, length(run) - 1) AS i) END
$$;
CREATE FUNCTION hermes_cjk_words(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(CASE WHEN w ~ '^{CJK_CLASS}' THEN hermes_cjk_grams(w) ELSE w END, ' ' ORDER BY n), '')
    FROM regexp_split_to_table(regexp_replace(regexp_replace(left(t, 200000), '({CJK_CLASS}+)', ' \\1 ', 'g'),
                                              '[^[:alnum:]]+', ' ', 'g'), ' ') WITH ORDINALITY AS x(w, n)
    WHERE w <> ''
$$;
-- Text without CJK (nearly all of it) skips the split into rows (5x slower; every insert
-- runs this on the previous message's text).
CREATE OR REPLACE FUNCTION hermes_words(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN left(t, 200000) ~ '{CJK_CLASS}' THEN hermes_cjk_words(t)
                ELSE btrim(regexp_replace(left(t, 200000), '[^[:alnum:]]+', ' ', 'g')) END
$$;
SET LOCAL maintenance_work_mem = '256MB';
DROP INDEX messages_cjk_trgm;
DROP INDEX messages_tsv;
ALTER TABLE messages NO FORCE ROW LEVEL SECURITY;
{rebuild_sql("true")};
ALTER TABLE messages FORCE ROW LEVEL SECURITY;
CREATE INDEX messages_tsv ON messages USING gin (tsv);
-- Searches limited to a time range (the session_search tool's since/until) combine it
-- with the words index instead of reading every match of a common word.
CREATE INDEX messages_time ON messages (hermes_user, hermes_profile, timestamp);
-- The planner's statistics of tsv hold the 10,000 most common lexemes (not 1,000): its
-- estimates of prefix terms and mid-frequency words then decide well between the GIN
-- index and walking the newest messages (hermes_postgres.store: _estimate).
ALTER TABLE messages ALTER COLUMN tsv SET STATISTICS 1000;
ANALYZE messages;
"""

def rebuild_indexes(conn: Any) -> None:
    """Rebuild the words index (``REINDEX … CONCURRENTLY``: writers go on) and refresh the
    planner's statistics, on an autocommit connection. A copy an interrupted run left
    behind (invalid, ``…_ccnew``) is dropped first. Needs the tables' owner; another role
    skips it with a log line (the rows themselves are already rebuilt)."""
    import psycopg

    try:
        for row in conn.execute("SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                                "WHERE i.indrelid = 'messages'::regclass AND NOT i.indisvalid").fetchall():
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {row['name']}")
        conn.execute("REINDEX INDEX CONCURRENTLY messages_tsv")
        conn.execute("ANALYZE messages")
    except psycopg.errors.InsufficientPrivilege as exc:
        log.warning("the search index was not rebuilt (%s): run REINDEX INDEX messages_tsv as the tables' owner",
                    " ".join(str(exc).split()))


#: What an administrator runs once per database (as a superuser) so that searches use
#: the indexes under row-level security: PostgreSQL evaluates a query's own conditions
#: only after the policy's unless their functions are LEAKPROOF, so without this the
#: tsvector match and ILIKE cannot use their indexes and every search scans the table
#: (correct, but slow past ~100k messages). Both functions raise no data-dependent
#: errors and return only a boolean.
LEAKPROOF_FUNCTIONS = ("pg_catalog.ts_match_vq(tsvector, tsquery)", "pg_catalog.texticlike(text, text)")
ADMIN_SQL = "".join(f"ALTER FUNCTION {f} LEAKPROOF;\n" for f in LEAKPROOF_FUNCTIONS)


def search_uses_indexes(conn: Any) -> bool:
    """Whether :data:`ADMIN_SQL` has been run in this database."""
    row = conn.execute("SELECT bool_and(proleakproof) AS ok FROM pg_proc WHERE oid = ANY(%s::regprocedure[])",
                       (list(LEAKPROOF_FUNCTIONS),)).fetchone()
    return bool(row["ok"])


#: version -> the SQL that brings the previous version to it.
MIGRATIONS: dict[int, str] = {1: V1, 2: V2}


def current_version(conn: Any, schema: str) -> int | None:
    """The schema version of ``schema`` (``None``: not created yet)."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL AS present", (f"{schema}.hermes_schema",)).fetchone()
    if not row["present"]:
        return None
    row = conn.execute(f"SELECT max(version) AS v FROM {schema}.hermes_schema").fetchone()
    return int(row["v"] or 0)


def search_path(conn: Any, schema: str) -> str:
    """The search path of the store's connections: its schema, the schemas holding the
    extensions it uses (pg_trgm's operators, unaccent's dictionary), then public."""
    rows = conn.execute("SELECT DISTINCT extnamespace::regnamespace::text AS ns FROM pg_extension "
                        "WHERE extname = ANY(%s)", (list(EXTENSIONS),)).fetchall()
    names = [schema] + [r["ns"] for r in rows if r["ns"] not in (schema, "public")] + ["public"]
    return ", ".join(names)


def migrate(conn: Any, schema: str) -> tuple[int | None, int]:
    """Bring ``schema`` to :data:`SCHEMA_VERSION` in one transaction under the migration
    advisory lock; returns (version before, version after). Raises ``RuntimeError`` for
    a database newer than this code."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {schema}.hermes_schema "
                     "(version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        before = current_version(conn, schema) or 0
        if before > SCHEMA_VERSION:
            raise RuntimeError(f"schema {schema} has version {before}, newer than this hermes-postgres "
                               f"understands ({SCHEMA_VERSION}); upgrade hermes-postgres")
        conn.execute(f"SET LOCAL search_path = {schema}, public")
        for ext in EXTENSIONS:  # where they already are (another schema), or here
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        conn.execute(f"SET LOCAL search_path = {search_path(conn, schema)}")
        for version in range(before + 1, SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[version])
            conn.execute(f"INSERT INTO {schema}.hermes_schema (version) VALUES (%s)", (version,))
        return (before or None), SCHEMA_VERSION
