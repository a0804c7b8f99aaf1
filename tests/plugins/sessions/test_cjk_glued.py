"""CJK text written against a Latin word: unicode61 reads "迁移到Postgres完成" as one token,
so the words index alone cannot find "Postgres" in it. Every part must be found, on the
index side (a message written glued) and on the query side (a query typed glued)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes.plugins.sessions import schema
from hermes.plugins.sessions.store import SQLiteSessionStore

DATA = Path(__file__).parent / "data"

# (message, the parts a search must find it by)
GLUED = [
    ("迁移到Postgres完成", ["Postgres", "postgres", "迁移", "完成", "迁移到"]),
    ("Dockerのイメージ", ["Docker", "イメージ"]),
    ("API키를 새로 발급했어요", ["API", "키를", "발급했어요"]),
    ("今天用Redis缓存了session数据", ["Redis", "session", "缓存", "数据"]),
    ("2024年3月的Café订单", ["2024", "Café", "cafe", "订单"]),
]


def ids(hits: list[dict]) -> list[int]:
    return [h["id"] for h in hits]


@pytest.fixture
def store(tmp_path: Path):
    s = SQLiteSessionStore(tmp_path / "state.db")
    yield s
    s.close()


def _fill(store: SQLiteSessionStore, how: str) -> dict[str, int]:
    """The glued messages among Latin-only ones, written one by one, in bulk or in a batch."""
    sid = store.create_session(source="cli")
    texts = ["nothing to see here", *(t for t, _ in GLUED), "Postgres is a database", "a plain note"]
    if how == "single":
        written = [store.append_message(sid, "user", t) for t in texts]
    elif how == "bulk":
        written = store.append_messages(sid, [{"role": "user", "content": t} for t in texts])
    else:
        with store.batch():
            written = store.append_messages(sid, [{"role": "user", "content": t} for t in texts])
    return dict(zip(texts, written, strict=True))


@pytest.mark.parametrize("how", ["single", "bulk", "batch"])
@pytest.mark.parametrize("text,parts", GLUED)
def test_each_part_of_a_glued_message_finds_it(store: SQLiteSessionStore, how: str, text: str,
                                               parts: list[str]) -> None:
    written = _fill(store, how)
    for part in parts:
        hits = store.search_messages(part, fallback=False)
        assert written[text] in ids(hits), (part, hits)
        hit = next(h for h in hits if h["id"] == written[text])
        assert "\u200b" not in hit["snippet"]
    assert store.check_integrity() == []


def test_latin_word_hit_is_highlighted_in_the_original_text(store: SQLiteSessionStore) -> None:
    written = _fill(store, "single")
    hits = store.search_messages("Postgres", fallback=False)
    assert set(ids(hits)) == {written["迁移到Postgres完成"], written["Postgres is a database"]}
    glued = next(h for h in hits if h["id"] == written["迁移到Postgres完成"])
    assert glued["snippet"] == "迁移到>>>Postgres<<<完成" and glued["mode"] == "strict"


def test_word_search_stays_a_word_search(store: SQLiteSessionStore) -> None:
    """Splitting adds word boundaries only where CJK touches Latin: "gres" is no word of
    "迁移到Postgres完成", and operators and prefixes work on the split words."""
    written = _fill(store, "bulk")
    glued = written["迁移到Postgres完成"]
    assert glued not in ids(store.search_messages("gres", fallback=False))
    assert glued in ids(store.search_messages("Postg*", fallback=False))
    assert written["Postgres is a database"] not in ids(store.search_messages("Postgres NOT database",
                                                                               fallback=False))
    assert glued in ids(store.search_messages("Postgres NOT database", fallback=False))
    assert glued in ids(store.search_messages("Redis OR Postgres", fallback=False))


@pytest.mark.parametrize("query,text", [
    ("Postgres迁移", "迁移到Postgres完成"),
    ("完成Postgres", "迁移到Postgres完成"),
    ("イメージDocker", "Dockerのイメージ"),
    ("키를API", "API키를 새로 발급했어요"),
    ("session缓存", "今天用Redis缓存了session数据"),
])
def test_a_query_typed_glued_finds_its_parts_in_any_order(store: SQLiteSessionStore, query: str, text: str) -> None:
    written = _fill(store, "single")
    hits = store.search_messages(query, fallback=False)
    assert ids(hits) == [written[text]], hits


def test_not_keeps_a_glued_word_whole(store: SQLiteSessionStore) -> None:
    written = _fill(store, "single")
    glued = written["今天用Redis缓存了session数据"]
    assert glued in ids(store.search_messages("数据 NOT MySQL", fallback=False))
    assert glued not in ids(store.search_messages("数据 NOT 缓存了session", fallback=False))
    assert glued in ids(store.search_messages("数据 NOT 缓存了MySQL", fallback=False))


def test_edit_delete_and_reindex_keep_the_split_index_exact(store: SQLiteSessionStore) -> None:
    written = _fill(store, "single")
    glued = written["迁移到Postgres完成"]
    with sqlite3.connect(store.path) as conn:  # an edit from outside the store drops the stale row
        conn.execute("UPDATE messages SET content = '迁移到MySQL完成' WHERE id = ?", (glued,))
    assert glued not in ids(store.search_messages("Postgres", fallback=False))
    assert any("messages_fts_split" in p and str(glued) in p for p in store.check_integrity())
    assert store.reindex() == len(written)
    assert store.check_integrity() == []
    assert ids(store.search_messages("MySQL", fallback=False)) == [glued]
    assert glued not in ids(store.search_messages("Postgres", fallback=False))
    assert store.delete_session(store.search_messages("MySQL")[0]["session_id"])
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM messages_fts_split").fetchone()[0] == 0
    assert store.check_integrity() == []


def test_forget_keeps_the_rest_of_a_glued_message_findable(store: SQLiteSessionStore) -> None:
    import hermes

    written = _fill(store, "single")
    glued = written["今天用Redis缓存了session数据"]
    report = store.forget(hermes.ForgetRequest(query="Redis", dry_run=False))
    assert report.removed == 1
    assert store.search_messages("Redis") == []
    assert ids(store.search_messages("session", fallback=False)) == [glued]
    with sqlite3.connect(store.path) as conn:
        assert "Redis" not in conn.execute("SELECT content FROM messages_fts_split WHERE rowid = ?",
                                           (glued,)).fetchone()[0]
    assert store.check_integrity() == []


def test_a_real_v4_database_is_migrated(tmp_path: Path) -> None:
    """state_v4.db was written by the v4 store (before the split index), glued messages
    and a glued tool-call argument included."""
    path = tmp_path / "state.db"
    shutil.copy(DATA / "state_v4.db", path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
        before = conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
        assert "messages_fts_split" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    store = SQLiteSessionStore(path)
    try:
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION == 5
            assert conn.execute("SELECT * FROM messages ORDER BY id").fetchall() == before
            for table in ("messages_fts", "messages_fts_trigram", "messages_fts_split"):
                config = dict(conn.execute(f"SELECT k, v FROM {table}_config").fetchall())
                assert {k: config.get(k) for k, _ in schema.FTS_SETTINGS} == dict(schema.FTS_SETTINGS)
        by_text = {m["content"]: m["id"] for m in store.get_messages("v4-zh")}
        assert by_text["昨晚把数据库迁移到Postgres完成了"] in ids(store.search_messages("Postgres", fallback=False))
        assert ids(store.search_messages("Docker", fallback=False)) == [by_text["Dockerのイメージを更新しました"]]
        assert ids(store.search_messages("API", fallback=False)) == [by_text["API키를 새로 발급했어요"]]
        assert [h["role"] for h in store.search_messages("kubectl", fallback=False)] == ["assistant"]
        assert store.check_integrity() == []
        with sqlite3.connect(path) as conn:  # reindex rebuilds the split index too
            conn.execute("DELETE FROM messages_fts_split")
        assert store.search_messages("Docker", fallback=False) == []
        assert store.reindex() == 7
        assert ids(store.search_messages("Docker", fallback=False)) == [by_text["Dockerのイメージを更新しました"]]
        store.append_message("v4-zh", "user", "新的Kafka集群")
        assert len(store.search_messages("Kafka", fallback=False)) == 1
    finally:
        store.close()
    SQLiteSessionStore(path).close()  # opening again is a no-op


_CJK = st.text(alphabet=st.sampled_from("数据库迁移缓存のイメージ키를발급"), min_size=1, max_size=4)
_LATIN = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789"), min_size=2, max_size=8)


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(st.tuples(_CJK, _LATIN), min_size=1, max_size=3), tail=_CJK)
def test_every_latin_word_glued_between_cjk_runs_is_found(tmp_path_factory, parts, tail) -> None:
    store = SQLiteSessionStore(tmp_path_factory.mktemp("glued") / "state.db")
    try:
        text = "".join(a + b for a, b in parts) + tail
        sid = store.create_session(source="cli")
        mid = store.append_message(sid, "user", text)
        for _, word in parts:
            assert mid in ids(store.search_messages(word, fallback=False)), (text, word)
        assert ids(store.search_messages(text, fallback=False)) == [mid]
    finally:
        store.close()


@pytest.mark.parametrize("query,snippet", [
    ("完成", "迁移到Postgres>>>完成<<<"),
    ("イメージ", "Dockerの>>>イメージ<<<"),
    ("Postgres迁移", "迁移到>>>Postgres<<<完成"),
])
def test_cjk_snippets_end_where_the_message_ends(store: SQLiteSessionStore, query: str, snippet: str) -> None:
    """The CJK index's copy of a text ends with a newline (so every pair of characters
    starts a trigram); a snippet never shows it."""
    _fill(store, "single")
    assert [h["snippet"] for h in store.search_messages(query, fallback=False)] == [snippet]
