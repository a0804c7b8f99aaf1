"""The CJK bigram stage's work must not grow with the number of CJK messages when it has
nothing to rank, and its cap on candidates must not lose hits a filter asks for.

Work is counted in SQLite virtual-machine steps (a progress handler on the store's read
connection), which is deterministic, unlike wall-clock time."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hermes.plugins.sessions import store as store_module
from hermes.plugins.sessions.store import SQLiteSessionStore

#: Characters of the filler messages; the question below shares no bigram with them.
FILLER = "数据库迁移缓存服务器部署测试环境配置日志错误修复版本更新用户会话索引查询性能"
QUESTION = "去西安旅游你推荐住哪个酒店？"


def _store(path: Path, cjk_messages: int) -> SQLiteSessionStore:
    rng = random.Random(cjk_messages)
    store = SQLiteSessionStore(path)
    sid = store.create_session(source="cli")
    store.append_messages(sid, [{"role": "user", "content": "".join(rng.choices(FILLER, k=30))}
                                for _ in range(cjk_messages)])
    return store


def _steps(store: SQLiteSessionStore, query: str) -> tuple[int, list[dict]]:
    calls = [0]

    def tick() -> int:
        calls[0] += 1
        return 0

    store._read(lambda c: c.set_progress_handler(tick, 100))
    try:
        hits = store.search_messages(query)
    finally:
        store._read(lambda c: c.set_progress_handler(None, 0))
    return calls[0], hits


def test_a_question_about_nothing_discussed_reads_no_messages(tmp_path: Path) -> None:
    small = _store(tmp_path / "small.db", 100)
    large = _store(tmp_path / "large.db", 3000)
    try:
        small_steps, small_hits = _steps(small, QUESTION)
        large_steps, large_hits = _steps(large, QUESTION)
    finally:
        small.close()
        large.close()
    assert small_hits == large_hits == []
    # Before: the bigram stage scored the newest 20,000 CJK messages (30x the work here).
    assert large_steps <= small_steps * 2 + 50, (small_steps, large_steps)


def test_the_candidate_cap_applies_after_the_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "MAX_GRAM_CANDIDATES", 20)
    store = SQLiteSessionStore(tmp_path / "state.db")
    try:
        old = store.create_session(source="cli")
        answer = store.append_message(old, "assistant", "西安的酒店推荐住钟楼附近")
        new = store.create_session(source="cli")
        store.append_messages(new, [{"role": "user", "content": f"西安酒店第{i}次讨论"} for i in range(100)])
        hits = store.search_messages(QUESTION, session_id=old)
        assert [h["id"] for h in hits] == [answer]
        everywhere = store.search_messages(QUESTION, limit=50)
        assert len(everywhere) == 20  # the newest 20 candidates only
        assert all(h["session_id"] == new for h in everywhere)
    finally:
        store.close()
