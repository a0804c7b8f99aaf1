"""The postgres session store beside the SQLite store, in one run (JSON lines on stdout).

    python contrib/hermes-postgres/benchmarks/bench.py [--sizes 100000] [--writers 16]
        [--dsn DSN]   # default: a throwaway cluster (hermes_postgres.testing)

Measures, for both stores: appending one message per transaction (latency p50/p95 and
rate), a bulk import (``append_messages`` in a ``batch``, messages/s), search latency
p50/p95 per query kind at each size, and the total throughput of N writer processes
appending one message per transaction each to its own session. Every line carries
``store``; compare the two stores' lines of one run (same machine, same moment).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import os
import queue
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

T0 = 1_700_000_000.0
_SYLLABLES = ["ka", "lo", "mi", "ren", "sto", "va", "qui", "der", "pan", "tor", "el", "shu", "ba", "nix", "or"]
_CJK_WORDS = ["数据库", "迁移", "缓存", "问题", "解决", "方案", "记忆", "断裂", "服务器", "部署", "测试", "日志",
              "东京", "天気", "漓江", "桂林", "网络", "配置", "用户", "模型"]
_ENGLISH = ("the a to of and in is it for on with that this was we you deploy database staging postgres "
            "backup cluster restart config server error fixed test release migrate cache latency").split()


def vocabulary(n: int = 20_000, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rnd.choice(_SYLLABLES) for _ in range(rnd.randint(2, 4))))
    return _ENGLISH + sorted(words)


def corpus(total: int, per_session: int = 50, seed: int = 11) -> list[tuple[str, list[dict[str, Any]]]]:
    """Sessions of synthetic messages: Zipf-distributed words, 5% CJK sentences."""
    rnd = random.Random(seed)
    vocab = vocabulary()
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))
    sessions = []
    for s in range(total // per_session):
        msgs = []
        for i in range(per_session):
            ts = T0 + s * 600 + i
            if rnd.random() < 0.05:
                text = "".join(rnd.choice(_CJK_WORDS) for _ in range(rnd.randint(4, 10)))
            else:
                text = " ".join(rnd.choices(vocab, cum_weights=cumulative, k=rnd.randint(8, 40)))
            msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": text, "timestamp": ts})
        sessions.append((f"s{s:07d}", msgs))
    return sessions


def queries(seed: int = 5) -> dict[str, list[str]]:
    rnd = random.Random(seed)
    vocab = vocabulary()
    rare = vocab[5000:20000]
    mid = vocab[200:2000]
    return {
        "word-rare": rnd.sample(rare, 20),
        "word-common": rnd.sample(_ENGLISH[9:], 10) + rnd.sample(vocab[40:80], 10),
        "two-words": [f"{rnd.choice(mid)} {rnd.choice(mid)}" for _ in range(20)],
        "phrase": [f'"{rnd.choice(mid)} {rnd.choice(mid)}"' for _ in range(20)],
        "prefix": [rnd.choice(mid)[:4] + "*" for _ in range(20)],
        "or": [f"{rnd.choice(rare)} OR {rnd.choice(rare)}" for _ in range(20)],
        "question": [f"when did we talk about the {rnd.choice(mid)} and {rnd.choice(rare)}?" for _ in range(20)],
        "cjk-trigram": [rnd.choice(["数据库", "服务器"]) + rnd.choice(_CJK_WORDS)[:1] for _ in range(10)]
        + rnd.sample(["数据库", "服务器"], 2) * 5,
        "cjk-like": [w[:2] for w in rnd.sample(_CJK_WORDS, 20)],
        "cjk-question": [f"我们什么时候讨论了{rnd.choice(_CJK_WORDS)}{rnd.choice(_CJK_WORDS)}的问题？" for _ in range(20)],
    }


#: Durability classes compared like with like: "crash" survives a process crash (SQLite
#: synchronous=normal; PostgreSQL synchronous_commit=off survives a client crash and a
#: server crash may lose its last ~0.6 s of commits, never corrupting); "commit" is durable
#: at commit, power loss included (SQLite synchronous=full; PostgreSQL synchronous_commit=on).
DURABILITY = {
    "crash": {"sqlite": {"synchronous": "normal"}, "postgres": {"synchronous_commit": "off"}},
    "commit": {"sqlite": {"synchronous": "full"}, "postgres": {"synchronous_commit": "on"}},
}
WRITERS_SCHEMA = "bench_writers"


def open_store(kind: str, target: str, user: str = "bench", schema: str = "hermes", **options: Any) -> Any:
    if kind == "sqlite":
        from hermes.plugins.sessions.store import SQLiteSessionStore

        return SQLiteSessionStore(target, **options)
    from hermes_postgres.store import PostgresSessionStore

    return PostgresSessionStore(target, user=user, pool_max=2, schema=schema, **options)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] * 1000.0


def emit(**row: Any) -> None:
    print(json.dumps(row), flush=True)


def bench_append(kind: str, target: str, n: int, durability: str = "crash") -> None:
    store = open_store(kind, target, user=f"bench-append-{durability}", **DURABILITY[durability][kind])
    sid = store.create_session("append")
    times = []
    started = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        store.append_message(sid, "user", f"append number {i} about the staging cluster")
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - started
    store.close()
    emit(bench="append-one-per-transaction", store=kind, durability=durability, messages=n,
         per_second=round(n / total),
         p50_ms=round(pct(times, 0.5), 2), p95_ms=round(pct(times, 0.95), 2))


def bench_import(kind: str, target: str, sessions: list[tuple[str, list[dict[str, Any]]]], size: int,
                 schema: str = "hermes") -> None:
    store = open_store(kind, target, schema=schema)
    started = time.perf_counter()
    n = 0
    for start in range(0, len(sessions), 40):  # ~2,000 messages per batch, like the importer
        with store.batch():
            for sid, msgs in sessions[start:start + 40]:
                store.create_session(sid, started_at=msgs[0]["timestamp"])
                store.append_messages(sid, msgs)
                n += len(msgs)
    total = time.perf_counter() - started
    if kind == "postgres":
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {schema}.messages")
    if kind == "sqlite":
        store.optimize()
    store.close()
    emit(bench="bulk-import", store=kind, size=size, messages=n, seconds=round(total, 1),
         per_second=round(n / total))


def bench_search(kind: str, target: str, size: int, schema: str = "hermes", repeat: int = 1) -> None:
    """p50/p95 over the queries of each kind; with ``repeat`` > 1 each query counts with
    its best of that many runs (on a shared machine other jobs otherwise decide the p95)."""
    store = open_store(kind, target, schema=schema)
    for name, qs in queries().items():
        store.search_messages(qs[0])  # warm
        times, hits, modes = [], 0, set()
        for q in qs:
            best = math.inf
            for _ in range(max(1, repeat)):
                t = time.perf_counter()
                found = store.search_messages(q)
                best = min(best, time.perf_counter() - t)
            times.append(best)
            hits += len(found)
            modes |= {h["mode"] for h in found}
        emit(bench="search", store=kind, size=size, kind=name, queries=len(qs), repeat=max(1, repeat),
             p50_ms=round(pct(times, 0.5), 1), p95_ms=round(pct(times, 0.95), 1), mean_hits=round(hits / len(qs), 1),
             modes=sorted(modes))
    store.close()




def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process on this machine (None: not readable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _backend_pid(store: Any) -> int | None:
    pool = getattr(store, "_pool", None)
    if pool is None:
        return None
    with pool.connection() as conn:
        return int(conn.execute("SELECT pg_backend_pid() AS p").fetchone()["p"])


def _writer(kind: str, target: str, proc: int, n: int, go: Any, out: Any, options: dict) -> None:
    store = open_store(kind, target, user="bench-writers", schema=WRITERS_SCHEMA, **options)
    sid = store.create_session(f"writer-{proc}-{random.random()}")
    backend = _backend_pid(store)  # pool_max=2, but one thread appending uses one connection
    out.put(("ready", proc))
    go.wait()
    server0 = _cpu_seconds(backend) if backend else None
    cpu0, began = time.process_time(), time.time()
    for i in range(n):
        store.append_message(sid, "user", f"writer {proc} message {i} staging cluster restart")
    ended, cpu = time.time(), time.process_time() - cpu0
    server1 = _cpu_seconds(backend) if backend else None
    out.put((proc, began, ended, cpu, None if server0 is None or server1 is None else server1 - server0))
    store.close()


def _server_helpers(dsn: str) -> list[int]:
    """The PostgreSQL server's own processes (WAL writer, checkpointer …), whose CPU an
    append also costs; empty when the server is not on this machine."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        # usesysid: a role's sessions; backend_type is hidden from unprivileged roles
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE usesysid IS NULL").fetchall()
    return [int(r[0]) for r in rows if _cpu_seconds(int(r[0])) is not None]


def _fresh_writers_target(kind: str, dsn: str, tmp: Path, options: dict) -> str:
    if kind == "sqlite":
        # Created (and switched to WAL) here: 16 processes creating one new file at once
        # can fail with "database is locked" in SQLiteSessionStore's open.
        path = str(tmp / f"writers-{time.monotonic_ns()}.db")
        open_store(kind, path, **options).close()
        return path
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {WRITERS_SCHEMA} CASCADE")
    open_store(kind, dsn, user="bench-writers", schema=WRITERS_SCHEMA, **options).close()  # migrate once
    return dsn


def bench_writers(kind: str, target: str, writers: int, n: int, durability: str = "crash") -> None:
    """``writers`` processes each appending ``n`` messages, one per transaction, to its own
    session, all starting together; total rate, and CPU per append in the clients and
    (PostgreSQL on this machine) in the server."""
    options = DURABILITY[durability][kind]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    helpers = _server_helpers(target) if kind == "postgres" else []
    go = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(kind, target, p, n, go, out, options))
             for p in range(writers)]
    for p in procs:
        p.start()

    def collect() -> list[Any]:
        got: list[Any] = []
        while len(got) < writers:
            try:
                got.append(out.get(timeout=1.0))
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    for p in procs:
                        p.kill()
                    raise SystemExit(f"a {kind} writer process failed (its traceback is above)") from None
        return got

    collect()  # every writer has opened its store
    helpers_before = sum(_cpu_seconds(p) or 0.0 for p in helpers)
    go.set()  # all start together
    results = collect()
    helpers_cpu = sum(_cpu_seconds(p) or 0.0 for p in helpers) - helpers_before  # WAL writer …
    for p in procs:
        p.join()
    # From the first writer's start to the last one's end: the rate all of them sustained
    # together (a writer that started late does not shorten it).
    wall = max(r[2] for r in results) - min(r[1] for r in results)
    total = writers * n
    backends = [r[4] for r in results]
    server_us = None if kind != "postgres" or None in backends else \
        round((sum(backends) + helpers_cpu) / total * 1e6)
    emit(bench="concurrent-writers", store=kind, durability=durability, setting=options, writers=writers,
         messages=total, per_second=round(total / wall), wall_s=round(wall, 2),
         client_cpu_us_per_append=round(sum(r[3] for r in results) / total * 1e6),
         server_cpu_us_per_append=server_us,
         of_which_background_us=round(helpers_cpu / total * 1e6) if server_us is not None else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated corpus sizes (messages)")
    parser.add_argument("--writers", default="16", help="comma-separated writer process counts (1,2,4,8,16)")
    parser.add_argument("--durability", default="crash,commit",
                        help="writers: crash (SQLite synchronous=normal beside PostgreSQL synchronous_commit=off), "
                        "commit (full beside on), or both")
    parser.add_argument("--writer-messages", type=int, default=300)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--dsn", help="an existing server (its schema 'hermes' is written to)")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each search this many times and count its best time (a shared machine)")
    parser.add_argument("--keep", help="a directory keeping each size's corpus between runs (SQLite: "
                        "corpus-SIZE.db there; PostgreSQL: schema bench_SIZE of --dsn); a corpus already "
                        "there is searched again, not imported again")
    args = parser.parse_args()
    cluster = None
    dsn = args.dsn
    if dsn is None:
        from hermes_postgres.testing import start_cluster

        cluster = start_cluster()
        dsn = cluster.dsn
    tmp = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    stores = [s for s in args.stores.split(",") if s]
    try:
        import platform

        emit(bench="machine", python=sys.version.split()[0], cpus=multiprocessing.cpu_count(),
             platform=platform.platform(), note="shared machine: compare stores within this run only")
        for durability in (d for d in args.durability.split(",") if d) if args.appends else ():
            for kind in stores:
                bench_append(kind, dsn if kind == "postgres" else str(tmp / f"append-{durability}.db"),
                             args.appends, durability)
        if "postgres" in stores:
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:  # what "commit" means on this server
                emit(bench="server", **{k: conn.execute(f"SHOW {k}").fetchone()[0]
                                        for k in ("server_version", "fsync", "synchronous_commit", "wal_sync_method")})
        for writers in (int(w) for w in args.writers.split(",") if w.strip() and int(w) > 0):
            for durability in (d for d in args.durability.split(",") if d):
                for kind in stores:
                    target = _fresh_writers_target(kind, dsn, tmp, DURABILITY[durability][kind])
                    bench_writers(kind, target, writers, args.writer_messages, durability)
        previous = 0
        for size in sorted(int(s) for s in args.sizes.split(",") if s):
            if args.keep:  # each size in a database of its own, imported once
                for kind in stores:
                    target = dsn if kind == "postgres" else str(Path(args.keep) / f"corpus-{size}.db")
                    schema = f"bench_{size}" if kind == "postgres" else "hermes"
                    store = open_store(kind, target, schema=schema)
                    have = store.count_messages()
                    store.close()
                    if have < size:
                        bench_import(kind, target, corpus(size)[have // 50:], size, schema=schema)
                    bench_search(kind, target, size, schema=schema, repeat=args.repeat)
                continue
            sessions = corpus(size)
            new = sessions[previous // 50:]  # sizes grow: import only the difference
            for kind in stores:
                target = dsn if kind == "postgres" else str(tmp / "corpus.db")
                bench_import(kind, target, new, size)
                bench_search(kind, target, size, repeat=args.repeat)
            previous = size
    finally:
        if cluster is not None:
            cluster.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
