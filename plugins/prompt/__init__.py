"""Default plugin ``prompt-layers``: the default system-prompt layers and
``hermes prompt show``.

The layers themselves live in :mod:`.layers` (orders 100 … 1300, see its docstring); the
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


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    """Add ``hermes prompt show``."""
    from .cli import prompt

    cli.add_command(prompt)
