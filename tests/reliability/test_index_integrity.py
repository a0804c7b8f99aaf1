"""The search indexes are compared with the messages row by row: an index that lost rows
passes SQLite's and FTS5's own checks, so only the comparison finds it. Each damage is
done on purpose with plain SQL on the real file; ``hermes doctor`` and ``hermes sessions
check`` report it with the fix, and ``hermes sessions reindex`` makes it clean."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hermes.plugins.sessions import integrity, schema
from hermes.plugins.sessions.store import SQLiteSessionStore

TEXTS = ["deploy the service", "東京の天気はどうですか", "the logs say 接続 failed", "plain words"]


def filled(path: Path, n: int = 12) -> SQLiteSessionStore:
    store = SQLiteSessionStore(path)
    sid = store.create_session(source="cli")
    store.append_messages(sid, [{"role": "user" if i % 2 == 0 else "assistant",
                                 "content": f"{TEXTS[i % len(TEXTS)]} {i}"} for i in range(n)])
    return store


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def native_checks_pass(path: Path) -> bool:
    """What check_integrity ran before: PRAGMA quick_check and FTS5's integrity-check."""
    with raw(path) as conn:
        if [r[0] for r in conn.execute("PRAGMA quick_check")] != ["ok"]:
            return False
        for table in ("messages_fts", "messages_fts_trigram"):
            try:
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            except sqlite3.DatabaseError:
                return False
    return True


def damage(path: Path, how: str) -> None:
    with raw(path) as conn:
        if how == "word-rows-deleted":
            conn.execute("DELETE FROM messages_fts WHERE rowid IN (SELECT id FROM messages LIMIT 3)")
        elif how == "cjk-rows-deleted":
            conn.execute("DELETE FROM messages_fts_trigram WHERE rowid = (SELECT min(rowid) FROM messages_fts_trigram)")
        elif how == "cjk-stale-row":
            conn.execute("INSERT INTO messages_fts_trigram(rowid, content) VALUES (999999, '古い')")
        elif how == "cjk-outdated-text":
            conn.execute("UPDATE messages_fts_trigram SET content = '別の文章' || char(10) "
                         "WHERE rowid = (SELECT min(rowid) FROM messages_fts_trigram)")
        elif how == "deferred-flag-left":
            conn.execute("INSERT INTO state_meta (key, value) VALUES ('fts_deferred', '1')")


DAMAGE = ["word-rows-deleted", "cjk-rows-deleted", "cjk-stale-row", "cjk-outdated-text",
          "deferred-flag-left"]


@pytest.mark.parametrize("how", DAMAGE)
def test_damage_the_native_checks_miss_is_found_and_reindex_cleans_it(how, tmp_path):
    path = tmp_path / "state.db"
    store = filled(path)
    try:
        assert store.check_integrity() == []
        damage(path, how)
        if how != "deferred-flag-left":
            assert native_checks_pass(path)  # the old check_integrity said "sound"
        problems = store.check_integrity()
        assert problems, how
        store.reindex()  # a leaked flag is removed too
        assert store.check_integrity() == []
    finally:
        store.close()


def test_a_budget_stops_the_comparison_and_says_how_far_it_got(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    store = filled(path, n=40)
    try:
        monkeypatch.setattr(integrity, "STEP", 10)
        full = store.compare_indexes()
        assert full.complete and full.checked_to == full.last_id == 40
        part = store.compare_indexes(budget=0)  # stops after the first range
        assert not part.complete and part.checked_to == 9
        damage(path, "word-rows-deleted")  # ids 1..3: inside the first range
        assert store.compare_indexes(budget=0).problems
    finally:
        store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.sampled_from(TEXTS) | st.text(max_size=20), min_size=1, max_size=30),
       drop=st.lists(st.integers(min_value=0, max_value=29), max_size=5), edit=st.booleans())
@example(texts=["0㐀", "deploy the service"], drop=[], edit=True)  # a glued message edited
def test_any_sound_store_compares_clean_and_any_lost_row_is_found(tmp_path_factory, texts, drop, edit):
    path = tmp_path_factory.mktemp("db") / "state.db"
    store = SQLiteSessionStore(path)
    try:
        sid = store.create_session(source="cli")
        ids = store.append_messages(sid, [{"role": "user", "content": t} for t in texts])
        if edit:  # an edit as the store's writers make one (forget): the triggers keep the
            # word and CJK indexes right; the split-words row is written again in Python
            with raw(path) as conn:
                conn.execute("UPDATE messages SET content = content || ' 追記' WHERE id = ?", (ids[0],))
                schema.index_split(conn, ids[0], ids[0])
                conn.execute("DELETE FROM messages WHERE id = ?", (ids[-1],))
        assert store.compare_indexes().problems == []
        lost = sorted({ids[i] for i in drop if i < len(ids) - 1})
        if lost:
            with raw(path) as conn:
                for i in lost:
                    conn.execute("DELETE FROM messages_fts WHERE rowid = ?", (i,))
            problems = store.compare_indexes().problems
            assert len(problems) == 1 and f"missing {len(lost)} message(s)" in problems[0]
    finally:
        store.close()


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), ANTHROPIC_API_KEY="fake-key")
    return subprocess.run([sys.executable, "-m", "hermes.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.slow  # hermes processes
def test_doctor_and_sessions_check_report_it_with_the_fix(tmp_path):
    filled(tmp_path / "state.db").close()
    assert hermes(tmp_path, "sessions", "check").returncode == 0
    damage(tmp_path / "state.db", "word-rows-deleted")
    for args in (["doctor"], ["sessions", "check"]):
        proc = hermes(tmp_path, *args)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        assert "missing 3 message(s)" in out and "hermes sessions reindex" in out, out
        assert "Traceback" not in out
    assert hermes(tmp_path, "sessions", "reindex").returncode == 0
    proc = hermes(tmp_path, "sessions", "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doctor = hermes(tmp_path, "doctor")
    assert "missing" not in doctor.stdout + doctor.stderr
