"""The default session store: SQLite ``state.db`` with FTS5 search, and ``hermes sessions``.

Registers the session store ``sqlite`` (selected by ``sessions.store``), whose factory
opens ``$HERMES_HOME/state.db``, and the ``hermes sessions`` command group. Settings live
under ``plugins.sqlite-sessions``:

``path``
    Another database file (relative paths are inside ``$HERMES_HOME``).
``write_timeout``
    Seconds a write waits for a busy database before failing (default 20).
``synchronous``
    ``normal`` (default; survives any process crash) or ``full`` (also power loss).

Only the cheap modules are imported here; the store, importers and CLI load on use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hermes

PLUGIN_NAME = "sqlite-sessions"
DB_FILE = "state.db"


def open_store(kernel: Any) -> Any:
    """Factory of the ``sqlite`` store: ``state.db`` in the kernel's home, configured from
    ``plugins.sqlite-sessions``. Bad settings raise :class:`hermes.ConfigError` naming
    the key."""
    from .store import SQLiteSessionStore

    settings = kernel.plugin_config(PLUGIN_NAME) or {}
    prefix = f"plugins.{PLUGIN_NAME}"
    path = settings.get("path") or DB_FILE
    if not isinstance(path, str):
        raise hermes.ConfigError(f"{prefix}.path: expected a file path, got {path!r}.",
                                 path=f"{prefix}.path")
    timeout = settings.get("write_timeout", 20.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise hermes.ConfigError(
            f"{prefix}.write_timeout: expected a positive number of seconds, got {timeout!r}.",
            path=f"{prefix}.write_timeout")
    sync = settings.get("synchronous", "normal")
    if not isinstance(sync, str) or sync.lower() not in ("normal", "full"):
        raise hermes.ConfigError(f"{prefix}.synchronous: expected normal or full, got {sync!r}.",
                                 path=f"{prefix}.synchronous")
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = Path(kernel.home) / file
    return SQLiteSessionStore(file, write_timeout=float(timeout), synchronous=sync)


@hermes.hookimpl
def hermes_register_session_stores(register: Any) -> None:
    """Register the ``sqlite`` store."""
    register("sqlite", open_store,
             description="SQLite state.db with FTS5 word and CJK search (default)")


@hermes.hookimpl
def hermes_register_commands(cli: Any) -> None:
    """Add ``hermes sessions``."""
    from .cli import sessions

    cli.add_command(sessions)
