"""Default plugin ``forget``: ``hermes forget`` asks every session store, context engine
and memory provider to forget a text or a session (their ``forget`` method, see
:class:`hermes.ForgetRequest`). The command loads only when it runs."""

from __future__ import annotations

from typing import Any

import hermes


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    from .cli import forget

    cli.add_command(forget)
