"""Default plugin ``prompt-layers``: the default system-prompt layers and
``hermes prompt show``.

The layers themselves live in :mod:`.layers` (orders 100 … 1300, see its docstring);
subdirectory hints (:mod:`.hints`) come through ``hermes_tool_result``; the
skills tools are the separate default plugin ``skills`` (:mod:`.skills`), so either can
be disabled on its own.
"""

from __future__ import annotations

from typing import Any

import hermes

from .layers import DEFAULT_LAYERS


@hermes.hookimpl
def hermes_register_prompt_layers(register: Any) -> None:
    """Register the default layers under their names."""
    for layer in DEFAULT_LAYERS:
        summary = " ".join((layer.__doc__ or "").split("\n\n")[0].split())
        register(layer.name, layer, description=summary)


#: The key of this plugin's per-agent state in ``Agent.plugin_state``.
_HINTS = "prompt-layers.subdirectory-hints"


@hermes.hookimpl
def hermes_tool_result(context: hermes.ToolContext, tool_name: str, args: dict[str, Any],
                       result: str) -> str | None:
    """Subdirectory hints (:mod:`.hints`): a context file of a directory below the working
    directory that this tool call touched, once per directory per agent; none for
    agents that skip context files (delegated sub-agents)."""
    agent = getattr(context, "agent", None)
    if agent is None or getattr(agent, "skip_context_files", False) or context.cwd is None:
        return None
    from .hints import SubdirectoryHints

    state = agent.plugin_state
    hints = state.get(_HINTS)
    if hints is None:  # parallel calls may both get here; setdefault keeps one
        max_chars = context.kernel.config.get("prompt.context_file_max_chars")
        hints = state.setdefault(_HINTS, SubdirectoryHints(context.cwd, max_chars=max_chars))
    return hints.check(tool_name, args) or None


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    """Add ``hermes prompt show``."""
    from .cli import prompt

    cli.add_command(prompt)
