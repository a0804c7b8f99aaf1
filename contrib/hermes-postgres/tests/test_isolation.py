"""Row-level security: a second user cannot read, search or delete the first user's
messages, through the store or with raw SQL on their own connection."""

from __future__ import annotations

import psycopg
import pytest
from hermes_postgres.store import PostgresSessionStore


@pytest.fixture
def pair(pg_cluster, pg_user):
    alice = PostgresSessionStore(pg_cluster.dsn, user=f"alice-{pg_user}", pool_max=2)
    bob = PostgresSessionStore(pg_cluster.dsn, user=f"bob-{pg_user}", pool_max=2)
    sid = alice.create_session("alice-1", source="telegram", started_at=1_700_000_000)
    alice.set_title(sid, "Zeppelin plans")
    alice.append_message(sid, "user", "secret plans for the zeppelin hangar", timestamp=1_700_000_001)
    alice.append_message(sid, "assistant", "飞艇机库的秘密计划", timestamp=1_700_000_002)
    yield alice, bob, sid
    alice.close()
    bob.close()


def test_store_api_shows_bob_nothing_of_alice(pair) -> None:
    alice, bob, sid = pair
    assert bob.get_session(sid) is None and bob.get_messages(sid) == []
    assert bob.search_messages("zeppelin") == [] and bob.search_messages("秘密计划") == []
    assert bob.search_messages("when were the zeppelin plans made?") == []
    assert bob.list_sessions() == [] and bob.resolve_session("alice") is None
    assert bob.resolve_session("Zeppelin plans") is None
    assert bob.delete_session(sid) is False
    assert bob.prune_sessions(0) == 0
    bob.update_token_counts(sid, input_tokens=999)
    bob.set_meta(f"import:{sid}", "bob")
    # the same id and the same title are free for bob: they are his own
    assert bob.create_session(sid) == sid and bob.set_title(sid, "Zeppelin plans") == "Zeppelin plans"
    assert bob.delete_session(sid) is True
    assert alice.get_session(sid)["input_tokens"] == 0
    assert alice.get_meta(f"import:{sid}") is None
    assert [m["content"] for m in alice.get_messages(sid)] == [
        "secret plans for the zeppelin hangar", "飞艇机库的秘密计划"]
    assert len(alice.search_messages("zeppelin")) == 1


def _raw(dsn: str, user: str | None) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True)
    if user is not None:
        conn.execute("SELECT set_config('app.hermes_user', %s, false), set_config('app.hermes_profile', "
                     "'default', false), set_config('search_path', 'hermes, public', false)", (user,))
    else:
        conn.execute("SET search_path = hermes, public")
    return conn


def test_raw_sql_on_bobs_connection_cannot_touch_alices_rows(pair, pg_cluster) -> None:
    alice, bob, sid = pair
    with _raw(pg_cluster.dsn, bob.user) as conn:
        assert conn.execute("SELECT count(*) FROM messages WHERE session_id = %s", (sid,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM sessions WHERE id = %s", (sid,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM messages WHERE tsv @@ to_tsquery('hermes_words', "
                            "'zeppelin')").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM messages WHERE content LIKE '%%zeppelin%%'").fetchone()[0] == 0
        assert conn.execute("DELETE FROM messages").rowcount == 0
        assert conn.execute("DELETE FROM sessions WHERE id = %s", (sid,)).rowcount == 0
        assert conn.execute("UPDATE messages SET content = 'gone'").rowcount == 0
        # nor can bob write rows in alice's name
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO sessions (hermes_user, hermes_profile, id, started_at) "
                         "VALUES (%s, 'default', 'planted', 0)", (alice.user,))
    assert len(alice.get_messages(sid)) == 2 and alice.get_session(sid)["title"] == "Zeppelin plans"


def test_a_connection_that_names_no_user_sees_nothing(pair, pg_cluster) -> None:
    with _raw(pg_cluster.dsn, None) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
        assert conn.execute("DELETE FROM sessions").rowcount == 0


def test_rls_is_forced_and_the_role_cannot_bypass_it(pg_cluster, pair) -> None:
    with _raw(pg_cluster.dsn, "nobody") as conn:
        rows = conn.execute("SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
                            "WHERE relnamespace = 'hermes'::regnamespace AND relkind = 'r' "
                            "AND relname IN ('sessions', 'messages', 'meta')").fetchall()
        assert sorted(r[0] for r in rows) == ["messages", "meta", "sessions"]
        assert all(r[1] and r[2] for r in rows)
        role = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
        assert role == (False, False)
    status = pair[0].status()
    assert status["superuser"] is False and status["bypassrls"] is False and status["messages"] == 2


def test_search_functions_are_leakproof_after_the_admin_setup(pair) -> None:
    """The administrator's one-time setup (schema.ADMIN_SQL, run by the test cluster as
    the README says) marks the match functions LEAKPROOF, without which PostgreSQL keeps
    every search under row-level security off the GIN indexes (a table scan; measured in
    benchmarks/bench.py). Isolation still holds: the other tests of this file run on it."""
    assert pair[0].status()["search_indexed"] is True
