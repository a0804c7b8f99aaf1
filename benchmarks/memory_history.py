"""Size and cost of the curated memory's history (``memories/history.jsonl``).

Applies N deterministic changes (adds, replaces, removes of 40-120 character entries,
as the memory tool makes them) to a real MemoryStore in a temporary directory, once with
the default bound (``memory.history_max_bytes`` = 1 MiB) and once unbounded, and prints
one JSON line per run: bytes on disk, records kept, the oldest id kept, and the time per
change. A plain baseline (the same changes without a journal — the file write alone) is
measured in the same run, so the journal's share of the cost is a ratio.

Run: ``.venv/bin/python benchmarks/memory_history.py [--changes 10000]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path

import hermes
from hermes.plugins.memory.journal import DEFAULT_MAX_BYTES
from hermes.plugins.memory.store import MemoryStore, join_entries

WORDS = "project uses uv ruff postgres deploy friday user prefers short answers tests pytest".split()


def entry(rng: random.Random) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
    return f"{text} #{rng.randint(0, 10**6)}"


def changes(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(action, old_text, content) for n changes that always apply to a store of ~20 entries."""
    rng = random.Random(seed)
    live: list[str] = []
    out = []
    while len(out) < n:
        roll = rng.random()
        if len(live) < 20 and (roll < 0.5 or not live):
            new = entry(rng)
            live.append(new)
            out.append(("add", "", new))
        elif roll < 0.8:
            i = rng.randrange(len(live))
            new = entry(rng)
            out.append(("replace", live[i], new))
            live[i] = new
        else:
            old = live.pop(rng.randrange(len(live)))
            out.append(("remove", old, ""))
    return out


def run(ops: list[tuple[str, str, str]], max_bytes: int | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(tmp, memory_limit=100_000, history_max_bytes=max_bytes or (1 << 40))
        start = time.perf_counter()
        for action, old, content in ops:
            outcome = store.apply("memory", [{"action": action, "old_text": old, "content": content}], who="bench")
            assert outcome.ok, outcome.data
        seconds = time.perf_counter() - start
        records = store.journal.records()
        return {"bound_bytes": max_bytes, "changes": len(ops), "journal_bytes": store.journal.size(),
                "records_kept": len(records), "oldest_id_kept": records[0]["id"] if records else None,
                "ms_per_change": round(seconds / len(ops) * 1000, 3)}


def baseline(ops: list[tuple[str, str, str]]) -> float:
    """ms per change of the file write alone (the same atomic write, no lock, no journal)."""
    with tempfile.TemporaryDirectory() as tmp:
        live: list[str] = []
        path = Path(tmp) / "MEMORY.md"
        start = time.perf_counter()
        for action, old, content in ops:
            if action == "add":
                live.append(content)
            elif action == "replace":
                live[live.index(old)] = content
            else:
                live.remove(old)
            hermes.atomic_write_text(path, join_entries(live))
        return (time.perf_counter() - start) / len(ops) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    ops = changes(args.changes, args.seed)
    print(json.dumps({"machine": platform.machine(), "python": platform.python_version(),
                      "cpus": os.cpu_count()}))
    base = baseline(ops)
    print(json.dumps({"baseline": "atomic write only", "ms_per_change": round(base, 3)}))
    for bound in (DEFAULT_MAX_BYTES, None):
        row = run(ops, bound)
        row["vs_baseline"] = round(float(row["ms_per_change"]) / base, 2)  # type: ignore[arg-type]
        print(json.dumps(row))


if __name__ == "__main__":
    main()
