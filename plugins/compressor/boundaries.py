"""Phase 2: which messages stay verbatim (head, pinned request, tail) and which are
summarized (the middle).

Rules, each from a bug users met upstream:

* Old summaries are taken out first (standalone ones removed, merged ones unwrapped) and
  their text becomes the "previous summary" to update, so exactly one summary survives.
* Head = the system prompt plus ``protect_first_n`` messages (never ending on a user
  request) on the *first* compaction only; afterwards the first exchange is already in
  the summary and keeping it forever would fossilize it.
* Tail = the newest messages, walked backward by a token budget, extended to
  ``protect_last_n`` messages while within 1.5× the budget, never fewer than three and
  never everything (something must be summarized).
* A boundary never separates an assistant tool call from its results, and the tail never
  starts with a tool result.
* The newest real user message is never summarized: the tail is pulled back to it when
  that stays affordable; otherwise (a long tool chain after it) it is *pinned* — kept
  verbatim right after the head — and the chain is summarized.
* The newest visible assistant reply is kept in the tail when that stays affordable.
* The tail never starts before an old standalone summary (the rows around it were placed
  for it; removing it could join two same-role messages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .transcript import Message, SummaryShape, classify, is_blank, message_tokens, text_of

#: Soft ceiling of the tail walk, as a multiple of the tail budget.
SOFT_CEILING = 1.5
#: How far the anchors (newest user message, newest reply) may stretch the tail.
ANCHOR_CEILING = 3.0
#: The tail always keeps at least this many messages (when there are more to summarize).
MIN_TAIL = 3


@dataclass
class Plan:
    """The layout of one compaction over :attr:`work` (the transcript with old summaries
    taken out): ``work[:head_end]`` head, ``work[pinned]`` (if any) kept after it,
    ``work[cut:]`` tail; everything else in between is summarized."""

    work: list[Message]
    head_end: int
    cut: int
    pinned: int | None = None
    previous_summary: str = ""
    summaries_found: int = 0
    tokens: dict[int, int] = field(default_factory=dict)

    @property
    def middle(self) -> list[int]:
        """Indices (in :attr:`work`) of the messages to summarize."""
        return [i for i in range(self.head_end, self.cut) if i != self.pinned]

    @property
    def has_middle(self) -> bool:
        return any(i != self.pinned for i in range(self.head_end, self.cut))


def strip_summaries(messages: list[Message]) -> tuple[list[Message], list[str], int]:
    """``(work, bodies, barrier)``: the transcript without standalone summaries and with
    merged ones unwrapped, the summary bodies found (oldest first), and the index in
    ``work`` right after the last standalone summary (0 if none)."""
    work: list[Message] = []
    bodies: list[str] = []
    barrier = 0
    for msg in messages:
        shape: SummaryShape | None = classify(msg) if msg.get("role") != "system" else None
        if shape is None:
            work.append(msg)
            continue
        if shape.body:
            bodies.append(shape.body)
        if shape.kind == "standalone":
            barrier = len(work)
        else:
            out = dict(msg)
            out["content"] = shape.genuine
            work.append(out)
    return work, bodies, barrier


def newest_user(work: list[Message], start: int) -> int | None:
    """Index of the newest real user message (non-blank) at or after ``start``."""
    for i in range(len(work) - 1, start - 1, -1):
        if work[i].get("role") == "user" and not is_blank(work[i]):
            return i
    return None


def newest_reply(work: list[Message], start: int) -> int | None:
    """Index of the newest assistant message with visible text at or after ``start``."""
    for i in range(len(work) - 1, start - 1, -1):
        if work[i].get("role") == "assistant" and text_of(work[i].get("content")).strip():
            return i
    return None


def align_forward(work: list[Message], i: int) -> int:
    """Move ``i`` past tool results so a region starting at ``i`` is not mid-group."""
    while i < len(work) and work[i].get("role") == "tool":
        i += 1
    return i


def plan(
    messages: list[Message],
    *,
    protect_first_n: int,
    first_compaction: bool,
    tail_budget: int,
    protect_last_n: int,
    tokens: Callable[[Message], int] = message_tokens,
) -> Plan:
    """Lay out one compaction of ``messages`` (see the module docstring): the protected
    head (:func:`_head_end`), the tail by token budget (:func:`_tail_cut`) never starting
    on a tool result (:func:`_align_tail`), then a clean boundary at the newest user
    message or reply when it fits (:func:`_anchor`)."""
    work, bodies, barrier = strip_summaries(messages)
    n = len(work)
    sizes: dict[int, int] = {}

    def size(i: int) -> int:
        if i not in sizes:
            sizes[i] = tokens(work[i])
        return sizes[i]

    def suffix(i: int) -> int:
        return sum(size(j) for j in range(i, n))

    head_end = _head_end(work, protect_first_n if first_compaction and not bodies else 0)
    floor = max(head_end, barrier)
    cut = _tail_cut(n, floor, size, tail_budget, protect_last_n)
    cut = _align_tail(work, cut, floor)
    cut, pinned = _anchor(work, head_end, floor, cut, suffix, tail_budget * ANCHOR_CEILING)
    return Plan(work, head_end, cut, pinned, "\n\n".join(bodies), len(bodies), sizes)


def _head_end(work: list[Message], first: int) -> int:
    """Where the protected head ends: the system message and ``first`` more messages,
    aligned forward, never ending on a request (the head is a whole exchange)."""
    n = len(work)
    head_start = 1 if n and work[0].get("role") == "system" else 0
    head_end = align_forward(work, min(head_start + max(first, 0), n))
    while head_end > head_start and work[head_end - 1].get("role") == "user":
        head_end -= 1
    return head_end


def _tail_cut(n: int, floor: int, size: Callable[[int], int], tail_budget: int,
              protect_last_n: int) -> int:
    """The first message of the tail chosen by token budget: at least ``MIN_TAIL``
    messages, extended to ``protect_last_n`` within the soft ceiling."""
    available = n - floor
    max_tail = available if available <= MIN_TAIL else max(MIN_TAIL, available - 2)
    hard_min = min(MIN_TAIL, max_tail)
    soft = tail_budget * SOFT_CEILING
    total = count = 0
    cut = n
    while cut > floor and count < max_tail:
        t = size(cut - 1)
        limit = soft if count < protect_last_n else tail_budget
        if count >= hard_min and total + t > limit:
            break
        total += t
        count += 1
        cut -= 1
    return cut


def _align_tail(work: list[Message], cut: int, floor: int) -> int:
    """The tail never starts with a tool result: take the whole group, or none of it."""
    if cut < len(work) and work[cut].get("role") == "tool":
        owner = cut
        while owner > 0 and work[owner].get("role") == "tool":
            owner -= 1
        if owner >= floor and work[owner].get("role") == "assistant":
            return owner
        return align_forward(work, cut)
    return cut


def _anchor(work: list[Message], head_end: int, floor: int, cut: int,
            suffix: Callable[[int], int], ceiling: float) -> tuple[int, int | None]:
    """``(cut, pinned)``: move the cut back to the newest user message (a clean
    boundary) when the tail from there fits ``ceiling``, else pin that message; then to
    the newest assistant reply the same way."""
    pinned = None
    user = newest_user(work, head_end)
    if user is not None and user < cut:
        if user > floor and suffix(user) <= ceiling:
            cut = user
        else:
            pinned = user
    reply = newest_reply(work, head_end)
    if reply is not None and floor < reply < cut and (pinned is None or reply > pinned):
        if suffix(reply) <= ceiling:
            cut = reply
    return cut, pinned
