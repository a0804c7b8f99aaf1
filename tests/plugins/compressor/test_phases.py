"""The four phases on hand-made transcripts: pruning placeholders and valid-JSON argument
shrinking, boundaries (groups never split, anchors kept, first exchange decays), role
choice and merging, orphan removal, and exactly one summary after repeated compactions
(reference §2.5, §9.1, §10 issues 2, 3, 8)."""

from __future__ import annotations

import copy
import json

import pytest

import hermes
from hermes.plugins.compressor import prune
from hermes.plugins.compressor.assemble import (
    COMPACTION_NOTE,
    assemble,
    sanitize_tool_pairs,
    summary_role,
)
from hermes.plugins.compressor.boundaries import plan
from hermes.plugins.compressor.transcript import classify, summary_block
from hermes.testing.conformance.context import make_conversation, transcript_problems

SYS = {"role": "system", "content": "You are Hermes."}


def call(cid: str, name: str = "read_file", **args) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def group(cid: str, result: str, name: str = "read_file", **args) -> list[dict]:
    return [{"role": "assistant", "content": "", "tool_calls": [call(cid, name, **args)]},
            {"role": "tool", "tool_call_id": cid, "name": name, "content": result}]


def summaries(messages):
    return [m for m in messages if hermes.is_compaction_summary(m)]


# -- phase 1 --------------------------------------------------------------------------------

def test_one_liners_are_informative():
    line = prune.tool_one_liner("read_file", {"path": "src/app.py", "offset": 10}, "a\nb\nc" * 100)
    assert line.startswith("[read_file] path=src/app.py → ")
    assert "chars" in line and "lines" in line and prune.is_placeholder(line)
    term = prune.tool_one_liner("terminal", {"command": "pytest -q"}, '{"output": "...", "exit_code": 2}')
    assert "command=pytest -q" in term and "exit 2" in term
    assert prune.tool_one_liner("odd", object(), "x") .startswith("[odd]")  # never raises


def test_shrunk_arguments_stay_valid_json():
    args = json.dumps({"path": "a.py", "content": "é\"quote\"\n" * 200, "nested": {"k": ["v" * 900, 1]}})
    out = prune.shrink_arguments(args)
    data = json.loads(out)  # valid JSON, never byte-sliced (#13574)
    assert data["path"] == "a.py" and data["nested"]["k"][1] == 1
    assert data["content"].endswith(prune.TRUNCATED) and len(out) < len(args)
    assert prune.shrink_arguments("not json " * 100) is None
    assert prune.shrink_arguments('{"a": 1}') is None


def test_dedupe_keeps_the_newest_copy():
    body = "same output\n" * 40
    msgs = [SYS, {"role": "user", "content": "go"}, *group("a", body), *group("b", body), *group("c", "other " * 50)]
    work = list(msgs)
    assert prune.dedupe(work, 1) == 1
    assert work[3]["content"] == prune.DUPLICATE_PLACEHOLDER and work[5]["content"] == body
    assert msgs[3]["content"] == body  # the input is untouched


def test_prune_tool_results_only(engine_factory):
    engine = engine_factory(protect_last_n=4)
    msgs = [SYS, {"role": "user", "content": "start"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "read things"}]
    for i in range(6):
        msgs += group(f"c{i}", f"content {i}\n" * 60, path=f"f{i}.py")
    msgs.append({"role": "assistant", "content": "done"})
    snapshot = copy.deepcopy(msgs)
    out, n = engine.prune_tool_results_only(msgs)
    assert msgs == snapshot and n == 4
    assert not transcript_problems(out)
    assert out[-4:] == msgs[-4:]  # the protected tail is verbatim (its group kept whole)
    assert "path=f0.py" in out[5]["content"] and prune.is_placeholder(out[5]["content"])
    again, n2 = engine.prune_tool_results_only(out)
    assert n2 == 0 and again is out  # a no-op returns the input object


# -- phase 2 ------------------------------------------------------------------------------------

def layout(messages, budget=200, protect_last_n=4, first=True):
    return plan(messages, protect_first_n=3, first_compaction=first, tail_budget=budget,
                protect_last_n=protect_last_n)


def test_tail_never_starts_inside_a_tool_group():
    msgs = [SYS, {"role": "user", "content": "go"}]
    calls = [call(f"p{i}") for i in range(5)]
    for j in range(4):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call(f"g{j}")]})
        msgs.append({"role": "tool", "tool_call_id": f"g{j}", "content": "r" * 400})
    msgs.append({"role": "assistant", "content": "", "tool_calls": calls})
    msgs += [{"role": "tool", "tool_call_id": c["id"], "content": "big " * 200} for c in calls]
    p = layout(msgs, budget=100)
    assert p.work[p.cut]["role"] != "tool"
    assert p.work[p.head_end]["role"] != "tool"


def test_newest_user_message_and_reply_stay_in_the_tail():
    msgs = make_conversation(12, seed=1)
    p = layout(msgs, budget=800)
    newest_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    assert p.cut <= newest_user or p.pinned == newest_user
    reply = max(i for i, m in enumerate(msgs[:newest_user]) if m["role"] == "assistant" and m["content"].strip())
    assert p.cut <= reply  # the answer the user is replying to is kept (#29824)


def test_a_long_tool_chain_pins_the_request():
    msgs = [SYS, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "Refactor everything."}]
    for i in range(30):
        msgs += group(f"c{i}", "line\n" * 200, path=f"m{i}.py")
    p = layout(msgs, budget=300)
    assert p.pinned == 3 and p.cut > 10  # the request is kept, the chain summarized
    out = assemble(p.work[:p.head_end], [p.work[p.pinned]], "body", p.work[p.cut:])
    assert not transcript_problems(out)
    assert {"role": "user", "content": "Refactor everything."} in out


def test_first_exchange_is_protected_only_on_the_first_compaction():
    msgs = make_conversation(10, seed=2)
    assert layout(msgs, first=True).head_end >= 3
    assert layout(msgs, first=False).head_end == 1


def test_head_never_ends_on_a_request():
    msgs = [SYS, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"}, *make_conversation(8, seed=3, system=None)]
    p = layout(msgs)
    assert p.head_end == 3 and p.work[p.head_end - 1]["role"] == "assistant"


def test_small_transcript_still_compresses_something():
    msgs = [SYS] + [{"role": r, "content": f"{r} {i} " * 20} for i in range(4) for r in ("user", "assistant")]
    assert len(msgs) == 9
    p = layout(msgs, budget=10_000, first=False)
    assert p.has_middle and len(p.middle) >= 2


# -- phase 4 ------------------------------------------------------------------------------------

U = {"role": "user", "content": "u"}
A = {"role": "assistant", "content": "a"}
T = {"role": "tool", "tool_call_id": "x", "content": "t"}


@pytest.mark.parametrize("before, tail, expected", [
    ([SYS], [A], ("user", False)),                  # first after the system prompt is user (#52160)
    ([SYS], [U], ("user", True)),                   # ... even when the tail starts with the user
    ([SYS, U, A], [A], ("user", False)),            # last head assistant → user
    ([SYS, U, A, U], [U], ("assistant", False)),    # last head user → assistant
    ([SYS, U, A], [U], ("user", True)),             # both collide → merge
    ([SYS, U], [A], ("assistant", True)),           # both collide → merge
    ([SYS, A], [A], ("user", False)),               # no user anywhere → forced user (#58753)
])
def test_summary_role(before, tail, expected):
    assert summary_role(before, tail) == expected


def test_merge_into_the_live_request_keeps_its_text_after_the_summary():
    out = assemble([SYS], [], "the body", [{"role": "user", "content": "What next?"}])
    assert [m["role"] for m in out] == ["system", "user"]
    shape = classify(out[1])
    assert shape.kind == "prepended" and shape.body == "the body" and shape.genuine == "What next?"
    assert out[1]["content"].endswith("What next?")
    assert out[0]["content"].endswith(COMPACTION_NOTE)


def test_merge_into_another_message_wraps_it():
    out = assemble([SYS, U, A], [], "body", [U, {"role": "assistant", "content": "later"}, U])
    shape = classify(out[3])
    assert shape.kind == "wrapped" and shape.genuine == "u" and shape.body == "body"
    assert not transcript_problems(out)


def test_note_is_added_once():
    once = assemble([SYS], [], "b", [A])
    twice = assemble([once[0]], [], "b", [A])
    assert twice[0]["content"].count(COMPACTION_NOTE) == 1


def test_orphans_are_removed_not_stubbed():
    msgs = [SYS, U,
            {"role": "assistant", "content": "", "tool_calls": [call("kept"), call("lost")]},
            {"role": "tool", "tool_call_id": "kept", "content": "ok"},
            {"role": "tool", "tool_call_id": "stray", "content": "orphan"},
            {"role": "assistant", "content": "", "tool_calls": [call("gone")]},
            U]
    out = sanitize_tool_pairs(msgs)
    assert not transcript_problems(out)
    assert [c["id"] for c in out[2]["tool_calls"]] == ["kept"]
    assert all(m.get("tool_call_id") != "stray" for m in out)
    assert "tool_calls" not in out[4] and out[4]["content"] == "(tool call removed)"
    assert msgs[2]["tool_calls"][1]["id"] == "lost"  # input untouched


# -- whole compactions --------------------------------------------------------------------------

def test_exactly_one_summary_after_repeated_compactions(engine_factory):
    engine = engine_factory(window=8_000)
    msgs = make_conversation(25, seed=4)
    for round_ in range(4):
        out = engine.compress(msgs, force=True)
        assert engine.last_compression["committed"], engine.last_compression
        assert not transcript_problems(out)
        assert len(summaries(out)) == 1
        msgs = out + make_conversation(8, seed=50 + round_, system=None, start_id=1000 * (round_ + 1))
    # the earlier checkpoint is carried into the next one
    assert "Earlier checkpoint" in summaries(out)[0]["content"]


def test_legacy_summary_prefix_is_replaced(engine_factory):
    engine = engine_factory(window=8_000)
    msgs = make_conversation(25, seed=5)
    msgs.insert(1, {"role": "user", "content": "[CONTEXT SUMMARY]: the old days"})
    msgs.insert(2, {"role": "assistant", "content": "ok"})
    out = engine.compress(msgs, force=True)
    assert not any("[CONTEXT SUMMARY]:" in str(m["content"]) for m in out)
    assert "the old days" in summaries(out)[0]["content"]


def test_resumed_session_seeds_the_previous_summary_from_the_transcript(engine_factory):
    first = engine_factory(window=8_000)
    out = first.compress(make_conversation(25, seed=6), force=True)
    fresh = engine_factory(window=8_000)  # a new process: nothing in memory
    msgs = out + make_conversation(10, seed=7, system=None, start_id=5000)
    again = fresh.compress(msgs, force=True)
    assert len(summaries(again)) == 1
    assert "Earlier checkpoint" in summaries(again)[0]["content"]


def test_fallback_summary_content(engine_factory):
    engine = engine_factory(window=8_000)
    msgs = [SYS, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "Set up the FastAPI project in ~/proj please"},
            {"role": "assistant", "content": "", "tool_calls": [call("w1", "write_file", path="proj/main.py")]},
            {"role": "tool", "tool_call_id": "w1", "content": "wrote 2.3KB " * 30},
            {"role": "assistant", "content": "", "tool_calls": [call("t1", "terminal", command="pytest")]},
            {"role": "tool", "tool_call_id": "t1", "content": "Error: 2 failed\nTraceback ...\n" * 20},
            {"role": "assistant", "content": "Two tests fail."}]
    for i in range(12):
        msgs += [{"role": "user", "content": f"next step {i} " + "pad " * 150},
                 {"role": "assistant", "content": f"did step {i} " + "pad " * 150}]
    msgs.append({"role": "user", "content": "Fix the failing tests"})
    out = engine.compress(msgs, force=True)
    info = engine.last_compression
    assert info["fallback"] and info["fallback_reason"] == "no_model" and info["committed"]
    body = summaries(out)[0]["content"]
    assert "Summary generation was unavailable" in body
    assert "write_file" in body and "proj/main.py" in body and "Error: 2 failed" in body
    assert body.count("Fix the failing tests") == 0  # the live request is not in the summary
    assert sum(m["content"].count("Fix the failing tests") for m in out if isinstance(m["content"], str)) == 1
    assert len(body) < 9_000


def test_secrets_never_reach_the_summary(engine_factory):
    engine = engine_factory(window=8_000)
    msgs = make_conversation(25, seed=8)
    msgs[1] = {"role": "user", "content": "use key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789 and go"}
    msgs.insert(2, {"role": "assistant", "content": "ok"})
    msgs.insert(3, {"role": "user", "content": "token=supersecretvalue123 now"})
    out = engine.compress(msgs, force=True)
    body = summaries(out)[0]["content"]
    assert "abcdefghijklmnopqrstuvwxyz0123456789" not in body and "supersecretvalue123" not in body


def test_summary_block_round_trip():
    shape = classify({"role": "user", "content": summary_block("B")})
    assert (shape.kind, shape.body) == ("standalone", "B")
    assert classify({"role": "user", "content": "hello"}) is None


# -- upstream edge cases (reference §9.1) ---------------------------------------------------------

def test_ten_large_tool_pairs_are_not_all_protected():
    msgs = [SYS, {"role": "user", "content": "read them all"}]
    for i in range(10):
        msgs += group(f"big{i}", "x" * 20_000)
    p = layout(msgs, budget=8_000, protect_last_n=20, first=False)
    tail = len(p.work) - p.cut
    assert 3 <= tail < 20


def test_a_tiny_budget_still_protects_three_and_admits_an_oversized_message():
    msgs = make_conversation(10, seed=9)
    p = layout(msgs, budget=1, first=False)
    assert len(p.work) - p.cut >= 3
    huge = [SYS, *make_conversation(6, seed=9, system=None), {"role": "user", "content": "y" * 40_000}]
    p = layout(huge, budget=1_000, first=False)
    assert p.work[p.cut:][-1]["content"] == "y" * 40_000  # the newest message is always kept


def test_none_contents_do_not_crash(engine_factory):
    engine = engine_factory(window=8_000)
    msgs = [{"role": "system", "content": None}]
    for i in range(30):
        msgs += [{"role": "user", "content": f"q{i} " + "w " * 200},
                 {"role": "assistant", "content": None, "tool_calls": [call(f"n{i}")]},
                 {"role": "tool", "tool_call_id": f"n{i}", "content": None},
                 {"role": "assistant", "content": "a " * 200}]
    out = engine.compress(msgs, force=True)
    assert engine.last_compression["committed"]
    assert not transcript_problems(out)
    assert COMPACTION_NOTE in out[0]["content"]


def test_summarizer_answer_shapes():
    from hermes.plugins.compressor.summary import EmptySummaryError, clean_summary

    assert clean_summary([{"type": "text", "text": "## Goal\nx"}]) == "## Goal\nx"
    assert clean_summary(hermes.SUMMARY_PREFIX + "\n\n## Goal\ny\n\n" + hermes.SUMMARY_END_MARKER) == "## Goal\ny"
    for empty in (None, "", "   ", "<think>only thoughts</think>  "):
        if empty and "think" in empty:
            assert clean_summary(empty)  # stripping would empty it: the original is kept
            continue
        with pytest.raises(EmptySummaryError):
            clean_summary(empty)
