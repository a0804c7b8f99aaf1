"""The ``session_search`` tool: the agent's recall of its past conversations.

Pipeline for a query: full-text search over every stored message (over-fetching 50 hits)
→ group hits by conversation (lineage root) → drop the current conversation's whole
lineage (its compressed parts and sub-agents are already "in mind") → keep the best N
conversations (default 3, at most 5) → load the session that produced each best hit →
cut a window of at most 100,000 characters around the matches → summarise each with the
auxiliary model (``auxiliary.session_search``), focused on the query, a few at a time and
under one overall deadline. Without an auxiliary model, or when a summary fails or runs
out of time, the raw matched snippets are returned instead, so a match is never lost.
An empty query lists recent conversations without any model call. The handler never
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

#: What the system prompt says about the tool when it is enabled (the prompt helper
#: includes it for the ``session_search`` toolset).
GUIDANCE = (
    "You have `session_search`, your long-term recall of past conversations with this "
    "user. Use it before asking the user to repeat themselves: when they say \"we did this "
    "before\", \"remember when\", \"last time\" or \"as we discussed\", when they mention a "
    "project, file, error or decision you do not see in this conversation, or when a past "
    "solution would help now. Call it without a query to see recent conversations (free, "
    "no summaries). With a query you get focused summaries of the best-matching past "
    "conversations. Queries work best as a few distinctive keywords (names, paths, error "
    "text); words are AND-ed, so join alternatives with OR, quote exact phrases, use "
    "prefix* and NOT. A plain question also works. If a search finds nothing, try fewer or "
    "different keywords before giving up."
)

SCHEMA: dict[str, Any] = {
    "name": "session_search",
    "description": (
        "Search your past conversations (long-term recall). With no query: list recent "
        "conversations (titles, previews; free). With a query: full-text search over every "
        "past message, tool call and tool result; returns a focused summary of each of the "
        "best-matching conversations (default 3, max 5), excluding the current one. Query "
        "syntax: keywords are AND-ed; use OR for alternatives, \"quoted phrases\", prefix*, "
        "NOT; a natural-language question also works. " + GUIDANCE
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string",
                      "description": "Keywords, phrase or question. Omit to browse recent conversations."},
            "role_filter": {"type": "string",
                            "description": "Comma-separated roles to search (user,assistant,tool); default all."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "description": f"Conversations to return (default {DEFAULT_LIMIT}, max {MAX_LIMIT})."},
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


def _run(args: dict[str, Any], ctx: hermes.ToolContext) -> dict[str, Any]:
    kernel = ctx.kernel
    try:
        store = kernel.session_store
    except Exception as exc:
        return {"success": False, "error": f"The session store is not available: {exc}"}
    settings = _settings(kernel)
    try:
        limit = int(args.get("limit") or DEFAULT_LIMIT)
    except (TypeError, ValueError):
        limit = DEFAULT_LIMIT
    limit = max(1, min(MAX_LIMIT, limit))
    query = str(args.get("query") or "").strip()
    current = ctx.session_id or ""
    current_root = store.lineage_root(current) if current else ""
    if not query:
        return _recent(store, limit, current, current_root, settings["hidden"])

    roles_arg = args.get("role_filter")
    roles = ([r.strip() for r in roles_arg.split(",") if r.strip()] if isinstance(roles_arg, str)
             else [str(r) for r in roles_arg] if isinstance(roles_arg, list) else None)
    hits = store.search_messages(query, role_filter=roles or None,
                                 exclude_sources=settings["hidden"], limit=OVERFETCH)
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

    chosen = list(groups.items())[:limit]
    jobs = []
    for root, root_hits in chosen:
        matched = root_hits[0]["session_id"]
        text = format_transcript(store.get_conversation(matched))
        jobs.append((root, root_hits, matched, truncate_around_matches(text, query, settings["max_chars"])))
    summaries = _summarize_all(kernel, query, store, jobs, settings)

    results = []
    for (root, root_hits, matched, _), summary in zip(jobs, summaries, strict=True):
        meta = store.get_session(root) or store.get_session(matched) or {}
        entry: dict[str, Any] = {
            "session_id": root, "matched_session_id": matched, "title": meta.get("title"),
            "when": format_when(meta.get("started_at")), "source": meta.get("source"),
            "model": meta.get("model"), "mode": root_hits[0].get("mode"),
            "summarized": summary is not None,
        }
        if summary is not None:
            entry["summary"] = summary
        else:
            entry["summary"] = RAW_PREFIX + "\n" + "\n".join(
                f"[{h['role'].upper()} {format_when(h.get('timestamp'))}] {h['snippet']}"
                for h in root_hits[:5])
        results.append(entry)
    return {"success": True, "query": query, "results": results, "count": len(results),
            "sessions_searched": len(groups)}


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
        f"Transcript:\n{window}\n\n"
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
