"""The recall benchmark (``benchmarks/recall.py``) against the postgres store, beside
the SQLite store in the same run: the same corpus, noise and questions, hit@1/5/10 per
half and search latency p50/p95, one JSON line per figure (``store`` says which).

    python contrib/hermes-postgres/benchmarks/recall_pg.py [--noise 20000] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import recall  # noqa: E402  (the project's recall benchmark: corpus, scoring)


def build_pg(dsn: str, sessions: list[dict[str, Any]], noise: int) -> tuple[Any, dict[tuple[str, int], int]]:
    from hermes_postgres.store import PostgresSessionStore

    store = PostgresSessionStore(dsn, user=f"recall-{time.time()}", pool_max=2)
    ids = recall.fill(store, sessions, noise, batch_per_noise_session=True)
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE hermes.messages")
    return store, ids


def run(name: str, store: Any, ids: dict[tuple[str, int], int], questions: list[dict[str, Any]]) -> None:
    rows, times = [], []
    for q in questions:
        evidence = {ids[(q["session"], q["evidence"])], *(ids[(s, i)] for s, i in q.get("also", []))}
        start = time.perf_counter()
        got = [h["id"] for h in store.search_messages(q["question"], limit=10)]
        times.append((time.perf_counter() - start) * 1000)
        rows.append((q, got, evidence))
    for half in ("tune", "held"):
        mine = [r for r in rows if r[0]["half"] == half]
        print(json.dumps({"bench": "recall", "store": name, "half": half, **recall.score(mine)}), flush=True)
    print(json.dumps({"bench": "recall", "store": name, "metric": "latency_ms",
                      "p50": round(recall.pct(times, 0.5), 2), "p95": round(recall.pct(times, 0.95), 2),
                      "mean": round(statistics.mean(times), 2)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=int, default=20_000)
    parser.add_argument("--dsn")
    args = parser.parse_args()
    sessions, questions = recall.load("sessions.jsonl"), recall.load("questions.jsonl")
    cluster = None
    dsn = args.dsn
    if dsn is None:
        from hermes_postgres.testing import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn
    try:
        with tempfile.TemporaryDirectory(prefix="hermes-recall-") as tmp:
            lite, lite_ids = recall.build(Path(tmp) / "state.db", sessions, args.noise)
            run("sqlite", lite, lite_ids, questions)
            lite.close()
        pg, pg_ids = build_pg(dsn, sessions, args.noise)
        run("postgres", pg, pg_ids, questions)
        pg.close()
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
