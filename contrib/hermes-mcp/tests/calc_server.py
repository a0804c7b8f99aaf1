"""A small MCP server for the client tests, written with the SDK's low-level Server."""

from __future__ import annotations

import os
import time

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(name="add", description="Add two integers.",
               inputSchema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                            "required": ["a", "b"]}),
    types.Tool(name="slow", description="Sleep, then answer.",
               inputSchema={"type": "object", "properties": {"seconds": {"type": "number"}}}),
    types.Tool(name="crash", description="Exit the server process.",
               inputSchema={"type": "object", "properties": {}}),
]


async def on_list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def on_call_tool(ctx, params):
    args = params.arguments or {}
    if params.name == "add":
        text = str(int(args["a"]) + int(args["b"]))
    elif params.name == "slow":
        await anyio.sleep(float(args.get("seconds", 5)))
        text = "slept"
    elif params.name == "crash":
        os._exit(3)
    else:
        return types.CallToolResult(content=[types.TextContent(type="text", text="no such tool")], is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    if os.environ.get("CALC_FAIL_AT_START"):
        raise SystemExit("calc: refusing to start")
    time.sleep(0)
    server = Server("calc", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
