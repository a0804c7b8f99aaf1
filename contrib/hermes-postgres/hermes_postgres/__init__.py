"""hermes-postgres: the session store on PostgreSQL, for teams and fleets of agents.

Install with ``pip install ./contrib/hermes-postgres`` (or ``hermes plugins install``),
select it with ``sessions.store: postgres`` and give the server under
``plugins.postgres``::

    sessions:
      store: postgres
    plugins:
      postgres:
        dsn: {$env: HERMES_PG_DSN}     # postgresql://hermes_app:…@db.internal/hermes
        user: alice                    # whose history (default: the login name)

Importing this module is cheap: psycopg is imported only when the store opens.
"""

from __future__ import annotations

import getpass
from typing import Any

import hermes

__version__ = "0.1.0"
PLUGIN_NAME = "postgres"
__all__ = ["PLUGIN_NAME", "hermes_register_session_stores", "hermes_settings", "open_store"]

#: ``plugins.postgres``: checked at start, by ``hermes config validate`` and ``doctor``.
hermes_settings = {
    "dsn": hermes.Setting(str, None, "the server: postgresql://user:password@host:5432/db or "
                          "'host=… dbname=…' ({$env: VAR} keeps the password out of config.yaml)",
                          secret=True),
    "user": hermes.Setting(str, None, "whose history this is; row-level security shows only this user's "
                           "rows (default: the login name)"),
    "profile": hermes.Setting(str, "default", "the agent profile; each has its own history"),
    "schema": hermes.Setting(str, "hermes", "the PostgreSQL schema holding the tables"),
    "pool_max": hermes.Setting(int, 8, "connections this process may open at most", positive=True),
    "write_timeout": hermes.Setting(float, 20.0, "seconds a write retries deadlocks before failing",
                                    positive=True),
    "connect_timeout": hermes.Setting(float, 10.0, "seconds to wait for the server when connecting",
                                      positive=True),
    "synchronous_commit": hermes.Setting(
        str, "on", "on: a write returns once the server flushed it to disk (like sqlite-sessions' "
        "synchronous: full); off: flushed in the background, a server crash may lose the last ~0.6 s of "
        "writes but never corrupts (like sqlite-sessions' default normal), several times the write rate",
        choices=("on", "off")),
}


def open_store(kernel: Any) -> Any:
    """Factory of the ``postgres`` store, configured from ``plugins.postgres``."""
    from .store import PostgresSessionStore

    s = kernel.plugin_settings(PLUGIN_NAME)
    return PostgresSessionStore(
        s["dsn"] or "", user=s["user"] or getpass.getuser(), profile=s["profile"], schema=s["schema"],
        pool_max=int(s["pool_max"]), write_timeout=float(s["write_timeout"]),
        connect_timeout=float(s["connect_timeout"]), synchronous_commit=s["synchronous_commit"])


def _doctor(kernel: Any) -> tuple[list[str], list[str]]:
    from .doctor import doctor

    return doctor(kernel)


#: ``hermes doctor`` asks the selected store's factory for its checks.
open_store.doctor = _doctor  # type: ignore[attr-defined]


@hermes.hookimpl
def hermes_register_session_stores(register: Any) -> None:
    """Register the ``postgres`` store."""
    register("postgres", open_store,
             description="PostgreSQL: one shared history for many agents and machines (row-level security per user)")
