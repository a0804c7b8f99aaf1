"""hermes-mcp: Hermes over the Model Context Protocol, both ways.

* ``hermes mcp serve``: Hermes' memory and session history for MCP clients.
* ``mcp_servers:`` in config.yaml: MCP servers' tools offered to the model in
  ``hermes chat`` as ``mcp_<server>_<tool>`` (a tool source, started only when an agent
  asks for its tools); ``hermes mcp list`` shows them.

The MCP SDK is imported only when a command runs or a server is started, so loading this
plugin (every ``hermes`` invocation) stays cheap.
"""

from __future__ import annotations

from typing import Any

import hermes

#: ``mcp_servers:`` is this plugin's top-level section of config.yaml (so ``hermes config
#: validate`` does not call it unknown).
hermes_config_sections = ("mcp_servers",)


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    from .cli import mcp

    cli.add_command(mcp)


@hermes.hookimpl
def hermes_register_tools(register: Any) -> None:
    from .client import MCPToolSource

    register(MCPToolSource())
