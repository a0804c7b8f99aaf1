"""Rebuilding the search columns: the v1 → v2 migration (CJK bigrams in the words index),
``reindex()`` and ``hermes sessions reindex`` on the postgres store (progress, a killed
run, a leftover half-built index), and the one tokenizer written twice (Python for what
the store inserts, SQL for the context and a reindex) agreeing."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from hermes_postgres import schema as pgschema
from hermes_postgres.search import words
from hermes_postgres.store import PostgresSessionStore
from hermes_postgres.testing import make_home, run_hermes
from hypothesis import given, settings
from hypothesis import strategies as st

T0 = 1_700_000_000.0
MESSAGES = [
    ("user", "我们讨论了数据库迁移到Postgres的方案"),
    ("assistant", "迁移已经完成，缓存问题也修复了"),
    ("user", "the staging cluster restarted after the deploy"),
    ("assistant", "东京の天気はどうですか"),
]


def _fill(store: PostgresSessionStore, sid: str = "s1") -> None:
    store.create_session(sid, started_at=T0)
    for i, (role, text) in enumerate(MESSAGES):
        store.append_message(sid, role, text, timestamp=T0 + i)


def _v1_words(text: str) -> str:
    """How version 1 wrote a message's own words: a CJK run as ONE token."""
    cjk = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
    return " ".join(re.findall(r"[^\W_]+", cjk.sub(lambda m: f" {m.group(0)} ", text)))


def _as_version_1(store: PostgresSessionStore) -> None:
    """Rewrite the store's rows as version 1 indexed them (own text only: enough here)."""
    def rewrite(conn) -> None:
        for row in conn.execute("SELECT id, content FROM messages").fetchall():
            conn.execute("UPDATE messages SET tsv = setweight(to_tsvector('hermes_words', %s), 'A') WHERE id = %s",
                         (_v1_words(row["content"]), row["id"]))
    store._write(rewrite)


def _found(store: PostgresSessionStore, query: str) -> list[str]:
    return [h["snippet"] for h in store.search_messages(query)]


def test_migration_from_version_1_indexes_cjk_bigrams(pg_cluster, monkeypatch) -> None:
    schema = f"mig_{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 1)
    old = PostgresSessionStore(pg_cluster.dsn, user="alice", schema=schema, pool_max=1)
    other = PostgresSessionStore(pg_cluster.dsn, user="bob", schema=schema, pool_max=1)
    for store in (old, other):
        _fill(store)
        _as_version_1(store)
    # This code's two-character CJK search reads the bigrams a version-1 index lacks.
    assert _found(old, "迁移") == []
    monkeypatch.setattr(pgschema, "SCHEMA_VERSION", 2)
    old.close()
    other.close()
    new = PostgresSessionStore(pg_cluster.dsn, user="alice", schema=schema, pool_max=1)
    bob = PostgresSessionStore(pg_cluster.dsn, user="bob", schema=schema, pool_max=1)
    try:
        assert len(_found(new, "迁移")) == 2
        assert len(_found(bob, "迁移")) == 2  # every user's rows were rebuilt, not only alice's
        assert len(_found(new, "数据库")) == 1 and len(_found(new, "staging")) == 1
        with psycopg.connect(pg_cluster.dsn) as conn:
            versions = conn.execute(f"SELECT version FROM {schema}.hermes_schema ORDER BY version").fetchall()
            indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,))}
            forced = conn.execute("SELECT relforcerowsecurity FROM pg_class WHERE oid = %s::regclass",
                                  (f"{schema}.messages",)).fetchone()[0]
        assert versions == [(1,), (2,)]
        assert "messages_tsv" in indexes and "messages_cjk_trgm" not in indexes
        assert forced  # row-level security binds the owner again after the rebuild
    finally:
        new.close()
        bob.close()


def test_reindex_rebuilds_what_was_lost(pg_cluster, pg_user) -> None:
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=2)
    try:
        _fill(store)
        store._write(lambda c: c.execute("UPDATE messages SET tsv = NULL, cjk = false, prev_cjk = NULL"))
        assert _found(store, "staging") == [] and _found(store, "迁移") == []
        steps: list[int] = []
        assert store.reindex(progress=steps.append) == len(MESSAGES)
        assert sum(steps) == len(MESSAGES)
        assert len(_found(store, "staging")) == 1 and len(_found(store, "迁移")) == 2
        assert len(_found(store, "东京")) == 1
        # The context came back too: the message after the deploy is found by its words.
        hits = store.search_messages("when did the staging cluster restart after the deploy?")
        assert hits and hits[0]["mode"].startswith(("strict", "relaxed"))
    finally:
        store.close()


def test_reindex_drops_a_half_built_index_left_by_an_interrupted_run(pg_cluster, pg_user) -> None:
    schema = f"hx_{uuid.uuid4().hex[:8]}"
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, schema=schema, pool_max=2)
    try:
        _fill(store)
        # What REINDEX CONCURRENTLY leaves when it is killed is an invalid copy of the
        # index; a unique index built concurrently over duplicates fails the same way.
        with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(f"CREATE UNIQUE INDEX CONCURRENTLY messages_tsv_ccnew ON {schema}.messages (role)")
            invalid = conn.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass AND NOT indisvalid",
                                   (f"{schema}.messages",)).fetchone()[0]
        assert invalid == 1
        assert store.reindex() == len(MESSAGES)
        with psycopg.connect(pg_cluster.dsn) as conn:
            left = conn.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass AND NOT indisvalid",
                                (f"{schema}.messages",)).fetchone()[0]
        assert left == 0
        assert len(_found(store, "迁移")) == 2
    finally:
        store.close()


KILLED_REINDEX = """
import sys, time
from hermes_postgres.store import PostgresSessionStore
store = PostgresSessionStore(sys.argv[1], user=sys.argv[2], pool_max=1)
store.REINDEX_CHUNK = 1
def step(n):
    print("chunk", flush=True)
    time.sleep(0.5)
store.reindex(progress=step)
"""


@pytest.mark.slow
def test_a_killed_reindex_loses_nothing_and_a_second_run_finishes(pg_cluster, pg_user) -> None:
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=2)
    try:
        _fill(store)
        store._write(lambda c: c.execute("UPDATE messages SET tsv = NULL, cjk = false"))
        proc = subprocess.Popen([sys.executable, "-c", KILLED_REINDEX, pg_cluster.dsn, pg_user],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "chunk"  # one chunk committed, the next under way
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        rebuilt = store._read(lambda c: c.execute("SELECT count(*) AS n FROM messages WHERE tsv IS NOT NULL")
                              .fetchone()["n"])
        assert 1 <= rebuilt < len(MESSAGES)  # the committed chunk stays; nothing half-written
        assert len(store.get_messages("s1")) == len(MESSAGES)
        assert store.reindex() == len(MESSAGES)
        assert len(_found(store, "迁移")) == 2 and len(_found(store, "staging")) == 1
    finally:
        store.close()


def test_sessions_reindex_command_on_postgres(pg_cluster, pg_user, tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", pg_user)
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    _fill(store)
    store._write(lambda c: c.execute("UPDATE messages SET tsv = NULL"))
    store.close()
    done = run_hermes(home, pg_cluster.dsn, "sessions", "reindex")
    assert done.returncode == 0, done.stderr
    assert f"reindexed {len(MESSAGES)} message(s)" in done.stdout
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    try:
        assert len(_found(store, "staging")) == 1
    finally:
        store.close()


# The tokenizer: Python (the store's inserts) and SQL (context, migrations, reindex) must
# split every text alike, or a reindex would change what a search finds.
_ALPHABET = st.sampled_from(list("abcXYZ019 _-.,:;!?'\"/\\\n\t") + list("éüñçÅß") + list("数据库迁移到東京のはカナ한국")
                            + ["\u3000", "。", "、", "（", "）"])


@pytest.fixture(scope="module")
def sql_words(pg_cluster):
    store = PostgresSessionStore(pg_cluster.dsn, user="tokenizer", pool_max=1)
    yield lambda text: store._read(lambda c: c.execute("SELECT hermes_words(%s) AS w", (text,)).fetchone()["w"])
    store.close()


@settings(max_examples=150, deadline=None)
@given(text=st.text(_ALPHABET, max_size=40))
def test_python_and_sql_tokenizers_agree(sql_words, text: str) -> None:
    assert words(text) == sql_words(text)


def test_cjk_runs_become_bigrams(sql_words) -> None:
    assert words("数据库迁移到Postgres已经 完成 a") == "数据 据库 库迁 迁移 移到 Postgres 已经 完成 a"
    assert sql_words("数据库迁移到Postgres已经 完成 a") == "数据 据库 库迁 迁移 移到 Postgres 已经 完成 a"
    assert words("桂") == "桂"
