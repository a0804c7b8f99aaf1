"""The engine's contract behaviour: thresholds, compaction shape, storage, DAG growth,
resumption and configuration."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hermes_lcm.engine import LCMEngine
from hermes_lcm.settings import LCMSettings
from hermes_lcm.transcript import is_summary, split_summary, validate
from lcm_helpers import SYSTEM, conversation, drive

from hermes import SUMMARY_PREFIX, ConfigError, is_compaction_summary


def flat(turns):
    return [m for turn in turns for m in turn]


def test_is_a_context_engine_named_lcm(make_engine, deterministic):
    from hermes import ContextEngine

    engine = make_engine(deterministic)
    assert isinstance(engine, ContextEngine)
    assert engine.name == "lcm"
    assert engine.db_path.name == "lcm.db"


def test_threshold_follows_settings_and_window(make_engine):
    engine = make_engine({"threshold": 0.5}, window=10_000)
    assert engine.threshold_tokens == 5_000
    assert not engine.should_compress(4_999)
    assert engine.should_compress(5_000)
    engine.update_from_response({"prompt_tokens": 6_000, "completion_tokens": 10, "total_tokens": 6_010})
    assert engine.should_compress()
    assert engine.should_compress_info() == (True, None)


def test_model_thresholds_override_the_setting(make_engine):
    engine = make_engine({"threshold": 0.5})
    engine.model_thresholds = {"tiny": 0.9}
    engine.update_model("vendor/tiny-model", 10_000)
    assert engine.threshold_tokens == 9_000
    engine.update_model("other", 10_000)
    assert engine.threshold_tokens == 5_000


def test_short_conversation_is_returned_unchanged(make_engine, deterministic):
    engine = make_engine(deterministic)
    messages = [SYSTEM, *flat(conversation(2))]
    out = engine.compress(messages, force=False)
    assert out == messages and out is not messages
    assert engine.last_compression["aborted"]
    assert engine.compression_count == 0


def test_compaction_shape(make_engine, deterministic):
    engine = make_engine(deterministic)
    messages = [SYSTEM, *flat(conversation(30, seed=1))]
    snapshot = json.dumps(messages)
    out = engine.compress(messages)
    assert json.dumps(messages) == snapshot, "input mutated"
    assert out[0] == SYSTEM
    summary = out[1]
    assert summary["role"] == "user" and is_summary(summary) and is_compaction_summary(summary)
    assert summary["content"].startswith(SUMMARY_PREFIX)
    ids, _ = split_summary(summary)
    assert ids and all(f'id="n{i}"' in summary["content"] for i in ids)
    assert validate(out) == []
    roles = [m["role"] for m in out[1:]]
    assert not [(a, b) for a, b in zip(roles, roles[1:], strict=False) if a == b != "tool"], roles
    # The tail is verbatim and holds at least fresh_tail_count messages plus the newest user one.
    tail = out[2:]
    assert tail == messages[len(messages) - len(tail):]
    assert len(tail) >= deterministic["fresh_tail_count"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    assert messages[last_user] in tail
    assert engine.compression_count == 1
    assert engine.last_prompt_tokens == -1
    lc = engine.last_compression
    assert lc["aborted"] is None and lc["fallback"] is True and lc["leaves"]
    assert lc["summarised_messages"] == len(messages) - 1 - len(tail)


def test_tool_groups_are_never_split(make_engine):
    # A tail of exactly fresh_tail_count messages would start inside the tool group.
    engine = make_engine({"summarizer": "deterministic", "fresh_tail_count": 3})
    calls = [{"id": f"c{k}", "type": "function", "function": {"name": "t", "arguments": "{}"}} for k in range(3)]
    messages = [SYSTEM,
                {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "u2"},
                {"role": "assistant", "content": None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": f"c{k}", "content": f"r{k}"} for k in range(3)),
                {"role": "assistant", "content": "a2"}, {"role": "user", "content": "u3"}]
    out = engine.compress(messages)
    assert validate(out) == []
    tail = out[2:]
    assert tail[0]["role"] == "assistant"
    # Either the whole group is in the tail, or none of it.
    in_tail = [m for m in tail if m.get("tool_call_id") or m.get("tool_calls")]
    assert len(in_tail) in (0, 4)


def test_summary_merges_into_a_user_message_rather_than_doubling_roles(make_engine):
    engine = make_engine({"summarizer": "deterministic", "fresh_tail_count": 2})
    messages = [SYSTEM, {"role": "user", "content": "one"}, {"role": "user", "content": "two"},
                {"role": "user", "content": "three"}, {"role": "user", "content": "four"}]
    out = engine.compress(messages)
    assert len(out) == 3 and out[1]["role"] == "user" and out[2] == messages[-1]
    ids, original = split_summary(out[1])
    assert ids and original == messages[-2]
    # Handed back, the merged message is recognised: nothing is stored twice.
    before = engine.store.message_count(engine.conversation_id)
    engine.compress([*out, {"role": "assistant", "content": "ok"}])
    assert engine.store.message_count(engine.conversation_id) == before + 1


def test_every_message_is_stored_once_and_nothing_is_deleted(make_engine, deterministic):
    engine = make_engine(deterministic, window=3_000)
    turns = list(conversation(120, seed=2))
    live, seen = drive(engine, iter(turns))
    assert engine.compression_count >= 3
    conv = engine.conversation_id
    assert engine.store.message_count(conv) == seen
    stored = [m.message() for m in engine.store.messages_in_range(conv, -1, 10**9)]
    assert stored == flat(turns)
    con = sqlite3.connect(engine.db_path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("DELETE FROM messages")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("UPDATE nodes SET content = 'x'")
    con.close()


def test_leaves_are_condensed_at_fanout(make_engine):
    engine = make_engine({"summarizer": "deterministic", "fresh_tail_count": 4, "leaf_fanout": 3},
                         window=200_000)
    live = [SYSTEM]
    for turn in conversation(40, seed=3):
        live = live + turn
        live = engine.compress(live, force=False) if len(live) > 12 else live
    store, conv = engine.store, engine.conversation_id
    roots = store.roots(conv)
    depths = [r.depth for r in roots]
    assert max(depths) >= 1, depths
    assert depths == sorted(depths, reverse=True), "older spans sit higher in the DAG"
    for depth in set(depths):
        assert depths.count(depth) < 3, "a full run of fanout nodes was left uncondensed"
    # Roots tile the summarised past without gaps or overlaps.
    assert roots[0].first_seq == 0
    for a, b in zip(roots, roots[1:], strict=False):
        assert b.first_seq == a.last_seq + 1
    for root in roots:
        if root.depth:
            kids = [store.node(c) for c in store.children(root.id)]
            assert all(k.depth < root.depth for k in kids)
            assert sum(k.message_count for k in kids) == root.message_count
            assert store.parent(kids[0].id) == root.id


def test_resume_with_a_new_engine_finds_the_conversation(make_engine, deterministic, lcm_kernel):
    engine = make_engine(deterministic)
    live, seen = drive(engine, conversation(60, seed=4))
    assert engine.compression_count >= 1
    conv = engine.conversation_id
    # A fresh process: same home, another session id; the summary message names the nodes.
    other = LCMEngine(settings=LCMSettings(summarizer="deterministic", fresh_tail_count=6),
                      home=engine.db_path.parent)
    other.update_model("fake-model", 8_000)
    other.on_session_start("continuation-session")
    extra = next(conversation(1, seed=99))
    other.on_turn_complete(live[1:] + extra)
    assert other.conversation_id == conv
    assert other.store.message_count(conv) == seen + len(extra)


def test_a_discarded_compaction_stores_nothing_twice(make_engine, deterministic):
    engine = make_engine(deterministic)
    messages = [SYSTEM, *flat(conversation(30, seed=5))]
    engine.compress(messages)
    count = engine.store.message_count(engine.conversation_id)
    # The host timed out and kept its old transcript, then added a turn.
    extra = next(conversation(1, seed=98))
    out = engine.compress(messages + extra)
    assert engine.store.message_count(engine.conversation_id) == count + len(extra)
    assert validate(out) == []


def test_force_compacts_down_to_the_newest_exchange(make_engine):
    engine = make_engine({"summarizer": "deterministic", "fresh_tail_count": 50})
    messages = [SYSTEM, *flat(conversation(10, seed=6))]
    assert engine.compress(messages) == messages  # the tail holds everything
    out = engine.compress(messages, force=True)
    assert len(out) < len(messages) and validate(out) == []
    assert out[-1] == messages[-1]


def test_on_session_reset_starts_a_new_conversation(make_engine, deterministic):
    engine = make_engine(deterministic)
    engine.on_turn_complete(flat(conversation(3)))
    first = engine.conversation_id
    engine.compression_count = 2
    engine.on_session_reset()
    assert engine.compression_count == 0 and engine.last_prompt_tokens == 0
    engine.on_turn_complete(flat(conversation(2, seed=7)))
    assert engine.conversation_id != first


def test_status_reports_the_store(make_engine, deterministic):
    engine = make_engine(deterministic)
    drive(engine, conversation(60, seed=8))
    status = engine.get_status()
    assert status["engine"] == "lcm" and status["db_path"].endswith("lcm.db")
    assert status["store"]["messages"] > 0 and status["store"]["nodes"] > 0
    assert 0 <= status["usage_percent"] <= 100


@pytest.mark.parametrize(("key", "value"), [
    ("leaf_fanout", 1), ("threshold", 1.5), ("fresh_tail_count", "many"), ("summarizer", "gpt"),
    ("grep_limit", True), ("colour", "blue"),
])
def test_bad_settings_fail_naming_the_key(lcm_kernel, key, value):
    kernel = lcm_kernel({key: value})
    with pytest.raises(ConfigError, match=rf"plugins\.lcm\.{key}") as info:
        kernel.create("context-engine", "lcm")
    assert info.value.path == f"plugins.lcm.{key}"


def test_db_path_setting(make_engine, deterministic, tmp_path):
    engine = make_engine({**deterministic, "db_path": "stores/ctx.db"})
    assert engine.db_path == engine.kernel.home / "stores" / "ctx.db"
    engine.on_turn_complete(flat(conversation(2)))
    assert engine.db_path.exists()


def test_has_content_to_compress(make_engine, deterministic):
    engine = make_engine(deterministic)
    assert not engine.has_content_to_compress([SYSTEM, {"role": "user", "content": "hi"}])
    assert engine.has_content_to_compress([SYSTEM, *flat(conversation(3))])


def test_preflight_uses_a_rough_estimate_and_backs_off_after_a_noop(make_engine):
    engine = make_engine({"summarizer": "deterministic", "fresh_tail_count": 500}, window=2_000)
    messages = [SYSTEM, *flat(conversation(30, seed=9))]
    assert engine.should_compress_preflight(messages)
    assert engine.compress(messages) == messages  # everything is fresh tail
    assert not engine.should_compress_preflight(messages)  # not again for the same transcript
    assert engine.should_compress_preflight(messages + [{"role": "user", "content": "more"}])
