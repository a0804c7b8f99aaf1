"""Default plugin ``builtin-memory``: the curated file memory.

Registers the memory provider ``builtin`` (``MEMORY.md`` and ``USER.md`` under
``$HERMES_HOME/memories``, the frozen snapshot and the ``memory`` tool) and the
``hermes memory`` commands. Settings come from the ``memory`` section of
``config.yaml``: ``memory_enabled``, ``user_profile_enabled``, ``memory_char_limit``,
``user_char_limit``.

The module imports only ``hermes`` and its own package, so ``hermes --help`` stays cheap.
"""

from __future__ import annotations

from typing import Any

import hermes


def builtin_provider(kernel: Any) -> Any:
    """MEMORY.md and USER.md with a frozen snapshot and the memory tool."""
    from .provider import BuiltinMemoryProvider

    return BuiltinMemoryProvider.from_kernel(kernel)


@hermes.hookimpl
def hermes_register_memory_providers(register: Any) -> None:
    register("builtin", builtin_provider, tools=("memory",),
             description="MEMORY.md and USER.md: curated notes frozen into the system prompt")


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    from .cli import memory

    cli.add_command(memory)
