"""hermes-lcm: lossless context management for Hermes.

Installing this distribution adds the entry point ``lcm`` in group ``hermes.plugins``;
this module is the plugin. It registers the context engine ``lcm`` (select it with
``hermes plugins select context-engine lcm`` or ``context.engine: lcm``) and the
``hermes lcm`` commands. Everything heavy is imported only when used, so that loading the
plugin costs nothing to ``hermes --help``.
"""

from __future__ import annotations

from typing import Any

import hermes

__version__ = "0.1.0"


def make_engine(kernel: Any) -> Any:
    """Lossless context: every message kept, old spans replaced by a summary DAG."""
    from .engine import LCMEngine

    return LCMEngine(kernel)


@hermes.hookimpl
def hermes_register_context_engines(register: Any) -> None:
    """Register the ``lcm`` engine."""
    register(
        "lcm",
        make_engine,
        description="Lossless context: every message kept, old spans replaced by a summary DAG "
        "(tools lcm_grep, lcm_describe, lcm_expand)",
    )


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    """Add ``hermes lcm status|grep|describe|expand``."""
    from .commands import lcm

    cli.add_command(lcm)


__all__ = ["__version__", "hermes_register_commands", "hermes_register_context_engines", "make_engine"]
