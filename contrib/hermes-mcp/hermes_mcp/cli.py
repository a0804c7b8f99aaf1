"""``hermes mcp serve``: Hermes' memory and sessions for MCP clients."""

from __future__ import annotations

from typing import Any

import click

import hermes
from hermes.cli import pass_state


@click.group()
def mcp() -> None:
    """Serve Hermes' memory and past sessions over the Model Context Protocol."""


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise hermes.HermesError(f"--http {value!r}: give HOST:PORT, e.g. 127.0.0.1:8765")
    return host.strip("[]") or "127.0.0.1", int(port)


@mcp.command("serve")
@click.option("--http", "http", metavar="HOST:PORT", default=None,
              help="Serve streamable HTTP instead of stdio. Anything but loopback needs "
                   "bearer tokens in plugins.mcp.tokens.")
@click.option("--read-only", is_flag=True, help="Offer no write: memory view, search and reading only.")
@pass_state
def serve(state: Any, http: str | None, read_only: bool) -> None:
    """Run an MCP server (stdio by default) with the memory tool (view, add, replace,
    remove), session_search, sessions_list and the resources hermes://memory/MEMORY.md,
    hermes://memory/USER.md and hermes://session/<id>."""
    import anyio

    from .backend import Backend
    from .server import LOOPBACK, Tokens, http_app, serve_stdio

    kernel = state.kernel()
    tokens = Tokens.from_config(kernel.plugin_config("mcp"))
    home = kernel.home
    # the worker thread builds its own kernel: SQLite and the memory manager live there
    backend = Backend(lambda: hermes.Kernel(home=home), read_only=read_only)
    try:
        if http is None:
            anyio.run(serve_stdio, backend)
            return
        host, port = _host_port(http)
        if host not in LOOPBACK and not tokens.entries:
            raise hermes.HermesError(
                f"--http {http}: refusing to listen on a non-loopback address without a bearer "
                "token; add plugins.mcp.tokens to config.yaml (token: {$env: HERMES_MCP_TOKEN})")
        import uvicorn

        click.echo(f"hermes mcp: streamable HTTP on http://{http}/mcp"
                   f"{' (read-only)' if read_only else ''}", err=True)
        uvicorn.run(http_app(backend, host, tokens), host=host, port=port, log_level="warning")
    finally:
        backend.close()


@mcp.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def list_servers(state: Any, as_json: bool) -> None:
    """Start the MCP servers of `mcp_servers:` in config.yaml and show each one's
    transport, state (ready, failed, died) and tools as the model sees them."""
    from hermes.cli import echo_json

    from .client import MCPToolSource, tool_name

    kernel = state.kernel()
    source = MCPToolSource()  # its own, started and closed here, as an agent's would be
    try:
        source.tools_of(kernel)
        rows = [{"name": s.name, "transport": s.transport, "state": s.state, "reason": s.reason,
                 "tools": [tool_name(s.name, t.name) for t in s.tools]}
                for s in source.servers.values()]
    finally:
        source.close()
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("No MCP servers configured (add mcp_servers: to config.yaml).")
        return
    for row in rows:
        why = f" ({row['reason']})" if row["reason"] else ""
        click.echo(f"{row['name']}  [{row['transport']}]  {row['state']}{why}")
        for name in row["tools"]:
            click.echo(f"    {name}")
