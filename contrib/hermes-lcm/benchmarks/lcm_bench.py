"""hermes-lcm benchmarks: one JSON line per figure.

* ``ingest`` — messages stored per second through the engine (``on_turn_complete`` each
  turn, as the runtime does), against a plain ``executemany`` insert of the same rows.
* ``compaction`` — CPU time of compaction passes (deterministic summaries, so only the
  engine is measured) over a session of N messages driven like the runtime drives it.
* ``grep`` — ``lcm_grep`` latency (substring and regex) over N stored messages, against a
  plain SQLite ``LIKE`` scan of the same table.

Usage: ``python contrib/hermes-lcm/benchmarks/lcm_bench.py [--messages 2000 20000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hermes_lcm.engine import LCMEngine  # noqa: E402
from hermes_lcm.settings import LCMSettings  # noqa: E402
from lcm_helpers import SYSTEM, conversation  # noqa: E402

from hermes import estimate_messages_tokens  # noqa: E402

MACHINE = f"{platform.machine()} {platform.system()} python{platform.python_version()} cpus={os.cpu_count()}"


def emit(**fields) -> None:
    print(json.dumps({"machine": MACHINE, **fields}), flush=True)


def turns_for(n: int) -> list[list[dict]]:
    out, total = [], 0
    for turn in conversation(10**9, seed=7, fact_turn=2):
        out.append(turn)
        total += len(turn)
        if total >= n:
            return out
    return out


def run(n: int) -> None:
    turns = turns_for(n)
    home = tempfile.mkdtemp()
    engine = LCMEngine(home=home, settings=LCMSettings(summarizer="deterministic"))
    engine.update_model("bench", 32_000)
    engine.on_session_start("bench")
    live = [SYSTEM]
    ingest = compact = 0.0
    passes = 0
    for turn in turns:
        live += turn
        started = time.process_time()
        engine.on_turn_complete(live[1:])
        ingest += time.process_time() - started
        if engine.should_compress(estimate_messages_tokens(live)):
            started = time.process_time()
            live = engine.compress(live)
            compact += time.process_time() - started
            passes += 1
    stored = engine.store.message_count(engine.conversation_id)
    emit(figure="ingest", messages=stored, per_second=round(stored / ingest), cpu_s=round(ingest, 3))
    rows = [(1, i, "user", "x" * 200, "{}", "fp", 50, None, 0.0) for i in range(stored)]
    con = sqlite3.connect(os.path.join(home, "baseline.db"))
    con.execute("CREATE TABLE m (c, seq, role, text, payload, fp, tokens, s, t)")
    started = time.process_time()
    with con:
        con.executemany("INSERT INTO m VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    base = time.process_time() - started
    emit(figure="ingest_baseline_executemany", messages=stored, per_second=round(stored / max(base, 1e-9)))
    emit(figure="compaction", messages=stored, passes=passes, cpu_s_total=round(compact, 3),
         cpu_ms_per_pass=round(1000 * compact / max(passes, 1), 2))
    engine.close()
    size = Path(home, "lcm.db").stat().st_size
    emit(figure="db_size", messages=stored, bytes=size, bytes_per_message=round(size / stored))
    for label, args in (("substring", {"pattern": "rotation day"}),
                        ("regex", {"pattern": r"rotation\s+day", "regex": True})):
        started = time.perf_counter()
        result = json.loads(engine.handle_tool_call("lcm_grep", args, messages=live[1:]))
        elapsed = time.perf_counter() - started
        assert result["messages"], result
        emit(figure=f"grep_{label}", messages=stored, ms=round(1000 * elapsed, 2))
    con = sqlite3.connect(os.path.join(home, "lcm.db"))
    started = time.perf_counter()
    con.execute("SELECT id FROM messages WHERE text LIKE '%rotation day%'").fetchall()
    emit(figure="grep_baseline_like", messages=stored, ms=round(1000 * (time.perf_counter() - started), 2))
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[2_000, 20_000])
    for n in parser.parse_args().messages:
        run(n)


if __name__ == "__main__":
    main()
