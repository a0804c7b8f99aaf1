"""The rank cap and the planner's estimates (hermes_postgres.store._run_stage): a stage with
more matches than the cap lists the newest, in the SQLite store's mode names, whether the
decision comes from the planner's estimate (large tables) or from reading the matches
(small ones) — and the estimates never change what a small store finds."""

from __future__ import annotations

import pytest
from hermes_postgres import store as pgstore
from hermes_postgres.store import PostgresSessionStore

from hermes.plugins.sessions import store as litestore
from hermes.plugins.sessions.store import SQLiteSessionStore

T0 = 1_700_000_000.0


def _fill(store) -> list[int]:
    store.create_session("fruit", started_at=T0)
    ids = []
    for i in range(12):
        ids.append(store.append_message("fruit", "user", f"kiwi number {i} is ripe", timestamp=T0 + i))
    for i in range(3):
        ids.append(store.append_message("fruit", "assistant", f"mango {i} mango", timestamp=T0 + 20 + i))
    return ids


@pytest.mark.parametrize("estimates_from", [0, 10**12], ids=["planner-estimates", "read-the-matches"])
def test_more_matches_than_the_cap_lists_the_newest(pg_cluster, pg_user, tmp_path, monkeypatch,
                                                   estimates_from: int) -> None:
    for module in (pgstore, litestore):  # a cap of 5 whatever else the server holds
        monkeypatch.setattr(module, "RANK_LIMIT", 5)
        monkeypatch.setattr(module, "RANK_SHARE", 0.0)
    monkeypatch.setattr(pgstore, "ESTIMATES_FROM", estimates_from)
    monkeypatch.setattr(pgstore, "NEWEST_WINDOW", 2)  # the walk to the newest kiwis crosses windows
    pg = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    lite = SQLiteSessionStore(tmp_path / "state.db")
    try:
        kiwis = _fill(pg)[:12]
        _fill(lite)
        pg._read(lambda c: c.execute("ANALYZE messages"))
        hits = pg.search_messages("kiwi", limit=3)
        assert [h["id"] for h in hits] == kiwis[::-1][:3]  # the newest three, newest first
        assert {h["mode"] for h in hits} == {"strict-recent"}
        mangos = pg.search_messages("mango")
        assert len(mangos) == 3 and {h["mode"] for h in mangos} == {"strict"}  # 3 < cap: ranked
        for query in ("kiwi", "mango", "ripe kiwi", "kiwi OR mango"):
            mine = [(h["position"], h["mode"]) for h in pg.search_messages(query, limit=4)]
            theirs = [(h["position"], h["mode"]) for h in lite.search_messages(query, limit=4)]
            assert {m for _, m in mine} == {m for _, m in theirs}, query
            if mine and mine[0][1].endswith("-recent"):
                assert mine == theirs, query  # newest first in both
    finally:
        pg.close()
        lite.close()


CORPUS = [
    ("user", "我们讨论了记忆断裂问题的解决方案"),
    ("assistant", "广西桂林的漓江很美"),
    ("user", "数据库迁移到Postgres已经完成"),
    ("assistant", "Redis缓存问题已修复"),
    ("user", "東京の天気はどうですか"),
    ("assistant", "The kubernetes cluster restarted after the deploy."),
    ("user", "My dog dances when she hears the doorbell."),
]
QUERIES = ["记忆断裂", "断裂", "广西的漓江在哪个城市？", "数据库迁移", "東京の天気", "天気", "迁移到Postgres",
           "dance", "kubernetes cluster", "when did the cluster restart?", "backu*", "doorbell OR 桂林"]


def test_estimates_do_not_change_what_a_small_store_finds(pg_cluster, pg_user, monkeypatch) -> None:
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    try:
        store.create_session("s", started_at=T0)
        for i, (role, text) in enumerate(CORPUS):
            store.append_message("s", role, text, timestamp=T0 + i)
        store._read(lambda c: c.execute("ANALYZE messages"))

        def found(query: str) -> list[tuple[int, str]]:
            return [(h["id"], h["mode"]) for h in store.search_messages(query)]

        monkeypatch.setattr(pgstore, "ESTIMATES_FROM", 10**12)
        exact = {q: found(q) for q in QUERIES}
        monkeypatch.setattr(pgstore, "ESTIMATES_FROM", 0)  # every estimate-driven path runs
        assert {q: found(q) for q in QUERIES} == exact
        assert all(exact[q] for q in QUERIES if q != "backu*")
    finally:
        store.close()


def test_the_size_that_sets_the_cap_is_this_users(pg_cluster, monkeypatch) -> None:
    """The rank cap and the switch to the planner's estimates follow this user's messages,
    not the whole shared table's: a small user beside a big one decides exactly."""
    import uuid

    schema = f"size_{uuid.uuid4().hex[:8]}"
    big = PostgresSessionStore(pg_cluster.dsn, user="big", schema=schema, pool_max=1)
    small = PostgresSessionStore(pg_cluster.dsn, user="small", schema=schema, pool_max=1)
    nobody = PostgresSessionStore(pg_cluster.dsn, user="nobody", schema=schema, pool_max=1)
    try:
        big.create_session("b", started_at=T0)
        big.append_messages("b", [{"role": "user", "content": f"cluster note {i}", "timestamp": T0 + i}
                                  for i in range(400)])
        small.create_session("s", started_at=T0)
        small.append_messages("s", [{"role": "user", "content": f"cluster note {i}", "timestamp": T0 + i}
                                    for i in range(20)])
        big._read(lambda c: c.execute("ANALYZE messages"))
        sizes = {s.user: s._read(s._user_messages) for s in (big, small, nobody)}
        assert 200 <= sizes["big"] <= 420 and 10 <= sizes["small"] <= 40 and sizes["nobody"] < 10, sizes
        monkeypatch.setattr(pgstore, "ESTIMATES_FROM", 100)  # the big user's searches use estimates
        monkeypatch.setattr(pgstore, "RANK_LIMIT", 30)
        monkeypatch.setattr(pgstore, "RANK_SHARE", 0.0)
        assert {h["mode"] for h in big.search_messages("cluster", limit=5)} == {"strict-recent"}
        assert {h["mode"] for h in small.search_messages("cluster", limit=5)} == {"strict"}  # 20 < 30: ranked
    finally:
        for s in (big, small, nobody):
            s.close()


def test_a_cjk_word_deep_in_a_long_message_is_found(pg_cluster, pg_user) -> None:
    """A tsvector keeps positions up to 16,383 only: a CJK word past them must still be
    found (its bigrams are required together, not in sequence)."""
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    try:
        store.create_session("long", started_at=T0)
        store.append_message("long", "tool", "log " * 17_000 + "数据库迁移失败", timestamp=T0)
        store.append_message("long", "user", "数据 and 据库 apart", timestamp=T0 + 1)
        hits = store.search_messages("数据库")
        assert [h["position"] for h in hits] == [1]  # the long one; not the message with both bigrams apart
    finally:
        store.close()


def test_a_question_ranks_the_matches_of_its_rarer_terms(pg_cluster, monkeypatch) -> None:
    """A relaxed question of a rare word and a commoner one ranks the rare word's matches
    (each one a random row read on a large table), not every match of either: the
    messages holding both still come first (before: the OR of both was ranked)."""
    import uuid

    import psycopg

    schema = f"narrow_{uuid.uuid4().hex[:8]}"
    store = PostgresSessionStore(pg_cluster.dsn, user="narrow", schema=schema, pool_max=1)
    ranked: list[tuple[str, tuple]] = []  # the ranking statements the store ran (run again below)
    execute = psycopg.Connection.execute

    def spy(self, query, params=None, **kwargs):
        if "OVER ()" in str(query):
            ranked.append((query, params))
        return execute(self, query, params, **kwargs)

    try:
        # One message a session (the previous message's words would count too), among
        # others that mention neither word.
        texts = ([f"quiet note {i}" for i in range(1000)] + [f"apple note {i}" for i in range(300)]
                 + [f"zebra seen {i}" for i in range(45)] + [f"apple zebra {i}" for i in range(5)])
        ids = []
        with store.batch():
            for i, text in enumerate(texts):
                store.create_session(f"s{i}", started_at=T0 + i)
                ids += store.append_messages(f"s{i}", [{"role": "user", "content": text, "timestamp": T0 + i}])
        store._read(lambda c: c.execute("ANALYZE messages"))
        monkeypatch.setattr(pgstore, "ESTIMATES_FROM", 0)  # as on a large table: estimates used
        monkeypatch.setattr(pgstore, "RANK_LIMIT", 1000)  # 350 matches: ranked, not the newest
        monkeypatch.setattr(pgstore, "RANK_SHARE", 0.0)
        monkeypatch.setattr(psycopg.Connection, "execute", spy)
        question = "when did we talk about the apple and zebra?"
        hits = store.search_messages(question, limit=5)
        assert {h["mode"] for h in hits} == {"relaxed"}
        assert sorted(h["id"] for h in hits) == ids[-5:]  # both words: first
        relaxed = [(q, p) for q, p in ranked if "'zebra'" in str(p) and "'when'" not in str(p)]
        assert relaxed
        monkeypatch.setattr(psycopg.Connection, "execute", execute)
        for query, params in relaxed:  # how many matches each read and scored (column n)
            rows = store._read(lambda c, q=query, p=params: c.execute(q, p).fetchall())
            assert rows[0]["n"] == 50, rows[0]["n"]  # the zebras, not the 300 apples
        more = store.search_messages(question, limit=40)
        assert len(more) == 40 and {h["id"] for h in more} <= set(ids[-50:])  # zebras only
        # More hits asked for than the rarer word has: every match is ranked.
        every = store.search_messages(question, limit=60)
        assert len(every) == 60 and set(ids[-50:]) <= {h["id"] for h in every}
    finally:
        store.close()


def test_term_counts_on_a_large_table_are_the_matches(pg_cluster) -> None:
    """The relaxed terms' counts on a large table come from the words index's entries
    where the planner reads it (no message read; the 1M bench's rare words and prefixes)
    and are counted where it would not yet expects few (here: another index for a small
    table, statistics older than the rows): either way this user's matches, a prefix's
    too (the planner takes ``'kiwi':*`` for 12)."""
    import uuid

    schema = f"counts_{uuid.uuid4().hex[:8]}"
    store = PostgresSessionStore(pg_cluster.dsn, user="counts", schema=schema, pool_max=1)
    try:
        store.create_session("c", started_at=T0)
        store.append_messages("c", [{"role": "user", "content": f"kiwi{i % 7} mango{i % 40} plain",
                                     "timestamp": T0 + i} for i in range(400)])
        store._read(lambda c: c.execute("ANALYZE messages"))
        store.append_messages("c", [{"role": "user", "content": f"zebra{i % 2} late", "timestamp": T0 + 1000 + i}
                                    for i in range(300)])  # not in the statistics
        queries = ["'kiwi3'", "'kiwi':*", "'mango7'", "'absent'", "'zebra1'", "'kiwi3':A"]
        got = store._read(lambda c: PostgresSessionStore._index_counts(c, queries, 10_000))
        exact = store._read(lambda c: [PostgresSessionStore._count(c, q, 10_000) for q in queries])
        assert got == exact
        # Each message holds the previous one's words too (weight D, the context).
        kiwi3 = sum(1 for i in range(400) if i % 7 == 3)
        assert exact == [2 * kiwi3, 401, 20, 0, 150 + 149, kiwi3]  # the last zebra1 has no next
    finally:
        store.close()
