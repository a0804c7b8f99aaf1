"""Property tests: whatever the conversation and whenever the host compacts, the live
context stays a valid transcript and the store stays lossless — expanding the top-level
nodes the live context names, followed by the live tail, gives back every original
message in order."""

from __future__ import annotations

import json
import tempfile

from hermes_lcm.engine import LCMEngine
from hermes_lcm.settings import LCMSettings
from hermes_lcm.transcript import is_summary, split_summary, validate
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

SYSTEM = {"role": "system", "content": "sys"}
WORDS = st.text(alphabet="abcdefghij ", min_size=0, max_size=60)


@st.composite
def turns(draw):
    """One turn: a user message, tool groups, usually a final answer (sometimes none, as
    after an interrupted turn, which leaves two user messages in a row)."""
    n = draw(st.integers(0, 10_000))
    out = [{"role": "user", "content": draw(WORDS)}]
    for g in range(draw(st.integers(0, 2))):
        ids = [f"t{n}_{g}_{k}" for k in range(draw(st.integers(1, 3)))]
        out.append({"role": "assistant", "content": draw(st.sampled_from([None, "", "calling"])),
                    "tool_calls": [{"id": i, "type": "function",
                                    "function": {"name": "f", "arguments": json.dumps({"x": draw(WORDS)})}}
                                   for i in ids]})
        out += [{"role": "tool", "tool_call_id": i, "content": draw(WORDS) * draw(st.integers(1, 20))} for i in ids]
    if draw(st.booleans()) or len(out) > 1:
        out.append({"role": "assistant", "content": draw(WORDS)})
    return out


def originals_of(live):
    out = []
    for m in live:
        if m["role"] == "system":
            continue
        if is_summary(m):
            original = split_summary(m)[1]
            if original is not None:
                out.append(original)
            continue
        out.append(m)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversation=st.lists(turns(), min_size=1, max_size=25),
    compact_after=st.lists(st.sampled_from(["no", "compress", "force"]), min_size=25, max_size=25),
    fresh_tail=st.integers(2, 8),
    fanout=st.integers(2, 4),
    window=st.sampled_from([0, 1_000, 50_000]),
)
def test_compaction_is_valid_and_lossless(conversation, compact_after, fresh_tail, fanout, window):
    with tempfile.TemporaryDirectory() as home:
        engine = LCMEngine(home=home, settings=LCMSettings(
            summarizer="deterministic", fresh_tail_count=fresh_tail, leaf_fanout=fanout,
            leaf_chunk_tokens=200, fallback_max_tokens=64))
        if window:
            engine.update_model("m", window)
        engine.on_session_start("s")
        live = [SYSTEM]
        sent = []
        for turn, action in zip(conversation, compact_after, strict=False):
            live = live + turn
            sent += turn
            if action == "no":
                engine.on_turn_complete(live[1:])
                continue
            snapshot = json.dumps(live)
            out = engine.compress(live, force=action == "force")
            assert json.dumps(live) == snapshot
            assert out[0] == SYSTEM
            assert validate(out) == [], validate(out)
            newest_user = [m for m in sent if m["role"] == "user"][-1]
            assert newest_user in originals_of(out)
            if out != live:
                assert is_summary(out[1])
                if len(out) > 2 and out[2]["role"] == "user":
                    # Only a pair the input already had (the summary merged into a user message).
                    assert split_summary(out[1])[1] is not None, "the summary made two user messages meet"
            live = out
        engine.on_turn_complete(live[1:])

        store, conv = engine.store, engine.conversation_id
        roots = store.roots(conv)
        event(f"compactions: {min(engine.compression_count, 3)}+, depth: {max((r.depth for r in roots), default=-1)}")
        named = split_summary(live[1])[0] if len(live) > 1 and is_summary(live[1]) else []
        assert named == [r.id for r in roots]
        restored = [m.message() for r in roots for m in store.node_messages(r, 0, 10**6)]
        assert restored + originals_of(live) == sent, "the store and the live tail lost or duplicated a message"
        # The pointers and the seq ranges agree, and every message sits in at most one leaf.
        covered = []
        for r in roots:
            ids = store.source_message_ids(r.id)
            assert ids == [m.id for m in store.node_messages(r, 0, 10**6)]
            covered += ids
        assert len(covered) == len(set(covered))
        engine.close()
