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


def build_pg(dsn: str, sessions: list[dict[str, Any]], noise: int,
             user: str | None = None) -> tuple[Any, dict[tuple[str, int], int]]:
    from hermes_postgres.store import PostgresSessionStore

    store = PostgresSessionStore(dsn, user=user or f"recall-{time.time()}", pool_max=2)
    if user and store.count_messages():  # loaded by an earlier run: map the corpus again
        ids = {(s["id"], i): m["id"] for s in sessions for i, m in enumerate(store.get_messages(s["id"]))}
        return store, ids
    ids = recall.fill(store, sessions, noise, batch_per_noise_session=True)
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE hermes.messages")
    return store, ids


def run(name: str, store: Any, ids: dict[tuple[str, int], int],
        questions: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[int], set[int]]]:
    rows, times = [], []
    for q in questions:
        evidence = {ids[(q["session"], q["evidence"])], *(ids[(s, i)] for s, i in q.get("also", []))}
        start = time.perf_counter()
        got = [h["id"] for h in store.search_messages(q["question"], limit=10)]
        times.append((time.perf_counter() - start) * 1000)
        rows.append((q, got, evidence))
    for half in ("tune", "held"):
        mine = [r for r in rows if r[0]["half"] == half]
        # MRR over the first 10 hits (0 when the evidence is not among them)
        mrr = sum(next((1 / k for k, g in enumerate(got, 1) if g in ev), 0.0) for _, got, ev in mine) / (len(mine) or 1)
        print(json.dumps({"bench": "recall", "store": name, "half": half, **recall.score(mine),
                          "mrr@10": round(mrr, 3)}), flush=True)
    print(json.dumps({"bench": "recall", "store": name, "metric": "latency_ms",
                      "p50": round(recall.pct(times, 0.5), 2), "p95": round(recall.pct(times, 0.95), 2),
                      "mean": round(statistics.mean(times), 2)}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=int, default=20_000)
    parser.add_argument("--dsn")
    parser.add_argument("--user", help="with --dsn: load the corpus under this user once and reuse it")
    parser.add_argument("--differences", action="store_true",
                        help="list the questions one store finds in its first 5 hits and the other not")
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
            lite_rows = run("sqlite", lite, lite_ids, questions)
            lite.close()
        pg, pg_ids = build_pg(dsn, sessions, args.noise, args.user if args.dsn else None)
        pg_rows = run("postgres", pg, pg_ids, questions)
        pg.close()
        for (q, lite_got, lite_ev), (_, pg_got, pg_ev) in zip(lite_rows, pg_rows, strict=True):
            lite_hit, pg_hit = bool(lite_ev & set(lite_got[:5])), bool(pg_ev & set(pg_got[:5]))
            if args.differences and lite_hit != pg_hit:
                print(json.dumps({"bench": "recall", "found_by": "sqlite" if lite_hit else "postgres",
                                  "half": q["half"], "kind": q["kind"], "question": q["question"]},
                                 ensure_ascii=False), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
