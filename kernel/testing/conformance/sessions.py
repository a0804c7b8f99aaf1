"""Conformance suite for :class:`hermes.SessionStore`.

Subclass it in your plugin's tests and provide a ``store`` fixture that yields a fresh,
empty store (and closes it afterwards)::

    import pytest
    from hermes.testing.conformance import SessionStoreConformance

    class TestMyStore(SessionStoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            s = MyStore(dsn=...)
            yield s
            s.close()

The tests use only the public contract (no SQL, no file layout), pass explicit
timestamps where order matters, and never sleep, so a server-backed store (PostgreSQL …)
passes them unchanged. Search tests use ordinary English words and a few CJK sentences;
the contract's search semantics (AND of terms, phrases, prefixes, sanitized syntax, the
relaxed fallback, CJK substring search) are what they pin, not how a store implements
them.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from ...session_rows import MESSAGE_FIELDS, SESSION_FIELDS

T0 = 1_700_000_000.0  # a fixed "now" for stores that accept explicit times


def _call(name: str, args: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


class SessionStoreConformance:
    """Behaviour every session store must have. Override the ``store`` fixture."""

    @pytest.fixture
    def store(self) -> Any:  # pragma: no cover - the subclass provides it
        raise NotImplementedError("override the `store` fixture to yield a fresh store")

    # -- helpers ------------------------------------------------------------------------

    def _session_with(self, store: Any, texts: list[str], *, source: str = "cli",
                      start: float = T0, role: str = "user") -> str:
        sid = store.create_session(source=source, started_at=start)
        for i, text in enumerate(texts):
            store.append_message(sid, role, text, timestamp=start + i)
        return sid

    # -- sessions -----------------------------------------------------------------------

    def test_is_a_session_store(self, store: Any) -> None:
        import hermes

        assert isinstance(store, hermes.SessionStore)

    def test_create_and_get(self, store: Any) -> None:
        sid = store.create_session(
            "s-1", source="telegram", model="m-1", model_config={"temperature": 0.2},
            system_prompt="You are Hermes.", user_id="u-1", cwd="/work", started_at=T0)
        assert sid == "s-1"
        row = store.get_session("s-1")
        assert row["id"] == "s-1" and row["source"] == "telegram" and row["model"] == "m-1"
        assert row["model_config"] == {"temperature": 0.2}
        assert row["system_prompt"] == "You are Hermes." and row["user_id"] == "u-1"
        assert row["cwd"] == "/work" and row["started_at"] == pytest.approx(T0)
        assert row["ended_at"] is None and row["end_reason"] is None
        assert row["message_count"] == 0 and row["tool_call_count"] == 0
        for key in ("input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "reasoning_tokens"):
            assert row[key] == 0
        assert row["title"] is None and row["parent_session_id"] is None
        assert set(row) >= set(SESSION_FIELDS)  # every key the contract names
        assert store.get_session("nope") is None

    def test_create_is_idempotent_and_generates_unique_ids(self, store: Any) -> None:
        store.create_session("same", source="cli", model="first")
        assert store.create_session("same", source="discord", model="second") == "same"
        assert store.get_session("same")["model"] == "first"
        ids = {store.create_session() for _ in range(50)}
        assert len(ids) == 50 and all(store.get_session(i) for i in ids)

    def test_unknown_parent_is_dropped(self, store: Any) -> None:
        sid = store.create_session(parent_session_id="does-not-exist")
        assert store.get_session(sid)["parent_session_id"] is None

    def test_system_prompt_end_and_reopen(self, store: Any) -> None:
        sid = store.create_session()
        store.update_system_prompt(sid, "frozen prompt")
        assert store.get_session(sid)["system_prompt"] == "frozen prompt"
        store.end_session(sid, "compression")
        row = store.get_session(sid)
        assert row["end_reason"] == "compression" and row["ended_at"] is not None
        store.end_session(sid, "user_exit")  # the first end wins
        assert store.get_session(sid)["end_reason"] == "compression"
        store.reopen_session(sid)
        row = store.get_session(sid)
        assert row["ended_at"] is None and row["end_reason"] is None
        store.end_session(sid, "user_exit", ended_at=T0 + 5)
        row = store.get_session(sid)
        assert row["end_reason"] == "user_exit" and row["ended_at"] == pytest.approx(T0 + 5)

    # -- messages -----------------------------------------------------------------------

    def test_append_and_read_back(self, store: Any) -> None:
        sid = store.create_session()
        calls = [_call("terminal", {"command": "ls -la"}, "c1"), _call("read_file", {"path": "a.py"}, "c2")]
        ids = [
            store.append_message(sid, "user", "list the files", timestamp=T0, token_count=4),
            store.append_message(sid, "assistant", "", tool_calls=calls, timestamp=T0 + 1,
                                 finish_reason="tool_calls", reasoning="need to look"),
            store.append_message(sid, "tool", "a.py b.py", tool_name="terminal",
                                 tool_call_id="c1", timestamp=T0 + 2),
            store.append_message(sid, "tool", "print(1)", tool_name="read_file",
                                 tool_call_id="c2", timestamp=T0 + 3),
            store.append_message(sid, "assistant", "Two files.", timestamp=T0 + 4),
        ]
        assert ids == sorted(ids) and len(set(ids)) == 5
        rows = store.get_messages(sid)
        assert [r["id"] for r in rows] == ids
        assert [r["role"] for r in rows] == ["user", "assistant", "tool", "tool", "assistant"]
        assert rows[0]["content"] == "list the files" and rows[0]["token_count"] == 4
        assert rows[1]["tool_calls"] == calls
        assert rows[1]["finish_reason"] == "tool_calls" and rows[1]["reasoning"] == "need to look"
        assert rows[2]["tool_name"] == "terminal" and rows[2]["tool_call_id"] == "c1"
        assert rows[3]["timestamp"] == pytest.approx(T0 + 3)
        assert all(r["session_id"] == sid for r in rows)
        assert all(set(r) >= set(MESSAGE_FIELDS) for r in rows)  # every key the contract names
        session = store.get_session(sid)
        assert session["message_count"] == 5
        assert session["tool_call_count"] == 2  # two calls; tool results count nothing
        assert session["last_active_at"] == pytest.approx(T0 + 4)

    def test_conversation_shape(self, store: Any) -> None:
        sid = store.create_session()
        call = _call("terminal", {"command": "pwd"})
        store.append_message(sid, "user", "where am I")
        store.append_message(sid, "assistant", None, tool_calls=[call])
        store.append_message(sid, "tool", "/home", tool_name="terminal", tool_call_id="call_1")
        assert store.get_conversation(sid) == [
            {"role": "user", "content": "where am I"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "/home", "tool_call_id": "call_1", "name": "terminal"},
        ]

    def test_append_to_unknown_session_creates_it(self, store: Any) -> None:
        store.append_message("brand-new", "user", "never lose me")
        assert store.get_session("brand-new") is not None
        assert [m["content"] for m in store.get_messages("brand-new")] == ["never lose me"]

    def test_unusable_numbers_do_not_lose_the_message(self, store: Any) -> None:
        """A timestamp that is not a finite number is stored as the time of the write, a
        token count that is not a number as ``None``: the message is kept either way."""
        sid = store.create_session()
        before = time.time()
        store.append_message(sid, "user", "nan time", timestamp=float("nan"), token_count="many")
        store.append_message(sid, "user", "inf time", timestamp=float("inf"))
        store.append_messages(sid, [{"role": "user", "content": "bulk nan", "timestamp": float("-inf"),
                                     "token_count": float("nan")}])
        rows = store.get_messages(sid)
        assert [r["content"] for r in rows] == ["nan time", "inf time", "bulk nan"]
        assert all(before - 1 <= r["timestamp"] <= time.time() + 1 for r in rows)
        assert rows[0]["token_count"] is None and rows[2]["token_count"] is None

    def test_broken_text_is_stored(self, store: Any) -> None:
        """A lone surrogate (from a broken source) is stored as U+FFFD and a non-string
        as its ``str()``; a NUL character is kept or dropped as the store can hold it
        (hermes.stored_text); the message is kept either way."""
        sid = store.create_session()
        store.append_message(sid, "user", "broken \ud800 surrogate", tool_name=7)
        store.append_messages(sid, [{"role": "assistant", "content": "nul\x00inside"}])
        rows = store.get_messages(sid)
        assert rows[0]["content"] == "broken \ufffd surrogate" and rows[0]["tool_name"] == "7"
        assert rows[1]["content"] in ("nul\x00inside", "nulinside")

    def test_append_messages_bulk(self, store: Any) -> None:
        sid = store.create_session()
        msgs: list[dict[str, Any]] = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"bulk line {i}",
             "timestamp": T0 + i} for i in range(30)]
        msgs.append({"role": "assistant", "content": "", "tool_calls": [_call("grep", {"q": "x"})]})
        msgs.append({"role": "tool", "content": "found", "name": "grep", "tool_call_id": "call_1"})
        ids = store.append_messages(sid, msgs)
        assert len(ids) == 32 and ids == sorted(ids)
        rows = store.get_messages(sid)
        assert [r["content"] for r in rows[:30]] == [f"bulk line {i}" for i in range(30)]
        assert rows[-1]["tool_name"] == "grep"
        assert store.get_session(sid)["message_count"] == 32
        assert store.get_session(sid)["tool_call_count"] == 1
        assert store.search_messages("bulk line 17")[0]["id"] == ids[17]

    def test_batch_groups_writes(self, store: Any) -> None:
        with store.batch():
            sid = store.create_session("batched", started_at=T0)
            store.append_messages(sid, [{"role": "user", "content": "batched armadillo"},
                                        {"role": "assistant", "content": "noted"}])
            store.append_message(sid, "user", "single armadillo")
            assert store.get_session(sid)["message_count"] == 3  # reads see the batch
            store.set_meta("conformance:batch", "yes")
            assert store.get_meta("conformance:batch") == "yes"
        assert len(store.search_messages("armadillo", fallback=False)) == 2
        assert [m["content"] for m in store.get_messages(sid)] == [
            "batched armadillo", "noted", "single armadillo"]

    def test_writer_lock_is_none_or_exclusive(self, store: Any) -> None:
        """``writer_lock`` is optional (``None``: the runtime uses its file lock); a lock
        a store does offer admits one holder per conversation, refuses a second at once
        with ``hermes.SessionBusyError`` naming the conversation, and frees it on release."""
        import hermes

        first = store.writer_lock("conformance-conv")
        if first is None:
            return
        first.acquire()
        try:
            second = store.writer_lock("conformance-conv")
            with pytest.raises(hermes.SessionBusyError) as info:
                second.acquire()
            assert info.value.session_id == "conformance-conv" and "conformance-conv" in str(info.value)
            other = store.writer_lock("conformance-other")  # another conversation is free
            other.acquire()
            other.release()
        finally:
            first.release()
        again = store.writer_lock("conformance-conv")
        again.acquire()
        again.release()

    def test_export_session(self, store: Any) -> None:
        sid = self._session_with(store, ["one", "two"])
        data = store.export_session(sid)
        assert data["session"]["id"] == sid
        assert [m["content"] for m in data["messages"]] == ["one", "two"]
        assert store.export_session("missing") is None

    # -- accounting ---------------------------------------------------------------------

    def test_token_counts(self, store: Any) -> None:
        sid = store.create_session()
        store.update_token_counts(sid, input_tokens=10, output_tokens=5, cache_read_tokens=100,
                                  cache_write_tokens=7, reasoning_tokens=3,
                                  estimated_cost_usd=0.5, model="m-a")
        store.update_token_counts(sid, input_tokens=1, output_tokens=2, model="m-b")
        row = store.get_session(sid)
        assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"],
                row["cache_write_tokens"], row["reasoning_tokens"]) == (11, 7, 100, 7, 3)
        assert row["estimated_cost_usd"] == pytest.approx(0.5)
        assert row["model"] == "m-a"  # filled only when empty
        store.update_token_counts(sid, input_tokens=3, output_tokens=4, estimated_cost_usd=0.25,
                                  absolute=True)
        row = store.get_session(sid)
        assert (row["input_tokens"], row["output_tokens"]) == (3, 4)
        assert row["estimated_cost_usd"] == pytest.approx(0.25)

    # -- titles and resolution ------------------------------------------------------------

    def test_titles(self, store: Any) -> None:
        a, b = store.create_session(), store.create_session()
        assert store.set_title(a, "  My\u200b   project \n") == "My project"
        assert store.get_session(a)["title"] == "My project"
        with pytest.raises(ValueError):
            store.set_title(b, "My project")
        assert store.set_title(a, "My project") == "My project"  # same session: fine
        assert store.set_title(a, "   ") is None
        assert store.get_session(a)["title"] is None
        assert store.set_title(b, "x" * 100) == "x" * 100
        with pytest.raises(ValueError):
            store.set_title(b, "x" * 101)

    def test_next_title_in_lineage(self, store: Any) -> None:
        assert store.next_title_in_lineage("Fresh") == "Fresh"
        s1, s2, s3 = (store.create_session() for _ in range(3))
        store.set_title(s1, "Deploy")
        assert store.next_title_in_lineage("Deploy") == "Deploy #2"
        store.set_title(s2, "Deploy #2")
        assert store.next_title_in_lineage("Deploy") == "Deploy #3"
        assert store.next_title_in_lineage("Deploy #2") == "Deploy #3"
        store.set_title(s3, "Deploy_ #9")  # '_' is no wildcard
        assert store.next_title_in_lineage("Deploy") == "Deploy #3"

    def test_resolve_session(self, store: Any) -> None:
        a = store.create_session("abc123-first", started_at=T0)
        store.create_session("abd999-second", started_at=T0 + 1)
        store.create_session("x%y", started_at=T0 + 2)
        assert store.resolve_session("abc123-first") == a
        assert store.resolve_session("abc") == a
        assert store.resolve_session("ab") is None  # ambiguous
        assert store.resolve_session("%") is None and store.resolve_session("_") is None
        assert store.resolve_session("x%") == "x%y"
        assert store.resolve_session("") is None and store.resolve_session("zzz") is None
        root = store.create_session("t-1", started_at=T0 + 3)
        cont = store.create_session("t-2", started_at=T0 + 4)
        store.set_title(root, "Trip plan")
        store.set_title(cont, "Trip plan #2")
        assert store.resolve_session("Trip plan") == cont  # the newest continuation
        assert store.resolve_session("Trip plan #2") == cont

    # -- lineage ------------------------------------------------------------------------

    def _compressed_chain(self, store: Any) -> tuple[str, str, str]:
        root = store.create_session("chain-1", started_at=T0)
        store.end_session(root, "compression", ended_at=T0 + 10)
        mid = store.create_session("chain-2", parent_session_id=root, started_at=T0 + 10)
        store.end_session(mid, "compression", ended_at=T0 + 20)
        tip = store.create_session("chain-3", parent_session_id=mid, started_at=T0 + 20)
        return root, mid, tip

    def test_lineage_root_and_compression_tip(self, store: Any) -> None:
        root, mid, tip = self._compressed_chain(store)
        assert store.lineage_root(tip) == root and store.lineage_root(mid) == root
        assert store.lineage_root(root) == root and store.lineage_root("unknown") == "unknown"
        assert store.compression_tip(root) == tip and store.compression_tip(mid) == tip
        assert store.compression_tip(tip) == tip

    def test_tip_ignores_delegation_children(self, store: Any) -> None:
        parent = store.create_session("p", started_at=T0)
        store.create_session("sub", parent_session_id=parent, source="subagent", started_at=T0 + 1)
        assert store.compression_tip(parent) == parent  # live parent: not compressed
        store.end_session(parent, "compression", ended_at=T0 + 5)
        cont = store.create_session("cont", parent_session_id=parent, started_at=T0 + 5)
        assert store.compression_tip(parent) == cont  # the sub-agent started before the end

    def test_tip_follows_undo_continuations(self, store: Any) -> None:
        """``/undo`` ends the session with ``undo`` and continues in a child, like a
        compaction (hermes.CONTINUED_REASONS); other end reasons are not followed."""
        first = store.create_session("u1", started_at=T0)
        store.end_session(first, "undo", ended_at=T0 + 5)
        second = store.create_session("u2", parent_session_id=first, started_at=T0 + 5)
        store.end_session(second, "compression", ended_at=T0 + 9)
        third = store.create_session("u3", parent_session_id=second, started_at=T0 + 9)
        assert store.compression_tip(first) == third and store.lineage_root(third) == first
        ended = store.create_session("n1", started_at=T0)
        store.end_session(ended, "new_session", ended_at=T0 + 5)
        store.create_session("n2", parent_session_id=ended, started_at=T0 + 6)
        assert store.compression_tip(ended) == ended

    def test_split_session(self, store: Any) -> None:
        parent = self._session_with(store, ["deploy with rsync", "then restart"])
        store.set_title(parent, "Deploys")
        summary = [{"role": "user", "content": "summary of the deploy talk"},
                   {"role": "assistant", "content": "", "tool_calls": [_call("restart", {})]},
                   {"role": "tool", "tool_call_id": "call_1", "name": "restart", "content": "ok"}]
        child = store.split_session(parent, summary, model="m", model_config={"note": "x"},
                                    title="Deploys #2", cwd="/work")
        row, old = store.get_session(child), store.get_session(parent)
        assert row["parent_session_id"] == parent and row["title"] == "Deploys #2"
        assert row["model_config"] == {"note": "x"} and row["ended_at"] is None
        assert old["end_reason"] == "compression" and old["ended_at"] is not None
        assert store.compression_tip(parent) == child
        assert store.get_conversation(child) == [
            {"role": "user", "content": "summary of the deploy talk"},
            {"role": "assistant", "content": "", "tool_calls": [_call("restart", {})]},
            {"role": "tool", "content": "ok", "tool_call_id": "call_1", "name": "restart"}]
        assert len(store.get_messages(parent)) == 2  # the parent keeps its transcript
        # a title taken meanwhile leaves the continuation untitled instead of failing
        other = store.split_session(child, [{"role": "user", "content": "again"}], title="Deploys")
        assert store.get_session(other)["title"] is None

    def test_children_and_lineage(self, store: Any) -> None:
        root, mid, tip = self._compressed_chain(store)
        sub = store.create_session("chain-sub", parent_session_id=mid, source="subagent",
                                   started_at=T0 + 15)
        assert [c["id"] for c in store.children(root)] == [mid]
        assert [c["id"] for c in store.children(mid)] == [sub, tip]
        assert store.lineage(tip) == [root, mid, sub, tip]

    def test_list_sessions_one_row_per_conversation(self, store: Any) -> None:
        root, mid, tip = self._compressed_chain(store)
        store.append_message(root, "user", "first question " + "x" * 100, timestamp=T0 + 1)
        store.append_message(tip, "user", "later", timestamp=T0 + 30)
        other = self._session_with(store, ["other chat"], start=T0 + 25, source="discord")
        rows = store.list_sessions()
        assert [r["id"] for r in rows] == [root, other]  # root is newer by its tip's activity
        top = rows[0]
        assert top["tip_id"] == tip and top["lineage_size"] == 3 and top["lineage_messages"] == 2
        assert top["last_active"] == pytest.approx(T0 + 30)
        assert top["preview"] == ("first question " + "x" * 100)[:60] + "..."
        assert len(top["preview"]) == 63
        assert rows[1]["preview"] == "other chat"
        assert {r["id"] for r in store.list_sessions(roots_only=False)} == {root, mid, tip, other}
        assert [r["id"] for r in store.list_sessions(source="discord")] == [other]
        assert [r["id"] for r in store.list_sessions(exclude_sources=["discord"])] == [root]
        assert [r["id"] for r in store.list_sessions(limit=1, offset=1)] == [other]

    def test_list_sessions_page_bounds_never_raise(self, store: Any) -> None:
        # The same rule as search (hermes.search_page): not a usable number -> the first
        # page of 20, negative -> 0, too large for SQL -> the largest bound SQL takes.
        ids = [store.create_session(started_at=T0 + i) for i in range(3)][::-1]
        def listed(**kw: Any) -> list[str]:
            return [r["id"] for r in store.list_sessions(**kw)]
        for bad in ("many", float("inf"), float("-inf"), float("nan"), None, 10**30):
            assert listed(limit=bad) == ids, bad
            assert listed(offset=bad) == ([] if bad == 10**30 else ids), bad
        assert listed(limit=-1) == [] and listed(offset=-5) == ids
        assert listed(limit="2", offset=1.5) == ids[1:3]

    def test_list_preview_and_last_active_fallbacks(self, store: Any) -> None:
        sid = store.create_session(started_at=T0)
        store.append_message(sid, "assistant", "no user message here", timestamp=T0 + 3)
        empty = store.create_session(started_at=T0 - 100)
        rows = {r["id"]: r for r in store.list_sessions()}
        assert rows[sid]["preview"] == ""
        assert rows[empty]["last_active"] == pytest.approx(T0 - 100)
        sid2 = store.create_session(started_at=T0 + 50)
        store.append_message(sid2, "user", "line one\nline two", timestamp=T0 + 51)
        assert {r["id"]: r for r in store.list_sessions()}[sid2]["preview"] == "line one line two"

    # -- delete and prune -----------------------------------------------------------------

    def test_delete_session(self, store: Any) -> None:
        parent = self._session_with(store, ["zebra crossing notes"])
        child = store.create_session(parent_session_id=parent)
        assert store.search_messages("zebra")
        assert store.delete_session(parent) is True
        assert store.get_session(parent) is None and store.get_messages(parent) == []
        assert store.search_messages("zebra") == []
        assert store.get_session(child)["parent_session_id"] is None
        assert store.delete_session(parent) is False

    def test_prune_only_old_ended_sessions(self, store: Any) -> None:
        old = time.time() - 200 * 86400
        ended_old = store.create_session(started_at=old, source="cron")
        store.end_session(ended_old, "user_exit")
        live_old = store.create_session(started_at=old)
        ended_new = store.create_session()
        store.end_session(ended_new, "user_exit")
        other_old = store.create_session(started_at=old, source="cli")
        store.end_session(other_old, "user_exit")
        assert store.prune_sessions(90, source="cron") == 1
        assert store.get_session(ended_old) is None and store.get_session(other_old) is not None
        assert store.prune_sessions(90) == 1
        assert store.get_session(other_old) is None
        assert store.get_session(live_old) is not None and store.get_session(ended_new) is not None

    # -- search -------------------------------------------------------------------------

    def test_search_finds_content_with_hit_shape(self, store: Any) -> None:
        sid = self._session_with(store, ["before it", "the kubernetes cluster restarted", "after it"])
        store.set_title(sid, "Cluster night")
        hits = store.search_messages("kubernetes")
        assert len(hits) == 1
        hit = hits[0]
        for key in ("id", "session_id", "role", "snippet", "timestamp", "source", "model",
                    "session_started", "session_title", "context", "mode", "score", "tool_name"):
            assert key in hit, key
        assert hit["session_id"] == sid and hit["role"] == "user" and hit["mode"] == "strict"
        assert ">>>" in hit["snippet"] and "<<<" in hit["snippet"]
        assert "kubernetes" in hit["snippet"].lower()
        assert hit["session_title"] == "Cluster night" and hit["source"] == "cli"
        assert [c["content"] for c in hit["context"]] == ["before it", "after it"]

    def test_search_empty_and_unusable_queries(self, store: Any) -> None:
        self._session_with(store, ["some content about C and problems"])
        for query in ("", "   ", "***", '""', "AND", "OR NOT", "()", None, 42):
            assert store.search_messages(query) == []

    @pytest.mark.parametrize("query", [
        "C++", '"unterminated', "(problem", "hello AND", "***", "{test}", "OR hello",
        "a AND OR b", "NOT", "col:value", "deploy*", "*", "-", "a\x00b", "'; DROP TABLE messages; --",
        "NEAR(a b)", "^start", "x" * 5000, "\u200b", "数", "数据", "\ufffd\ud7ff", "%_%", "\\",
    ])
    def test_search_never_raises(self, store: Any, query: str) -> None:
        self._session_with(store, ["hello problem test deploy value start 数据库"])
        assert isinstance(store.search_messages(query), list)

    def test_a_failing_search_returns_nothing_and_logs_once(
            self, store: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
        # The contract's search_messages keeps "never raises" for every store: whatever
        # the store's own search (_search_messages) raises becomes [] and one warning
        # naming the store, so a store cannot forget the guard.
        self._session_with(store, ["narwhal tusk"])
        def broken(query: Any, **kw: Any) -> list[Any]:
            raise RuntimeError("the index is gone")
        monkeypatch.setattr(store, "_search_messages", broken)
        with caplog.at_level(logging.WARNING, logger="hermes.sessions"):
            assert store.search_messages("narwhal", limit="x") == []
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, warnings
        assert store.name in warnings[0] and "'narwhal'" in warnings[0] and "the index is gone" in warnings[0]

    def test_search_operators_phrases_prefix(self, store: Any) -> None:
        a = self._session_with(store, ["the staging database moved", "database backups nightly"])
        rows = store.get_messages(a)
        ids = [r["id"] for r in rows]
        def found(query: str) -> set[int]:
            return {h["id"] for h in store.search_messages(query, fallback=False)}

        assert found("database staging") == {ids[0]}
        assert found('"staging database"') == {ids[0]}
        assert found('"database staging"') == set()
        assert found("staging OR nightly") == set(ids)
        assert found("database NOT staging") == {ids[1]}
        assert found("backu*") == {ids[1]}

    def test_search_compound_terms(self, store: Any) -> None:
        sid = self._session_with(store, ["edit my-app.config.ts for the chat-send hook",
                                         "set max_retries in P2.2", "my app config"])
        ids = [r["id"] for r in store.get_messages(sid)]
        assert {h["id"] for h in store.search_messages("my-app.config.ts")} == {ids[0]}
        assert {h["id"] for h in store.search_messages("chat-send")} == {ids[0]}
        assert {h["id"] for h in store.search_messages("max_retries")} == {ids[1]}
        assert {h["id"] for h in store.search_messages("P2.2")} == {ids[1]}

    def test_search_tool_names_and_arguments(self, store: Any) -> None:
        sid = store.create_session()
        call = _call("web_fetch", {"url": "https://example.org/quokka-facts"})
        mid = store.append_message(sid, "assistant", "", tool_calls=[call])
        rid = store.append_message(sid, "tool", "ok", tool_name="terminal", tool_call_id="call_1")
        assert {h["id"] for h in store.search_messages("quokka")} == {mid}
        assert {h["id"] for h in store.search_messages("web_fetch")} == {mid}
        assert {h["id"] for h in store.search_messages("terminal")} == {rid}

    def test_a_nameless_tool_result_is_named_by_its_call_however_far_back(self, store: Any) -> None:
        # OpenAI-format transcripts give a tool result only its tool_call_id: the hit
        # takes the name from the assistant call with that id, even with more than 60
        # messages (55 other calls) in between.
        sid = store.create_session(started_at=T0)
        store.append_message(sid, "assistant", "", tool_calls=[_call("web_fetch", {"url": "u"}, "call_far")])
        store.append_messages(sid, [m for i in range(55) for m in (
            {"role": "assistant", "content": "", "tool_calls": [_call("terminal", {"cmd": "ls"}, f"c{i}")]},
            {"role": "tool", "content": f"listing {i}", "tool_call_id": f"c{i}", "name": "terminal"})])
        far = store.append_message(sid, "tool", "platypus habitat page", tool_call_id="call_far")
        near = store.append_message(sid, "tool", "wombat burrow output", tool_call_id="c54")
        assert [(h["id"], h["tool_name"]) for h in store.search_messages("platypus")] == [(far, "web_fetch")]
        assert [(h["id"], h["tool_name"]) for h in store.search_messages("wombat")] == [(near, "terminal")]
        assert store.get_messages(sid)[-1]["tool_name"] is None  # the stored row is left as written

    def test_a_nameless_tool_result_is_named_whatever_its_call_id_holds(self, store: Any) -> None:
        # An id is any string: quotes, backslashes and non-ASCII text are escaped or kept
        # when the call is stored as JSON, and the id must still be found.
        sid = store.create_session(started_at=T0)
        odd = ['call "7" \\ x', "调用-ü", "c 1/2"]
        store.append_messages(sid, [{"role": "assistant", "content": "", "tool_calls": [_call(f"tool_{i}", {}, cid)]}
                                    for i, cid in enumerate(odd)])
        store.append_messages(sid, [{"role": "tool", "content": f"okapi result {i}", "tool_call_id": cid}
                                    for i, cid in enumerate(odd)])
        named = {h["snippet"].split()[-1]: h["tool_name"] for h in store.search_messages("okapi")}
        assert named == {"0": "tool_0", "1": "tool_1", "2": "tool_2"}, named

    def test_search_filters(self, store: Any) -> None:
        a = self._session_with(store, ["walrus on telegram"], source="telegram", start=T0)
        b = self._session_with(store, ["walrus on the cli"], source="cli", start=T0 + 100)
        store.append_message(b, "assistant", "walrus answer", timestamp=T0 + 200)
        def ids(**kw: Any) -> set[str]:
            return {h["session_id"] + ":" + h["role"] for h in store.search_messages("walrus", **kw)}
        assert ids(source_filter=["telegram"]) == {f"{a}:user"}
        assert ids(exclude_sources=["telegram"]) == {f"{b}:user", f"{b}:assistant"}
        assert ids(role_filter=["assistant"]) == {f"{b}:assistant"}
        assert ids(session_id=a) == {f"{a}:user"}
        assert ids(since=T0 + 50) == {f"{b}:user", f"{b}:assistant"}
        assert ids(until=T0 + 150) == {f"{a}:user", f"{b}:user"}
        assert ids(since=T0 + 150, until=T0 + 250) == {f"{b}:assistant"}

    def test_search_pagination(self, store: Any) -> None:
        self._session_with(store, [f"capybara fact number {i}" for i in range(12)])
        pages = [store.search_messages("capybara", limit=5, offset=o) for o in (0, 5, 10)]
        assert [len(p) for p in pages] == [5, 5, 2]
        seen = [h["id"] for p in pages for h in p]
        assert len(set(seen)) == 12
        assert store.search_messages("capybara", limit=0) == []
        # a limit or offset that is not a usable number: the first page of 20 (hermes.search_page)
        for bad in ({"limit": "many"}, {"limit": float("inf")}, {"offset": None}, {"limit": 10**30}):
            assert len(store.search_messages("capybara", **bad)) == 12, bad
        assert store.search_messages("capybara", offset=10**30) == []

    def test_ranking_prefers_better_matches(self, store: Any) -> None:
        self._session_with(store, [
            "ocelot " + "filler words " * 30,
            "ocelot ocelot ocelot habitat",
        ])
        hits = store.search_messages("ocelot")
        assert hits[0]["snippet"].count("ocelot") >= 3

    def test_natural_language_question_falls_back(self, store: Any) -> None:
        sid = self._session_with(store, [
            "Moved the staging database from MySQL to Postgres last Tuesday.",
            "Lunch order: noodles.",
        ])
        target = store.get_messages(sid)[0]["id"]
        question = "when did I move the staging database to Postgres?"
        assert store.search_messages(question, fallback=False) == []
        hits = store.search_messages(question)
        assert hits and hits[0]["id"] == target and hits[0]["mode"] == "relaxed"

    def test_relaxed_hits_follow_strict_hits(self, store: Any) -> None:
        self._session_with(store, ["meerkat burrow map", "meerkat alone", "burrow alone"])
        hits = store.search_messages("meerkat burrow")
        modes = [h["mode"] for h in hits]
        assert modes[0] == "strict" and set(modes[1:]) == {"relaxed"} and len(hits) == 3
        assert "meerkat" in hits[0]["snippet"] and "burrow" in hits[0]["snippet"]

    def test_cjk_search(self, store: Any) -> None:
        sid = self._session_with(store, [
            "我们讨论了记忆断裂问题的解决方案",
            "广西桂林的漓江很美",
            "plain english text",
        ])
        ids = [r["id"] for r in store.get_messages(sid)]
        hits = store.search_messages("记忆断裂")
        assert [h["id"] for h in hits][:1] == [ids[0]] and hits[0]["mode"] == "trigram"
        hits = store.search_messages("断裂")  # two characters: below trigram length
        assert [h["id"] for h in hits] == [ids[0]] and hits[0]["mode"] == "like"
        assert ">>>" in hits[0]["snippet"]
        hits = store.search_messages("广西 OR 桂林 OR 漓江")
        assert {h["id"] for h in hits} == {ids[1]}
        assert store.search_messages("记忆断裂 NOT 方案", fallback=False) == []

    def test_mixed_script_and_wildcards_in_cjk(self, store: Any) -> None:
        sid = self._session_with(store, ["Redis缓存问题已修复", "100%完成", "100完成了"])
        ids = [r["id"] for r in store.get_messages(sid)]
        assert {h["id"] for h in store.search_messages("Redis缓存")} == {ids[0]}
        assert {h["id"] for h in store.search_messages("0%完")} == {ids[1]}

    def test_search_sees_writes_immediately(self, store: Any) -> None:
        sid = store.create_session()
        store.append_message(sid, "user", "axolotl regeneration")
        assert len(store.search_messages("axolotl")) == 1

    # -- bookkeeping ----------------------------------------------------------------------

    def test_meta(self, store: Any) -> None:
        assert store.get_meta("conformance:key") is None
        store.set_meta("conformance:key", "v1")
        store.set_meta("conformance:key", "v2")
        assert store.get_meta("conformance:key") == "v2"
        store.set_meta("conformance:key", None)
        assert store.get_meta("conformance:key") is None
