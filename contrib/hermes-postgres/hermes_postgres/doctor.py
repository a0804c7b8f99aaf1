"""``hermes doctor`` for the postgres store: connect, show the server version, the
schema version and this user's row counts, and name the fix when something is wrong.
Never a traceback, never the password."""

from __future__ import annotations

from typing import Any

import hermes


def doctor(kernel: Any) -> tuple[list[str], list[str]]:
    """``(lines, problems)`` for the doctor report."""
    from . import open_store, schema
    from .store import PostgresSessionStore, mask_dsn

    try:
        settings = kernel.plugin_settings("postgres")
    except Exception as exc:  # a bad setting is reported by the config check too
        return [], [f"postgres: {hermes.redact_secrets(str(exc))}"]
    dsn = settings.get("dsn") or ""
    if not dsn:
        return [], ["postgres: plugins.postgres.dsn is not set; give the server's DSN, e.g. "
                    "dsn: {$env: HERMES_PG_DSN} with HERMES_PG_DSN=postgresql://hermes_app:…@db/hermes"]
    try:
        store: PostgresSessionStore = open_store(kernel)
    except hermes.StoreError as exc:
        return [], [f"postgres: {str(exc).splitlines()[0]}"]
    except Exception as exc:
        return [], [f"postgres: {type(exc).__name__}: {hermes.redact_secrets(str(exc)).splitlines()[0]}"]
    try:
        st = store.status()
    except Exception as exc:
        return [], [f"postgres: connected to {mask_dsn(dsn)} but could not read the store: "
                    f"{hermes.redact_secrets(str(exc)).splitlines()[0]}"]
    finally:
        store.close()
    lines = [f"postgres {st['server']} at {mask_dsn(dsn)}: schema {store.schema} v{st['schema_version']}, "
             f"role {st['role']}, user {store.user!r}/{store.profile!r}: {st['sessions']} sessions, "
             f"{st['messages']} messages"]
    if st["fsync"] != "on":
        lines.append("postgres: the server runs with fsync=off, so no write is durable whatever "
                     "plugins.postgres.synchronous_commit says, and a crash of its machine can corrupt the "
                     "database; fine for a throwaway test server, not for history you keep (set fsync = on)")
    else:
        lines.append(f"postgres: writes durable {'at commit' if st['synchronous_commit'] == 'on' else 'within ~0.6 s'} "
                     f"(plugins.postgres.synchronous_commit: {st['synchronous_commit']})")
    if not st["search_indexed"]:
        lines.append("postgres: searches scan every message (row-level security keeps them off the indexes); "
                     "for speed past ~100k messages an administrator runs once in this database: "
                     + " ".join(schema.ADMIN_SQL.split()))
    problems = []
    if st["superuser"] or st["bypassrls"]:
        problems.append(f"postgres: role {st['role']} is a superuser or has BYPASSRLS, so row-level security "
                        "does not separate users; connect as an ordinary role (see the hermes-postgres README)")
    return lines, problems
