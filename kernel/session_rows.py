"""What every session store does to a row before it stores it and after it reads it.

The SQLite store and third-party stores (``contrib/hermes-postgres``) share these, so
that titles, session ids and stored message content look the same whatever the store.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from .session_refs import CONTINUED_REASONS

#: The longest session title, in characters, after :func:`sanitize_title`.
MAX_TITLE_LENGTH = 100
#: How far the lineage walks go at most (a longer chain is corrupt anyway).
MAX_LINEAGE_HOPS = 1000
#: A title that continues another: ``name #3``.
NUMBERED_TITLE_RE = re.compile(r"^(.*?) #(\d+)$")

_INVISIBLE_RE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufffc\u00ad]")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


#: The keys of a session row (``hermes.SessionStore``), in the order stores list them.
SESSION_FIELDS = (
    "id", "source", "user_id", "model", "model_config", "system_prompt",
    "parent_session_id", "started_at", "ended_at", "end_reason", "last_active_at",
    "message_count", "tool_call_count", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd",
    "title", "cwd",
)
#: The keys of a message row (``hermes.SessionStore``).
MESSAGE_FIELDS = ("id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
                  "timestamp", "token_count", "finish_reason", "reasoning")


def session_row(row: Any) -> dict[str, Any] | None:
    """A session row as a store returns it from a database row (a mapping of
    :data:`SESSION_FIELDS`, maybe more): ``model_config`` decoded; ``None`` for none."""
    if row is None:
        return None
    out = dict(row)
    out["model_config"] = decode_json(out.get("model_config"))
    return out


def message_row(row: Any) -> dict[str, Any]:
    """A message row as a store returns it from a database row: ``tool_calls`` decoded."""
    out = dict(row)
    out["tool_calls"] = decode_json(out.get("tool_calls"))
    return out


def sanitize_title(title: str | None) -> str | None:
    """Clean a title: drop control and invisible formatting characters, collapse
    whitespace; ``None`` when nothing is left. ``ValueError`` when longer than
    :data:`MAX_TITLE_LENGTH` characters."""
    if title is None:
        return None
    text = " ".join(_INVISIBLE_RE.sub("", _CONTROL_RE.sub("", str(title))).split())
    if not text:
        return None
    if len(text) > MAX_TITLE_LENGTH:
        raise ValueError(f"Title too long ({len(text)} characters); the limit is {MAX_TITLE_LENGTH}.")
    return text


def new_session_id(now: float | None = None) -> str:
    """A fresh id like ``20260315_092437_c9a6ff`` (sortable by creation time)."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(now or time.time()))
    return f"{stamp}_{secrets.token_hex(3)}"


def stored_text(value: Any, *, keep_nul: bool = True) -> str | None:
    """A string column's value as a store writes it: non-strings as their ``str()``,
    lone surrogates (from broken sources; UTF-8 cannot encode them) as U+FFFD;
    ``keep_nul=False`` also drops NUL characters, for stores whose text cannot hold them
    (PostgreSQL)."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = str(value)
    if not keep_nul and "\x00" in value:
        value = value.replace("\x00", "")
    if not value.isascii() and _SURROGATE_RE.search(value):
        value = _SURROGATE_RE.sub("\ufffd", value)
    return value


def encode_json(value: Any) -> str | None:
    """A JSON column's text: ``None`` and strings as they are, anything else dumped."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def decode_json(value: Any) -> Any:
    """The value a JSON column holds; text that is not JSON comes back as it is."""
    if not isinstance(value, str) or not value:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def stored_content(content: Any) -> str | None:
    """A message's ``content`` as a store keeps it: strings as they are; a list of
    content parts as the text of its text parts, any other part as its JSON, joined by
    newlines (unlike :func:`hermes.content_text`, nothing is summarised away)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text") if part.get("type", "text") == "text" else None
                parts.append(str(text) if text is not None else json.dumps(part, ensure_ascii=False))
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


#: The largest ``LIMIT`` / ``OFFSET`` SQL databases take (a signed 64-bit integer).
MAX_PAGE_BOUND = 2**63 - 1


def search_page(limit: Any, offset: Any) -> tuple[int, int]:
    """A page's ``limit`` and ``offset`` (``search_messages``, ``list_sessions``) as
    whole numbers from 0 up to :data:`MAX_PAGE_BOUND`; values that are not numbers
    (``"x"``, ``None``, infinities, NaN) give the first page of 20, so listing and search
    never fail on their input."""
    try:
        bounds = int(limit), int(offset)
    except (TypeError, ValueError, OverflowError):
        return 20, 0
    return min(max(0, bounds[0]), MAX_PAGE_BOUND), min(max(0, bounds[1]), MAX_PAGE_BOUND)


def filter_values(value: Any) -> list[str]:
    """A search filter's values (``source_filter``, ``exclude_sources``, ``role_filter``):
    ``None`` is none, a string is comma-separated, any other iterable is its items."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def substring_snippet(content: str, terms: list[str], width: int = 120) -> str:
    """A search hit's snippet when no index made one (substring and scan matches):
    ``width`` characters from 40 before the first of ``terms`` found (case-insensitive),
    that term marked ``>>>term<<<`` like the indexes' snippets; ``...`` where cut."""
    lower = content.lower()
    for term in terms:
        pos = lower.find(term.lower())
        if pos >= 0:
            start = max(0, pos - 40)
            end = min(len(content), start + width)
            stop = pos + len(term)
            return (("..." if start else "") + f"{content[start:pos]}>>>{content[pos:stop]}<<<"
                    f"{content[stop:end]}" + ("..." if end < len(content) else ""))
    return content[:width] + ("..." if len(content) > width else "")


def message_time(value: Any, now: float) -> float:
    """A message's ``timestamp`` as a store keeps it: a finite number of seconds, else
    ``now`` (bad input must not fail the write)."""
    try:
        when = float(value) if value is not None else now
    except (TypeError, ValueError):
        return now
    return when if math.isfinite(when) else now


def message_tokens(value: Any) -> int | None:
    """A message's ``token_count`` as a store keeps it: an integer, else ``None``."""
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def tool_call_count(role: str, tool_calls: Any) -> int:
    """How many tool calls a message adds to its session's ``tool_call_count``: an
    assistant message's calls (a JSON string is decoded; anything else counts one)."""
    if role != "assistant" or not tool_calls:
        return 0
    if isinstance(tool_calls, str):
        tool_calls = decode_json(tool_calls)
    return len(tool_calls) if isinstance(tool_calls, list) else 1


def session_preview(first_user_message: str | None) -> str:
    """``list_sessions``' ``preview``: the first user message, newlines as spaces, cut to
    60 characters plus ``...``."""
    raw = " ".join(((first_user_message or "")[:64]).replace("\r", " ").split("\n"))
    return raw[:60] + "..." if len(raw) > 60 else raw


def title_base(title: str) -> str:
    """``name`` for ``name #N``, else the title itself."""
    m = NUMBERED_TITLE_RE.match(title)
    return m.group(1) if m else title


def next_numbered_title(base: str, titles: Iterable[str]) -> str:
    """``next_title_in_lineage``: ``base`` when none of ``titles`` (every title equal to
    ``base`` or starting with ``base #``) is it or ``base #N``, else ``base #(max N + 1)``;
    the unnumbered base counts as #1."""
    top = 0
    for title in titles:
        if title == base:
            top = max(top, 1)
        elif (m := NUMBERED_TITLE_RE.match(title)) and m.group(1) == base:
            top = max(top, int(m.group(2)))
    return base if top == 0 else f"{base} #{top + 1}"


def pick_titled_session(title: str, rows: Iterable[tuple[str, str, float | None]]) -> str | None:
    """``resolve_session`` by title: of ``rows`` (id, title, started_at — every session
    titled ``title`` or starting with its base and `` #``), the newest continuation
    ``base #N`` (highest N, then newest start), or the exact title; an explicit
    ``name #3`` resolves only to itself. ``None`` when no row qualifies."""
    numbered = NUMBERED_TITLE_RE.match(title)
    base = numbered.group(1) if numbered else title
    best: tuple[int, float, str] | None = None
    for sid, row_title, started in rows:
        m = NUMBERED_TITLE_RE.match(row_title)
        continues = bool(m and m.group(1) == base)
        if row_title != title and (numbered is not None or not continues):
            continue
        key = (int(m.group(2)) if (m and continues) else 1, started or 0.0, sid)
        if best is None or key > best:
            best = key
    return best[2] if best else None


def follow_parents(session_id: str, parent_of: Callable[[str], str | None]) -> str:
    """``lineage_root``: follow ``parent_of`` (the parent's id when that session exists,
    else ``None``) up to a session without one; cycle-safe and bounded."""
    current, seen = session_id, {session_id}
    for _ in range(MAX_LINEAGE_HOPS):
        parent = parent_of(current)
        if not parent or parent in seen:
            return current
        seen.add(parent)
        current = parent
    return current


def follow_continuations(session_id: str, ending: Callable[[str], tuple[str | None, float | None] | None],
                         newest_child_since: Callable[[str, float], str | None]) -> str:
    """``compression_tip``: while the session ended (``ending`` gives its end reason and
    ``ended_at``, ``None`` for no session) with a reason in :data:`CONTINUED_REASONS`,
    move to ``newest_child_since(id, ended_at)`` (its newest child started at or after the
    end); cycle-safe and bounded."""
    current, seen = session_id, {session_id}
    for _ in range(MAX_LINEAGE_HOPS):
        end = ending(current)
        if end is None or end[0] not in CONTINUED_REASONS or end[1] is None:
            return current
        child = newest_child_since(current, end[1])
        if child is None or child in seen:
            return current
        seen.add(child)
        current = child
    return current
