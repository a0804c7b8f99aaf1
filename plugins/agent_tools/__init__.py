"""The ``delegate_task`` tool: hand a self-contained task to a sub-agent.

The sub-agent has its own context and a child session of the caller's, loads no context
files, writes no memory and shares the caller's iteration budget. It is the runtime agent
(``ctx.agent``) that runs it; outside a turn the tool explains that it needs one.
"""

from __future__ import annotations

import json
from typing import Any

import hermes

SCHEMA = {
    "name": "delegate_task",
    "description": (
        "Delegate a self-contained task to a sub-agent with a fresh context. Use it for "
        "work that would flood your own context (broad searches, long tool sequences). "
        "Give it everything it needs: it cannot see this conversation. It returns the "
        "sub-agent's final answer."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "What the sub-agent must do, completely stated."},
            "context": {"type": "string", "description": "Facts from this conversation it needs."},
        },
        "required": ["task"],
    },
}


def delegate_task(args: dict[str, Any], ctx: hermes.ToolContext) -> str:
    """Run the task in a sub-agent of ``ctx.agent`` and return its answer as JSON."""
    task = str(args.get("task") or "").strip()
    if not task:
        return json.dumps({"error": "delegate_task needs a non-empty 'task'"})
    if ctx.agent is None or not hasattr(ctx.agent, "delegate"):
        return json.dumps({"error": "delegate_task can only run inside an agent turn"})
    return json.dumps(ctx.agent.delegate(task, str(args.get("context") or "")), ensure_ascii=False)


@hermes.hookimpl
def hermes_register_tools(register: Any) -> None:
    register(hermes.Tool(name="delegate_task", schema=SCHEMA, handler=delegate_task,
                         parallel_safe=False, toolset="delegation",
                         subagents=False))  # a sub-agent does not delegate again
