"""Recall of ``search_messages`` on natural questions, beside a plain BM25-OR baseline.

The corpus (``benchmarks/recall_corpus/``, written for Hermes by ``generate.py``) holds
multi-session conversations in English, Chinese and Japanese and questions typed as
people ask them, each tagged with the message that answers it. The sessions are imported
into a fresh store through its public API, together with ``--noise`` messages of the
synthetic chat corpus of ``benchmarks/sessions.py`` (distractors at a realistic scale).
For every question the store's first 10 hits are compared with the evidence message:

* hit@1/5/10 overall, per question kind and per half (``tune``: looked at while tuning;
  ``held``: never looked at while tuning — the honest figure);
* the same figures for a **baseline** in the same run: a plain FTS5 table (unicode61,
  message text only) queried with the question's words OR-ed (stop words dropped),
  ranked by bm25 — what anyone would write first;
* search latency p50/p95 (ms) of the store and of the baseline.

Each figure is one JSON line. ``--half tune`` prints only the tuning half (use it while
tuning); ``--misses`` lists the missed questions of the printed halves.

Run: ``.venv/bin/python benchmarks/recall.py [--noise 20000] [--half tune|held|both]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import hermes
from hermes.plugins.sessions.store import SQLiteSessionStore

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "recall_corpus"
KS = (1, 5, 10)

#: The baseline's stop words: a short, ordinary English list (not the store's).
BASELINE_STOP = frozenset("""a an and are as at be but by did do does for from had has have he her his how i
if in into is it its me my of on or our she so that the their them then there these they this to
was we were what when where which who why will with would you your""".split())


def emit(**fields: Any) -> None:
    print(json.dumps({"bench": "recall", **fields}, ensure_ascii=False), flush=True)


def load(name: str) -> list[dict[str, Any]]:
    with open(CORPUS / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def build(path: Path, sessions: list[dict[str, Any]], noise: int) -> tuple[SQLiteSessionStore, dict[tuple[str, int], int]]:
    """Import noise first (older ids), then the corpus; returns the store and
    ``(session, index) → message id``."""
    store = SQLiteSessionStore(path)
    return store, fill(store, sessions, noise)


def fill(store: Any, sessions: list[dict[str, Any]], noise: int, *,
         batch_per_noise_session: bool = False) -> dict[tuple[str, int], int]:
    """Load ``noise`` synthetic messages, then the corpus, into any store; the
    ``(session, index) → message id`` map. A server store may want one transaction per
    noise session rather than one for all of them."""
    if noise:
        sys.path.insert(0, str(HERE))
        from sessions import Corpus  # the synthetic chat corpus of the speed benchmark

        def load_noise() -> None:
            for sid, msgs in Corpus(seed=7).messages(noise):
                with store.batch() if batch_per_noise_session else contextlib.nullcontext():
                    store.create_session(sid, source="cli", started_at=msgs[0]["timestamp"])
                    store.append_messages(sid, msgs)

        if batch_per_noise_session:
            load_noise()
        else:
            with store.batch():
                load_noise()
    ids: dict[tuple[str, int], int] = {}
    with store.batch():
        for s in sessions:
            store.create_session(s["id"], source="cli", started_at=s["started_at"])
            for i, mid in enumerate(store.append_messages(s["id"], s["messages"])):
                ids[(s["id"], i)] = mid
    return ids


def build_baseline(store_path: Path) -> sqlite3.Connection:
    """A plain FTS5 index of message text with the store's message ids as rowids."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(content)")
    src = sqlite3.connect(store_path)
    conn.executemany("INSERT INTO fts(rowid, content) VALUES (?, ?)",
                     src.execute("SELECT id, content FROM messages WHERE content IS NOT NULL"))
    src.close()
    conn.commit()
    return conn


def baseline_search(conn: sqlite3.Connection, question: str, limit: int = 10) -> list[int]:
    words = [w for w in re.findall(r"\w+", question.lower()) if w not in BASELINE_STOP]
    if not words:
        return []
    expr = " OR ".join('"' + w.replace('"', '""') + '"' for w in dict.fromkeys(words))
    return [r[0] for r in conn.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
                                       (expr, limit))]


def score(rows: list[tuple[dict[str, Any], list[int], set[int]]]) -> dict[str, float]:
    n = len(rows) or 1
    out = {f"hit@{k}": round(sum(bool(ev & set(got[:k])) for _, got, ev in rows) / n, 3) for k in KS}
    out["n"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", type=int, default=20_000, help="synthetic distractor messages")
    parser.add_argument("--half", choices=("tune", "held", "both"), default="both")
    parser.add_argument("--misses", action="store_true", help="list missed questions (hit@5)")
    parser.add_argument("--kind", help="only questions of this kind")
    args = parser.parse_args(argv)

    sessions, questions = load("sessions.jsonl"), load("questions.jsonl")
    if args.kind:
        questions = [q for q in questions if q["kind"] == args.kind]
    emit(metric="machine", python=platform.python_version(), sqlite=sqlite3.sqlite_version,
         cpus=os.cpu_count(), hermes=hermes.__version__, load_avg=[round(x, 2) for x in os.getloadavg()],
         sessions=len(sessions), messages=sum(len(s["messages"]) for s in sessions), noise=args.noise,
         questions=len(questions))
    with tempfile.TemporaryDirectory(prefix="hermes-recall-") as tmp:
        path = Path(tmp) / "state.db"
        store, ids = build(path, sessions, args.noise)
        base = build_baseline(path)
        halves = ("tune", "held") if args.half == "both" else (args.half,)
        results: dict[str, list[tuple[dict[str, Any], list[int], set[int]]]] = {"store": [], "baseline": []}
        times: dict[str, list[float]] = {"store": [], "baseline": []}
        for q in questions:
            if q["half"] not in halves:
                continue
            # The evidence message, or that of the same question asked about another session.
            evidence = {ids[(q["session"], q["evidence"])], *(ids[(s, i)] for s, i in q.get("also", []))}
            start = time.perf_counter()
            got = [h["id"] for h in store.search_messages(q["question"], limit=10)]
            times["store"].append((time.perf_counter() - start) * 1000)
            results["store"].append((q, got, evidence))
            start = time.perf_counter()
            got = baseline_search(base, q["question"])
            times["baseline"].append((time.perf_counter() - start) * 1000)
            results["baseline"].append((q, got, evidence))
        store.close()
        base.close()

    for half in halves:
        for system, rows in results.items():
            mine = [r for r in rows if r[0]["half"] == half]
            kinds = sorted({r[0]["kind"] for r in mine})
            emit(half=half, system=system, metric="overall", **score(mine))
            for kind in kinds:
                emit(half=half, system=system, metric="kind", kind=kind,
                     **score([r for r in mine if r[0]["kind"] == kind]))
    for system, values in times.items():
        emit(system=system, metric="latency_ms", p50=round(pct(values, 0.5), 2),
             p95=round(pct(values, 0.95), 2), mean=round(statistics.mean(values), 2) if values else 0.0)
    if args.misses:
        for q, got, ev in results["store"]:
            if not ev & set(got[:5]):
                print(f"MISS [{q['half']}/{q['kind']}] {q['question']}  (evidence {ev}, got {got[:5]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
