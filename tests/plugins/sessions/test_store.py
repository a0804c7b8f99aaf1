"""SQLite-specific behaviour of the ``sqlite`` store: the file, the indexes, locking,
broken files, migrations from an older schema."""

from __future__ import annotations

import json
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest

import hermes
from hermes.plugins.sessions import schema
from hermes.plugins.sessions.store import SQLiteSessionStore


@pytest.fixture
def store(tmp_path: Path):
    s = SQLiteSessionStore(tmp_path / "state.db")
    yield s
    s.close()


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- the file ---------------------------------------------------------------------------


def test_kernel_opens_state_db_in_home(kernel, hermes_home: Path) -> None:
    store = kernel.session_store
    assert isinstance(store, SQLiteSessionStore) and store.name == "sqlite"
    assert store.path == hermes_home / "state.db"
    mode = stat.S_IMODE((hermes_home / "state.db").stat().st_mode)
    assert mode == 0o600
    with raw(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert store._writer.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_plugin_settings(kernel_factory, hermes_home: Path) -> None:
    k = kernel_factory(config={"plugins": {"sqlite-sessions": {
        "path": "other.db", "write_timeout": 3, "synchronous": "full"}}})
    store = k.session_store
    assert store.path == hermes_home / "other.db" and store.write_timeout == 3.0
    assert store._writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


@pytest.mark.parametrize("key, value", [("write_timeout", -1), ("write_timeout", "soon"),
                                        ("synchronous", "off"), ("path", 5)])
def test_bad_settings_name_the_key(kernel_factory, key: str, value: object) -> None:
    k = kernel_factory(config={"plugins": {"sqlite-sessions": {key: value}}})
    with pytest.raises(hermes.ConfigError) as info:
        _ = k.session_store
    assert f"plugins.sqlite-sessions.{key}" in str(info.value)


# -- indexes ----------------------------------------------------------------------------


def test_trigram_index_holds_only_cjk_messages(store: SQLiteSessionStore) -> None:
    sid = store.create_session()
    store.append_message(sid, "user", "plain latin text")
    store.append_message(sid, "user", "café naïve résumé")  # non-ASCII, not CJK
    cjk = store.append_message(sid, "user", "数据库迁移")
    kana = store.append_message(sid, "assistant", "", tool_calls=[{
        "id": "c", "type": "function", "function": {"name": "search", "arguments": '{"q": "カタカナ"}'}}])
    bulk = store.append_messages(sid, [{"role": "user", "content": "bulk latin"},
                                       {"role": "user", "content": "한국어 문장"}])
    with raw(store.path) as conn:
        rows = {r[0] for r in conn.execute("SELECT rowid FROM messages_fts_trigram")}
        words = conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'content : latin'").fetchone()[0]
    assert rows == {cjk, kana, bulk[1]}
    assert words == 2
    assert [h["id"] for h in store.search_messages("カタカナ")] == [kana]
    assert [h["id"] for h in store.search_messages("cafe")] != []  # diacritics folded


def test_indexes_follow_updates_and_deletes(store: SQLiteSessionStore) -> None:
    sid = store.create_session()
    a = store.append_message(sid, "user", "original wording 原来的文字")
    store.append_messages(sid, [{"role": "user", "content": f"filler {i}"} for i in range(20)])
    with raw(store.path) as conn:
        conn.execute("UPDATE messages SET content = 'revised wording' WHERE id = ?", (a,))
    assert store.search_messages("original") == []
    assert [h["id"] for h in store.search_messages("revised")] == [a]
    assert store.search_messages("原来的") == []  # left the CJK index with its CJK text
    with raw(store.path) as conn:
        conn.execute("UPDATE messages SET content = '又有中文了' WHERE id = ?", (a,))
    assert [h["id"] for h in store.search_messages("又有中文")] == [a]
    assert store.check_integrity() == []
    store.delete_session(sid)
    assert store.check_integrity() == []
    with raw(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM messages_fts_trigram").fetchone()[0] == 0


def test_a_broken_index_makes_search_empty_with_one_warning(store: SQLiteSessionStore, caplog) -> None:
    """A real SQLite failure inside search (the word index dropped behind the store's
    back) gives no hits and one warning naming the store, the query and the error."""
    sid = store.create_session()
    store.append_message(sid, "user", "capybara facts")
    with raw(store.path) as conn:
        conn.execute("DROP TABLE messages_fts")
    with caplog.at_level("WARNING", logger="hermes.sessions"):
        assert store.search_messages("capybara") == []
    assert [r.getMessage() for r in caplog.records] == [
        "sqlite session search for 'capybara' failed: no such table: messages_fts"]


def _fail_on(store: SQLiteSessionStore, content: str) -> None:
    """Make the store's own connection fail inserting a message with this content (a
    real SQLite error in the middle of a write, as a full disk would give)."""
    store._writer.execute(
        "CREATE TEMP TRIGGER fail_insert BEFORE INSERT ON main.messages "
        f"WHEN new.content = '{content}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END")


def test_failed_bulk_write_leaves_nothing(store: SQLiteSessionStore) -> None:
    sid = store.create_session()
    store.append_message(sid, "user", "kept")
    _fail_on(store, "boom")
    bad = [{"role": "user", "content": "fine"}, {"role": "user", "content": "boom"}]
    with pytest.raises(sqlite3.Error):
        store.append_messages(sid, bad)
    assert [m["content"] for m in store.get_messages(sid)] == ["kept"]
    assert store.get_meta("fts_deferred") is None
    assert store.get_session(sid)["message_count"] == 1
    # the triggers are live again: a plain append is indexed
    store.append_message(sid, "user", "indexed again")
    assert len(store.search_messages("indexed again")) == 1
    assert store.check_integrity() == []


def test_a_failed_write_dooms_its_batch(store: SQLiteSessionStore) -> None:
    store.append_message("before", "user", "outside")
    _fail_on(store, "boom")
    with pytest.raises(hermes.StoreError, match="rolled back"):
        with store.batch():
            store.append_messages("a", [{"role": "user", "content": "first of the batch"}])
            with pytest.raises(sqlite3.Error):
                store.append_messages("b", [{"role": "user", "content": "ok"}, {"role": "user", "content": "boom"}])
            store.append_messages("c", [{"role": "user", "content": "after the failure"}])
    for sid in ("a", "b", "c"):
        assert store.get_session(sid) is None
    assert [m["content"] for m in store.get_messages("before")] == ["outside"]
    assert store.get_meta("fts_deferred") is None and store.check_integrity() == []


def test_unusable_values_never_fail_an_append(store: SQLiteSessionStore) -> None:
    mid = store.append_message("s", "user", "broken \ud800 surrogate", token_count="many",
                               finish_reason=3, timestamp="yesterday")  # type: ignore[arg-type]
    row = store.get_messages("s")[0]
    assert row["id"] == mid and row["content"] == "broken \ufffd surrogate"
    assert row["token_count"] is None and row["finish_reason"] == "3" and row["timestamp"] > 0
    store.append_messages("s", [{"role": "user", "content": ["part one", {"type": "text", "text": "part two"}]}])
    assert store.get_messages("s")[1]["content"] == "part one\npart two"


def test_batch_is_one_transaction(store: SQLiteSessionStore) -> None:
    store.append_message("before", "user", "outside the batch")
    with pytest.raises(RuntimeError):
        with store.batch():
            store.append_messages("inside", [{"role": "user", "content": "rolled back 回滚了"}])
            raise RuntimeError("import failed half way")
    assert store.get_session("inside") is None and store.search_messages("rolled") == []
    assert store.get_meta("fts_deferred") is None
    with store.batch():
        store.append_messages("kept", [{"role": "user", "content": f"kept {i} 保留下来"} for i in range(10)])
        with store.batch():  # nested: joins the outer batch
            store.append_message("kept", "user", "nested write")
        store.append_messages("gone", [{"role": "user", "content": "deleted in the same batch"}])
        assert store.delete_session("gone")  # indexed first, so the delete is clean
    assert len(store.search_messages("kept", fallback=False, limit=50)) == 10
    assert len(store.search_messages("保留下来", limit=50)) == 10
    assert store.search_messages("deleted") == []
    assert store.check_integrity() == []


def test_other_writers_wait_for_a_batch(store: SQLiteSessionStore, tmp_path: Path) -> None:
    other = SQLiteSessionStore(store.path)
    done = threading.Event()

    def write() -> None:
        other.append_message("elsewhere", "user", "waited for the batch")
        done.set()

    with store.batch():
        store.append_message("batch", "user", "first")
        thread = threading.Thread(target=write)
        thread.start()
        assert not done.wait(0.3)  # blocked while the batch holds the write lock
        assert other.search_messages("first") == []  # and cannot see uncommitted rows
    thread.join(10)
    assert done.is_set() and len(other.search_messages("waited")) == 1
    other.close()


def test_read_connections_of_finished_threads_are_closed(store: SQLiteSessionStore) -> None:
    store.append_message("s", "user", "threaded reads")

    def search() -> None:
        assert len(store.search_messages("threaded")) == 1

    for _ in range(20):
        t = threading.Thread(target=search)
        t.start()
        t.join()
    search()  # this thread's reader prunes the finished ones
    assert len(store._readers) <= 2 and len(store._conns) <= 3


def test_common_terms_rank_only_the_newest_matches(store: SQLiteSessionStore, monkeypatch) -> None:
    from hermes.plugins.sessions import store as store_module

    monkeypatch.setattr(store_module, "RANK_LIMIT", 10)
    store.append_messages("old", [{"role": "user", "content": "common common common rare-old"}])
    store.append_messages("new", [{"role": "user", "content": f"common filler {i}"} for i in range(30)])
    hits = store.search_messages("common", limit=50, fallback=False)
    assert len(hits) == 10 and all(h["session_id"] == "new" for h in hits)  # the newest 10 only
    assert {h["mode"] for h in hits} == {"strict-recent"}  # and the hits say so
    # a filter is applied before the window, so older qualifying matches are still found
    hits = store.search_messages("common", session_id="old", fallback=False)
    assert [h["session_id"] for h in hits] == ["old"]
    assert len(store.search_messages("rare-old common", fallback=False)) == 1  # rare terms: exact


def test_relaxed_queries_drop_very_common_terms(store: SQLiteSessionStore, monkeypatch) -> None:
    from hermes.plugins.sessions import store as store_module

    monkeypatch.setattr(store_module, "COMMON_MIN", 5)
    monkeypatch.setattr(store_module, "RANK_LIMIT", 10)
    store.append_messages("noise", [{"role": "user", "content": f"database chatter {i}"} for i in range(40)])
    store.append_messages("old", [{"role": "user", "content": "the postgres database migration"}])
    store.append_messages("newer", [{"role": "user", "content": f"database again {i}"} for i in range(40)])
    hits = store.search_messages("which database did the postgres migration use?")
    assert hits[0]["session_id"] == "old" and hits[0]["mode"] == "relaxed"


def test_two_common_words_meeting_is_a_last_resort(store: SQLiteSessionStore, monkeypatch) -> None:
    from hermes.plugins.sessions import store as store_module

    monkeypatch.setattr(store_module, "COMMON_MIN", 5)
    store.append_messages("noise", [{"role": "user", "content": f"upload {i}"} for i in range(20)]
                          + [{"role": "user", "content": f"size {i}"} for i in range(20)])
    store.append_messages("fact", [{"role": "user", "content": "max upload size is 25 MB"}])
    hits = store.search_messages("what is the maximum upload size?")
    assert hits[0]["session_id"] == "fact" and hits[0]["mode"] == "relaxed"


def test_lineage_walks_survive_cycles(store: SQLiteSessionStore) -> None:
    a = store.create_session("a", started_at=100)
    b = store.create_session("b", parent_session_id=a, started_at=200)
    store.end_session(a, "compression", ended_at=150)
    store.end_session(b, "compression", ended_at=250)
    with raw(store.path) as conn:  # a corrupted lineage: a <-> b, both "continuing" the other
        conn.execute("UPDATE sessions SET parent_session_id = 'b', started_at = 300 WHERE id = 'a'")
    assert store.lineage_root("a") in ("a", "b")
    assert store.compression_tip("a") in ("a", "b")
    assert sorted(store.lineage("a")) == ["a", "b"]
    assert store.list_sessions() == []  # no root: nothing to fold into


# -- locking ----------------------------------------------------------------------------


def _hold_write_lock(path: Path, seconds: float, ready: threading.Event) -> None:
    conn = raw(path)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO state_meta VALUES ('holder', 'x')")
    ready.set()
    time.sleep(seconds)
    conn.execute("COMMIT")
    conn.close()


def test_write_waits_for_a_busy_database(store: SQLiteSessionStore) -> None:
    sid = store.create_session()
    store.append_message(sid, "user", "visible before the lock")
    ready = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(store.path, 0.6, ready))
    holder.start()
    ready.wait(5)
    # readers are never blocked by a writer
    assert len(store.search_messages("visible")) == 1
    assert store.get_session(sid)["message_count"] == 1
    mid = store.append_message(sid, "user", "written after waiting")
    holder.join()
    assert store.get_messages(sid)[-1]["id"] == mid
    assert store.get_meta("holder") == "x"


def test_write_gives_up_after_its_timeout(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "state.db", write_timeout=0.3)
    sid = store.create_session()
    ready = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(store.path, 1.5, ready))
    holder.start()
    ready.wait(5)
    try:
        with pytest.raises(hermes.StoreError) as info:
            store.append_message(sid, "user", "cannot get in")
    finally:
        holder.join()
    assert str(store.path) in str(info.value) and "locked" in str(info.value)
    store.append_message(sid, "user", "gets in now")
    assert [m["content"] for m in store.get_messages(sid)] == ["gets in now"]
    store.close()


# -- broken and foreign files -----------------------------------------------------------


def test_corrupt_file_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is certainly not a database\n" * 200)
    with pytest.raises(hermes.StoreError) as info:
        SQLiteSessionStore(path)
    text = str(info.value)
    assert str(path) in text and "Move it aside" in text and "not a usable SQLite database" in text


def test_truncated_database_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = SQLiteSessionStore(path)
    s.append_messages("x", [{"role": "user", "content": "word " * 200} for _ in range(200)])
    s.close()
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\xff" * 4000 + data[4100:])  # smash the schema page
    with pytest.raises(hermes.StoreError) as info:
        SQLiteSessionStore(path)
    assert str(path) in str(info.value)


def test_corrupt_file_through_the_kernel(kernel_factory, hermes_home: Path) -> None:
    (hermes_home / "state.db").write_text("garbage " * 1000)
    with pytest.raises(hermes.StoreError) as info:
        _ = kernel_factory().session_store
    assert "state.db" in str(info.value)


def test_directory_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "state.db").mkdir()
    with pytest.raises(hermes.StoreError, match="not a file"):
        SQLiteSessionStore(tmp_path / "state.db")


def test_hermes_agent_database_is_refused_with_advice(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with raw(path) as conn:
        conn.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                           "INSERT INTO schema_version VALUES (7);"
                           "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL);"
                           "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT, timestamp REAL);")
    before = path.read_bytes()
    with pytest.raises(hermes.StoreError) as info:
        SQLiteSessionStore(path)
    assert "Hermes agent state.db (schema v7)" in str(info.value)
    assert "hermes sessions import" in str(info.value)
    assert path.read_bytes() == before  # untouched


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SQLiteSessionStore(path).close()
    with raw(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(hermes.StoreError, match="newer"):
        SQLiteSessionStore(path)


def test_closed_store_refuses_politely(tmp_path: Path) -> None:
    s = SQLiteSessionStore(tmp_path / "state.db")
    s.close()
    with pytest.raises(hermes.StoreError, match="closed"):
        s.create_session()
    assert s.search_messages("anything") == []


# -- migration --------------------------------------------------------------------------

#: The v1 layout exactly as the first version of this store wrote it: content-only word
#: index, no CJK index, no state_meta, no cwd or last_active_at.
V1_SCHEMA = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL DEFAULT 'cli', user_id TEXT, model TEXT,
    model_config TEXT, system_prompt TEXT,
    parent_session_id TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,
    message_count INTEGER NOT NULL DEFAULT 0, tool_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0, cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0, estimated_cost_usd REAL, title TEXT
);
CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT, reasoning TEXT
);
CREATE INDEX idx_messages_session ON messages(session_id, id);
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_au AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
PRAGMA user_version = 1;
"""


def test_migrates_v1_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    call = [{"id": "c1", "type": "function",
             "function": {"name": "web_fetch", "arguments": json.dumps({"url": "https://example.org/pangolin"})}}]
    with raw(path) as conn:
        conn.executescript(V1_SCHEMA)
        conn.execute("INSERT INTO sessions (id, source, started_at, title, input_tokens) "
                     "VALUES ('old-1', 'cli', 1000, 'Old chat', 42)")
        conn.execute("INSERT INTO sessions (id, source, started_at, parent_session_id, ended_at, end_reason) "
                     "VALUES ('old-2', 'cli', 2000, 'old-1', NULL, NULL)")
        conn.execute("UPDATE sessions SET ended_at = 1900, end_reason = 'compression' WHERE id = 'old-1'")
        rows = [("old-1", "user", "look up pangolins", None, None, 1001),
                ("old-1", "assistant", "", json.dumps(call), None, 1002),
                ("old-1", "tool", "pangolins eat ants", None, "web_fetch", 1003),
                ("old-2", "user", "还记得穿山甲吗", None, None, 2001)]
        for sid, role, content, calls, tool, ts in rows:
            conn.execute("INSERT INTO messages (session_id, role, content, tool_calls, tool_name, timestamp) "
                         "VALUES (?, ?, ?, ?, ?, ?)", (sid, role, content, calls, tool, ts))
        conn.execute("UPDATE sessions SET message_count = 3, tool_call_count = 1 WHERE id = 'old-1'")
        conn.execute("UPDATE sessions SET message_count = 1 WHERE id = 'old-2'")
        before = conn.execute("SELECT id, session_id, role, content, tool_calls, tool_name, timestamp "
                              "FROM messages ORDER BY id").fetchall()

    store = SQLiteSessionStore(path)
    with raw(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        after = conn.execute("SELECT id, session_id, role, content, tool_calls, tool_name, timestamp "
                             "FROM messages ORDER BY id").fetchall()
    assert after == before
    old1 = store.get_session("old-1")
    assert old1["title"] == "Old chat" and old1["input_tokens"] == 42 and old1["message_count"] == 3
    assert old1["last_active_at"] == 1003 and old1["cwd"] is None
    assert store.compression_tip("old-1") == "old-2"
    assert [h["session_id"] for h in store.search_messages("pangolins eat", fallback=False)] == ["old-1"]
    # v2 indexes tool-call arguments and CJK text, including rows written under v1
    assert [h["role"] for h in store.search_messages("example.org/pangolin")] == ["assistant"]
    hits = store.search_messages("穿山甲")
    assert [h["session_id"] for h in hits] == ["old-2"] and hits[0]["mode"] == "trigram"
    assert store.check_integrity() == []
    store.append_message("old-2", "user", "new message after migration")
    assert store.get_session("old-2")["message_count"] == 2
    store.close()
    SQLiteSessionStore(path).close()  # opening again is a no-op
