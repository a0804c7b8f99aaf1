"""Property tests of full-text search: any text is a valid query.

* every stage the planner makes, rendered and run by the store's own SQL
  (``explain_search``), is accepted by SQLite, whatever the user typed;
* the store's ``search_messages`` returns a list for any input and never has to fall
  back on its "search failed" safety net (which would hide a planner bug);
* a word that is in a stored message finds that message.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hermes.plugins.sessions.store import SQLiteSessionStore

# Text that hits the sanitizer's edge cases often: FTS5 syntax characters, operators,
# quotes, wildcards, CJK, combining marks, controls, surrogate-free unicode.
SPECIALS = st.sampled_from(list('"*^+-(){}[]:.,;!?@#$%&|~<>/\\\'_=') + [
    " AND ", " OR ", " NOT ", " NEAR(", "数据库", "记忆", "한", "カ", "\u0301", "\x00", "\u200b"])
QUERIES = st.one_of(
    st.text(max_size=80),
    st.lists(st.one_of(SPECIALS, st.text(alphabet=string.ascii_letters, min_size=1, max_size=6)),
             max_size=12).map("".join),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteSessionStore]:
    s = SQLiteSessionStore(Path(tmp_path_factory.mktemp("prop")) / "state.db")
    sid = s.create_session(source="cli")
    s.append_messages(sid, [
        {"role": "user", "content": "deploy the staging database to Postgres"},
        {"role": "assistant", "content": "我们讨论了数据库迁移的问题 (C++ and NEAR too)"},
        {"role": "tool", "content": "100% done_ok", "name": "terminal"},
    ])
    yield s
    s.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(QUERIES, st.booleans())
def test_every_planned_stage_runs(store: SQLiteSessionStore, query: str, fallback: bool) -> None:
    # The store's own SQL for every stage (none skipped), against its real tables: a
    # stage FTS5 or SQLite rejects raises here instead of being hidden by the safety net.
    for stage in store.explain_search(query, fallback=fallback):
        assert stage["mode"] in ("strict", "relaxed", "trigram", "like")
        assert isinstance(stage["hits"], list)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(QUERIES, st.integers(-3, 30), st.integers(-3, 10))
def test_search_never_raises_and_returns_a_list(store: SQLiteSessionStore, caplog: pytest.LogCaptureFixture,
                                                query: str, limit: int, offset: int) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hermes.sessions"):
        hits = store.search_messages(query, limit=limit, offset=offset)
    assert isinstance(hits, list)
    assert not [r for r in caplog.records if "failed" in r.getMessage()], caplog.text
    assert len(hits) <= max(0, limit)
    for hit in hits:
        assert hit["mode"] in ("strict", "relaxed", "trigram", "like", "strict-recent", "relaxed-recent",
                               "trigram-recent")


WORD = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=2, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(WORD, min_size=1, max_size=8), st.data())
def test_a_stored_word_finds_its_message(store: SQLiteSessionStore, words: list[str], data: st.DataObject) -> None:
    marker = "zq" + "".join(words[:2])
    assume(len(marker) <= 40)
    text = " ".join([*words, marker])
    mid = store.append_message("prop-words", "user", text)
    probe = data.draw(st.sampled_from([*words, marker]))
    hits = store.search_messages(probe, limit=1000, fallback=False)
    assert mid in {h["id"] for h in hits}
    assert mid in {h["id"] for h in store.search_messages(marker[:4] + "*", limit=10_000)}
