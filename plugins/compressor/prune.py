"""Phase 1: cheap, deterministic shrinking of tool traffic (no model call).

* old tool results become an informative one-line placeholder (tool, key arguments,
  size, exit code) instead of a bare "cleared" marker, so the model still knows what ran;
* an exact duplicate of a newer tool result becomes a short pointer to it;
* oversized tool-call arguments are shrunk *inside* the JSON (long string leaves cut),
  so they stay valid JSON — byte-slicing produced unterminated strings that strict
  providers rejected on every later turn.

Every function returns new message dicts for what it changes and never mutates input.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .transcript import Message, call_name_args, text_of

PRUNED_NOTE = "output cleared to save context"
DUPLICATE_PLACEHOLDER = "[Duplicate tool output — same content as a more recent call]"
SCREENSHOT_PLACEHOLDER = "[screenshot removed to save context]"

#: Tool results shorter than this are left alone (the placeholder would not be shorter).
MIN_PRUNE_CHARS = 200
#: Tool results of the summarized middle that still go to the summarizer verbatim: the
#: newest ones, which the active task most likely still needs; older ones go as one-liners.
SUMMARY_KEEP_RECENT_RESULTS = 3
#: Arguments longer than this are shrunk; string leaves longer than LEAF_CHARS are cut.
ARGS_MAX_CHARS = 500
LEAF_CHARS = 200
TRUNCATED = "...[truncated]"

# Argument keys worth naming in a placeholder, most telling first.
_KEY_ARGS = ("command", "cmd", "path", "file_path", "filepath", "filename", "url", "urls",
             "query", "pattern", "target", "goal", "action", "name", "code", "question")
_EXIT_RE = re.compile(r"\bexit(?:[ _]?code|[ _]status)?\"?\s*[:=]\s*(-?\d+)", re.IGNORECASE)


def call_index(messages: list[Message]) -> dict[str, tuple[str, Any]]:
    """``tool_call_id -> (tool name, decoded arguments)`` over every assistant message."""
    index: dict[str, tuple[str, Any]] = {}
    for msg in messages:
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            for call in msg["tool_calls"]:
                if isinstance(call, dict):
                    cid = call.get("id") or call.get("call_id")
                    if cid:
                        index[str(cid)] = call_name_args(call)
    return index


def is_placeholder(content: Any) -> bool:
    """Whether a tool result is already a placeholder written by this module."""
    return isinstance(content, str) and len(content) < 600 and content.startswith("[") and (
        PRUNED_NOTE in content or content == DUPLICATE_PLACEHOLDER
    )


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_one_liner(name: str, args: Any, content: str) -> str:
    """An informative placeholder for an old tool result, e.g.
    ``[read_file] path=src/app.py → 3,412 chars, 120 lines (output cleared to save context)``.
    Never raises."""
    try:
        parts = []
        if isinstance(args, dict):
            keys = [k for k in _KEY_ARGS if k in args] or list(args)[:2]
            for key in keys[:2]:
                parts.append(f"{key}={_short(args[key], 80 if key in ('command', 'cmd') else 60)}")
        elif isinstance(args, str) and args.strip():
            parts.append(_short(args, 60))
        lines = content.count("\n") + 1 if content else 0
        size = f"{len(content):,} chars, {lines:,} line{'s' if lines != 1 else ''}"
        match = _EXIT_RE.search(content[:2000]) or _EXIT_RE.search(content[-2000:])
        if match:
            size += f", exit {match.group(1)}"
        what = " ".join(parts)
        return f"[{name or 'tool'}] {what + ' → ' if what else ''}{size} ({PRUNED_NOTE})"
    except Exception:  # a placeholder must never break compaction
        return f"[{name or 'tool'}] ({len(content or ''):,} chars; {PRUNED_NOTE})"


def shrink_arguments(arguments: Any) -> str | None:
    """Shrunk JSON for oversized tool-call ``arguments``: every string leaf longer than
    :data:`LEAF_CHARS` is cut and marked, then the JSON is re-serialized. ``None`` when
    the arguments are small, not JSON, or unchanged (non-JSON is never byte-sliced)."""
    if not isinstance(arguments, str) or len(arguments) <= ARGS_MAX_CHARS:
        return None
    try:
        data = json.loads(arguments)
    except ValueError:
        return None

    def shrink(value: Any) -> Any:
        if isinstance(value, str) and len(value) > LEAF_CHARS:
            return value[:LEAF_CHARS] + TRUNCATED
        if isinstance(value, dict):
            return {k: shrink(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shrink(v) for v in value]
        return value

    out = json.dumps(shrink(data), ensure_ascii=False)
    return out if out != arguments and len(out) < len(arguments) else None


def shrink_calls(msg: Message) -> Message | None:
    """A copy of an assistant message with its oversized arguments shrunk, or ``None``."""
    calls = msg.get("tool_calls")
    if not calls:
        return None
    new_calls, changed = [], False
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        shrunk = shrink_arguments(fn.get("arguments")) if isinstance(fn, dict) else None
        if shrunk is None or not isinstance(fn, dict):
            new_calls.append(call)
        else:
            new_calls.append({**call, "function": {**fn, "arguments": shrunk}})
            changed = True
    if not changed:
        return None
    out = dict(msg)
    out["tool_calls"] = new_calls
    return out


def demote_result(msg: Message, index: dict[str, tuple[str, Any]], min_chars: int = MIN_PRUNE_CHARS) -> Message | None:
    """A copy of a tool result with its body replaced by a one-liner, or ``None`` when it
    is short, already a placeholder, or not a tool result."""
    if msg.get("role") != "tool":
        return None
    content = msg.get("content")
    if isinstance(content, list):
        if not any(isinstance(p, dict) and p.get("type") in ("image", "image_url", "input_image")
                   for p in content):
            content = text_of(content)
        else:
            parts = [
                {"type": "text", "text": SCREENSHOT_PLACEHOLDER}
                if isinstance(p, dict) and p.get("type") in ("image", "image_url", "input_image") else p
                for p in content
            ]
            out = dict(msg)
            out["content"] = parts
            return out
    if not isinstance(content, str) or len(content) <= min_chars or is_placeholder(content):
        return None
    name, args = index.get(str(msg.get("tool_call_id") or ""), (str(msg.get("name") or ""), None))
    out = dict(msg)
    out["content"] = tool_one_liner(name or str(msg.get("name") or ""), args, content)
    return out


def dedupe(messages: list[Message], start: int) -> int:
    """Replace, in place in the list (new dicts), tool results from ``start`` on that
    exactly repeat a newer one. Returns how many were replaced."""
    seen: set[str] = set()
    count = 0
    for i in range(len(messages) - 1, start - 1, -1):
        msg = messages[i]
        content = msg.get("content")
        if msg.get("role") != "tool" or not isinstance(content, str) or len(content) < MIN_PRUNE_CHARS:
            continue
        digest = hashlib.md5(content.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()
        if digest in seen:
            messages[i] = {**msg, "content": DUPLICATE_PLACEHOLDER}
            count += 1
        else:
            seen.add(digest)
    return count


def prune_range(messages: list[Message], start: int, end: int,
                index: dict[str, tuple[str, Any]], *, min_chars: int = MIN_PRUNE_CHARS) -> int:
    """Demote tool results and shrink tool-call arguments in ``messages[start:end]``
    (replacing list items with new dicts). Returns how many messages changed."""
    count = 0
    for i in range(start, end):
        msg = messages[i]
        changed = demote_result(msg, index, min_chars) if msg.get("role") == "tool" else shrink_calls(msg)
        if changed is not None:
            messages[i] = changed
            count += 1
    return count


def relieve_pressure(messages: list[Message], start: int, budget: int,
                     index: dict[str, tuple[str, Any]], tokens: Any, keep_last: int = 3) -> int:
    """Shrink tool traffic in the protected tail ``messages[start:]`` oldest first, until
    its size fits ``budget`` tokens; the last ``keep_last`` messages stay verbatim and user
    or assistant text is never touched. Returns how many messages changed."""
    total = sum(tokens(m) for m in messages[start:])
    count = 0
    for i in range(start, max(start, len(messages) - keep_last)):
        if total <= budget:
            break
        msg = messages[i]
        changed = demote_result(msg, index) if msg.get("role") == "tool" else shrink_calls(msg)
        if changed is not None:
            total += tokens(changed) - tokens(msg)
            messages[i] = changed
            count += 1
    return count


__all__ = [
    "DUPLICATE_PLACEHOLDER",
    "PRUNED_NOTE",
    "call_index",
    "dedupe",
    "demote_result",
    "is_placeholder",
    "prune_range",
    "relieve_pressure",
    "shrink_arguments",
    "shrink_calls",
    "tool_one_liner",
]


def prune_for_summary(messages: list[Message], indices: list[int], index: dict[str, tuple[str, Any]],
                      keep_recent: int = SUMMARY_KEEP_RECENT_RESULTS) -> int:
    """Upstream's cheap pre-pass before summarizing: in ``messages[i] for i in indices``
    (the middle about to be summarized), demote every tool result but the newest
    ``keep_recent`` to its one-liner and shrink oversized call arguments, replacing list
    items with new dicts. Without it a forced compaction of many tool turns sent the
    summarizer every old output in full. Returns how many messages changed."""
    results = [i for i in indices if messages[i].get("role") == "tool"]
    keep = set(results[-keep_recent:]) if keep_recent > 0 else set()
    count = 0
    for i in indices:
        msg = messages[i]
        if i in keep:
            continue
        changed = demote_result(msg, index) if msg.get("role") == "tool" else shrink_calls(msg)
        if changed is not None:
            messages[i] = changed
            count += 1
    return count
