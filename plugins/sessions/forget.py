"""``forget`` for the SQLite session store (``hermes forget``).

A request with a query replaces every occurrence of the text (case-insensitive) in
message content, tool-call arguments, reasoning and session system prompts with
``[forgotten]`` — the transcript keeps its shape, so tool calls stay paired — and drops a
title holding it. A request naming sessions without a query deletes those sessions.

Gone means gone from the file, not only hidden: the connection turns on
``secure_delete`` (freed cells and pages are zeroed), the triggers take the old text out
of both full-text indexes, an FTS5 ``optimize`` rewrites each index without the deleted
entries, then ``VACUUM`` rebuilds the file and ``wal_checkpoint(TRUNCATE)`` empties the
write-ahead log (whose old frames would still hold the text). A running chat holding a
read snapshot can keep the checkpoint from truncating; the report says so.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import hermes

from . import schema

REDACTED = "[forgotten]"
_PREVIEW = 70


def _pattern(query: str) -> re.Pattern[str]:
    return re.compile(re.escape(query), re.IGNORECASE)


def _context(text: str, pattern: re.Pattern[str]) -> str:
    """A short one-line excerpt around the first match."""
    match = pattern.search(text)
    if match is None:
        return ""
    start = max(0, match.start() - 25)
    piece = " ".join(text[start:match.end() + 25].split())
    return ("…" if start else "") + piece[:_PREVIEW] + ("…" if match.end() + 25 < len(text) else "")


def _scope(request: hermes.ForgetRequest, id_column: str, time_column: str) -> tuple[str, list[Any]]:
    """The request's session and ``before`` limits as `` AND …`` clauses and their arguments."""
    where, args = "", list(request.session_ids)
    if args:
        where = f" AND {id_column} IN ({','.join('?' * len(args))})"
    if request.before is not None:
        where += f" AND {time_column} < ?"
        args.append(request.before)
    return where, args


def _find(conn: sqlite3.Connection, request: hermes.ForgetRequest) -> dict[str, Any]:
    query = request.query.strip()
    out: dict[str, Any] = {"messages": [], "prompts": [], "whole": []}
    if not query:
        if not request.session_ids:
            return out
        where, args = _scope(request, "id", "started_at")
        out["whole"] = [dict(r) for r in conn.execute(
            f"SELECT id, title, message_count FROM sessions WHERE 1{where}", args)]
        return out
    pattern = _pattern(query)
    conn.create_function("hermes_forget_has", 1, lambda text: text is not None and bool(pattern.search(text)),
                         deterministic=True)
    where, args = _scope(request, "session_id", "timestamp")
    out["messages"] = [dict(r) for r in conn.execute(
        "SELECT id, session_id, role, content, tool_calls, reasoning FROM messages WHERE "
        "(hermes_forget_has(content) OR hermes_forget_has(tool_calls) OR hermes_forget_has(reasoning))"
        + where, args)]
    where, args = _scope(request, "id", "started_at")
    out["prompts"] = [dict(r) for r in conn.execute(
        "SELECT id, title, system_prompt FROM sessions WHERE "
        "(hermes_forget_has(system_prompt) OR hermes_forget_has(title))" + where, args)]
    return out


def forget(store: Any, request: hermes.ForgetRequest) -> hermes.ForgetReport:
    """Report (``request.dry_run``) or remove what ``request`` names in ``store``."""
    report = hermes.ForgetReport(component=f"sessions ({store.path})")
    if not request.query.strip() and not request.session_ids:
        return report
    pattern = _pattern(request.query.strip()) if request.query.strip() else None
    found = store._read(lambda conn: _find(conn, request))
    for row in found["whole"]:
        report.found.append(f"session {row['id']} ({row['message_count']} messages"
                            + (f", {row['title']!r}" if row["title"] else "") + ") — deleted whole")
    for row in found["messages"]:
        text = next((row[k] for k in ("content", "tool_calls", "reasoning")
                     if row[k] and pattern and pattern.search(row[k])), "")
        report.found.append(f"session {row['session_id']} message {row['id']} ({row['role']}): "
                            f"{_context(text, pattern) if pattern else ''}")
    for row in found["prompts"]:
        where = "title" if row["title"] and pattern and pattern.search(row["title"]) else "system prompt"
        report.found.append(f"session {row['id']} {where}")
    report.sessions = sorted({r["id"] for r in found["whole"]} | {r["session_id"] for r in found["messages"]}
                             | {r["id"] for r in found["prompts"]})
    if request.dry_run or not report.found:
        return report

    def scrub(text: str | None) -> str | None:
        return pattern.sub(REDACTED, text) if (pattern and text) else text

    def apply(conn: sqlite3.Connection) -> int:
        conn.execute("PRAGMA secure_delete = ON")
        for row in found["whole"]:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (row["id"],))
            conn.execute("DELETE FROM state_meta WHERE key = ?", (f"import:{row['id']}",))
            conn.execute("DELETE FROM sessions WHERE id = ?", (row["id"],))
        for row in found["messages"]:
            conn.execute("UPDATE messages SET content = ?, tool_calls = ?, reasoning = ? WHERE id = ?",
                         (scrub(row["content"]), scrub(row["tool_calls"]), scrub(row["reasoning"]), row["id"]))
        for row in found["prompts"]:
            title = None if (row["title"] and pattern and pattern.search(row["title"])) else row["title"]
            conn.execute("UPDATE sessions SET system_prompt = ?, title = ? WHERE id = ?",
                         (scrub(row["system_prompt"]), title, row["id"]))
        for row in found["messages"]:  # the edit dropped its split-words row (see schema)
            schema.index_split(conn, row["id"], row["id"])
        for table in ("messages_fts", "messages_fts_trigram", "messages_fts_split"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        return len(found["whole"]) + len(found["messages"]) + len(found["prompts"])

    report.removed = store._write(apply)
    report.note = compact(store)
    return report


def compact(store: Any) -> str:
    """VACUUM and truncate the WAL, so no page of the file still holds removed text;
    ``""``, or a sentence saying what kept it from finishing."""
    with store._write_lock:
        conn = store._writer
        try:
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("VACUUM")
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.Error as exc:
            return (f"the text is gone from the tables and indexes, but {store.path} could not be "
                    f"compacted ({exc}); close running chats and run `hermes forget` again")
    if busy:
        return (f"a running chat still reads {store.path}; old copies may remain in its -wal "
                "file until that chat ends (run the command again then)")
    return ""
