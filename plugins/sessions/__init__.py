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


#: ``plugins.sqlite-sessions``, declared once: checked at start, by ``hermes config
#: validate`` and ``hermes doctor``, and handed to :func:`open_store` with defaults.
hermes_settings = {
    "path": hermes.Setting(str, None, "another database file (relative: inside $HERMES_HOME)"),
    "write_timeout": hermes.Setting(float, 20.0, "seconds a write waits for a busy database",
                                    positive=True),
    "synchronous": hermes.Setting(str, "normal", "normal (survives a process crash) or full "
                                  "(also power loss)", choices=("normal", "full")),
}


def _db_file(kernel: Any) -> Path:
    """The database file ``plugins.sqlite-sessions.path`` names (relative: in the home)."""
    file = Path(kernel.plugin_settings(PLUGIN_NAME)["path"] or DB_FILE).expanduser()
    return file if file.is_absolute() else Path(kernel.home) / file


def open_store(kernel: Any) -> Any:
    """Factory of the ``sqlite`` store: ``state.db`` in the kernel's home, configured from
    ``plugins.sqlite-sessions``. Bad settings raise :class:`hermes.ConfigError` naming
    the key."""
    from .store import SQLiteSessionStore

    settings = kernel.plugin_settings(PLUGIN_NAME)
    return SQLiteSessionStore(_db_file(kernel), write_timeout=float(settings["write_timeout"]),
                              synchronous=settings["synchronous"])


def _doctor(kernel: Any) -> tuple[list[str], list[str]]:
    from .integrity import doctor

    return doctor(kernel, _db_file(kernel))


#: ``hermes doctor`` asks the selected store's factory for its checks: the search indexes
#: compared with the messages, in bounded time.
open_store.doctor = _doctor  # type: ignore[attr-defined]


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
