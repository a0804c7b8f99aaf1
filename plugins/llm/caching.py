"""Anthropic prompt caching: where the ``cache_control`` breakpoints go.

Strategy "system and 3": the system prompt plus the last three non-system messages that
can carry a marker, at most four breakpoints (the API rejects a fifth). Because the API
caches the prefix *up to* each breakpoint and finds earlier breakpoints by looking back,
marking the newest messages every call makes each request read everything the previous
one wrote and write only what is new.

Markers are placed on the kernel's OpenAI-style messages, before conversion to a wire
format, so one placement serves the native Anthropic client (which moves message-level
markers onto the right block) and Claude models behind OpenAI-compatible routers
(OpenRouter-style "envelope" routes, where markers must sit on content parts).

Every function returns a new list and never mutates the messages it is given: messages
that get a marker (or lose a stale one) are copied, the others are shared.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]

#: The API's limit on ``cache_control`` blocks per request.
MAX_BREAKPOINTS = 4


def is_claude_model(model: str) -> bool:
    """Whether ``model`` names a Claude model (``claude-…``, ``anthropic/claude-…``)."""
    name = (model or "").lower()
    return "claude" in name or "anthropic" in name


def cache_marker(ttl: str = "5m") -> dict[str, str]:
    """The ``cache_control`` value for a TTL: ``{"type": "ephemeral"}``, plus
    ``"ttl": "1h"`` for the one-hour cache. Every marker of one request shares a TTL."""
    marker = {"type": "ephemeral"}
    if ttl == "1h":
        marker["ttl"] = "1h"
    return marker


def _is_empty(content: Any) -> bool:
    return content is None or content == "" or content == []


def _strip_message(msg: Message) -> Message:
    """``msg`` without markers: the same object when it has none, else a copy.

    A string that decoration turned into one text part stays a part list: a string and
    a one-part list mean the same to every provider, and guessing which one the caller
    had would make stripping lossy for callers who really sent a list."""
    content = msg.get("content")
    marked_parts = isinstance(content, list) and any(
        isinstance(p, dict) and "cache_control" in p for p in content
    )
    if "cache_control" not in msg and not marked_parts:
        return msg
    out = {k: v for k, v in msg.items() if k != "cache_control"}
    if marked_parts and isinstance(content, list):
        out["content"] = [{k: v for k, v in p.items() if k != "cache_control"}
                          if isinstance(p, dict) and "cache_control" in p else p for p in content]
    return out


def strip_cache_control(messages: list[Message]) -> list[Message]:
    """A copy of ``messages`` with every marker removed (the inverse of
    :func:`apply_cache_control` on unmarked input, except that a marked string stays a
    one-part text list)."""
    return [_strip_message(m) for m in messages]


def can_carry_marker(msg: Message, *, native: bool = True) -> bool:
    """Whether a breakpoint can be placed on ``msg``.

    On the native API every message can (an empty one gets a message-level marker that
    the client moves onto a block). On envelope routes a marker must sit on a content
    part, so only non-empty string content or a list ending in a dict part qualifies.
    """
    if native:
        return True
    content = msg.get("content")
    if isinstance(content, str):
        return bool(content)
    return isinstance(content, list) and bool(content) and isinstance(content[-1], dict)


def _mark(msg: Message, marker: dict[str, str], *, native: bool) -> Message:
    """A copy of ``msg`` carrying ``marker`` in the right place for its content."""
    out = dict(msg)
    content = msg.get("content")
    if native and (msg.get("role") == "tool" or _is_empty(content) or msg.get("tool_calls")):
        # The client puts it on the message's last block (tool_result, last tool_use), so
        # the breakpoint covers the whole message.
        out["cache_control"] = dict(marker)
    elif isinstance(content, str):
        out["content"] = [{"type": "text", "text": content, "cache_control": dict(marker)}]
    elif isinstance(content, list) and content and isinstance(content[-1], dict):
        out["content"] = [*content[:-1], {**content[-1], "cache_control": dict(marker)}]
    return out


def apply_cache_control(
    messages: list[Message],
    *,
    ttl: str = "5m",
    native: bool = True,
    max_breakpoints: int = MAX_BREAKPOINTS,
) -> list[Message]:
    """Place breakpoints on the system message and the last non-system messages.

    Returns a new list; ``messages`` and its dicts are never mutated (decorated messages
    are copies, undecorated ones are shared). Markers already present are removed first,
    so applying twice gives the same result and never more than ``max_breakpoints``.
    An empty system prompt gets no breakpoint (it has no block to carry one).
    """
    out = strip_cache_control(messages)
    if not out:
        return out
    marker = cache_marker(ttl)
    budget = max_breakpoints
    if out[0].get("role") == "system" and not _is_empty(out[0].get("content")) and budget:
        system = out[0]
        content = system.get("content")
        if isinstance(content, list) and len(content) > 1 and isinstance(content[0], dict):
            # [frozen prompt, ephemeral additions]: the breakpoint belongs on the frozen
            # prompt, so a changing ephemeral block never costs the cached prefix.
            out[0] = {**system, "content": [{**content[0], "cache_control": dict(marker)}, *content[1:]]}
        else:
            out[0] = _mark(system, marker, native=native)
        budget -= 1
    for i in range(len(out) - 1, -1, -1):
        if budget <= 0:
            break
        msg = out[i]
        if msg.get("role") == "system" or not can_carry_marker(msg, native=native):
            continue
        out[i] = _mark(msg, marker, native=native)
        budget -= 1
    return out


def count_cache_markers(messages: list[Message]) -> int:
    """How many ``cache_control`` markers ``messages`` carry (messages and parts)."""
    count = 0
    for msg in messages:
        count += "cache_control" in msg
        content = msg.get("content")
        if isinstance(content, list):
            count += sum(1 for p in content if isinstance(p, dict) and "cache_control" in p)
    return count
