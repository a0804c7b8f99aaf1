"""Default plugin ``backup``: ``hermes backup`` and ``hermes restore``.

One archive holds a whole home — the curated memory and its history, the session store
and the lossless engine's store (SQLite online backups, consistent while chats run),
skills, ``SOUL.md``, ``config.yaml`` and, only with ``--with-secrets``, ``.env`` — with a
manifest of versions and checksums that ``hermes restore`` checks before touching
anything. See :mod:`.archive`.

Only this module is imported at start; the archive code loads when a command runs.
"""

from __future__ import annotations

from typing import Any

import hermes


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    from .cli import backup, restore

    cli.add_command(backup)
    cli.add_command(restore)
