"""Keeping a stored transcript valid for the provider APIs after an accident.

A process killed while a tool runs leaves an assistant message whose tool calls have no
results; both APIs reject every later request that carries it (HTTP 400), so the
conversation could never be continued. A process killed while an answer streams leaves
a user message without an answer. The runtime closes both gaps with messages that say
what happened, stored like any other message, so the repair persists and the model
learns that the call's effects are unknown.
"""

from __future__ import annotations

import json
from typing import Any

from ..contracts import Message

__all__ = ["INTERRUPTED_ANSWER", "interrupted_result", "missing_results", "unanswered_tail",
           "with_missing_results"]

#: Content of the assistant message that closes a user turn left without an answer (a
#: killed run, an interrupt before the first call, a failed model call).
INTERRUPTED_ANSWER = "(no answer: the turn ended before an answer was stored)"


def interrupted_result(call: dict[str, Any]) -> Message:
    """The tool result stored for a call that never finished."""
    name = (call.get("function") or {}).get("name", "")
    content = json.dumps({
        "error": f"interrupted: the call to {name or 'this tool'} did not finish (the run "
                 "stopped before its result was stored). Its effects are unknown; check "
                 "before repeating it."}, ensure_ascii=False)
    return {"role": "tool", "tool_call_id": call.get("id", ""), "name": name, "content": content}


def missing_results(messages: list[Message]) -> list[tuple[int, list[Message]]]:
    """Where tool results are missing: ``(index, results)`` pairs, each meaning "insert
    these results before ``messages[index]``" (after the call's existing results), in
    ascending order. ``index == len(messages)`` is the tail."""
    out: list[tuple[int, list[Message]]] = []
    i = 0
    while i < len(messages):
        calls = messages[i].get("tool_calls") if messages[i].get("role") == "assistant" else None
        i += 1
        if not calls:
            continue
        answered: set[str] = set()
        while i < len(messages) and messages[i].get("role") == "tool":
            answered.add(str(messages[i].get("tool_call_id") or ""))
            i += 1
        gap = [interrupted_result(c) for c in calls if str(c.get("id") or "") not in answered]
        if gap:
            out.append((i, gap))
    return out


def with_missing_results(messages: list[Message]) -> list[Message]:
    """A copy of ``messages`` with every unanswered tool call given its interrupted
    result (the same list when nothing is missing)."""
    gaps = missing_results(messages)
    if not gaps:
        return messages
    out: list[Message] = []
    start = 0
    for index, results in gaps:
        out += messages[start:index]
        out += results
        start = index
    out += messages[start:]
    return out


def unanswered_tail(messages: list[Message]) -> list[Message]:
    """The messages that close the end of a transcript left open by a crash: interrupted
    results for the last assistant message's unanswered calls, or an interrupted answer
    when the last message is a user message. Empty when the transcript is closed."""
    gaps = missing_results(messages)
    if gaps and gaps[-1][0] == len(messages):
        return gaps[-1][1]
    if messages and messages[-1].get("role") == "user":
        return [{"role": "assistant", "content": INTERRUPTED_ANSWER, "finish_reason": "interrupted"}]
    return []
