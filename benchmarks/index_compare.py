"""Time the search-index comparison of ``hermes sessions check`` / ``hermes doctor``
(``SQLiteSessionStore.compare_indexes``) on a large ``state.db``.

Fills a fresh database with N messages through the real store (1,000-message sessions,
every third message with CJK text, so both indexes are compared), then times, in the same
run: ``PRAGMA quick_check`` (the baseline: SQLite's own cheapest whole-file check), the
full comparison, the doctor's bounded comparison (how far 2 s get) and the whole
``check_integrity()``. One JSON line per step.

Run: ``.venv/bin/python benchmarks/index_compare.py [--messages 200000]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import tempfile
import time
from pathlib import Path

WORDS = "deploy service logs failed retry cluster node config 東京 天気 migration database".split()  # 8+: CJK


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()

    from hermes.plugins.sessions.integrity import DOCTOR_BUDGET
    from hermes.plugins.sessions.store import SQLiteSessionStore

    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="hermes-index-bench-") as tmp:
        path = Path(tmp) / "state.db"
        store = SQLiteSessionStore(path)
        start = time.perf_counter()
        with store.batch():
            for _ in range(max(1, args.messages // 1000)):
                sid = store.create_session(source="cli")
                store.append_messages(sid, [{"role": "user", "content": " ".join(
                    rng.choice(WORDS[:8] if i % 3 else WORDS) for _ in range(30))} for i in range(1000)])
        common = {"messages": store.count_messages(), "cpus": os.cpu_count()}
        print(json.dumps({"step": "fill", **common, "seconds": round(time.perf_counter() - start, 2)}))

        start = time.perf_counter()
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA quick_check").fetchall()
        baseline = time.perf_counter() - start
        print(json.dumps({"step": "quick_check (baseline)", **common, "seconds": round(baseline, 2)}))

        start = time.perf_counter()
        full = store.compare_indexes()
        took = time.perf_counter() - start
        print(json.dumps({"step": "compare_indexes (all)", **common, "seconds": round(took, 2),
                          "vs_quick_check": round(took / baseline, 2), "problems": len(full.problems)}))

        start = time.perf_counter()
        part = store.compare_indexes(budget=DOCTOR_BUDGET)
        print(json.dumps({"step": f"compare_indexes (doctor, {DOCTOR_BUDGET:g} s budget)", **common,
                          "seconds": round(time.perf_counter() - start, 2), "ids_checked": part.checked_to,
                          "of": part.last_id}))

        start = time.perf_counter()
        problems = store.check_integrity()
        took = time.perf_counter() - start
        print(json.dumps({"step": "check_integrity (sessions check)", **common, "seconds": round(took, 2),
                          "vs_quick_check": round(took / baseline, 2), "problems": len(problems)}))
        store.close()


if __name__ == "__main__":
    main()
