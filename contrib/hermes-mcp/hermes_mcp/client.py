"""MCP servers' tools inside ``hermes chat``: the ``mcp_servers:`` section of config.yaml.

::

    mcp_servers:
      files:                                  # stdio: Hermes starts the command
        command: npx
        args: ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]
        env: {NOTES_TOKEN: {$env: NOTES_TOKEN}}
        timeout: 30                           # seconds per call (default 60)
      search:                                 # streamable HTTP
        url: https://mcp.example.com/mcp
        headers: {Authorization: {$env: SEARCH_MCP_AUTH}}

:class:`MCPToolSource` is a tool source (``hermes.Tool`` with ``expand``): nothing starts
at kernel boot; the first ``Kernel.tools()`` (an agent starting, ``hermes mcp list``)
connects every server on one background event loop and lists its tools as
``mcp_<server>_<tool>``. A server that fails to start or dies is reported once (a log
warning) and its tools are withdrawn; the chat goes on.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import hermes

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0
STARTUP_TIMEOUT = 30.0


def tool_name(server: str, tool: str) -> str:
    """``mcp_<server>_<tool>`` with characters model APIs accept, at most 64 long."""
    raw = f"mcp_{server}_{tool}"
    return re.sub(r"[^A-Za-z0-9_-]", "_", raw)[:64]


@dataclass
class ServerState:
    """One configured server: its state (``starting``, ``ready``, ``failed``, ``died``),
    why, and its tools (MCP ``Tool`` objects) while ready."""

    name: str
    spec: dict[str, Any]
    state: str = "starting"
    reason: str = ""
    tools: list[Any] = field(default_factory=list)
    client: Any = None
    timeout: float = DEFAULT_TIMEOUT
    stop: asyncio.Event | None = None
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def transport(self) -> str:
        return "http" if self.spec.get("url") else "stdio"


def _source_handler(args: dict[str, Any], ctx: Any) -> str:
    return json.dumps({"error": "mcp_servers is a tool source, not a tool"})


class MCPToolSource(hermes.Tool):
    """The servers of one kernel's ``mcp_servers`` section and their tools: a tool
    source (registered like a tool, expanded by ``Kernel.tools()``, closed by
    ``Kernel.close()``)."""

    def __init__(self) -> None:
        super().__init__(name="mcp_servers",
                         schema={"name": "mcp_servers", "description": "Tools of the MCP servers in config.yaml",
                                 "parameters": {"type": "object", "properties": {}}},
                         handler=_source_handler, toolset="mcp", expand=self.tools_of)
        self.servers: dict[str, ServerState] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started = False

    def tools_of(self, kernel: Any) -> list[hermes.Tool]:
        """Start the servers (the first time) and return the tools of the live ones."""
        self.start(kernel)
        out = []
        for server in list(self.servers.values()):
            if server.state != "ready":
                continue
            for tool in server.tools:
                out.append(self._wrap(server, tool))
        return out

    def _wrap(self, server: ServerState, tool: Any) -> hermes.Tool:
        name = tool_name(server.name, tool.name)
        schema = {"name": name,
                  "description": f"[MCP server {server.name}] {tool.description or tool.name}",
                  "parameters": dict(tool.input_schema or {"type": "object", "properties": {}})}

        def handler(args: dict[str, Any], ctx: Any) -> str:
            return self.call(server.name, tool.name, args)

        return hermes.Tool(name=name, schema=schema, handler=handler, toolset="mcp")

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, kernel: Any) -> None:
        """Connect every configured server once (later calls return at once)."""
        with self._lock:
            if self._started:
                return
            self._started = True
            section = kernel.config.raw("mcp_servers", {}) or {}
            if not isinstance(section, dict):
                log.warning("config.yaml: mcp_servers must be a mapping of name: {command|url: …}; ignored")
                return
            for name in section:
                try:
                    if "." in str(name):
                        raise hermes.ConfigError(f"mcp_servers: the server name {name!r} may not contain '.'")
                    spec = kernel.config.get(f"mcp_servers.{name}")
                    if not isinstance(spec, dict) or not (spec.get("command") or spec.get("url")):
                        raise hermes.ConfigError(f"mcp_servers.{name} needs `command:` (stdio) or `url:` (HTTP)")
                    state = ServerState(str(name), spec, timeout=float(spec.get("timeout") or DEFAULT_TIMEOUT))
                except (hermes.ConfigError, TypeError, ValueError) as exc:
                    state = ServerState(str(name), {}, state="failed", reason=str(exc))
                    self._report(state)
                self.servers[str(name)] = state
            pending = [s for s in self.servers.values() if s.state == "starting"]
            if not pending:
                return
            import asyncio  # only with servers to run: `hermes --help` stays cheap
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="hermes-mcp-client", daemon=True)
            self._thread.start()
            for server in pending:
                asyncio.run_coroutine_threadsafe(self._hold(server), self._loop)
        startup = max(float(s.spec.get("startup_timeout") or STARTUP_TIMEOUT) for s in pending)
        for server in pending:
            if not server.ready.wait(startup) and server.state == "starting":
                server.state, server.reason = "failed", f"did not start within {startup:.0f}s"
                self._report(server)

    async def _hold(self, server: ServerState) -> None:
        """Connect, list tools, then keep the session open until closed or it dies."""
        import asyncio

        from mcp import Client

        server.stop = asyncio.Event()
        try:
            # the SDK's own read timeout is a backstop only: ours (in call) fires first and
            # gives the model the configured figure
            async with Client(self._transport(server.spec), read_timeout_seconds=server.timeout + 5,
                              client_info=_client_info()) as client:
                server.tools = list((await client.list_tools()).tools)
                server.client = client
                if server.state == "starting":
                    server.state = "ready"
                server.ready.set()
                await server.stop.wait()
        except asyncio.CancelledError:
            return
        except BaseException as exc:  # noqa: BLE001 - a server's failure is a state, never a crash
            self._fail(server, exc)
        finally:
            server.client = None
            server.ready.set()

    def _fail(self, server: ServerState, exc: BaseException) -> None:
        if server.state in ("failed", "died", "closed"):
            return
        server.state = "died" if server.state == "ready" else "failed"
        server.reason = _reason(exc)
        server.tools = []
        self._report(server)

    @staticmethod
    def _report(server: ServerState) -> None:
        what = "stopped" if server.state == "died" else "could not start"
        log.warning("MCP server %r %s: %s; its tools are withdrawn", server.name, what, server.reason)

    @staticmethod
    def _transport(spec: dict[str, Any]) -> Any:
        if spec.get("url"):
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = {str(k): str(v) for k, v in (spec.get("headers") or {}).items()}
            http = httpx2.AsyncClient(headers=headers, timeout=float(spec.get("timeout") or DEFAULT_TIMEOUT))
            return streamable_http_client(str(spec["url"]), http_client=http)
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment

        # only the SDK's safe variables plus the configured ones: no API keys leak to servers
        env = {**get_default_environment(), **{str(k): str(v) for k, v in (spec.get("env") or {}).items()}}
        return StdioServerParameters(command=str(spec["command"]), args=[str(a) for a in spec.get("args") or []],
                                     env=env, cwd=spec.get("cwd"))

    def call(self, server_name: str, tool: str, args: dict[str, Any]) -> str:
        """Call one tool with the server's timeout; a JSON string, never raises."""
        server = self.servers.get(server_name)
        if server is None or server.state != "ready" or server.client is None or self._loop is None:
            why = server.reason if server else "not configured"
            return json.dumps({"error": f"MCP server {server_name!r} is not available ({why})"})
        import asyncio

        future = asyncio.run_coroutine_threadsafe(server.client.call_tool(tool, args), self._loop)
        try:
            result = future.result(server.timeout)
        except TimeoutError:  # concurrent.futures' is the builtin since 3.11
            future.cancel()
            return json.dumps({"error": f"MCP tool {tool!r} on {server_name!r} timed out after {server.timeout:g}s"})
        except Exception as exc:  # the server died or answered with a protocol error
            if server.client is None or not self._alive(server):
                self._fail(server, exc)
            return json.dumps({"error": f"MCP tool {tool!r} on {server_name!r} failed: {_reason(exc)}"})
        text = "\n".join(getattr(c, "text", "") or json.dumps(c.model_dump(mode="json"), default=str)
                         for c in result.content)
        if getattr(result, "is_error", False):
            return json.dumps({"error": text}, ensure_ascii=False)
        structured = getattr(result, "structured_content", None)
        if structured is not None and not text:
            return json.dumps(structured, ensure_ascii=False, default=str)
        return text

    def _alive(self, server: ServerState) -> bool:
        if self._loop is None or server.client is None:
            return False
        import asyncio

        future = asyncio.run_coroutine_threadsafe(server.client.send_ping(), self._loop)
        try:
            future.result(2)
            return True
        except Exception:
            future.cancel()
            return False

    def close(self) -> None:
        loop = self._loop
        if loop is None:
            return
        for server in self.servers.values():
            if server.stop is not None:
                if server.state == "ready":
                    server.state = "closed"
                loop.call_soon_threadsafe(server.stop.set)  # a died server's session too
        # let each session exit its context (the SDK stops stdio children), then stop the loop
        for server in self.servers.values():
            if server.stop is not None:
                deadline = 5.0
                while server.client is not None and deadline > 0:
                    threading.Event().wait(0.05)
                    deadline -= 0.05
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None


def _client_info() -> Any:
    from mcp.types import Implementation

    return Implementation(name="hermes", version=hermes.__version__)


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
