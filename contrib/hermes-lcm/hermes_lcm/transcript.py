"""Pure helpers over OpenAI-style transcripts: identity, searchable text, the summary
message the engine puts into the live context, and where a transcript may be cut."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import hermes
from hermes import SUMMARY_END_MARKER, SUMMARY_PREFIX

Message = dict[str, Any]

#: Opens this engine's block inside the summary message (after the kernel's
#: ``SUMMARY_PREFIX``, which tells every reader that the message is a compaction summary).
#: The engine recognises its own message by it and by the node tags when the host hands
#: the compacted transcript back.
SUMMARY_HEADER = "[Lossless context"
_NODE_TAG = re.compile(r'<lcm-summary id="n(\d+)"')
#: Closes the summary block; when the block had to be merged into a user message, the
#: original text follows it (see :func:`split_summary`).
MERGE_SEPARATOR = f"\n\n{SUMMARY_END_MARKER}\n\n"


def text_of(message: Message) -> str:
    """The searchable text of a message: its content (text parts of a multi-part
    content joined) and, for an assistant's tool calls, each call's name and arguments."""
    parts = [hermes.content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        parts.append(f"[tool call {fn.get('name', '?')}] {fn.get('arguments', '')}")
    return "\n".join(p for p in parts if p)


def fingerprint(message: Message) -> str:
    """A stable identity for a message as the host sends it back: role, content, tool
    calls and tool-call id. ``name`` and extra keys are left out on purpose — session
    stores drop or add them on a round trip."""
    content = message.get("content")
    key = [
        message.get("role", ""),
        "" if content is None else content,
        message.get("tool_calls") or [],
        message.get("tool_call_id") or "",
    ]
    raw = json.dumps(key, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(raw.encode("utf-8"), digest_size=16).hexdigest()


def is_summary(message: Message) -> bool:
    """Whether ``message`` is (or starts with) this engine's summary block."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str) or not content.startswith(SUMMARY_PREFIX):
        return False
    head = content.partition(MERGE_SEPARATOR)[0]
    return SUMMARY_HEADER in head and _NODE_TAG.search(head) is not None


def split_summary(message: Message) -> tuple[list[int], Message | None]:
    """``(node_ids, original)`` for a summary message: the node ids it names and, when
    the block was merged into a user message, that message as it was before."""
    content = message["content"]
    head, sep, rest = content.partition(MERGE_SEPARATOR)
    ids = [int(i) for i in _NODE_TAG.findall(head)]
    if not sep:
        return ids, None
    original = dict(message)
    original["content"] = rest
    return ids, original


def render_summary(nodes: Sequence[Any], *, total_messages: int, budget: float = float("inf")) -> str:
    """The summary block of the live context: the kernel's ``SUMMARY_PREFIX``, a header
    that tells the model how to get the details back, and one ``<lcm-summary>`` block per
    top-level node, oldest first (the caller closes it with ``SUMMARY_END_MARKER``). Summaries
    are included newest first while they fit ``budget`` tokens (the newest always); older
    ones are named by id only — still one ``lcm_describe`` away."""
    shown: set[int] = set()
    used = 0
    for node in reversed(nodes):
        if shown and used + node.tokens > budget:
            break
        shown.add(node.id)
        used += node.tokens
    lines = [
        SUMMARY_PREFIX,
        "",
        f"{SUMMARY_HEADER}: the {total_messages:,} earliest messages of this conversation are "
        "stored losslessly and summarised below as nodes of a summary DAG, oldest first. "
        "Call lcm_grep(pattern) to search every original message and summary, "
        "lcm_describe(node_id) to see what a node covers, and lcm_expand(node_id) to read "
        "its original messages verbatim.]",
    ]
    for node in nodes:
        attrs = (
            f'id="n{node.id}" depth="{node.depth}" messages="{node.first_seq + 1}-{node.last_seq + 1}" '
            f'earliest="{iso(node.earliest_at)}" latest="{iso(node.latest_at)}"'
        )
        lines.append("")
        if node.id not in shown:
            lines.append(f'<lcm-summary {attrs} omitted="for space: lcm_describe shows it"/>')
            continue
        lines.append(f"<lcm-summary {attrs}>")
        lines.append(node.content.strip())
        lines.append("</lcm-summary>")
    return "\n".join(lines)


def iso(ts: float | None) -> str:
    """A UTC timestamp as ``YYYY-MM-DDTHH:MM:SSZ`` (``""`` for ``None``)."""
    if ts is None:
        return ""
    import datetime as _dt

    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cut_points(messages: Sequence[Message]) -> list[int]:
    """Indices where ``messages`` may be cut so that the part from the index on is a
    valid transcript tail: never at a tool result (its call would be left behind)."""
    return [i for i, m in enumerate(messages) if m.get("role") != "tool"]


def validate(messages: Sequence[Message]) -> list[str]:
    """Problems that would make a provider refuse ``messages``: tool results without
    their call, tool calls without their results. ``[]`` when the transcript is valid."""
    problems: list[str] = []
    pending: set[str] = set()
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in pending:
                problems.append(f"message {i}: tool result {call_id!r} has no preceding call")
            pending.discard(call_id)
            continue
        if pending:
            problems.append(f"message {i}: tool calls {sorted(pending)} have no results")
            pending.clear()
        if role == "assistant":
            pending = {c.get("id") for c in msg.get("tool_calls") or []}
    if pending:
        problems.append(f"end: tool calls {sorted(pending)} have no results")
    return problems
