"""hermes-mcp: Hermes' memory and session history served over the Model Context Protocol.

Adds the ``hermes mcp`` command group (``serve``). The MCP SDK is imported only when a
command runs, so loading this plugin (every ``hermes`` invocation) stays cheap.
"""

from __future__ import annotations

from typing import Any

import hermes


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    from .cli import mcp

    cli.add_command(mcp)
