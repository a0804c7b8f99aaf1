"""The engine's tools: ``lcm_grep``, ``lcm_describe`` and ``lcm_expand``.

Each takes the parsed arguments and returns a JSON-ready dict; the engine serialises it.
Answers are bounded (hit counts, snippet sizes, page sizes) so that a tool result can
never flood the context it is meant to save.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .settings import LCMSettings
from .store import LCMStore, Node, StoredMessage
from .transcript import iso

MAX_PATTERN_CHARS = 500
SNIPPET_CHARS = 240
MAX_GREP_LIMIT = 100

SCHEMAS: list[dict[str, Any]] = [
    {
        "name": "lcm_grep",
        "description": (
            "Search every original message and every summary of this conversation, including "
            "what was compacted out of your context. Plain text matches case-insensitively; set "
            "regex=true for a Python regular expression. Returns message ids, the summary node "
            "that covers each message, and node ids of matching summaries, oldest first. "
            "Follow up with lcm_expand(node_id, cursor) to read the originals."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Text or regular expression to find."},
                "regex": {"type": "boolean", "description": "Treat pattern as a regular expression.",
                          "default": False},
                "case_sensitive": {"type": "boolean", "default": False},
                "scope": {"type": "string", "enum": ["all", "messages", "summaries"], "default": "all"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_GREP_LIMIT,
                          "description": "Most hits of each kind (default 20)."},
                "offset": {"type": "integer", "minimum": 0, "description": "Skip this many hits (paging)."},
                "all_conversations": {"type": "boolean", "default": False,
                                      "description": "Search every stored conversation, not only this one."},
            },
            "required": ["pattern"],
        },
    },
    {
        "name": "lcm_describe",
        "description": (
            "Describe a summary node: which messages it covers (ids, positions, time range), its "
            "parent and children in the summary DAG, token counts and its full summary text. "
            "Without node_id, give an overview of this conversation's store and its top-level nodes."
        ),
        "parameters": {
            "type": "object",
            "properties": {"node_id": {"type": "string", "description": "A node id such as \"n12\"."}},
        },
    },
    {
        "name": "lcm_expand",
        "description": (
            "Restore the original messages a summary node covers, verbatim, oldest first, one page "
            "at a time. Pass next_cursor from the answer to continue; a grep hit's cursor jumps "
            "straight to that message."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "node_id": {"type": "string", "description": "A node id such as \"n12\"."},
                "cursor": {"type": "string", "description": "Where to start (\"0\", or next_cursor)."},
                "max_chars": {"type": "integer", "minimum": 200, "description": "Page size in characters."},
            },
            "required": ["node_id"],
        },
    },
]

TOOL_NAMES = frozenset(s["name"] for s in SCHEMAS)


class ToolError(ValueError):
    """A bad argument; reported to the model as ``{"error": ...}``."""


def node_ref(node_id: int) -> str:
    """The id a model sees for a node."""
    return f"n{node_id}"


def parse_node_id(value: Any) -> int:
    """``"n12"``, ``"12"`` or ``12`` → ``12``."""
    text = str(value if value is not None else "").strip()
    if text[:1] in ("n", "N"):
        text = text[1:]
    if not text.isdigit():
        raise ToolError(f"node_id must look like 'n12', got {value!r}")
    return int(text)


def _int_arg(args: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ToolError(f"{key} must be a whole number, got {value!r}") from None
    return max(low, min(high, number))


def _bool_arg(args: dict[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _snippet(text: str, regex: re.Pattern[str]) -> str:
    m = regex.search(text)
    if m is None:
        return text[:SNIPPET_CHARS]
    half = max(0, (SNIPPET_CHARS - (m.end() - m.start())) // 2)
    start, end = max(0, m.start() - half), min(len(text), m.end() + half)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _get_node(store: LCMStore, args: dict[str, Any], conversation_id: int | None) -> Node:
    if args.get("node_id") in (None, ""):
        raise ToolError("node_id is required (e.g. 'n12'); lcm_grep or lcm_describe() lists node ids")
    node = store.node(parse_node_id(args["node_id"]))
    if node is None:
        raise ToolError(f"no node {args['node_id']!r}; lcm_describe() lists this conversation's nodes")
    return node


def grep(store: LCMStore, conversation_id: int | None, args: dict[str, Any], settings: LCMSettings) -> dict[str, Any]:
    """``lcm_grep``: matching messages (with the leaf and lineage that cover each) and
    matching summaries."""
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        raise ToolError("pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"pattern is longer than {MAX_PATTERN_CHARS} characters")
    use_regex = _bool_arg(args, "regex")
    flags = 0 if _bool_arg(args, "case_sensitive") else re.IGNORECASE
    try:
        regex = re.compile(pattern if use_regex else re.escape(pattern), flags)
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from None
    scope = args.get("scope") or "all"
    if scope not in ("all", "messages", "summaries"):
        raise ToolError("scope must be 'all', 'messages' or 'summaries'")
    limit = _int_arg(args, "limit", settings.grep_limit, 1, MAX_GREP_LIMIT)
    offset = _int_arg(args, "offset", 0, 0, 10**9)
    everywhere = _bool_arg(args, "all_conversations") or conversation_id is None
    msgs, nodes, more = store.grep(
        regex, conversation_id=None if everywhere else conversation_id,
        messages=scope in ("all", "messages"), summaries=scope in ("all", "summaries"),
        limit=limit, offset=offset, literal=None if use_regex else pattern,
        case_sensitive=_bool_arg(args, "case_sensitive"),
    )
    out_msgs = []
    for m in msgs:
        leaf = store.leaf_of(m.id)
        hit: dict[str, Any] = {
            "message_id": m.id, "position": m.seq + 1, "role": m.role, "time": iso(m.created_at),
            "snippet": _snippet(m.text, regex),
        }
        if everywhere:
            hit["conversation"] = m.conversation_id
        if leaf is None:
            hit["node_id"] = None
            hit["note"] = "not summarised yet: this message is still in your live context"
        else:
            leaf_node = store.node(leaf)
            hit["node_id"] = node_ref(leaf)
            hit["lineage"] = [node_ref(n) for n in store.lineage(leaf)]
            hit["expand"] = {"node_id": node_ref(leaf), "cursor": str(m.seq - leaf_node.first_seq)}
        out_msgs.append(hit)
    out_nodes = [
        {"node_id": node_ref(n.id), "depth": n.depth, "kind": n.kind,
         "positions": [n.first_seq + 1, n.last_seq + 1], "snippet": _snippet(n.content, regex)}
        for n in nodes
    ]
    return {
        "pattern": pattern, "mode": "regex" if use_regex else "substring",
        "scope": "all conversations" if everywhere else "this conversation",
        "messages": out_msgs, "summaries": out_nodes, "more": more,
        "next_offset": offset + limit if more else None,
    }


def describe(store: LCMStore, conversation_id: int | None, args: dict[str, Any]) -> dict[str, Any]:
    """``lcm_describe``: one node, or (without ``node_id``) the conversation's overview."""
    if args.get("node_id") in (None, ""):
        if conversation_id is None:
            return {"conversations": store.conversations(), "totals": store.stats()}
        roots = store.roots(conversation_id)
        covered = sum(r.message_count for r in roots)
        return {
            "conversation": conversation_id,
            **store.stats(conversation_id),
            "summarised_messages": covered,
            "top_level_nodes": [
                {"node_id": node_ref(r.id), "depth": r.depth, "positions": [r.first_seq + 1, r.last_seq + 1],
                 "messages": r.message_count, "time_range": [iso(r.earliest_at), iso(r.latest_at)]}
                for r in roots
            ],
        }
    node = _get_node(store, args, conversation_id)
    parent = store.parent(node.id)
    first, last = store.node_messages(node, 0, 1), store.node_messages(node, node.message_count - 1, 1)
    return {
        "node_id": node_ref(node.id),
        "kind": node.kind,
        "depth": node.depth,
        "conversation": node.conversation_id,
        "parent": node_ref(parent) if parent is not None else None,
        "children": [node_ref(c) for c in store.children(node.id)],
        "messages": {
            "count": node.message_count,
            "positions": [node.first_seq + 1, node.last_seq + 1],
            "first_message_id": first[0].id if first else None,
            "last_message_id": last[0].id if last else None,
        },
        "time_range": {"earliest": iso(node.earliest_at), "latest": iso(node.latest_at)},
        "tokens": {"summary": node.tokens, "source_messages": node.source_tokens},
        "summarizer": node.summarizer,
        "created_at": iso(node.created_at),
        "summary": node.content,
    }


def _parse_cursor(value: Any) -> tuple[int, int]:
    if value in (None, ""):
        return 0, 0
    text = str(value).strip()
    index, _, offset = text.partition(":")
    if not index.isdigit() or (offset and not offset.isdigit()):
        raise ToolError(f"cursor must be next_cursor from a previous answer (like '12' or '12:4000'), got {value!r}")
    return int(index), int(offset or 0)


def expand(store: LCMStore, conversation_id: int | None, args: dict[str, Any], settings: LCMSettings) -> dict[str, Any]:
    """``lcm_expand``: the node's original messages from the cursor on, at most
    ``max_chars`` of content per page; a message longer than a page is split across
    pages (the cursor then carries a character offset)."""
    node = _get_node(store, args, conversation_id)
    budget = _int_arg(args, "max_chars", settings.expand_max_chars, 200, 200_000)
    index, char_offset = _parse_cursor(args.get("cursor"))
    if index >= node.message_count:
        raise ToolError(f"cursor {index} is past the end: {node_ref(node.id)} covers {node.message_count} messages")
    out: list[dict[str, Any]] = []
    used = 0
    next_cursor: str | None = None
    position = index
    while position < node.message_count and next_cursor is None:
        batch = store.node_messages(node, position, 64)
        if not batch:
            break
        for stored in batch:
            if out:
                # Later messages are kept whole: one that does not fit opens the next page.
                entry, size, rest = _render(stored, 0, None)
                if size > budget - used:
                    next_cursor = str(position)
                    break
            else:
                # The first message of a page is split when it alone exceeds the page.
                entry, size, rest = _render(stored, char_offset, budget)
            out.append(entry)
            used += size
            if rest is not None:
                next_cursor = f"{position}:{rest}"
                break
            position += 1
            char_offset = 0
    return {
        "node_id": node_ref(node.id),
        "messages": out,
        "returned": len(out),
        "covers": node.message_count,
        "next_cursor": next_cursor,
        "done": next_cursor is None,
    }


def _render(stored: StoredMessage, char_offset: int, room: int | None) -> tuple[dict[str, Any], int, int | None]:
    """One message for an expand page: ``(entry, size, next_offset)``. With ``room``, a
    longer content is cut there and ``next_offset`` says where the rest starts."""
    msg = stored.message()
    entry: dict[str, Any] = {"message_id": stored.id, "position": stored.seq + 1, "role": stored.role,
                             "time": iso(stored.created_at)}
    extra = 0
    for key in ("tool_calls", "tool_call_id", "name"):
        if msg.get(key):
            entry[key] = msg[key]
            extra += len(json.dumps(msg[key], ensure_ascii=False))
    content = msg.get("content")
    if not isinstance(content, str):
        entry["content"] = content
        return entry, extra + len(json.dumps(content, ensure_ascii=False, default=str)), None
    rest: int | None = None
    piece = content[char_offset:]
    if room is not None and len(piece) > (room := max(room - extra, 200)):
        piece = piece[:room]
        rest = char_offset + room
    if char_offset or rest is not None:
        entry["content_range"] = [char_offset, char_offset + len(piece), len(content)]
    entry["content"] = piece
    return entry, extra + len(piece), rest
