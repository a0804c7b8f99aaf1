"""Property: the transcript repair makes any transcript acceptable to the providers'
tool-call rules without dropping or reordering a single stored message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hermes.runtime.transcript import missing_results, unanswered_tail, with_missing_results


@st.composite
def transcripts(draw):
    out, n = [], 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "answer", "calls"]))
        if kind == "user":
            out.append({"role": "user", "content": draw(st.text(max_size=5))})
        elif kind == "answer":
            out.append({"role": "assistant", "content": "ok"})
        else:
            ids = [f"c{n + i}" for i in range(draw(st.integers(1, 3)))]
            n += len(ids)
            out.append({"role": "assistant", "content": "",
                        "tool_calls": [{"id": i, "function": {"name": "t"}} for i in ids]})
            # a crash may have stored any prefix of the results, in any order
            for i in draw(st.permutations(ids))[: draw(st.integers(0, len(ids)))]:
                out.append({"role": "tool", "tool_call_id": i, "content": "done"})
    return out


def _valid(messages) -> bool:
    pending: list[str] = []
    for msg in messages:
        if msg["role"] == "tool":
            if msg["tool_call_id"] not in pending:
                return False
            pending.remove(msg["tool_call_id"])
            continue
        if pending:
            return False
        pending = [c["id"] for c in msg.get("tool_calls") or []]
    return not pending


@given(transcripts())
def test_repair_answers_every_call_and_keeps_every_message(messages):
    fixed = with_missing_results(messages)
    assert _valid(fixed)
    kept = [m for m in fixed if not (m["role"] == "tool" and "interrupted" in m["content"])]
    assert kept == messages  # nothing dropped, nothing reordered
    assert missing_results(fixed) == []


@given(transcripts())
def test_closing_the_tail_leaves_nothing_open(messages):
    closed = messages + unanswered_tail(messages)
    assert unanswered_tail(closed) == []
    assert not closed or closed[-1]["role"] != "user"
