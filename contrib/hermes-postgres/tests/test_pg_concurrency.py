"""Many processes appending at once: nothing lost, nothing duplicated, no global lock;
and the cross-machine one-writer lock, which a killed holder cannot keep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from hermes_postgres.lock import PostgresSessionLock, SessionBusyError
from hermes_postgres.schema import rebuild_sql
from hermes_postgres.store import PostgresSessionStore

PROCESSES, APPENDS = 8, 1000

WORKER = """
import sys
from hermes_postgres.store import PostgresSessionStore
dsn, user, proc, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = PostgresSessionStore(dsn, user=user, pool_max=1)
for i in range(n):
    # every other append goes to the session all workers share
    sid = "shared" if i % 2 else f"own-{proc}"
    s.append_message(sid, "user", f"p{proc} m{i}", timestamp=1_700_000_000 + i)
s.close()
"""


@pytest.mark.slow
def test_eight_processes_thousand_appends_each(pg_cluster, pg_user) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, pg_cluster.dsn, pg_user, str(p), str(APPENDS)],
                              stderr=subprocess.PIPE, text=True) for p in range(PROCESSES)]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * PROCESSES, errors
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user)
    shared = store.get_messages("shared")
    contents = [m["content"] for m in shared]
    for p in range(PROCESSES):
        own = store.get_messages(f"own-{p}")
        assert [m["content"] for m in own] == [f"p{p} m{i}" for i in range(0, APPENDS, 2)]  # in order
        contents += [m["content"] for m in own]
        assert [c for c in (m["content"] for m in shared) if c.startswith(f"p{p} ")] == \
            [f"p{p} m{i}" for i in range(1, APPENDS, 2)]  # each writer's order kept in the shared one
    assert len(contents) == len(set(contents)) == PROCESSES * APPENDS  # none lost, none twice
    assert store.get_session("shared")["message_count"] == len(shared) == PROCESSES * APPENDS // 2
    ids = [m["id"] for m in shared]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert store.count_messages() == PROCESSES * APPENDS
    # Every message's search context is its committed predecessor's text, also where
    # another process appended to the shared session while this append waited for it.
    with store._pool.connection() as conn, conn.transaction(force_rollback=True):
        before = conn.execute("SELECT id, tsv::text AS tsv, prev_cjk FROM messages ORDER BY id").fetchall()
        conn.execute(rebuild_sql("true"))  # what a reindex computes from the rows alone
        after = conn.execute("SELECT id, tsv::text AS tsv, prev_cjk FROM messages ORDER BY id").fetchall()
    assert len(before) == PROCESSES * APPENDS
    assert [r for r, s in zip(before, after, strict=True) if r != s] == []
    store.close()


HOLDER = """
import sys, time
from hermes_postgres.store import PostgresSessionStore
s = PostgresSessionStore(sys.argv[1], user=sys.argv[2], pool_max=1)
lock = s.writer_lock("conv-1")
lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_writer_lock_is_exclusive_and_dies_with_its_holder(pg_cluster, pg_user) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, pg_cluster.dsn, pg_user],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
        with pytest.raises(SessionBusyError, match="conv-1") as info:
            store.writer_lock("conv-1").acquire()
        assert info.value.pid == holder.pid and f"process {holder.pid}@" in str(info.value)  # named
        with store.writer_lock("conv-2") as other:  # another conversation is free
            assert other.held
        other_user = PostgresSessionStore(pg_cluster.dsn, user=pg_user + "-b", pool_max=1)
        with PostgresSessionLock(other_user, "conv-1"):  # the key includes the user
            pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
        deadline = time.monotonic() + 30
        while True:  # the server drops the lock when it sees the connection gone
            try:
                with store.writer_lock("conv-1") as lock:
                    assert lock.held
                break
            except SessionBusyError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        store.close()
        other_user.close()
    finally:
        if holder.poll() is None:
            holder.kill()
