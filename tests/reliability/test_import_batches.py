"""Long imports commit in bounded batches, even inside one huge session: another real
process keeps writing while it runs, and an import killed part way finishes when run
again (nothing twice, nothing missing)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes.plugins.sessions.store import SQLiteSessionStore
from hermes.plugins.sessions.transfer import ImportReport, import_sessions, read

N = 30_000


def big_session(path: Path, n: int = N) -> Path:
    with open(path, "w", encoding="utf-8") as fh:  # the source file, not a Hermes file
        fh.write(json.dumps({"hermes_session": {"id": "big-1", "source": "cli", "title": "Big one",
                                                "started_at": 1000, "ended_at": 9000,
                                                "end_reason": "user_exit"}}) + "\n")
        for i in range(n):
            fh.write(json.dumps({"role": "user" if i % 2 == 0 else "assistant",
                                 "content": f"message {i} about ingress timeouts", "timestamp": 1000 + i}) + "\n")
    return path


def hermes(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "hermes.cli", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "HERMES_HOME": str(home), "HERMES_LOAD_PLUGINS": ""})


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from hermes.plugins.sessions.store import SQLiteSessionStore
    db, stop = sys.argv[1], Path(sys.argv[2])
    store = SQLiteSessionStore(db)
    sid = store.create_session("writer-1", source="other")
    store.append_message(sid, "user", "first")
    print("ready", flush=True)
    n = 0
    while not stop.exists():
        store.append_message(sid, "user", f"note {n}")
        n += 1
        time.sleep(0.002)
    store.close()
    print(n, flush=True)
""")


def rows(db: Path, session_id: str) -> list[tuple[int, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT id, content FROM messages WHERE session_id = ? ORDER BY id",
                            (session_id,)).fetchall()
    finally:
        conn.close()


@pytest.mark.slow  # a huge import in a second process; tests/plugins/sessions/test_import.py stays fast
def test_another_process_writes_between_the_batches_of_one_huge_session(hermes_home: Path,
                                                                       tmp_path: Path) -> None:
    source = big_session(tmp_path / "big.jsonl")
    SQLiteSessionStore(hermes_home / "state.db").close()
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(hermes_home / "state.db"), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        importer = hermes(hermes_home, "sessions", "import", str(source))
        out, err = importer.communicate(timeout=300)
        assert importer.returncode == 0, err
        assert f"{N} message(s)" in out
    finally:
        stop.touch()
        wout, werr = writer.communicate(timeout=60)
    assert writer.returncode == 0, werr  # no write of the other process failed (locked out)
    imported = [i for i, _ in rows(hermes_home / "state.db", "big-1")]
    assert len(imported) == N
    written = [i for i, _ in rows(hermes_home / "state.db", "writer-1")]
    between = [i for i in written if imported[0] < i < imported[-1]]
    assert between, "the other process got the database while the import ran"


@pytest.mark.slow  # a huge import killed in a real process; tests/plugins/sessions/test_import.py stays fast
def test_an_import_killed_part_way_finishes_when_run_again(hermes_home: Path, tmp_path: Path) -> None:
    source = big_session(tmp_path / "big.jsonl")
    db = hermes_home / "state.db"
    importer = hermes(hermes_home, "sessions", "import", str(source))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and importer.poll() is None:
        try:
            if len(rows(db, "big-1")) >= 2000:  # a batch or two committed
                break
        except sqlite3.OperationalError:
            pass  # not created yet
        time.sleep(0.005)
    killed = importer.poll() is None
    if killed:
        os.kill(importer.pid, signal.SIGKILL)
    importer.communicate(timeout=60)
    partial = rows(db, "big-1")
    assert partial == [(partial[0][0] + k, f"message {k} about ingress timeouts") for k in range(len(partial))], \
        "what was committed is a prefix, in order"
    again = hermes(hermes_home, "sessions", "import", str(source))
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert [c for _, c in rows(db, "big-1")] == [f"message {k} about ingress timeouts" for k in range(N)]
    store = SQLiteSessionStore(db)
    try:
        row = store.get_session("big-1")
        assert row is not None and row["title"] == "Big one" and row["end_reason"] == "user_exit"
        assert json.loads(store.get_meta("import:big-1") or "{}").get("partial") is None
    finally:
        store.close()
    third = hermes(hermes_home, "sessions", "import", str(source))
    out, _ = third.communicate(timeout=300)
    assert "0 new session(s), 0 message(s)" in out and "1 unchanged" in out


@pytest.mark.slow  # 25 imports into fresh stores; tests/plugins/sessions/test_import.py stays fast
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=5), batch=st.integers(1, 30))
def test_batch_size_never_changes_what_is_imported(tmp_path_factory: object, sizes: list[int], batch: int) -> None:
    base = tmp_path_factory.mktemp("imp")  # type: ignore[attr-defined]
    source = base / "many.jsonl"
    with open(source, "w", encoding="utf-8") as fh:
        for s, n in enumerate(sizes):
            msgs = [{"role": "user", "content": f"s{s} m{k}"} for k in range(n)]
            fh.write(json.dumps({"hermes_session": {"id": f"s{s}", "source": "cli"}}) + "\n")
            for m in msgs:
                fh.write(json.dumps(m) + "\n")
    results = []
    for size in (batch, 10_000):
        store = SQLiteSessionStore(base / f"state-{size}.db")
        report = ImportReport()
        import_sessions(store, read(source, "jsonl", report.problems), report, batch_messages=size)
        again = ImportReport()
        import_sessions(store, read(source, "jsonl", again.problems), again, batch_messages=size)
        assert again.messages_added == 0 and again.sessions_unchanged == len(sizes)
        results.append({f"s{s}": [m["content"] for m in (store.export_session(f"s{s}") or {"messages": []})["messages"]]
                        for s in range(len(sizes))})
        store.close()
    assert results[0] == results[1]
