"""The ``session_search`` tool: the agent's recall of its past conversations.

Shapes (none calls a model unless asked): **browse** (no arguments: recent
conversations), **discover** (``query``: full-text search over every stored message,
over-fetching 50 hits → grouped by conversation (lineage root) → the current
conversation's whole lineage dropped → the best N conversations (default 3, at most 5),
each with its best hit's snippet, the messages around it (the anchor flagged) and its
bookends — first and last user/assistant messages), **scroll** (``session_id`` +
``around_message_id`` + ``window``) and **read** (``session_id`` alone: the whole
conversation, head and tail when long). ``sort``, ``role_filter``, ``since``/``until``
narrow discover. With ``summarize`` and an auxiliary model (``auxiliary.session_search``)
each conversation found is also summarised, focused on the query, a few at a time under
one deadline; when a summary fails, the raw snippets stand in, so a match is never lost. The handler never
raises into the agent loop: failures come back as ``{"success": false, "error": ...}``.

Settings (``plugins.session-search``): ``max_concurrency`` (1-5, default 3), ``timeout``
(seconds for all summaries together, default 60), ``max_chars`` (window size, default
100000), ``hidden_sources`` (sources never searched, default ``["tool"]``).
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import hermes

log = logging.getLogger("hermes.session_search")

PLUGIN_NAME = "session-search"
DEFAULT_LIMIT, MAX_LIMIT = 3, 5
DEFAULT_CONCURRENCY, MAX_CONCURRENCY = 3, 5
DEFAULT_TIMEOUT = 60.0
MAX_SESSION_CHARS = 100_000
OVERFETCH = 50
HIDDEN_SOURCES = ("tool",)
TOOL_BODY_CHARS = 500
PROXIMITY = 200
RAW_PREFIX = "[Raw matches — summarization unavailable]"
DEFAULT_WINDOW, MAX_WINDOW = 3, 20
BOOKENDS = 2
#: A session longer than this is read as its first and last READ_EDGE messages.
READ_MAX, READ_EDGE = 60, 20
MESSAGE_CHARS = 1500

#: What the system prompt says about the tool when it is enabled (the prompt helper
#: includes it for the ``session_search`` toolset).
GUIDANCE = (
    "You have `session_search`, your long-term recall of past conversations with this "
    "user. Use it before asking the user to repeat themselves: when they say \"we did this "
    "before\", \"remember when\", \"last time\" or \"as we discussed\", when they mention a "
    "project, file, error or decision you do not see in this conversation, or when a past "
    "solution would help now. Four shapes, none of them costs a model call: "
    "**browse** (no arguments) lists recent conversations; **discover** (`query`) finds "
    "the best-matching conversations, each with the matching message, the messages "
    "around it (the anchor flagged) and the conversation's first and last messages; "
    "**scroll** (`session_id` + `around_message_id` + `window`) reads more around a "
    "message discover showed you; **read** (`session_id` alone) reads a whole "
    "conversation (head and tail when long). A query may be a plain question or a few "
    "distinctive keywords (names, paths, error text); \"quoted phrases\", OR, NOT and "
    "prefix* work. Narrow with `role_filter`, `since`/`until` (YYYY-MM-DD) and `sort` "
    "(relevance, newest, oldest). Set `summarize` only when you need a recap of long "
    "conversations and cannot read them yourself. If a search finds nothing, try other "
    "words before giving up."
)

SCHEMA: dict[str, Any] = {
    "name": "session_search",
    "description": (
        "Recall past conversations (long-term memory), excluding the current one. "
        "No arguments: recent conversations. query: best-matching conversations with the "
        "matching message in context. session_id (+ around_message_id, window): read a "
        "past conversation. " + GUIDANCE
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string",
                      "description": "A question, keywords or phrase. Omit to browse or read."},
            "session_id": {"type": "string",
                           "description": "Read this conversation (alone: whole; with around_message_id: a window)."},
            "around_message_id": {"type": "integer",
                                  "description": "With session_id: the message to centre the window on."},
            "window": {"type": "integer", "minimum": 1, "maximum": MAX_WINDOW,
                       "description": f"Messages before and after the anchor (default {DEFAULT_WINDOW})."},
            "role_filter": {"type": "string",
                            "description": "Comma-separated roles to search (user,assistant,tool); default all."},
            "since": {"type": "string", "description": "Only messages from this date on (YYYY-MM-DD)."},
            "until": {"type": "string", "description": "Only messages up to this date (YYYY-MM-DD, inclusive)."},
            "sort": {"type": "string", "enum": ["relevance", "newest", "oldest"],
                     "description": "Order of the conversations found (default relevance)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "description": f"Conversations to return (default {DEFAULT_LIMIT}, max {MAX_LIMIT})."},
            "summarize": {"type": "boolean",
                          "description": "Add a model-written recap of each conversation found (slower)."},
        },
        "required": [],
    },
}

_SUMMARY_SYSTEM = (
    "You help an assistant remember a past conversation. Read the transcript excerpt and "
    "write a factual recap, in the past tense, focused on the search topic you are given. "
    "Cover: what the user wanted; what was done and how it turned out; the decisions, "
    "solutions and conclusions; concrete details worth reusing (commands, file paths, "
    "URLs, names, versions, error messages) quoted exactly; anything left unresolved. Be "
    "thorough on the topic and brief on everything else. If the excerpt says nothing about "
    "the topic, say so in one sentence."
)

_STOP = frozenset(
    "a an and are as at be by did do does for from had has have how i in is it me my of on "
    "or our so that the their them this to was we were what when where which who why will "
    "with you your not".split()
)


# --------------------------------------------------------------------------------------
# transcript shaping
# --------------------------------------------------------------------------------------


def format_when(ts: Any) -> str:
    """``"March 15, 2026 at 09:24 AM"`` from unix seconds (``"unknown"`` when absent)."""
    try:
        value = float(ts)
    except (TypeError, ValueError):
        return "unknown"
    return time.strftime("%B %d, %Y at %I:%M %p", time.localtime(value))


def format_transcript(messages: list[dict[str, Any]]) -> str:
    """A readable transcript: ``[USER]: …`` blocks; tool results as ``[TOOL:name]``, cut
    to their first and last 250 characters when longer than 500; tool calls listed."""
    blocks = []
    for msg in messages:
        role = str(msg.get("role") or "")
        content = msg.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        if role == "tool":
            if len(content) > TOOL_BODY_CHARS:
                half = TOOL_BODY_CHARS // 2
                content = f"{content[:half]}\n...[truncated]...\n{content[-half:]}"
            blocks.append(f"[TOOL:{msg.get('name') or msg.get('tool_name') or 'tool'}]: {content}")
            continue
        if content:
            blocks.append(f"[{role.upper()}]: {content}")
        calls = msg.get("tool_calls") or []
        names = [c.get("function", {}).get("name", "?") for c in calls if isinstance(c, dict)]
        if names:
            blocks.append(f"[{role.upper()}]: [Called: {', '.join(names)}]")
    return "\n\n".join(blocks)


def query_terms(query: str) -> list[str]:
    """Lower-case words of a query, operators and common stop words dropped."""
    words = re.findall(r"\w+", query.lower())
    terms = [w for w in words if w not in _STOP and w not in ("and", "or", "not")]
    return list(dict.fromkeys(terms)) or list(dict.fromkeys(words))


def _positions(text: str, needle: str) -> list[int]:
    out, start = [], text.find(needle)
    while start >= 0:
        out.append(start)
        start = text.find(needle, start + 1)
    return out


def truncate_around_matches(text: str, query: str, max_chars: int = MAX_SESSION_CHARS) -> str:
    """At most ``max_chars`` of ``text``, placed where the query matches most.

    Candidate positions come from the first strategy that finds any: the whole query as
    a phrase; places where the rarest term has every other term within 200 characters;
    any term. The window starts a quarter of its size before a candidate and the one
    covering the most candidates wins. Cut ends are marked.
    """
    if len(text) <= max_chars:
        return text
    lower = text.lower()
    phrase = " ".join(re.sub(r'["*()]', " ", query).lower().split())
    terms = query_terms(query)
    candidates = _positions(lower, phrase) if phrase else []
    if not candidates and len(terms) > 1:
        found = {t: _positions(lower, t) for t in terms}
        if all(found.values()):
            rarest = min(terms, key=lambda t: len(found[t]))
            for pos in found[rarest]:
                if all(any(abs(p - pos) <= PROXIMITY for p in found[t][
                        bisect.bisect_left(found[t], pos - PROXIMITY):
                        bisect.bisect_right(found[t], pos + PROXIMITY)]) for t in terms if t != rarest):
                    candidates.append(pos)
    if not candidates:
        candidates = sorted(p for t in terms for p in _positions(lower, t))
    if not candidates:
        return text[:max_chars] + "\n\n...[later conversation truncated]..."
    candidates.sort()
    best_start, best_count = 0, -1
    for pos in candidates:
        start = max(0, pos - max_chars // 4)
        end = min(len(text), start + max_chars)
        start = max(0, end - max_chars)
        count = bisect.bisect_left(candidates, end) - bisect.bisect_left(candidates, start)
        if count > best_count:
            best_start, best_count = start, count
    end = min(len(text), best_start + max_chars)
    head = "...[earlier conversation truncated]...\n\n" if best_start > 0 else ""
    tail = "\n\n...[later conversation truncated]..." if end < len(text) else ""
    return head + text[best_start:end] + tail


# --------------------------------------------------------------------------------------
# the tool
# --------------------------------------------------------------------------------------


def _settings(kernel: Any) -> dict[str, Any]:
    try:
        raw = kernel.plugin_config(PLUGIN_NAME) or {}
    except Exception:  # settings never break recall
        raw = {}

    def number(key: str, default: float, low: float, high: float) -> float:
        try:
            return min(high, max(low, float(raw.get(key, default))))
        except (TypeError, ValueError):
            return default

    hidden = raw.get("hidden_sources", list(HIDDEN_SOURCES))
    return {
        "concurrency": int(number("max_concurrency", DEFAULT_CONCURRENCY, 1, MAX_CONCURRENCY)),
        "timeout": number("timeout", DEFAULT_TIMEOUT, 1, 3600),
        "max_chars": int(number("max_chars", MAX_SESSION_CHARS, 1000, 1_000_000)),
        "hidden": [str(s) for s in hidden] if isinstance(hidden, list) else list(HIDDEN_SOURCES),
    }


def session_search(args: dict[str, Any], ctx: hermes.ToolContext) -> str:
    """Handler of the ``session_search`` tool; always returns a JSON string."""
    try:
        result = _run(args if isinstance(args, dict) else {}, ctx)
    except Exception as exc:  # never into the agent loop
        log.warning("session_search failed: %s", exc, exc_info=True)
        result = {"success": False, "error": f"Search failed: {exc}"}
    return json.dumps(result, ensure_ascii=False, default=str)


def _int(value: Any, default: int, low: int, high: int) -> int:
    try:
        return max(low, min(high, int(value)))
    except (TypeError, ValueError):
        return default


def _day(value: Any, *, end: bool = False) -> float | None:
    """``YYYY-MM-DD`` (local time; ``end``: the end of that day) or unix seconds."""
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        day = time.mktime(time.strptime(text[:10], "%Y-%m-%d"))
    except ValueError:
        raise ValueError(f"since/until must be a date like 2025-03-14, not {text!r}") from None
    return day + 86400 - 0.001 if end else day


def _message(msg: dict[str, Any], anchor: int | None = None) -> dict[str, Any]:
    """A stored message as the tool shows it: id, role (tool messages with their tool
    name), time and text (cut to MESSAGE_CHARS); ``anchor`` flags the matched one."""
    content = msg.get("content") or ""
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    if len(content) > MESSAGE_CHARS:
        content = content[:MESSAGE_CHARS] + "…[cut]"
    calls = [c.get("function", {}).get("name", "?") for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
    out: dict[str, Any] = {"id": msg.get("id"), "role": msg.get("role"), "when": format_when(msg.get("timestamp")),
                           "content": content}
    if msg.get("role") == "tool":
        out["tool_name"] = msg.get("tool_name") or msg.get("name")
    if calls:
        out["tool_calls"] = calls
    if anchor is not None and msg.get("id") == anchor:
        out["anchor"] = True
    return out


def _window(messages: list[dict[str, Any]], around: int, window: int) -> list[dict[str, Any]]:
    index = next((i for i, m in enumerate(messages) if m.get("id") == around), None)
    if index is None:
        return []
    return [_message(m, around) for m in messages[max(0, index - window): index + window + 1]]


def _bookends(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    talk = [m for m in messages if m.get("role") in ("user", "assistant") and m.get("content")]
    return {"first": [_message(m) for m in talk[:BOOKENDS]],
            "last": [_message(m) for m in talk[-BOOKENDS:]] if len(talk) > BOOKENDS else []}


def _run(args: dict[str, Any], ctx: hermes.ToolContext) -> dict[str, Any]:
    kernel = ctx.kernel
    try:
        store = kernel.session_store
    except Exception as exc:
        return {"success": False, "error": f"The session store is not available: {exc}"}
    settings = _settings(kernel)
    limit = _int(args.get("limit") or DEFAULT_LIMIT, DEFAULT_LIMIT, 1, MAX_LIMIT)
    window = _int(args.get("window") or DEFAULT_WINDOW, DEFAULT_WINDOW, 1, MAX_WINDOW)
    query = str(args.get("query") or "").strip()
    current = ctx.session_id or ""
    current_root = store.lineage_root(current) if current else ""
    target = str(args.get("session_id") or "").strip()
    if target and not query:
        return _read_session(store, target, args.get("around_message_id"), window)
    if not query:
        return _recent(store, limit, current, current_root, settings["hidden"])
    return _discover(kernel, store, args, query, target, limit, window, current, current_root, settings)


def _discover(kernel: Any, store: Any, args: dict[str, Any], query: str, target: str, limit: int,
              window: int, current: str, current_root: str, settings: dict[str, Any]) -> dict[str, Any]:
    """discover: the best conversations for ``query`` (the live one's lineage left out),
    each with its best hit in context and its bookends; summaries only when asked."""
    try:
        since, until = _day(args.get("since")), _day(args.get("until"), end=True)
    except ValueError as exc:
        return {"success": False, "error": str(exc)}
    sort = str(args.get("sort") or "relevance").lower()
    if sort not in ("relevance", "newest", "oldest"):
        return {"success": False, "error": f"sort must be relevance, newest or oldest, not {sort!r}"}

    roles_arg = args.get("role_filter")
    roles = ([r.strip() for r in roles_arg.split(",") if r.strip()] if isinstance(roles_arg, str)
             else [str(r) for r in roles_arg] if isinstance(roles_arg, list) else None)
    hits = store.search_messages(query, role_filter=roles or None, exclude_sources=settings["hidden"],
                                 session_id=target or None, since=since, until=until, limit=OVERFETCH)
    roots: dict[str, str] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for hit in hits:
        sid = hit["session_id"]
        if sid not in roots:
            roots[sid] = store.lineage_root(sid)
        root = roots[sid]
        if sid == current or (current_root and root == current_root):
            continue  # the live conversation: its fragments are already in context
        groups.setdefault(root, []).append(hit)
    if not groups:
        return {"success": True, "query": query, "results": [], "count": 0,
                "sessions_searched": 0, "message": "No matching sessions found."}

    chosen = list(groups.items())
    if sort != "relevance":
        chosen.sort(key=lambda item: item[1][0].get("timestamp") or 0.0, reverse=sort == "newest")
    chosen = chosen[:limit]
    conversations = {root: store.get_messages(root_hits[0]["session_id"]) for root, root_hits in chosen}
    summaries: list[str | None] = [None] * len(chosen)
    if args.get("summarize") is True:
        jobs = [(root, root_hits, root_hits[0]["session_id"],
                 truncate_around_matches(format_transcript(conversations[root]), query, settings["max_chars"]))
                for root, root_hits in chosen]
        summaries = _summarize_all(kernel, query, store, jobs, settings)

    results = [_entry(store, root, root_hits, conversations[root], window, summary)
               for (root, root_hits), summary in zip(chosen, summaries, strict=True)]
    return {"success": True, "query": query, "results": results, "count": len(results),
            "sessions_searched": len(groups),
            "message": "Scroll with session_id + around_message_id + window; read a whole one with session_id."}


def _entry(store: Any, root: str, root_hits: list[dict[str, Any]], messages: list[dict[str, Any]],
           window: int, summary: str | None) -> dict[str, Any]:
    """One conversation found by discover."""
    best = root_hits[0]
    matched = best["session_id"]
    meta = store.get_session(root) or store.get_session(matched) or {}
    return {
        "session_id": root, "matched_session_id": matched, "title": meta.get("title"),
        "when": format_when(meta.get("started_at")), "source": meta.get("source"),
        "model": meta.get("model"), "mode": best.get("mode"),
        "match_message_id": best["id"], "snippet": best.get("snippet", ""),
        "window": _window(messages, best["id"], window),
        "bookends": _bookends(messages),
        "other_matches": [h["id"] for h in root_hits[1:5]],
        "summarized": summary is not None,
        "summary": summary if summary is not None else RAW_PREFIX + "\n" + "\n".join(
            f"[{h['role'].upper()} {format_when(h.get('timestamp'))}] {h['snippet']}" for h in root_hits[:5]),
    }


def _read_session(store: Any, ref: str, around: Any, window: int) -> dict[str, Any]:
    """read (whole conversation, head and tail when long) or scroll (a window)."""
    sid = store.resolve_session(ref) if hasattr(store, "resolve_session") else ref
    meta = store.get_session(sid) if sid else None
    if meta is None:
        return {"success": False, "error": f"No session {ref!r}. Use session_search without arguments to list them."}
    messages = store.get_messages(sid)
    head = {"success": True, "session_id": sid, "title": meta.get("title"),
            "when": format_when(meta.get("started_at")), "source": meta.get("source"),
            "message_count": len(messages)}
    if around not in (None, ""):
        anchor = _int(around, -1, -1, 2**62)
        shown = _window(messages, anchor, window)
        if not shown:
            return {"success": False, "error": f"Message {around} is not in session {sid}."}
        return {**head, "mode": "scroll", "messages": shown}
    if len(messages) <= READ_MAX:
        return {**head, "mode": "read", "messages": [_message(m) for m in messages]}
    return {**head, "mode": "read", "messages": [_message(m) for m in messages[:READ_EDGE]],
            "omitted": len(messages) - 2 * READ_EDGE,
            "tail": [_message(m) for m in messages[-READ_EDGE:]]}


def _recent(store: Any, limit: int, current: str, current_root: str, hidden: list[str]) -> dict[str, Any]:
    rows = store.list_sessions(limit=limit + 5, exclude_sources=hidden or None)
    results = []
    for row in rows:
        if row["id"] in (current, current_root) or row.get("tip_id") == current:
            continue
        results.append({
            "session_id": row["id"], "title": row.get("title"), "source": row.get("source"),
            "started_at": format_when(row.get("started_at")),
            "last_active": format_when(row.get("last_active")),
            "message_count": row.get("lineage_messages", row.get("message_count")),
            "preview": row.get("preview", ""),
        })
        if len(results) >= limit:
            break
    return {"success": True, "mode": "recent", "results": results, "count": len(results),
            "message": "Recent conversations. Search with a query to recall what happened in them."}


def _summarize_all(kernel: Any, query: str, store: Any, jobs: list[tuple], settings: dict[str, Any]) -> list[str | None]:
    """One summary per job (``None`` where it failed), all within one deadline."""
    try:
        aux = kernel.auxiliary("session_search")
    except Exception as exc:
        log.info("no auxiliary model for session_search: %s", exc)
        aux = None
    if aux is None or not jobs:
        return [None] * len(jobs)
    client, model = aux
    deadline = time.monotonic() + settings["timeout"]
    pool = ThreadPoolExecutor(max_workers=min(settings["concurrency"], len(jobs)),
                              thread_name_prefix="session-search")
    futures: list[Future[str | None]] = []
    try:
        for root, _hits, _matched, window in jobs:
            meta = store.get_session(root) or {}
            futures.append(pool.submit(_summarize, client, model, query, meta, window, deadline))
        wait(futures, timeout=max(0.0, deadline - time.monotonic()))
    finally:
        # Threads still talking to the model are abandoned, not awaited: the deadline is
        # the deadline (each request carries the remaining time as its own timeout).
        pool.shutdown(wait=False, cancel_futures=True)
    out: list[str | None] = []
    for future in futures:
        if future.done() and not future.cancelled() and future.exception() is None:
            out.append(future.result())
        else:
            out.append(None)
    return out


def _summarize(client: Any, model: str, query: str, meta: dict[str, Any], window: str,
               deadline: float) -> str | None:
    prompt = (
        f"Search topic: {query}\n"
        f"Session source: {meta.get('source') or 'unknown'}\n"
        f"Session date: {format_when(meta.get('started_at'))}\n\n"
        f"Transcript:\n{hermes.redact_secrets(window)}\n\n"
        f"Summarize this conversation with focus on: {query}"
    )
    for attempt in range(3):
        remaining = deadline - time.monotonic()
        if remaining <= 0.5:
            return None
        try:
            response = client.complete(hermes.LLMRequest(
                model=model, max_tokens=4000, temperature=0.1, timeout=remaining,
                messages=[{"role": "system", "content": _SUMMARY_SYSTEM},
                          {"role": "user", "content": prompt}],
            ))
            text = (response.content or "").strip()
            if text:
                return text
        except Exception as exc:
            log.info("session_search summary attempt %d failed: %s", attempt + 1, exc)
            if not getattr(exc, "retryable", True):
                return None
        pause = float(attempt + 1)
        if deadline - time.monotonic() <= pause + 0.5:
            return None
        time.sleep(pause)
    return None


TOOL = hermes.Tool(name="session_search", schema=SCHEMA, handler=session_search,
                   parallel_safe=True, toolset="session_search")


@hermes.hookimpl
def hermes_register_tools(register: Any) -> None:
    """Register ``session_search``."""
    register(TOOL)
