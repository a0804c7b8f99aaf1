"""The Hermes side of the MCP server: memory and sessions through the kernel only.

Everything here is synchronous and runs on one worker thread (see :class:`Backend`), so
the kernel's SQLite connection and the memory manager are used from a single thread and
MCP requests that arrive at once are applied one after the other (the memory store's
cross-process lock then orders them against agents and other servers).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import hermes

T = TypeVar("T")

#: scope names (per HTTP token; stdio has them all unless --read-only)
MEMORY_READ, MEMORY_WRITE, SESSIONS_READ = "memory:read", "memory:write", "sessions:read"
ALL_SCOPES = frozenset({MEMORY_READ, MEMORY_WRITE, SESSIONS_READ})

MEMORY_FILES = {"MEMORY.md": "memory", "USER.md": "user"}

SESSIONS_LIST_SCHEMA: dict[str, Any] = {
    "name": "sessions_list",
    "description": "List past Hermes conversations, most recently active first (id, title, "
                   "source, preview, message count). Read one with session_search(session_id=…) "
                   "or the resource hermes://session/<id>.",
    "parameters": {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Rows (default 20)."},
            "offset": {"type": "integer", "minimum": 0, "description": "Rows to skip (paging)."},
        },
    },
}


def _error(message: str) -> str:
    return json.dumps({"success": False, "error": message}, ensure_ascii=False)


def memory_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The agent's ``memory`` schema plus the ``view`` action (MCP clients have no frozen
    snapshot in their prompt, so they need a way to read the entries)."""
    out = json.loads(json.dumps(schema))
    params = out.setdefault("parameters", {"type": "object", "properties": {}})
    action = params.setdefault("properties", {}).setdefault("action", {"type": "string"})
    if isinstance(action.get("enum"), list) and "view" not in action["enum"]:
        action["enum"] = ["view", *action["enum"]]
    out["description"] = (out.get("description") or "") + (
        " Over MCP, action 'view' returns the live entries of the target with its usage.")
    return out


class Backend:
    """One kernel, one memory manager, one worker thread.

    ``home`` selects ``HERMES_HOME`` (``None``: the usual one); ``read_only`` hides and
    refuses every write. Call :meth:`call` from any thread or ``await`` :meth:`run`.
    """

    def __init__(self, make_kernel: Callable[[], Any], *, read_only: bool = False):
        self._make_kernel = make_kernel
        self.read_only = read_only
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hermes-mcp")
        self._kernel: Any = None
        self._manager: Any = None
        self._turn = 0
        self._lock = threading.Lock()

    # -- threading -------------------------------------------------------------------------

    def submit(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker thread and wait for it."""
        return self._pool.submit(fn).result()

    async def run(self, fn: Callable[[], T]) -> T:
        import asyncio

        return await asyncio.wrap_future(self._pool.submit(fn))

    def close(self) -> None:
        def shut() -> None:
            if self._manager is not None:
                self._manager.shutdown()
            if self._kernel is not None:
                self._kernel.close()

        try:
            self.submit(shut)
        finally:
            self._pool.shutdown(wait=True)

    # -- lazily built on the worker thread ---------------------------------------------------

    @property
    def kernel(self) -> Any:
        if self._kernel is None:
            self._kernel = self._make_kernel()
        return self._kernel

    @property
    def manager(self) -> Any:
        if self._manager is None:
            manager = hermes.MemoryManager(self.kernel, platform="mcp", agent_context="mcp")
            manager.initialize("mcp")
            self._manager = manager
        return self._manager

    # -- catalogue ---------------------------------------------------------------------------

    def tool_scopes(self) -> dict[str, tuple[dict[str, Any], frozenset[str]]]:
        """tool name → (schema, scopes needed to call it), for this kernel's selection."""
        out: dict[str, tuple[dict[str, Any], frozenset[str]]] = {}
        for schema in self.manager.tool_schemas():
            name = schema.get("name", "")
            if name == "memory":
                out[name] = (memory_schema(schema), frozenset({MEMORY_READ}))
            elif name:
                # an external provider's tool may store what it is given: a writer's tool
                out[name] = (schema, frozenset({MEMORY_READ, MEMORY_WRITE}))
        for tool in self.kernel.tools(expand=False):
            if tool.name == "session_search":
                out[tool.name] = (tool.openai_schema(), frozenset({SESSIONS_READ}))
        out["sessions_list"] = (SESSIONS_LIST_SCHEMA, frozenset({SESSIONS_READ}))
        return out

    def scopes(self, granted: frozenset[str]) -> frozenset[str]:
        return granted - {MEMORY_WRITE} if self.read_only else granted

    def list_tools(self, granted: frozenset[str]) -> list[dict[str, Any]]:
        granted = self.scopes(granted)
        tools = []
        for schema, needed in self.tool_scopes().values():
            if not needed <= granted:
                continue
            if self.read_only and MEMORY_WRITE in needed:
                continue
            tools.append(schema)
        return tools

    # -- calls -------------------------------------------------------------------------------

    def call_tool(self, name: str, args: dict[str, Any], *, granted: frozenset[str], client: str) -> str:
        """Run one tool for the MCP client named ``client``; a JSON string, never raises."""
        granted = self.scopes(granted)
        table = self.tool_scopes()
        if name not in table:
            return _error(f"unknown tool {name!r}")
        _, needed = table[name]
        if name == "memory" and str(args.get("action") or "").lower() != "view":
            needed = needed | {MEMORY_WRITE}
        missing = sorted(needed - granted)
        if missing:
            why = "this server is read-only (--read-only)" if self.read_only and MEMORY_WRITE in missing \
                else f"this client lacks the scope {', '.join(missing)}"
            return _error(f"{name}: refused, {why}.")
        try:
            if name == "memory" and str(args.get("action") or "").lower() == "view":
                return self._view(args)
            if name == "sessions_list":
                return self._sessions_list(args)
            if name == "session_search":
                tool = next(t for t in self.kernel.tools(expand=False) if t.name == name)
                return tool.handler(args, hermes.ToolContext(kernel=self.kernel, session_id=""))
            with self._lock:
                # each MCP call is its own "turn": the memory tool's per-turn failure cap restarts
                self._turn += 1
                self.manager.on_turn_start(self._turn, "")
                # the client's name is the writer: the memory history says "by mcp:<client>"
                return self.manager.handle_tool_call(name, args, session_id=f"mcp:{client}", origin="mcp")
        except Exception as exc:  # a tool failure is a result for the client, never a crash
            return _error(f"{name} failed: {exc}")

    def memory_text(self, target: str) -> str:
        """The live entries of ``target`` as the agent's prompt block shows them."""
        builtin = self.manager.builtin
        if builtin is None:
            raise hermes.HermesError("the built-in memory provider is not active")
        builtin.initialize("mcp")  # a fresh snapshot: what is on disk now
        return self.manager.builtin_block(target)

    def _view(self, args: dict[str, Any]) -> str:
        target = str(args.get("target") or "memory").strip().lower()
        if target not in MEMORY_FILES.values():
            return _error(f"unknown target {target!r}; use 'memory' or 'user'.")
        text = self.memory_text(target)
        return json.dumps({"success": True, "target": target, "content": text or "(empty)"}, ensure_ascii=False)

    def _sessions_list(self, args: dict[str, Any]) -> str:
        def number(key: str, default: int, high: int) -> int:
            try:
                return max(0, min(high, int(args.get(key, default))))
            except (TypeError, ValueError):
                return default

        rows = self.kernel.session_store.list_sessions(limit=number("limit", 20, 100) or 1,
                                                       offset=number("offset", 0, 10**9))
        keep = ("id", "title", "source", "started_at", "last_active", "preview", "lineage_messages", "tip_id")
        return json.dumps({"success": True, "sessions": [{k: r.get(k) for k in keep} for r in rows]},
                          ensure_ascii=False, default=str)

    def session_text(self, ref: str) -> str:
        store = self.kernel.session_store
        sid = store.resolve_session(ref)
        if sid is None:
            raise hermes.HermesError(f"no session {ref!r}")
        lines = []
        for msg in store.get_conversation(sid):
            content = msg.get("content")
            if not isinstance(content, str):
                content = json.dumps(content, ensure_ascii=False, default=str)
            lines.append(f"[{msg.get('role')}] {content}")
        return "\n\n".join(lines)

    def resource_list(self, granted: frozenset[str]) -> list[tuple[str, str, str]]:
        """(uri, name, description) of what ``granted`` may read."""
        granted = self.scopes(granted)
        out = []
        if MEMORY_READ in granted and self.manager.builtin is not None:
            out += [(f"hermes://memory/{f}", f, f"Hermes curated memory ({t})") for f, t in MEMORY_FILES.items()]
        if SESSIONS_READ in granted:
            for row in self.kernel.session_store.list_sessions(limit=50):
                out.append((f"hermes://session/{row['id']}", row.get("title") or row["id"],
                            row.get("preview") or "Hermes conversation"))
        return out

    def read_resource(self, uri: str, granted: frozenset[str]) -> str:
        granted = self.scopes(granted)
        if uri.startswith("hermes://memory/"):
            target = MEMORY_FILES.get(uri.removeprefix("hermes://memory/"))
            if target is None:
                raise hermes.HermesError(f"unknown memory resource {uri}")
            if MEMORY_READ not in granted:
                raise PermissionError("this client lacks the scope memory:read")
            return self.memory_text(target)
        if uri.startswith("hermes://session/"):
            if SESSIONS_READ not in granted:
                raise PermissionError("this client lacks the scope sessions:read")
            return self.session_text(uri.removeprefix("hermes://session/"))
        raise hermes.HermesError(f"unknown resource {uri}")
