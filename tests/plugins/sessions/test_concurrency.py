"""Several processes writing one state.db at once: nothing lost, nothing doubled, the
search indexes agree with the messages table, readers keep working meanwhile.

Real processes (not threads): SQLite's locking is per process and per file, which is
what the CLI, a second agent and an import running side by side exercise.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes.plugins.sessions.store import SQLiteSessionStore

WRITER = textwrap.dedent("""
    import sys, time
    from hermes.plugins.sessions.store import SQLiteSessionStore
    path, proc, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = SQLiteSessionStore(path, write_timeout=60)
    own = store.create_session(f"proc-{proc}", source="cli")
    errors = 0
    for i in range(count):
        # every 10th message goes to a session all writers share; every 25th is CJK
        target = "shared" if i % 10 == 0 else own
        text = f"concurrencymarker p{proc}m{i} token{proc}x{i}"
        if i % 25 == 0:
            text += " 并发写入测试"
        try:
            store.append_message(target, "user", text)
        except Exception as exc:
            errors += 1
            print("ERROR", type(exc).__name__, exc, file=sys.stderr)
    store.close()
    print(errors)
""")

READER = textwrap.dedent("""
    import sys, time
    from hermes.plugins.sessions.store import SQLiteSessionStore
    path, stop_file = sys.argv[1], sys.argv[2]
    store = SQLiteSessionStore(path)
    searches = 0
    import os
    while not os.path.exists(stop_file) and searches < 100000:
        hits = store.search_messages("concurrencymarker", limit=5)
        store.list_sessions(limit=5)
        searches += 1
    store.close()
    print(searches)
""")


def _run_writers(path: Path, procs: int, per_proc: int, tmp_path: Path) -> None:
    SQLiteSessionStore(path).close()  # create the schema once, as a running agent would have
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(p), str(per_proc)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for p in range(procs)]
    outputs = [w.communicate(timeout=300) for w in writers]
    stop.touch()
    reader_out, reader_err = reader.communicate(timeout=60)
    for w, (out, err) in zip(writers, outputs, strict=True):
        assert w.returncode == 0, err
        assert out.strip() == "0", err  # zero write errors
        assert "ERROR" not in err
    assert reader.returncode == 0, reader_err
    assert int(reader_out.strip()) > 0  # searches kept completing during the writes


def _verify(path: Path, procs: int, per_proc: int) -> None:
    total = procs * per_proc
    conn = sqlite3.connect(path)
    contents = [r[0] for r in conn.execute("SELECT content FROM messages")]
    assert len(contents) == total
    keys = [re.search(r"p(\d+)m(\d+)", c).group(0) for c in contents]
    assert len(set(keys)) == total  # no duplicates, and with the count: no loss
    assert set(keys) == {f"p{p}m{i}" for p in range(procs) for i in range(per_proc)}
    # counters agree with rows
    for sid, count in conn.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id"):
        stored = conn.execute("SELECT message_count FROM sessions WHERE id = ?", (sid,)).fetchone()[0]
        assert stored == count, sid
    # the indexes agree with the messages table
    indexed = conn.execute(
        "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'concurrencymarker'").fetchone()[0]
    assert indexed == total
    cjk_rows = conn.execute("SELECT count(*) FROM messages WHERE content LIKE '%并发写入%'").fetchone()[0]
    cjk_indexed = conn.execute("SELECT count(*) FROM messages_fts_trigram").fetchone()[0]
    assert cjk_rows == cjk_indexed == procs * len(range(0, per_proc, 25))
    conn.close()
    store = SQLiteSessionStore(path)
    try:
        assert store.check_integrity() == []
        for p in range(procs):
            for i in (0, per_proc // 2, per_proc - 1):
                hits = store.search_messages(f"token{p}x{i}", fallback=False)
                assert len(hits) == 1 and f"p{p}m{i}" in hits[0]["snippet"]
        hits = store.search_messages("并发写入测试", limit=10_000)
        assert len(hits) == cjk_rows and {h["mode"] for h in hits} == {"trigram"}
    finally:
        store.close()


@pytest.mark.slow  # eight processes; test_import_alongside_live_appends stays fast
def test_eight_processes_thousand_appends_each(tmp_path: Path) -> None:
    """The reliability target: 8 processes x 1,000 appends, zero errors, zero lost or
    duplicated messages, FTS in agreement with the messages table."""
    path = tmp_path / "state.db"
    _run_writers(path, 8, 1000, tmp_path)
    _verify(path, 8, 1000)


def test_import_alongside_live_appends(tmp_path: Path) -> None:
    """A bulk import (deferred indexing inside its transaction) while other processes
    append one message at a time: both paths keep the indexes exact."""
    path = tmp_path / "state.db"
    SQLiteSessionStore(path).close()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(p), "300"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for p in range(3)]
    store = SQLiteSessionStore(path, write_timeout=60)
    for batch in range(10):
        store.append_messages(f"import-{batch}", [
            {"role": "user", "content": f"bulkmarker b{batch}n{i} 批量导入" if i % 7 == 0 else f"bulkmarker b{batch}n{i}"}
            for i in range(500)])
    for w in writers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0 and out.strip() == "0", err
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 3 * 300 + 10 * 500
    assert conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'bulkmarker'").fetchone()[0] == 5000
    assert conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'concurrencymarker'").fetchone()[0] == 900
    assert conn.execute("SELECT count(*) FROM messages_fts_trigram").fetchone()[0] == (
        conn.execute("SELECT count(*) FROM messages WHERE content GLOB '*[一-鿿]*'").fetchone()[0])
    assert conn.execute("SELECT value FROM state_meta WHERE key = 'fts_deferred'").fetchone() is None
    conn.close()
    assert store.check_integrity() == []
    assert json.loads(json.dumps(store.search_messages("b3n14")))[0]["session_id"] == "import-3"
    store.close()
