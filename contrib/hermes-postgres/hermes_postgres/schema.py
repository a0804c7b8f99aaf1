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
that ``my-app.config.ts`` is the same four words here and in the query. Messages with
CJK text (``cjk``) also enter a pg_trgm index of their own text for substring search,
and keep the previous message's text when it has CJK (``prev_cjk``) for the bigram stage.
"""

from __future__ import annotations

import re
from typing import Any

import hermes

SCHEMA_VERSION = 1
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
MIGRATIONS: dict[int, str] = {1: V1}


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
