"""Phase 4: put head, pinned request, summary and tail back together as a valid transcript.

* The summary's role never makes two consecutive messages of one role: user after an
  assistant (or tool) row, assistant after a user row, and user when it would be the first
  message after the system prompt (Anthropic requires it) or when no user message would
  survive otherwise. When both roles collide, the summary is merged into the first tail
  message instead (prepended to the live request, or wrapping any other message).
* The system prompt gets a one-time note that turns were compacted.
* Orphans are removed: a tool result whose call is gone is dropped, and a call whose
  result is gone is stripped from its assistant message (never stubbed).
"""

from __future__ import annotations

from .transcript import (
    Message,
    call_ids,
    is_blank,
    prepend_summary,
    summary_block,
    text_of,
    wrap_summary,
)

COMPACTION_NOTE = (
    "[Note: Some earlier conversation turns have been compacted into a handoff summary to save "
    "context space. Build on that summary and the current state rather than redoing work. Your "
    "persistent memory remains fully authoritative regardless of compaction.]"
)
REMOVED_CALL_TEXT = "(tool call removed)"


def with_note(system: Message) -> Message:
    """A copy of the system message carrying :data:`COMPACTION_NOTE` exactly once."""
    out = dict(system)
    content = system.get("content")
    if COMPACTION_NOTE in text_of(content):
        return out
    if isinstance(content, list):
        out["content"] = [*content, {"type": "text", "text": COMPACTION_NOTE}]
    elif content:
        out["content"] = f"{content}\n\n{COMPACTION_NOTE}"
    else:
        out["content"] = COMPACTION_NOTE
    return out


def summary_role(before: list[Message], tail: list[Message]) -> tuple[str, bool]:
    """``(role, merge)`` for the summary placed between ``before`` and ``tail``."""
    conversational = [m for m in before if m.get("role") != "system"]
    last = conversational[-1].get("role") if conversational else None
    force_user = last is None or not any(m.get("role") == "user" for m in conversational + tail)
    if force_user:
        role = "user"
    else:
        role = "user" if last in ("assistant", "tool") else "assistant"
    first = tail[0].get("role") if tail else None
    if role != first:
        return role, False
    other = "assistant" if role == "user" else "user"
    if not force_user and other != last:
        return other, False
    return role, True


def assemble(head: list[Message], pinned: list[Message], body: str, tail: list[Message]) -> list[Message]:
    """The compacted transcript (all dicts are fresh copies; nothing is mutated)."""
    out = [dict(m) for m in head]
    if out and out[0].get("role") == "system":
        out[0] = with_note(out[0])
    out += [dict(m) for m in pinned]
    tail = [dict(m) for m in tail]
    role, merge = summary_role(out, tail)
    if merge:
        first = tail[0]
        live = first.get("role") == "user" and not is_blank(first) and not any(
            m.get("role") == "user" and not is_blank(m) for m in tail[1:])
        tail[0] = prepend_summary(first, body) if live else wrap_summary(first, body)
    else:
        out.append({"role": role, "content": summary_block(body)})
    return sanitize_tool_pairs(out + tail)


def sanitize_tool_pairs(messages: list[Message]) -> list[Message]:
    """Drop tool results that do not answer a call of the assistant message right before
    their group, and strip calls left without a result. Returns a new list; rows that
    change are copies."""
    out: list[Message] = []
    owner: int | None = None
    expected: list[str] = []
    answered: set[str] = set()

    def close() -> None:
        nonlocal owner
        if owner is None:
            return
        original = out[owner].get("tool_calls") or []
        calls = [c for c in original
                 if isinstance(c, dict) and str(c.get("id") or c.get("call_id") or "") in answered]
        if len(calls) != len(original):
            msg = dict(out[owner])
            if calls:
                msg["tool_calls"] = calls
            else:
                msg.pop("tool_calls", None)
                if is_blank(msg):
                    msg["content"] = REMOVED_CALL_TEXT
            out[owner] = msg
        owner = None

    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            cid = str(msg.get("tool_call_id") or "")
            if owner is not None and cid in expected and cid not in answered:
                answered.add(cid)
                out.append(msg)
            continue  # an orphan result: its call is gone or it is out of place
        close()
        out.append(msg)
        if role == "assistant" and msg.get("tool_calls"):
            owner, expected, answered = len(out) - 1, call_ids(msg), set()
    close()
    return out
