"""Time ``hermes backup`` and ``hermes restore`` on a large home (issue 20).

Generates, once, a home of N messages (default 1,000,000: 10,000 sessions of 100 messages
of 8-40 words) through the real session store under ``--home`` (default
``/tmp/hermes-bench-1m``; reused when it already holds them), then runs the real CLI as
subprocesses: ``hermes backup``, ``hermes restore`` into a fresh directory, and a plain
``cp`` of the database as the baseline of the same run. Prints one JSON line per step.

Run: ``.venv/bin/python benchmarks/backup_restore.py [--messages 1000000] [--home DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("memory context session search compaction summary prompt cache tool result file python kernel "
         "plugin config token budget user agent answer error test pelican deploy migration database").split()


def count(home: Path) -> int:
    db = home / "state.db"
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])


def generate(home: Path, messages: int, per: int = 100) -> float:
    import hermes

    home.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    started = time.perf_counter()
    kernel = hermes.Kernel(home=home, check_selection=False)
    try:
        store = kernel.session_store
        for _ in range(messages // per):
            sid = store.create_session(None, source="cli", model="bench")
            store.append_messages(sid, [
                {"role": "user" if i % 2 == 0 else "assistant",
                 "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))}
                for i in range(per)])
    finally:
        kernel.close()
    return time.perf_counter() - started


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--home", default="/tmp/hermes-bench-1m")
    args = parser.parse_args()
    home = Path(args.home)
    print(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}))
    if count(home) < args.messages:
        shutil.rmtree(home, ignore_errors=True)
        print(json.dumps({"step": "generate", "messages": args.messages, "seconds": round(generate(home, args.messages), 1)}))
    db_bytes = (home / "state.db").stat().st_size
    hermes = [sys.executable, "-m", "hermes.cli"]
    with tempfile.TemporaryDirectory(dir=home.parent) as tmp:
        work = Path(tmp)
        base = timed(["cp", str(home / "state.db"), str(work / "copy.db")])
        print(json.dumps({"step": "cp baseline", "db_bytes": db_bytes, "seconds": round(base, 2)}))
        archive = work / "home.tar.gz"
        backup = timed([*hermes, "--home", str(home), "backup", str(archive)])
        print(json.dumps({"step": "backup", "messages": count(home), "archive_bytes": archive.stat().st_size,
                          "seconds": round(backup, 2), "vs_cp": round(backup / base, 1)}))
        restore = timed([*hermes, "restore", str(archive), "--home", str(work / "restored")])
        print(json.dumps({"step": "restore", "messages": count(work / "restored"), "seconds": round(restore, 2),
                          "vs_cp": round(restore / base, 1)}))


if __name__ == "__main__":
    main()
