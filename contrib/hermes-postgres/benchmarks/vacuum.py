"""The dead rows the v1 -> v2 migration leaves in ``messages``, and what ``VACUUM`` and
``VACUUM FULL`` do about them (JSON lines on stdout; the README's Operations figures).

    python contrib/hermes-postgres/benchmarks/vacuum.py [--messages 50000]

Starts a throwaway PostgreSQL cluster (``hermes_postgres.testing``), fills a version-1
schema, opens it with this version (the migration rewrites every message once), then
runs ``VACUUM (ANALYZE)`` and ``VACUUM (FULL, ANALYZE)``. Each line gives the table's
size (heap and with indexes), its live and dead rows and the step's seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from hermes_postgres import schema as pgschema  # noqa: E402
from hermes_postgres.store import PostgresSessionStore  # noqa: E402
from hermes_postgres.testing import start_cluster  # noqa: E402

SCHEMA = "vacuum_bench"
PER_SESSION = 500


def _fill(dsn: str, messages: int) -> None:
    """A version-1 schema holding ``messages`` messages (sessions of 500)."""
    current, pgschema.SCHEMA_VERSION = pgschema.SCHEMA_VERSION, 1  # this process only: create it as v1 had it
    store = PostgresSessionStore(dsn, user="bench", schema=SCHEMA, pool_max=1)
    try:
        for j in range(max(1, messages // PER_SESSION)):
            sid = store.create_session()
            store.append_messages(sid, [
                {"role": "user" if i % 2 else "assistant",
                 "content": f"message {j} {i} about the staging cluster deploy and its cache " * 3}
                for i in range(PER_SESSION)])
    finally:
        store.close()
        pgschema.SCHEMA_VERSION = current


def _state(conn: Any, step: str, seconds: float | None) -> dict[str, Any]:
    conn.execute(f"ANALYZE {SCHEMA}.messages")
    table = f"{SCHEMA}.messages"
    total, heap = conn.execute("SELECT pg_total_relation_size(%s), pg_relation_size(%s)", (table, table)).fetchone()
    live, dead = conn.execute("SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass",
                              (table,)).fetchone()
    return {"step": step, "seconds": seconds, "heap_mib": round(heap / 2**20, 1),
            "total_mib": round(total / 2**20, 1), "live_rows": live, "dead_rows": dead}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    args = parser.parse_args()
    cluster = start_cluster()
    try:
        _fill(cluster.dsn, args.messages)
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            print(json.dumps(_state(conn, "v1", None)), flush=True)
            steps = [("v2 migration", lambda: PostgresSessionStore(cluster.dsn, user="bench", schema=SCHEMA,
                                                                    pool_max=1).close()),
                     ("VACUUM (ANALYZE)", lambda: conn.execute(f"VACUUM (ANALYZE) {SCHEMA}.messages")),
                     ("VACUUM (FULL, ANALYZE)", lambda: conn.execute(f"VACUUM (FULL, ANALYZE) {SCHEMA}.messages"))]
            for step, run in steps:
                start = time.perf_counter()
                run()
                print(json.dumps(_state(conn, step, round(time.perf_counter() - start, 2))), flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
