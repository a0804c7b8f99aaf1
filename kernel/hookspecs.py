"""Every hook a Hermes plugin can implement, in one place.

There are two kinds of hook and no others:

* **Registration hooks** (``hermes_register_*``) are called once per :class:`~hermes.Kernel`,
  while it boots. Each receives a ``register`` callable and uses it to add *factories*
  (classes or callables), never live instances, so that listing what is installed builds
  nothing heavy. Errors in a registration hook are load failures of the plugin that
  raised them: the plugin is unregistered, the failure is recorded and the kernel goes on
  (unless ``HERMES_STRICT_PLUGINS=1``).
* **Event hooks** (``hermes_session_start`` … ``hermes_session_end``) fan out to every
  plugin that implements them, for observers such as metrics, logging or audit. Their
  return values are ignored, except ``hermes_tool_result``'s: text to add to a tool's
  result (the prompt plugin's subdirectory hints use it). An exception in one implementation is logged once and never
  breaks the turn; the other implementations still run.

**One call order for every hook** (registration, ``hermes_register_commands``, events):
load order — default plugins first, then plugins registered by code, entry-point and
local plugins; within each of those groups ``tryfirst`` / ``trylast`` move an
implementation to the front / back. So a default registers its names before any
third-party plugin, and a newcomer claiming one is the plugin in conflict
(:meth:`hermes.manager.HermesPluginManager.ordered_impls`). Plugin code runs guarded: what
it prints to stdout is reported on stderr, ``sys.exit()`` is a failure of the plugin.

All hooks are synchronous and take keyword arguments only (a pluggy rule: an
implementation may accept any subset of the arguments, by name). Per-turn work that must
be fast (prefetch, compaction, prompt rendering) is done by methods of the selected
engine or provider objects, not through hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

from .registry import COMPONENT_KINDS as _COMPONENT_KINDS

if TYPE_CHECKING:  # names for the annotations only: importing them here would cost --help
    import click

    from .contracts import CompactionEvent, MemoryWriteEvent, SessionInfo, ToolContext, TurnEvent
    from .registry import Register, RegisterTool

hookspec = pluggy.HookspecMarker("hermes")
hookimpl = pluggy.HookimplMarker("hermes")


# --------------------------------------------------------------------------------------
# Registration hooks: once per kernel, at boot.
# --------------------------------------------------------------------------------------


@hookspec
def hermes_register_context_engines(register: Register) -> None:
    """Register context-engine factories.

    **When:** once per kernel, during boot, after every plugin has been loaded.

    **How:** call ``register(name, factory, *, description="")`` once per engine. ``factory``
    is called later as ``factory(kernel)`` (or with no arguments if it takes none) and must
    return a :class:`hermes.ContextEngine`. ``name`` is what ``context.engine`` in
    ``config.yaml`` selects.

    **Returns:** nothing; the return value is ignored.

    **Errors:** an exception is a load failure of this plugin (recorded, plugin removed,
    kernel continues). Registering a name another plugin already registered raises
    :class:`hermes.ConflictError` naming both plugins.
    """


@hookspec
def hermes_register_memory_providers(register: Register) -> None:
    """Register memory-provider factories.

    **When:** once per kernel, during boot.

    **How:** ``register(name, factory, *, description="")``; ``factory(kernel)`` returns a
    :class:`hermes.MemoryProvider`. ``memory.provider`` in ``config.yaml`` selects at most
    one external provider; the provider named ``builtin`` is always active.

    **Returns:** nothing.

    **Errors:** as for :func:`hermes_register_context_engines`.
    """


@hookspec
def hermes_register_prompt_layers(register: Register) -> None:
    """Register system-prompt layers.

    **When:** once per kernel, during boot.

    **How:** ``register(name, factory, *, description="")``; ``factory(kernel)`` returns a
    :class:`hermes.PromptLayer`, which declares its ``order`` (lower renders first) and
    whether it is ``cached`` (part of the byte-stable system prompt, rendered once per
    session) or ephemeral (added at API-call time, never persisted). Config
    ``prompt.disabled_layers`` turns layers off by name.

    **Returns:** nothing.

    **Errors:** as for :func:`hermes_register_context_engines`.
    """


@hookspec
def hermes_register_tools(register: RegisterTool) -> None:
    """Register tools the model may call.

    **When:** once per kernel, during boot.

    **How:** ``register(tool)`` with a :class:`hermes.Tool` (name, JSON schema, handler,
    ``parallel_safe``, ``toolset``). The tool's ``name`` is its registry key. Tools known
    only at run time (an MCP server's) come from a *tool source*: a ``Tool`` with
    ``expand(kernel) -> list[Tool]`` set, expanded lazily by ``Kernel.tools()`` (so
    nothing starts at boot, only when an agent or command asks for the tools; it may
    return fewer tools later to withdraw them) and closed by ``Kernel.close()`` when it
    has a ``close()``. ``Kernel.tools(expand=False)`` leaves sources out.

    **Returns:** nothing.

    **Errors:** as for :func:`hermes_register_context_engines`; two plugins registering one
    tool name is a :class:`hermes.ConflictError`.
    """


@hookspec
def hermes_register_session_stores(register: Register) -> None:
    """Register session-store factories.

    **When:** once per kernel, during boot.

    **How:** ``register(name, factory, *, description="")``; ``factory(kernel)`` returns a
    :class:`hermes.SessionStore`. ``sessions.store`` selects one (default ``sqlite``). A
    store several machines share also offers ``writer_lock(session_id)``
    (:meth:`hermes.SessionStore.writer_lock`), which the runtime then takes for the
    one-writer-per-conversation rule instead of its file lock.

    **Returns:** nothing.

    **Errors:** as for :func:`hermes_register_context_engines`.
    """


@hookspec
def hermes_register_llm_clients(register: Register) -> None:
    """Register LLM-client factories.

    **When:** once per kernel, during boot.

    **How:** ``register(name, factory, *, description="")``; ``factory(kernel)`` returns a
    :class:`hermes.LLMClient`. ``model.provider`` selects the main client and
    ``auxiliary.<task>.provider`` the auxiliary ones.

    **Returns:** nothing.

    **Errors:** as for :func:`hermes_register_context_engines`.
    """


@hookspec
def hermes_register_commands(cli: click.Group) -> None:
    """Add commands to the ``hermes`` command-line interface.

    **When:** at most once per CLI invocation, after the kernel has loaded its plugins,
    the first time a command that is not built in is looked up or the commands are
    listed (``hermes --help``). Not called for ``hermes --version`` or built-in commands.

    **How:** ``cli`` is the root :class:`click.Group`; add commands or groups to it with
    ``@cli.command()`` or ``cli.add_command(...)``. Use ``hermes.cli.pass_state`` and
    ``hermes.cli.echo_json``. A command that would replace a built-in command or another
    plugin's command is ignored with a warning.

    **Returns:** nothing.

    **Errors:** an exception is a load failure of this plugin; the CLI still starts.
    """


# --------------------------------------------------------------------------------------
# Event hooks: fan-out, for observers. Failures are isolated.
# --------------------------------------------------------------------------------------


@hookspec
def hermes_session_start(session: SessionInfo) -> None:
    """A session has started.

    **When:** once per session, after its record exists in the session store and before
    the first model call. Sessions created by a compaction split or a delegated sub-agent
    also fire it.

    **Args:** ``session`` is a :class:`hermes.SessionInfo` (id, source, model, parent id).

    **Returns:** nothing; the return value is ignored.

    **Errors:** isolated: an exception is logged once per plugin and the session goes on.
    """


@hookspec
def hermes_turn_end(session: SessionInfo, turn: TurnEvent) -> None:
    """A user turn has finished.

    **When:** once per user turn, after the final answer is stored (also after a turn that
    failed or was interrupted; ``turn.status`` says which).

    **Args:** ``session`` is a :class:`hermes.SessionInfo`; ``turn`` is a
    :class:`hermes.TurnEvent` with the user message, the answer, the number of model
    calls, tool calls and the token usage of the turn.

    **Returns:** nothing.

    **Errors:** isolated; never breaks the turn.
    """


@hookspec
def hermes_compaction(session: SessionInfo, event: CompactionEvent) -> None:
    """The context engine compacted the conversation.

    **When:** once per compaction, after the old session has ended and the child session
    has started.

    **Args:** ``session`` is the *child* :class:`hermes.SessionInfo`; ``event`` is a
    :class:`hermes.CompactionEvent` (parent session id, messages and tokens before and
    after, whether a fallback summary was used, the focus topic).

    **Returns:** nothing.

    **Errors:** isolated.
    """


@hookspec
def hermes_memory_write(session: SessionInfo | None, event: MemoryWriteEvent) -> None:
    """A memory write was committed.

    **When:** once per committed action of the ``memory`` tool (or ``hermes memory``
    command); refused or failed writes do not fire it.

    **Args:** ``session`` is a :class:`hermes.SessionInfo` or ``None`` outside a session;
    ``event`` is a :class:`hermes.MemoryWriteEvent` (action, target, content, old text).

    **Returns:** nothing.

    **Errors:** isolated.
    """


@hookspec
def hermes_session_end(session: SessionInfo, reason: str) -> None:
    """A session has ended.

    **When:** once per session at a real boundary: the user exits, starts ``/new``, a
    compaction splits the session (``reason='compression'``) or a sub-agent finishes.

    **Args:** ``session`` is a :class:`hermes.SessionInfo`; ``reason`` is the stored
    ``end_reason`` (``user_exit``, ``new_session``, ``compression``, ``delegation`` …).

    **Returns:** nothing.

    **Errors:** isolated.
    """


@hookspec
def hermes_tool_result(context: ToolContext, tool_name: str, args: dict[str, object], result: str) -> str | None:
    """A tool call of an agent has finished; the hook may add text to its result.

    **When:** once per tool call the model made (registered, memory or context-engine
    tool, failed ones included), after the tool ran and before its result goes into the
    conversation. Parallel tool calls call it from several threads at once.

    **Args:** ``context`` is the :class:`hermes.ToolContext` of the call (``agent``,
    ``session_id``, ``cwd``, ``kernel``; ``context.agent.plugin_state`` is a dict for
    per-agent state, e.g. what was already shown; ``context.agent.skip_context_files``
    is true for delegated sub-agents); ``tool_name`` and ``args`` are the call's;
    ``result`` is the tool's result text.

    **Returns:** text to append to the result (the model reads it with the result in the
    next request; never the system prompt, whose cache it would break), or ``None`` /
    ``""`` for nothing. Several implementations' texts are appended in call order.

    **Errors:** isolated: an exception is logged once per plugin and the result goes on
    without that plugin's text.
    """


#: Names of the registration hooks, in the order the kernel calls them: one per row of
#: :data:`hermes.registry.COMPONENT_KINDS`.
REGISTRATION_HOOKS = tuple(kind.hook for kind in _COMPONENT_KINDS)

#: Names of the fan-out event hooks.
EVENT_HOOKS = (
    "hermes_session_start",
    "hermes_turn_end",
    "hermes_compaction",
    "hermes_memory_write",
    "hermes_session_end",
    "hermes_tool_result",
)
