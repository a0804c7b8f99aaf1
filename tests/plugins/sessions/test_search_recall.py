"""Recall on natural questions (issue 14): the reply to a turn, dates, possessives, word
forms, ranking, CJK bigrams; the v3 index stays exact under deletes and edits; an old
(v2) database is migrated and `hermes sessions reindex` rebuilds the index."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hermes.plugins.sessions import schema
from hermes.plugins.sessions.store import SQLiteSessionStore


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SQLiteSessionStore(tmp_path / "state.db")
    yield s
    s.close()


def ids(hits: list[dict[str, Any]], k: int = 5) -> list[int]:
    return [h["id"] for h in hits[:k]]


def noise(store: SQLiteSessionStore, n: int = 30) -> None:
    for i in range(n):
        store.append_messages(f"noise{i}", [
            {"role": "user", "content": f"what should I cook tonight, something with {w}?"}
            for w in ("rice", "beans", "pasta")] + [
            {"role": "assistant", "content": "Try a quick stir fry with what you have."}])


def test_the_reply_to_the_turn_the_question_echoes_is_found(store: SQLiteSessionStore) -> None:
    noise(store)
    sid = store.create_session()
    store.append_message(sid, "user", "Where should Priya and I stay in Tbilisi?")
    reply = store.append_message(sid, "assistant", "Pick the Old Mill guesthouse: central and quiet at night.")
    # The reply shares no word with the question; the turn before it does.
    assert reply in ids(store.search_messages("where did you suggest we stay in Tbilisi?"))


def test_a_question_naming_the_date_finds_what_was_said_that_day(store: SQLiteSessionStore) -> None:
    for month, finding in ((3, "a small cavity"), (7, "nothing at all"), (11, "a cracked filling")):
        ts = datetime(2024, month, 5, 12, tzinfo=UTC).timestamp()
        sid = store.create_session(started_at=ts)
        store.append_messages(sid, [{"role": "user", "content": f"Went to the dentist yesterday. They found {finding}.",
                                     "timestamp": ts}])
    hits = store.search_messages("what did the dentist say in July 2024?")
    assert "nothing at all" in hits[0]["snippet"]
    assert "July" not in hits[0]["snippet"]  # the date is index-only: snippets are the message's text


def test_possessives_and_word_forms(store: SQLiteSessionStore) -> None:
    noise(store)
    store.append_messages("others", [{"role": "user", "content": text} for text in (
        "a kitten", "kitten toys", "Maria", "Maria called", "the bookshop", "bookshop hours")])
    sid = store.create_session()
    jon = store.append_message(sid, "user", "Jon adopted a kitten called Pepper")
    dancing = store.append_message(sid, "user", "Maria has been dancing salsa for a year")
    opening = store.append_message(sid, "user", "Hannah is opening her own bookshop in May")
    assert ids(store.search_messages("Jon's kitten"))[:1] == [jon]
    assert dancing in ids(store.search_messages("what dances does Maria do?"))
    assert opening in ids(store.search_messages("when does the bookshop open?"))


def test_three_rare_terms_beat_one_common_word(store: SQLiteSessionStore) -> None:
    for i in range(40):
        store.append_message("short", "user", f"my desk is a mess {i}")
    long = store.append_message("long", "assistant", (
        "A nice weekend project for the desk at home: start with a layer of zeolite for drainage, "
        "then soil and moss, keep the terrarium out of direct sun, mist twice a week and add "
        "springtails as a clean-up crew so mould never gets a foothold."))
    assert ids(store.search_messages("desk zeolite terrarium springtails layout"), 1) == [long]


def test_chinese_and_japanese_questions_find_their_answer(store: SQLiteSessionStore) -> None:
    sid = store.create_session()
    store.append_messages(sid, [
        {"role": "user", "content": "今天天气怎么样？"},
        {"role": "assistant", "content": "今天多云，很适合散步。"},
        {"role": "user", "content": "小王上周领养了一只猫，起名叫豆豆。"},
        {"role": "user", "content": "来月京都に旅行します。どこに泊まるのがいいですか？"},
        {"role": "assistant", "content": "京都なら町家の宿がおすすめです。"},
    ])
    msgs = store.get_messages(sid)
    assert ids(store.search_messages("小王的猫叫什么名字？"), 1) == [msgs[2]["id"]]
    assert msgs[4]["id"] in ids(store.search_messages("京都旅行でおすすめされた宿はどこ？"))


def _integrity(store: SQLiteSessionStore) -> list[str]:
    return store.check_integrity()


def test_index_stays_exact_when_messages_are_deleted_or_edited(store: SQLiteSessionStore) -> None:
    sid = store.create_session()
    first, middle, last = store.append_messages(sid, [
        {"role": "user", "content": "alpha question about quokkas"},
        {"role": "assistant", "content": "beta answer"},
        {"role": "user", "content": "gamma follow-up"}])
    other = store.create_session()
    store.append_messages(other, [{"role": "user", "content": f"message {i}"} for i in range(5)])
    with sqlite3.connect(store.path) as conn:  # a middle message goes: its successor's context changes
        conn.execute("DELETE FROM messages WHERE id = ?", (middle,))
    assert _integrity(store) == []
    # "gamma" now follows the quokka question: found by it as context
    assert last in ids(store.search_messages("quokkas gamma", limit=5))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE messages SET content = 'alpha question about wombats' WHERE id = ?", (first,))
    assert _integrity(store) == []
    assert store.delete_session(sid) and store.delete_session(other)
    assert _integrity(store) == []
    assert store.search_messages("quokkas") == [] and store.search_messages("wombats") == []


# The v2 layout (before the context columns and the prefix index), enough to migrate.
V2_FTS = """
CREATE VIEW messages_fts_source AS SELECT id, content, tool_name, NULL AS tool_args FROM messages;
CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_args,
    content = 'messages_fts_source', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tool_name, tool_args, tokenize = 'trigram');
"""


def test_a_v2_database_is_migrated_and_reindexed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    for statement in schema._split(schema.TABLES):
        conn.execute(statement)
    conn.executescript(V2_FTS)
    conn.execute("INSERT INTO sessions (id, started_at) VALUES ('old', 1700000000)")
    conn.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('old', ?, ?, 1700000000)",
                     [("user", "where should we stay in Porto?"), ("assistant", "Pension Lumen, near the river."),
                      ("user", "数据库迁移完成了")])
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()

    store = SQLiteSessionStore(path)
    try:
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert store.check_integrity() == []
        reply = store.get_messages("old")[1]["id"]
        assert reply in ids(store.search_messages("where did you suggest we stay in Porto"))
        assert store.search_messages("数据库迁移")[0]["session_id"] == "old"
        seen: list[int] = []
        assert store.reindex(progress=seen.append) == 3 and sum(seen) == 3
        assert store.check_integrity() == []
        assert reply in ids(store.search_messages("where did you suggest we stay in Porto"))
    finally:
        store.close()


def test_reindex_command_shows_progress(hermes_home: Path) -> None:
    from click.testing import CliRunner

    from hermes.cli import cli

    store = SQLiteSessionStore(hermes_home / "state.db")
    store.append_messages("s", [{"role": "user", "content": "reindex me please"}])
    store.close()
    result = CliRunner().invoke(cli, ["sessions", "reindex"])
    assert result.exit_code == 0, result.output
    assert "reindexed 1 message" in result.output


def test_cli_search_shows_title_date_number_reply_and_groups_a_lineage(hermes_home: Path) -> None:
    import json

    from click.testing import CliRunner

    from hermes.cli import cli

    store = SQLiteSessionStore(hermes_home / "state.db")
    store.create_session("part1", started_at=1_700_000_000)
    store.set_title("part1", "Porto trip")
    store.append_messages("part1", [{"role": "user", "content": "hello"},
                                    {"role": "user", "content": "Where should we stay in Porto?"},
                                    {"role": "assistant", "content": "Pension Lumen, near the river."}])
    store.end_session("part1", "compression", ended_at=1_700_000_100)
    store.create_session("part2", parent_session_id="part1", started_at=1_700_000_100)
    store.append_messages("part2", [{"role": "user", "content": "Where should we stay in Porto?"}])
    store.close()
    out = CliRunner().invoke(cli, ["sessions", "search", "Porto"])
    assert out.exit_code == 0, out.output
    assert "Porto trip" in out.output and "[Porto]" in out.output and ">>>" not in out.output
    assert out.output.count("Where should we stay") == 1  # the compacted copy is grouped
    hits = json.loads(CliRunner().invoke(cli, ["sessions", "search", "Porto", "--json"]).output)
    assert len(hits) == 1 and hits[0]["mode"] == "strict" and hits[0]["lineage_root"] == "part1"
    assert len(hits[0]["also_in"]) == 1 and {"id", "timestamp", "position", "session_id"} <= set(hits[0])
    numbered = CliRunner().invoke(cli, ["sessions", "search", "Porto", "--session", "part1"]).output
    assert "#2" in numbered and "↳ assistant: Pension Lumen" in numbered


def test_two_character_cjk_terms_anywhere_in_the_text(store: SQLiteSessionStore) -> None:
    sid = store.create_session()
    start, middle, end, only = store.append_messages(sid, [
        {"role": "user", "content": "记忆断裂的问题"}, {"role": "user", "content": "我们讨论了记忆断裂"},
        {"role": "user", "content": "这是记忆"}, {"role": "user", "content": "记忆"}])
    store.append_message(sid, "user", "完全无关的中文句子")
    assert {h["id"] for h in store.search_messages("记忆", limit=50)} == {start, middle, end, only}
    assert {h["id"] for h in store.search_messages("断裂", limit=50)} == {start, middle}
    assert store.search_messages("猫狗", limit=50) == []
    assert [h["mode"] for h in store.search_messages("断裂")] == ["like", "like"]


def test_matches_below_the_rank_limit_are_ranked_not_listed_newest(store: SQLiteSessionStore, monkeypatch) -> None:
    from hermes.plugins.sessions import store as store_module

    monkeypatch.setattr(store_module, "RANK_LIMIT", 10)
    best = store.append_message("old", "user", "ferret ferret ferret")
    store.append_messages("new", [{"role": "user", "content": f"a long message that mentions a ferret once, number {i}"}
                                  for i in range(8)])
    hits = store.search_messages("ferret", fallback=False, limit=3)
    assert hits[0]["id"] == best and {h["mode"] for h in hits} == {"strict"}


def test_tool_results_without_a_name_show_the_tool_they_answer(store: SQLiteSessionStore) -> None:
    # OpenAI-format JSONL: the tool message carries only tool_call_id
    store.append_messages("imported", [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "web_search", "arguments": "{}"}}]},
        {"role": "tool", "content": "armadillo facts from the web", "tool_call_id": "call_7"}])
    hit = store.search_messages("armadillo")[0]
    assert hit["role"] == "tool" and hit["tool_name"] == "web_search"


def test_highlight_is_bold_on_a_terminal_and_bracketed_otherwise() -> None:
    from hermes.plugins.sessions.cli import _highlight

    assert _highlight("a >>>match<<< here", True) == "a \x1b[1mmatch\x1b[22m here"
    assert _highlight("a >>>match<<< here", False) == "a [match] here"
