"""``lcm_grep``, ``lcm_describe`` and ``lcm_expand`` through ``handle_tool_call``, the
way the runtime routes them (JSON strings in and out, the live transcript as ``messages``)."""

from __future__ import annotations

import json

import pytest
from lcm_helpers import FACT, SYSTEM, conversation, drive


@pytest.fixture
def compacted(make_engine, deterministic):
    """An engine after many compactions over a 150-turn conversation with the fact in
    turn 3; returns ``(engine, live transcript, call)``."""
    engine = make_engine(deterministic, window=3_000)
    live, _ = drive(engine, conversation(150, seed=11, fact_turn=3))
    assert engine.compression_count >= 5

    def call(name, **args):
        return json.loads(engine.handle_tool_call(name, args, messages=live[1:]))

    return engine, live, call


def test_schemas_are_openai_functions(make_engine, deterministic):
    schemas = make_engine(deterministic).get_tool_schemas()
    assert [s["name"] for s in schemas] == ["lcm_grep", "lcm_describe", "lcm_expand"]
    for s in schemas:
        assert s["description"] and s["parameters"]["type"] == "object"
    assert schemas[0]["parameters"]["required"] == ["pattern"]
    assert schemas[2]["parameters"]["required"] == ["node_id"]


def test_grep_finds_a_compacted_message_and_points_at_its_node(compacted):
    engine, live, call = compacted
    assert not any(FACT in (m.get("content") or "") for m in live)  # it left the live context
    result = call("lcm_grep", pattern="password ROTATION")
    assert result["mode"] == "substring"
    [hit] = result["messages"]
    assert FACT in hit["snippet"] and hit["role"] == "user"
    assert hit["node_id"] == hit["lineage"][0] and len(hit["lineage"]) >= 2
    top = hit["lineage"][-1]
    assert f'id="{top}"' in live[1]["content"], "the lineage ends at a node the live context names"
    page = call("lcm_expand", **hit["expand"], max_chars=300)
    assert page["messages"][0]["message_id"] == hit["message_id"]
    assert FACT in page["messages"][0]["content"]


def test_grep_regex_case_scope_and_paging(compacted):
    _, _, call = compacted
    regex = call("lcm_grep", pattern=r"Turn 1[0-9]:", regex=True, case_sensitive=True, limit=4)
    assert regex["mode"] == "regex" and len(regex["messages"]) == 4 and regex["more"]
    positions = [h["position"] for h in regex["messages"]]
    assert positions == sorted(positions)
    following = call("lcm_grep", pattern=r"Turn 1[0-9]:", regex=True, case_sensitive=True, limit=4,
                     offset=regex["next_offset"])
    assert {h["message_id"] for h in following["messages"]}.isdisjoint({h["message_id"] for h in regex["messages"]})
    assert call("lcm_grep", pattern="TURN 1", case_sensitive=True)["messages"] == []
    assert call("lcm_grep", pattern="TURN 1")["messages"]
    summaries = call("lcm_grep", pattern="Messages", scope="summaries", limit=100)
    assert summaries["messages"] == [] and summaries["summaries"]
    assert all(s["node_id"].startswith("n") for s in summaries["summaries"])
    only_msgs = call("lcm_grep", pattern="lorem", scope="messages", limit=3)
    assert only_msgs["summaries"] == [] and len(only_msgs["messages"]) == 3
    assert len(call("lcm_grep", pattern="Turn", limit=1000)["messages"]) == 100  # capped


def test_grep_reports_live_messages_as_unsummarised(compacted):
    _, live, call = compacted
    newest = live[-1]["content"]
    [hit] = call("lcm_grep", pattern=newest)["messages"]
    assert hit["node_id"] is None and "live" in hit["note"]


@pytest.mark.parametrize(("args", "error"), [
    ({"pattern": ""}, "non-empty"),
    ({"pattern": "(unclosed", "regex": True}, "invalid regular expression"),
    ({"pattern": "x" * 501}, "longer than"),
    ({"pattern": "x", "scope": "everything"}, "scope"),
    ({"pattern": "x", "limit": "lots"}, "whole number"),
])
def test_grep_errors_are_json(compacted, args, error):
    _, _, call = compacted
    assert error in call("lcm_grep", **args)["error"]


def test_describe_a_node_and_the_overview(compacted):
    engine, live, call = compacted
    overview = call("lcm_describe")
    assert overview["messages"] == engine.store.message_count(engine.conversation_id)
    tops = [n["node_id"] for n in overview["top_level_nodes"]]
    assert tops and all(f'id="{t}"' in live[1]["content"] for t in tops)
    assert overview["summarised_messages"] == sum(n["messages"] for n in overview["top_level_nodes"])
    top = call("lcm_describe", node_id=tops[0])
    assert top["parent"] is None and top["kind"] in ("leaf", "condensed")
    assert top["messages"]["positions"][0] == 1
    assert top["tokens"]["source_messages"] > top["tokens"]["summary"]
    assert top["time_range"]["earliest"] <= top["time_range"]["latest"]
    if top["children"]:
        child = call("lcm_describe", node_id=top["children"][0])
        assert child["parent"] == top["node_id"] and child["depth"] < top["depth"]
    assert "no node" in call("lcm_describe", node_id="n99999")["error"]
    assert "look like" in call("lcm_describe", node_id="banana")["error"]


def test_expand_pages_through_a_whole_node_verbatim(compacted):
    engine, _, call = compacted
    node_id = call("lcm_describe")["top_level_nodes"][0]["node_id"]
    node = engine.store.node(int(node_id[1:]))
    originals = [m.message() for m in engine.store.node_messages(node, 0, 10**6)]
    got, cursor, pages = [], "0", 0
    while cursor is not None:
        page = call("lcm_expand", node_id=node_id, cursor=cursor, max_chars=1_500)
        pages += 1
        assert sum(len(m.get("content") or "") for m in page["messages"]) <= 1_500 + 200
        got.extend(page["messages"])
        cursor = page["next_cursor"]
        assert page["done"] == (cursor is None)
    assert pages > 1
    assert [m["message_id"] for m in got] == engine.store.source_message_ids(node.id)
    for original, restored in zip(originals, got, strict=True):
        assert restored["role"] == original["role"]
        assert restored.get("content") == original.get("content")
        assert restored.get("tool_calls") == original.get("tool_calls")
        assert restored.get("tool_call_id") == original.get("tool_call_id")


def test_expand_splits_a_message_larger_than_a_page(make_engine, deterministic):
    engine = make_engine(deterministic)
    huge = "".join(f"line {i:05d}\n" for i in range(3_000))  # 33,000 characters
    messages = [SYSTEM, {"role": "user", "content": "dump the log"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": huge},
                *[m for turn in conversation(8, seed=12, tool_every=0) for m in turn]]
    out = engine.compress(messages)
    node_id = engine.last_compression["leaves"][0]

    def expand(cursor):
        return json.loads(engine.handle_tool_call("lcm_expand", {"node_id": node_id, "cursor": cursor,
                                                                 "max_chars": 10_000}, messages=out[1:]))

    pieces, cursor = [], "2"
    while cursor is not None and cursor.startswith("2"):
        page = expand(cursor)
        first = page["messages"][0]
        assert first["position"] == 3 and len(json.dumps(page)) < 12_000
        pieces.append(first["content"])
        cursor = page["next_cursor"]
    assert "".join(pieces) == huge and len(pieces) == 4
    assert "past the end" in expand("999")["error"]
    assert "cursor" in expand("x:y")["error"]


def test_unknown_tool_and_bad_args_never_raise(make_engine, deterministic):
    engine = make_engine(deterministic)
    assert "Unknown context engine tool" in json.loads(engine.handle_tool_call("lcm_nope", {}))["error"]
    assert "node_id is required" in json.loads(engine.handle_tool_call("lcm_expand", {}))["error"]
    assert json.loads(engine.handle_tool_call("lcm_grep", {"pattern": "anything"}))["messages"] == []


def test_grep_across_conversations(make_engine, deterministic):
    engine = make_engine(deterministic)
    engine.on_turn_complete([{"role": "user", "content": "alpha marker one"},
                             {"role": "assistant", "content": "ok"}])
    engine.on_session_end("session-1", [])
    engine.on_session_reset()
    engine.on_session_start("session-2")
    engine.on_turn_complete([{"role": "user", "content": "beta"}, {"role": "assistant", "content": "ok"}])
    mine = json.loads(engine.handle_tool_call("lcm_grep", {"pattern": "alpha marker"}))
    assert mine["messages"] == []
    everywhere = json.loads(engine.handle_tool_call("lcm_grep", {"pattern": "alpha marker",
                                                                 "all_conversations": True}))
    [hit] = everywhere["messages"]
    assert hit["conversation"] != engine.conversation_id


@pytest.mark.parametrize(("pattern", "case_sensitive", "expected"), [
    ("50%_off", False, ["Sale: 50%_OFF today"]),
    ("50%_off", True, []),
    ("%", False, ["Sale: 50%_OFF today"]),
    ("a_b", False, ["path a_b\\c"]),
    ("b\\c", False, ["path a_b\\c"]),
    ("a_bx", False, []),  # LIKE's "_" wildcard must not leak into substring mode
    ("STRASSE", False, []),
    ("ärger", False, ["Ärger über die Straße"]),
    ("Ärger", True, ["Ärger über die Straße"]),
    ("ärger", True, []),
])
def test_substring_search_is_literal(make_engine, deterministic, pattern, case_sensitive, expected):
    engine = make_engine(deterministic)
    texts = ["Sale: 50%_OFF today", "path a_b\\c", "path axbxc", "Ärger über die Straße"]
    engine.on_turn_complete([m for t in texts for m in ({"role": "user", "content": t},
                                                       {"role": "assistant", "content": "ok"})])
    result = json.loads(engine.handle_tool_call(
        "lcm_grep", {"pattern": pattern, "case_sensitive": case_sensitive}))
    assert [h["snippet"] for h in result["messages"]] == expected
