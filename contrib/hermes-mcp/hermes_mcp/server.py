"""The MCP server: tools and resources of :class:`~.backend.Backend` on the official SDK.

stdio (what desktop clients launch) grants every scope (minus writes with
``--read-only``): whoever can start the process can read the files anyway. Streamable
HTTP maps each request's bearer token to its scopes (:class:`Tokens`); a request without
a valid token is refused with 401 before it reaches the MCP session.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field
from typing import Any

import hermes

from .backend import ALL_SCOPES, Backend

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass
class Tokens:
    """Bearer tokens from ``plugins.mcp.tokens``: ``[{token, scopes, name}]`` (``token``
    may be ``{$env: NAME}``, resolved by the config). Compared in constant time."""

    entries: list[tuple[str, frozenset[str], str]] = field(default_factory=list)

    @classmethod
    def from_config(cls, section: dict[str, Any]) -> Tokens:
        raw = section.get("tokens") or []
        if not isinstance(raw, list):
            raise hermes.ConfigError("config.yaml: plugins.mcp.tokens must be a list of "
                                     "{token: …, scopes: [memory:read, memory:write, sessions:read]}")
        entries = []
        for i, item in enumerate(raw):
            if isinstance(item, str):
                item = {"token": item}
            token = item.get("token") if isinstance(item, dict) else None
            if not isinstance(token, str) or not token.strip():
                raise hermes.ConfigError(f"config.yaml: plugins.mcp.tokens[{i}] has no token (is its "
                                         "$env variable set?); give `token:` a string or {$env: NAME}")
            scopes = item.get("scopes")
            granted = ALL_SCOPES if scopes is None else frozenset(str(s) for s in scopes)
            unknown = granted - ALL_SCOPES
            if unknown:
                raise hermes.ConfigError(f"config.yaml: plugins.mcp.tokens[{i}] has unknown scopes "
                                         f"{sorted(unknown)}; use {sorted(ALL_SCOPES)}")
            entries.append((token.strip(), granted, str(item.get("name") or f"token{i + 1}")))
        return cls(entries)

    def match(self, authorization: str | None) -> tuple[frozenset[str], str] | None:
        """(scopes, token name) for an ``Authorization: Bearer …`` header, or ``None``."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        given = authorization[7:].strip().encode()
        found = None
        for token, scopes, name in self.entries:
            # every entry is compared (no early exit), each in constant time
            if hmac.compare_digest(given, token.encode()) and found is None:
                found = (scopes, name)
        return found


def client_name(ctx: Any) -> str:
    """The MCP client's name from its initialize ``clientInfo`` (``unknown`` when absent)."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None) or getattr(params, "clientInfo", None)
    name = getattr(info, "name", None)
    return str(name) if name else "unknown"


def build_server(backend: Backend, tokens: Tokens | None = None) -> Any:
    """An ``mcp.server.lowlevel.Server``; with ``tokens`` each request's scopes come from
    its bearer token (HTTP), else every scope is granted (stdio, loopback without tokens)."""
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp.types import INVALID_PARAMS

    def granted(ctx: Any) -> frozenset[str]:
        if tokens is None:
            return ALL_SCOPES
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        hit = tokens.match(headers.get("authorization") if headers is not None else None)
        return hit[0] if hit else frozenset()  # fail closed

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        schemas = await backend.run(lambda: backend.list_tools(granted(ctx)))
        return types.ListToolsResult(tools=[
            types.Tool(name=s["name"], description=s.get("description"),
                       inputSchema=s.get("parameters") or {"type": "object", "properties": {}})
            for s in schemas])

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        args = dict(params.arguments or {})
        scopes, who = granted(ctx), client_name(ctx)
        text = await backend.run(lambda: backend.call_tool(params.name, args, granted=scopes, client=who))
        try:
            failed = json.loads(text).get("success") is False
        except (ValueError, AttributeError):
            failed = False
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=failed)

    async def on_list_resources(ctx: Any, params: Any) -> Any:
        rows = await backend.run(lambda: backend.resource_list(granted(ctx)))
        return types.ListResourcesResult(resources=[
            types.Resource(uri=uri, name=name, description=desc, mimeType="text/markdown")
            for uri, name, desc in rows])

    async def on_read_resource(ctx: Any, params: Any) -> Any:
        uri = str(params.uri)
        scopes = granted(ctx)
        try:
            text = await backend.run(lambda: backend.read_resource(uri, scopes))
        except (hermes.HermesError, PermissionError) as exc:
            # an error the client can show (unknown resource, missing scope), not "internal error"
            raise MCPError(INVALID_PARAMS, f"{uri}: {exc}") from None
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mimeType="text/markdown", text=text)])

    return Server("hermes", version=hermes.__version__,
                  instructions="Hermes' long-term memory (curated notes and user profile) and past "
                               "conversations. View memory before adding; keep entries short.",
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                  on_list_resources=on_list_resources, on_read_resource=on_read_resource)


async def serve_stdio(backend: Backend) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(backend)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(backend: Backend, host: str, tokens: Tokens) -> Any:
    """The Starlette app of ``--http``, behind a bearer-token gate when tokens exist."""
    server = build_server(backend, tokens if tokens.entries else None)
    app = server.streamable_http_app(host=host)
    if not tokens.entries:
        return app

    async def gate(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            if tokens.match(headers.get("authorization")) is None:
                body = b'{"error": "a valid bearer token is required (plugins.mcp.tokens)"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return gate
