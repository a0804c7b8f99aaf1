"""Import sessions from other tools and export them again.

Readers turn a source into :class:`SourceSession` objects; :func:`import_sessions` writes
them through the :class:`hermes.SessionStore` contract, so importing works into any
store. Sources:

* a Hermes ``state.db`` — the Hermes agent's (any upstream schema version: only the
  columns present are read; rewound rows of newer versions are skipped) or a Hermes
  kernel one; session ids, lineage, titles, times and token totals are kept;
* JSONL of OpenAI-format messages — one message per line (one session per file), or one
  ``{"messages": [...]}`` conversation per line, or the files ``hermes sessions export``
  writes (a ``{"hermes_session": {...}}`` line starts each session);
* Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``): user and
  assistant lines, content blocks (text, thinking, tool_use, tool_result) mapped to
  OpenAI-style messages, split assistant lines of one message merged, sidechain (sub-agent)
  and meta lines skipped.

**Re-importing adds nothing twice.** Each imported session records, in the store's
bookkeeping under ``import:<session id>``, how many messages came from the source and a
digest of them. A second import of the same source skips unchanged sessions and appends
only the new messages of a source that grew (a live transcript); a source whose earlier
messages changed is reported and skipped. A bad line is reported as ``file:line: why``
and skipped; the rest of the file still imports.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import hermes

SQLITE_MAGIC = b"SQLite format 3\x00"
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "tool": "tool", "function": "tool"}
_SESSION_FIELDS = ("source", "user_id", "model", "model_config", "system_prompt",
                   "parent_session_id", "started_at", "ended_at", "end_reason", "title", "cwd")
#: Messages written per store batch (one transaction in the SQLite store): big enough to
#: index efficiently, small enough not to keep other writers waiting long.
BATCH_MESSAGES = 5000
#: ... and at most about this many seconds: a busy store's other writers wait no longer.
BATCH_SECONDS = 0.25
#: Messages of one session written per step (a batch ends only between steps).
STEP_MESSAGES = 1000
_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                 "reasoning_tokens", "estimated_cost_usd")


@dataclass
class SourceSession:
    """One session read from a source: its ``id``, OpenAI-style ``messages`` (with
    optional ``timestamp``, ``token_count``, ``finish_reason``, ``reasoning``), session
    fields in ``meta`` and where it came from (``origin``, ``kind``)."""

    id: str
    messages: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    origin: str = ""
    kind: str = ""


@dataclass
class ImportReport:
    """What an import did. ``problems`` are ``file:line: why`` lines (skipped input)."""

    sessions_added: int = 0
    sessions_updated: int = 0
    sessions_unchanged: int = 0
    sessions_skipped: int = 0
    messages_added: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("sessions_added", "sessions_updated",
                                              "sessions_unchanged", "sessions_skipped",
                                              "messages_added", "problems")}


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _timestamp(value: Any) -> float | None:
    """Unix seconds from a number, a numeric string or an ISO-8601 string."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) / 1000.0 if value > 1e11 else float(value)  # ms → s
    if isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            return _timestamp(float(text))
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _canonical(message: dict[str, Any]) -> str:
    return json.dumps(
        [message.get("role"), message.get("content"), message.get("tool_calls") or None,
         message.get("tool_call_id"), message.get("name") or message.get("tool_name")],
        sort_keys=True, ensure_ascii=False, default=str)


def digest(messages: Iterable[dict[str, Any]]) -> str:
    """A stable fingerprint of a message sequence (role, content, tool fields)."""
    return _digest_update(hashlib.sha256(), messages).hexdigest()


def normalize_message(obj: Any) -> dict[str, Any]:
    """An OpenAI-style message dict from loose input; ``ValueError`` saying why not."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    role = _ROLES.get(str(obj.get("role") or "").lower())
    if role is None:
        raise ValueError(f"unknown role {obj.get('role')!r}")
    content = obj.get("content")
    msg: dict[str, Any] = {"role": role, "content": None if content is None else hermes.content_text(content)}
    calls = obj.get("tool_calls")
    if calls is None and isinstance(obj.get("function_call"), dict):  # legacy OpenAI shape
        calls = [{"id": obj.get("id") or "call_0", "type": "function", "function": obj["function_call"]}]
    if calls:
        if not isinstance(calls, list):
            raise ValueError("tool_calls is not a list")
        out = []
        for i, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError(f"tool call {i} has no function name")
            args = fn.get("arguments")
            if not isinstance(args, str):
                args = json.dumps(args if args is not None else {}, ensure_ascii=False)
            out.append({"id": str(call.get("id") or f"call_{i}"), "type": "function",
                        "function": {"name": str(fn["name"]), "arguments": args}})
        msg["tool_calls"] = out
    if obj.get("tool_call_id"):
        msg["tool_call_id"] = str(obj["tool_call_id"])
    name = obj.get("name") or obj.get("tool_name")
    if name and role == "tool":
        msg["name"] = str(name)
    ts = _timestamp(obj.get("timestamp") if "timestamp" in obj else obj.get("created_at"))
    if ts is not None:
        msg["timestamp"] = ts
    for key in ("token_count", "finish_reason", "reasoning"):
        if obj.get(key) is not None:
            msg[key] = obj[key]
    return msg


# --------------------------------------------------------------------------------------
# detection
# --------------------------------------------------------------------------------------


class _NotAFile(hermes.HermesError):
    """An import source that is not a file or directory: a usage error (exit status 2)."""

    exit_code = 2


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Files to import: files as given; directories searched for ``*.jsonl`` and
    ``*.db`` files (sorted). Missing paths raise :class:`hermes.HermesError`."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".db"))
            out += found
        elif path.is_file():
            out.append(path)
        elif path.exists():
            # Reading a FIFO would wait for a writer forever; a device has no sessions.
            raise _NotAFile(f"{path} is not a regular file (a FIFO or a device). Save the "
                            "sessions to a file and import that.")
        else:
            raise hermes.HermesError(f"{path}: no such file or directory. Check the path.")
    return out


def detect(path: Path) -> str:
    """``"hermes-db"``, ``"claude-code"`` or ``"jsonl"``."""
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head == SQLITE_MAGIC:
        return "hermes-db"
    with open(path, encoding="utf-8", errors="replace") as f:
        for _, line in zip(range(50), f, strict=False):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                if obj.get("type") in ("user", "assistant", "summary", "system") and (
                        "message" in obj or "sessionId" in obj or "leafUuid" in obj):
                    return "claude-code"
                if "role" in obj or "messages" in obj or "hermes_session" in obj:
                    return "jsonl"
    return "jsonl"


def count_units(path: Path, kind: str) -> int:
    """Rough work units of a source for a progress bar (messages or lines)."""
    try:
        if kind == "hermes-db":
            with _open_ro(path) as conn:
                return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except (OSError, sqlite3.Error):
        return 0


def read(path: Path, kind: str, problems: list[str]) -> Iterator[SourceSession]:
    """The sessions of one source of the given kind."""
    readers: dict[str, Callable[[Path, list[str]], Iterator[SourceSession]]] = {
        "hermes-db": read_hermes_db, "claude-code": read_claude_code, "jsonl": read_jsonl,
    }
    return readers[kind](path, problems)


# --------------------------------------------------------------------------------------
# Hermes state.db
# --------------------------------------------------------------------------------------


class _open_ro:
    """A read-only connection to a SQLite file (closed on exit)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> sqlite3.Connection:
        self.conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        self.conn.row_factory = sqlite3.Row
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def read_hermes_db(path: Path, problems: list[str]) -> Iterator[SourceSession]:
    """Sessions of a Hermes ``state.db`` (agent or kernel, any schema version)."""
    try:
        with _open_ro(path) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"sessions", "messages"} <= tables:
                problems.append(f"{path}: not a Hermes state.db (no sessions/messages tables); skipped")
                return
            scols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
            mcols = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
            order = "started_at, id" if "started_at" in scols else "id"
            wanted = [c for c in (*_SESSION_FIELDS, *_TOKEN_FIELDS) if c in scols]
            active = " AND coalesce(active, 1) != 0" if "active" in mcols else ""
            mwanted = [c for c in ("role", "content", "tool_call_id", "tool_calls", "tool_name",
                                   "timestamp", "token_count", "finish_reason", "reasoning")
                       if c in mcols]
            sessions = conn.execute(
                f"SELECT id, {', '.join(wanted)} FROM sessions ORDER BY {order}").fetchall()
            for srow in sessions:
                meta = {k: srow[k] for k in wanted if srow[k] is not None}
                if isinstance(meta.get("model_config"), str):
                    try:
                        meta["model_config"] = json.loads(meta["model_config"])
                    except ValueError:
                        meta.pop("model_config")
                messages = []
                for mrow in conn.execute(
                        f"SELECT id, {', '.join(mwanted)} FROM messages WHERE session_id = ?{active} "
                        "ORDER BY id", (srow["id"],)):
                    raw = {k: mrow[k] for k in mwanted if mrow[k] is not None}
                    if isinstance(raw.get("tool_calls"), str):
                        try:
                            raw["tool_calls"] = json.loads(raw["tool_calls"])
                        except ValueError:
                            problems.append(f"{path}: message {mrow['id']}: tool_calls is not JSON; "
                                            "kept without them")
                            raw.pop("tool_calls")
                    try:
                        messages.append(normalize_message(raw))
                    except ValueError as exc:
                        problems.append(f"{path}: message {mrow['id']}: {exc}; skipped")
                yield SourceSession(str(srow["id"]), messages, meta, str(path), "hermes-db")
    except sqlite3.DatabaseError as exc:
        problems.append(f"{path}: cannot read this database ({exc}); skipped")


# --------------------------------------------------------------------------------------
# JSONL (OpenAI messages, Hermes exports)
# --------------------------------------------------------------------------------------


def _derived_id(path: Path, first: dict[str, Any] | None) -> str:
    seed = path.name + "\0" + (_canonical(first) if first else "")
    return "jsonl-" + hashlib.sha256(seed.encode("utf-8")).hexdigest()[:16]


def read_jsonl(path: Path, problems: list[str]) -> Iterator[SourceSession]:
    """Sessions of an OpenAI-format JSONL file (see the module docstring)."""
    current: SourceSession | None = None
    implicit: SourceSession | None = None

    def finish(session: SourceSession | None) -> Iterator[SourceSession]:
        if session is not None and session.messages:
            if not session.id:
                session.id = _derived_id(path, session.messages[0])
            if "system_prompt" not in session.meta and session.messages[0]["role"] == "system" \
                    and session.kind == "jsonl":
                session.meta["system_prompt"] = session.messages.pop(0)["content"]
            yield session

    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except ValueError as exc:
                problems.append(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)}); skipped")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{where}: not a JSON object; skipped")
                continue
            if isinstance(obj.get("hermes_session"), dict):
                yield from finish(current)
                meta = dict(obj["hermes_session"])
                current = SourceSession(str(meta.pop("id", "") or ""), [], meta, str(path), "hermes-export")
                continue
            if isinstance(obj.get("messages"), list):
                sid = str(obj.get("id") or obj.get("session_id") or "")
                session = SourceSession(sid, [], {}, str(path), "jsonl")
                for i, raw in enumerate(obj["messages"]):
                    try:
                        session.messages.append(normalize_message(raw))
                    except ValueError as exc:
                        problems.append(f"{where}: message {i}: {exc}; skipped")
                if not sid and session.messages:
                    session.id = _derived_id(path, session.messages[0]) + f"-{lineno}"
                yield from finish(session)
                continue
            if "role" not in obj:
                problems.append(f"{where}: neither a message (no 'role') nor a session; skipped")
                continue
            try:
                message = normalize_message(obj)
            except ValueError as exc:
                problems.append(f"{where}: {exc}; skipped")
                continue
            if current is None:
                if implicit is None:
                    implicit = SourceSession("", [], {}, str(path), "jsonl")
                implicit.messages.append(message)
            else:
                current.messages.append(message)
    yield from finish(current)
    yield from finish(implicit)


# --------------------------------------------------------------------------------------
# Claude Code transcripts
# --------------------------------------------------------------------------------------


@dataclass
class _ClaudeSession:
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_names: dict[str, str] = field(default_factory=dict)
    last_assistant_id: str | None = None
    cwd: str | None = None
    model: str | None = None


def read_claude_code(path: Path, problems: list[str]) -> Iterator[SourceSession]:
    """Sessions of a Claude Code transcript (usually one per file)."""
    sessions: dict[str, _ClaudeSession] = {}
    summaries: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except ValueError as exc:
                problems.append(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)}); skipped")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{where}: not a JSON object; skipped")
                continue
            kind = obj.get("type")
            if kind == "summary":
                if isinstance(obj.get("summary"), str):
                    summaries.append(obj["summary"])
                continue
            if kind not in ("user", "assistant") or obj.get("isSidechain") or obj.get("isMeta"):
                continue  # snapshots, system notes, sub-agent chatter: not the conversation
            msg = obj.get("message")
            if not isinstance(msg, dict):
                problems.append(f"{where}: {kind} line without a message object; skipped")
                continue
            sid = str(obj.get("sessionId") or path.stem)
            state = sessions.setdefault(sid, _ClaudeSession())
            state.cwd = state.cwd or obj.get("cwd")
            ts = _timestamp(obj.get("timestamp"))
            content = msg.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if not isinstance(content, list):
                problems.append(f"{where}: message content is neither text nor a list of blocks; skipped")
                continue
            if kind == "assistant":
                _claude_assistant(state, msg, content, ts)
            else:
                _claude_user(state, content, ts)
    title = summaries[0].strip() if summaries else None
    for sid, state in sessions.items():
        if not state.messages:
            continue
        meta: dict[str, Any] = {"source": "claude-code"}
        if state.cwd:
            meta["cwd"] = state.cwd
        if state.model:
            meta["model"] = state.model
        if title:
            meta["title"] = title[:100]
        first_ts = next((m["timestamp"] for m in state.messages if "timestamp" in m), None)
        if first_ts is not None:
            meta["started_at"] = first_ts
        yield SourceSession(sid, state.messages, meta, str(path), "claude-code")


def _claude_assistant(state: _ClaudeSession, msg: dict[str, Any], blocks: list[Any], ts: float | None) -> None:
    text, thinking, calls = [], [], []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            text.append(str(block["text"]))
        elif kind == "thinking" and block.get("thinking"):
            thinking.append(str(block["thinking"]))
        elif kind == "tool_use":
            call_id = str(block.get("id") or f"toolu_{len(state.tool_names)}")
            name = str(block.get("name") or "tool")
            state.tool_names[call_id] = name
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}})
    model = msg.get("model")
    if isinstance(model, str) and model and not model.startswith("<"):
        state.model = state.model or model
    mid = msg.get("id")
    last = state.messages[-1] if state.messages else None
    if mid and last is not None and last["role"] == "assistant" and state.last_assistant_id == mid:
        # Claude Code writes one line per content block of a streamed message.
        if text:
            last["content"] = "\n".join(p for p in (last.get("content"), *text) if p)
        if thinking:
            last["reasoning"] = "\n".join(p for p in (last.get("reasoning"), *thinking) if p)
        if calls:
            last.setdefault("tool_calls", []).extend(calls)
        return
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(text)}
    if thinking:
        message["reasoning"] = "\n".join(thinking)
    if calls:
        message["tool_calls"] = calls
    if ts is not None:
        message["timestamp"] = ts
    state.messages.append(message)
    state.last_assistant_id = mid


def _claude_user(state: _ClaudeSession, blocks: list[Any], ts: float | None) -> None:
    text = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            call_id = str(block.get("tool_use_id") or "")
            result: dict[str, Any] = {"role": "tool", "content": hermes.content_text(block.get("content")),
                                      "tool_call_id": call_id}
            if call_id in state.tool_names:
                result["name"] = state.tool_names[call_id]
            if ts is not None:
                result["timestamp"] = ts
            state.messages.append(result)
        elif kind == "text" and block.get("text"):
            text.append(str(block["text"]))
        elif kind == "image":
            text.append("[image]")
    if text:
        message: dict[str, Any] = {"role": "user", "content": "\n".join(text)}
        if ts is not None:
            message["timestamp"] = ts
        state.messages.append(message)
    state.last_assistant_id = None


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------


def import_sessions(
    store: hermes.SessionStore,
    sessions: Iterable[SourceSession],
    report: ImportReport,
    *,
    progress: Callable[[int], None] | None = None,
    batch_messages: int = BATCH_MESSAGES,
) -> ImportReport:
    """Write sessions into ``store`` idempotently (see the module docstring), about
    ``batch_messages`` messages per :meth:`~hermes.SessionStore.batch` — a single huge
    session too is written in several batches, so other writers get the database
    between them. The import bookkeeping is updated in each batch, so an import killed
    part way resumes where it stopped when run again."""
    batch_messages = max(1, int(batch_messages))
    steps = _write_steps(store, sessions, report, progress, min(batch_messages, STEP_MESSAGES))
    while True:
        pending = 0
        started = time.monotonic()
        with store.batch():
            for written in steps:
                pending += written
                if pending >= batch_messages or time.monotonic() - started >= BATCH_SECONDS:
                    break
            else:
                return report
        # Leave the database free for a moment: a writer waiting for the lock polls every
        # few milliseconds and must get in before the next batch takes it again.
        # (The store's writers retry every 2-30 ms while they have waited under 2 s.)
        time.sleep(min(0.03, max(0.01, 0.05 * (time.monotonic() - started))))


def _write_steps(store: hermes.SessionStore, sessions: Iterable[SourceSession], report: ImportReport,
                 progress: Callable[[int], None] | None, chunk: int) -> Iterator[int]:
    """Import each session, yielding the number of messages written after each step of
    at most ``chunk`` messages (the caller commits between steps)."""
    for session in sessions:
        total = 0
        try:
            for written in _import_one(store, session, report, chunk):
                total += written
                if progress is not None:
                    progress(written)
                yield written
        except hermes.StoreError:
            raise
        except Exception as exc:  # one bad session never aborts the rest
            report.sessions_skipped += 1
            report.problems.append(f"{session.origin}: session {session.id}: {exc}; skipped")
        if progress is not None:  # skipped and unchanged messages count as done
            progress(max(1, len(session.messages) - total))
        yield 1  # the session row and bookkeeping


def _digest_update(h: Any, messages: Iterable[dict[str, Any]]) -> Any:
    for m in messages:
        calls = m.get("tool_calls")
        # Unit separators keep fields apart; JSON only for the (rare) structured part.
        h.update(f"{m.get('role')}\x1f{m.get('content')}\x1f{m.get('tool_call_id')}\x1f"
                 f"{m.get('name') or m.get('tool_name')}\x1f".encode("utf-8", "surrogatepass"))
        if calls:
            h.update(json.dumps(calls, sort_keys=True, ensure_ascii=False, default=str)
                     .encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    return h


def _import_one(store: hermes.SessionStore, session: SourceSession, report: ImportReport,
                chunk: int) -> Iterator[int]:
    key = f"import:{session.id}"
    messages = session.messages
    recorded = store.get_meta(key)
    existing = store.get_session(session.id)
    info: dict[str, Any]
    if recorded is not None and existing is not None:
        info = json.loads(recorded)
        done = int(info.get("count", 0))
        h = _digest_update(hashlib.sha256(), messages[:done])
        if len(messages) < done or h.hexdigest() != info.get("digest"):
            report.sessions_skipped += 1
            report.problems.append(
                f"{session.origin}: session {session.id} changed since it was imported; skipped "
                f"(`hermes sessions delete {session.id}` first to import it again)")
            return
        if len(messages) == done and not info.get("partial"):
            report.sessions_unchanged += 1
            return
        new = bool(info.get("partial"))  # a first import killed part way: finish it
    elif existing is not None:
        report.sessions_skipped += 1
        report.problems.append(f"{session.origin}: session {session.id} already exists in this "
                               "store and was not imported; skipped")
        return
    else:
        meta = session.meta
        started = _timestamp(meta.get("started_at"))
        if started is None:
            started = next((m["timestamp"] for m in messages if "timestamp" in m), None) or time.time()
        store.create_session(
            session.id, source=str(meta.get("source") or session.kind or "import"),
            model=meta.get("model"), model_config=meta.get("model_config") if isinstance(meta.get("model_config"), dict) else None,
            system_prompt=meta.get("system_prompt"), user_id=meta.get("user_id"),
            parent_session_id=meta.get("parent_session_id"), cwd=meta.get("cwd"), started_at=started,
        )
        info = {"origin": session.origin, "kind": session.kind, "count": 0,
                "digest": hashlib.sha256().hexdigest(), "imported_at": time.time(), "partial": True}
        done, h, new = 0, hashlib.sha256(), True
    # The messages, a chunk per step; the bookkeeping records each chunk with it, and
    # stays "partial" until the session is finished (title, tokens, end).
    while done < len(messages):
        part = messages[done:done + chunk]
        store.append_messages(session.id, part)
        done += len(part)
        report.messages_added += len(part)
        info.update(count=done, digest=_digest_update(h, part).hexdigest())
        store.set_meta(key, json.dumps(info))
        yield len(part)
    if new:
        _finish(store, session)
        info.pop("partial", None)
        store.set_meta(key, json.dumps(info))
        report.sessions_added += 1
    else:
        report.sessions_updated += 1


def _finish(store: hermes.SessionStore, session: SourceSession) -> None:
    """Title, token totals and end of a newly imported session (after its messages)."""
    meta = session.meta
    if meta.get("title"):
        try:
            store.set_title(session.id, str(meta["title"]))
        except ValueError:
            pass  # taken by another session: an untitled import beats a failed one
    tokens = {k: meta[k] for k in _TOKEN_FIELDS if isinstance(meta.get(k), (int, float))}
    if tokens:
        store.update_token_counts(session.id, absolute=True, **tokens)
    if meta.get("end_reason") or meta.get("ended_at"):
        store.end_session(session.id, str(meta.get("end_reason") or "imported"),
                          ended_at=_timestamp(meta.get("ended_at")))


# --------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------


def export_jsonl_lines(data: dict[str, Any]) -> Iterator[str]:
    """JSON lines for one exported session: a ``hermes_session`` line, then its
    messages in OpenAI format (plus ``timestamp`` and the other stored fields). The
    JSONL importer reads these back losslessly."""
    session = {k: v for k, v in data["session"].items() if v is not None}
    yield json.dumps({"hermes_session": session}, ensure_ascii=False, default=str)
    for row in data["messages"]:
        msg: dict[str, Any] = {"role": row["role"], "content": row.get("content")}
        if row.get("tool_calls"):
            msg["tool_calls"] = row["tool_calls"]
        if row.get("tool_call_id"):
            msg["tool_call_id"] = row["tool_call_id"]
        if row.get("tool_name"):
            msg["name"] = row["tool_name"]
        for key in ("timestamp", "token_count", "finish_reason", "reasoning"):
            if row.get(key) is not None:
                msg[key] = row[key]
        yield json.dumps(msg, ensure_ascii=False, default=str)


def _when(ts: Any) -> str:
    value = _timestamp(ts)
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(value)) if value else "unknown"


def export_markdown(data: dict[str, Any]) -> str:
    """One session as readable Markdown (for people, not for re-import)."""
    s = data["session"]
    lines = [f"# {s.get('title') or s['id']}", ""]
    facts = [("Session", f"`{s['id']}`"), ("Source", s.get("source")), ("Model", s.get("model")),
             ("Started", _when(s.get("started_at"))),
             ("Ended", f"{_when(s['ended_at'])} ({s.get('end_reason')})" if s.get("ended_at") else None),
             ("Continues", f"`{s['parent_session_id']}`" if s.get("parent_session_id") else None),
             ("Directory", f"`{s['cwd']}`" if s.get("cwd") else None)]
    lines += [f"- **{k}:** {v}" for k, v in facts if v]
    lines.append("")
    for row in data["messages"]:
        role = row["role"]
        if role == "tool":
            lines.append(f"### Tool result: {row.get('tool_name') or 'tool'}")
            lines += ["", "```", (row.get("content") or "").replace("```", "` ` `"), "```", ""]
            continue
        lines += [f"## {role.capitalize()}", ""]
        if row.get("content"):
            lines += [row["content"], ""]
        for call in row.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            lines.append(f"> **calls** `{fn.get('name')}` `{fn.get('arguments')}`")
        if row.get("tool_calls"):
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
