"""The write path: one round trip per append, atomic, and the durability setting
``plugins.postgres.synchronous_commit``."""

from __future__ import annotations

import os
import tempfile

import psycopg
import pytest
from hermes_postgres.schema import rebuild_sql
from hermes_postgres.store import PostgresSessionStore
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import hermes


def _traced(store: PostgresSessionStore, action) -> list[str]:
    """The protocol messages the store's (single) pooled connection exchanged during
    ``action()``, as libpq traces them."""
    with store._pool.connection() as conn:
        pgconn = conn.pgconn
    with tempfile.TemporaryFile("w+") as f:
        pgconn.trace(f.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            action()
        finally:
            pgconn.untrace()
        f.seek(0)
        return [line.split("\t")[2].split()[0] for line in f.read().splitlines() if line.count("\t") >= 2]


def test_an_append_is_one_round_trip(pg_cluster, pg_user) -> None:
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_min=1, pool_max=1)
    try:
        sid = store.create_session("rt")
        for i in range(6):  # past psycopg's prepare threshold: the statements are prepared
            store.append_message(sid, "user", f"warm {i}")
        messages = _traced(store, lambda: store.append_message(sid, "user", "traced"))
        # Everything goes out before the one Sync, and one ReadyForQuery ends it: the
        # session upsert and the insert run as one implicit transaction.
        assert messages.count("Sync") == 1 and messages.count("ReadyForQuery") == 1, messages
        assert messages.index("Sync") < messages.index("ReadyForQuery")
        assert not {"Parse", "Query"} & set(messages), messages  # prepared, no BEGIN/COMMIT
        assert store.get_session(sid)["message_count"] == 7
        assert [m["content"] for m in store.get_messages(sid)][-1] == "traced"
    finally:
        store.close()


def test_a_failed_append_changes_nothing(pg_cluster, pg_user) -> None:
    """The upsert and the insert commit together or not at all: an insert the server
    rejects leaves the session's counters as they were."""
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_min=1, pool_max=1)
    admin = psycopg.connect(pg_cluster.dsn.replace("user=hermes_app", "user=postgres").replace(
        "password=hermes-test-secret", "password=hermes-admin-secret"), autocommit=True)
    try:
        sid = store.create_session("atomic")
        store.append_message(sid, "user", "first")
        # A check the insert of one particular message violates (set up by the admin).
        admin.execute("ALTER TABLE hermes.messages ADD CONSTRAINT no_poison CHECK (content <> 'poison')")
        with pytest.raises(psycopg.errors.CheckViolation):
            store.append_message(sid, "user", "poison")
        row = store.get_session(sid)
        assert row["message_count"] == 1 and [m["content"] for m in store.get_messages(sid)] == ["first"]
        store.append_message(sid, "user", "second")  # the connection is fine afterwards
        assert store.get_session(sid)["message_count"] == 2
    finally:
        admin.execute("ALTER TABLE hermes.messages DROP CONSTRAINT IF EXISTS no_poison")
        admin.close()
        store.close()


@pytest.mark.parametrize("value", ["on", "off"])
def test_synchronous_commit_is_the_connections_setting(pg_cluster, pg_user, value) -> None:
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1, synchronous_commit=value)
    try:
        with store._pool.connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == value
        sid = store.create_session()
        store.append_message(sid, "user", "kept")
        assert store.get_messages(sid)[0]["content"] == "kept"
    finally:
        store.close()


def test_a_bad_synchronous_commit_is_one_clear_error(pg_cluster, pg_user) -> None:
    with pytest.raises(hermes.StoreError, match="plugins.postgres.synchronous_commit 'sometimes'"):
        PostgresSessionStore(pg_cluster.dsn, user=pg_user, synchronous_commit="sometimes")


def test_the_setting_reaches_the_store_from_config(kernel_factory, pg_cluster, pg_user) -> None:
    kernel = kernel_factory(config={"sessions": {"store": "postgres"}, "plugins": {"postgres": {
        "dsn": pg_cluster.dsn, "user": pg_user, "synchronous_commit": "off"}}}, autoload=True)
    assert kernel.session_store.synchronous_commit == "off"
    with pytest.raises(hermes.ConfigError, match="synchronous_commit"):
        kernel_factory(config={"plugins": {"postgres": {"dsn": pg_cluster.dsn, "synchronous_commit": "later"}}},
                       autoload=True).plugin_settings("postgres")
    assert os.environ.get("HERMES_HOME")  # the fixture's home, not the user's


_TEXT = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60),
    st.text(alphabet="ab é漢字かなー한 .,-_/\n\t'\"#*", max_size=40),
    st.builds(lambda w, n: (w + " ") * n, st.sampled_from(["deploy", "数据库", "naïve-x"]), st.integers(150, 400)),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), _TEXT), min_size=1, max_size=6),
       bulk=st.booleans())
# Vowel signs and combining marks are part of their word on the server (hypothesis found
# U+1DE7): "हिंदी" is one word, not "ह द".
@example(messages=[("user", "हिंदी में खोज"), ("assistant", "xᷧy")], bulk=False)
def test_context_words_match_what_the_server_computes(pg_cluster, pg_user, messages, bulk) -> None:
    """The context words an append takes from the client (the previous message is the one
    this store wrote) are exactly those the server computes from the stored rows."""
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_min=1, pool_max=1)
    try:
        sid = store.create_session()
        if bulk:
            store.append_messages(sid, [{"role": r, "content": c} for r, c in messages[:2]])
        for role, content in messages[2 if bulk else 0:]:
            store.append_message(sid, role, content)
        with store._pool.connection() as conn, conn.transaction(force_rollback=True):
            query = "SELECT id, tsv::text AS tsv, prev_cjk FROM messages WHERE session_id = %s ORDER BY id"
            before = conn.execute(query, (sid,)).fetchall()
            conn.execute(rebuild_sql("x.session_id = %s"), (sid,))
            assert conn.execute(query, (sid,)).fetchall() == before
        assert len(before) == len(messages)
    finally:
        store.close()


def test_doctor_says_how_durable_writes_are(kernel_factory, pg_cluster, pg_user) -> None:
    from hermes_postgres.doctor import doctor

    kernel = kernel_factory(config={"sessions": {"store": "postgres"}, "plugins": {"postgres": {
        "dsn": pg_cluster.dsn, "user": pg_user}}}, autoload=True)
    lines, problems = doctor(kernel)
    # The test cluster runs with fsync=off (hermes_postgres.testing): doctor says what that means.
    assert any("fsync=off" in line and "corrupt" in line and "plugins.postgres.synchronous_commit" in line
               for line in lines), lines
    assert problems == []
