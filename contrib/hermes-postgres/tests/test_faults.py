"""Crash invariants with real SIGKILLs: a compaction split killed before its commit
leaves the parent live and unchanged and no continuation; a writer killed in the middle
of appending leaves every append it was told succeeded, each once, and a consistent
message count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hermes_postgres.store import PostgresSessionStore

SPLIT = """
import sys
from hermes_postgres.store import PostgresSessionStore
s = PostgresSessionStore(sys.argv[1], user=sys.argv[2], pool_max=1)
s.split_session("parent", [{"role": "user", "content": "summary"}] * 50, title="Trip #2")
print("not killed", flush=True)
"""


def test_split_killed_before_commit_changes_nothing(pg_cluster, pg_user) -> None:
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    store.create_session("parent", started_at=1_700_000_000)
    store.set_title("parent", "Trip")
    store.append_message("parent", "user", "before the split", timestamp=1_700_000_001)
    env = {**os.environ, "HERMES_FAULT_POINT": "compaction-split"}
    done = subprocess.run([sys.executable, "-c", SPLIT, pg_cluster.dsn, pg_user], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL and "not killed" not in done.stdout
    row = store.get_session("parent")
    assert row["ended_at"] is None and row["end_reason"] is None and row["message_count"] == 1
    assert store.children("parent") == [] and store.compression_tip("parent") == "parent"
    assert store.resolve_session("Trip #2") is None and store.count_messages() == 1
    store.close()


APPEND = """
import sys
from hermes_postgres.store import PostgresSessionStore
s = PostgresSessionStore(sys.argv[1], user=sys.argv[2], pool_max=1)
for i in range(100000):
    s.append_message("victim", "user", f"m{i}")
    print(i, flush=True)  # printed only after the append returned
"""


def test_writer_killed_mid_append_keeps_every_acknowledged_message(pg_cluster, pg_user) -> None:
    proc = subprocess.Popen([sys.executable, "-c", APPEND, pg_cluster.dsn, pg_user], stdout=subprocess.PIPE,
                            text=True)
    acknowledged = []
    deadline = time.monotonic() + 60
    while len(acknowledged) < 300 and time.monotonic() < deadline:
        acknowledged.append(int(proc.stdout.readline()))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    acknowledged += [int(line) for line in proc.stdout.read().split()]  # printed before it died
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    contents = [m["content"] for m in store.get_messages("victim")]
    assert len(contents) == len(set(contents))
    assert contents[:len(acknowledged)] == [f"m{i}" for i in acknowledged]
    assert len(contents) - len(acknowledged) <= 1  # at most the one in flight
    assert store.get_session("victim")["message_count"] == len(contents)
    store.close()
