"""Moving in and checking up through the real ``hermes`` CLI with ``sessions.store:
postgres``: import a SQLite state.db (idempotent), export from Postgres, and ``hermes
doctor`` (server/schema versions and row counts; the fix named, no traceback, no
password, when the server is down or the DSN wrong)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hermes_postgres.testing import make_home, run_hermes

from hermes.plugins.sessions.store import SQLiteSessionStore


@pytest.fixture
def home(tmp_path: Path, pg_user: str) -> Path:
    return make_home(tmp_path / "home", pg_user)


def _state_db(path: Path) -> Path:
    s = SQLiteSessionStore(path)
    for n in range(3):
        sid = s.create_session(f"old-{n}", source="cli", started_at=1_700_000_000 + n)
        s.append_messages(sid, [{"role": "user", "content": f"walrus question {n}", "timestamp": 1_700_000_000 + n},
                                {"role": "assistant", "content": "walrus answer", "timestamp": 1_700_000_001 + n}])
        s.set_title(sid, f"Walrus {n}")
        s.update_token_counts(sid, input_tokens=10 * n, output_tokens=n, estimated_cost_usd=0.01 * n)
        s.end_session(sid, "user_exit", ended_at=1_700_000_100 + n)
    s.close()
    return path


def test_import_state_db_is_idempotent_and_export_reads_it_back(home, pg_cluster, tmp_path) -> None:
    db = _state_db(tmp_path / "state.db")
    first = run_hermes(home, pg_cluster.dsn, "sessions", "import", str(db))
    assert first.returncode == 0, first.stderr
    assert "imported 3 new session(s), 6 message(s)" in first.stdout
    again = run_hermes(home, pg_cluster.dsn, "sessions", "import", str(db))
    assert "imported 0 new session(s), 0 message(s)" in again.stdout and "3 unchanged" in again.stdout
    listed = run_hermes(home, pg_cluster.dsn, "sessions", "list", "--json")
    rows = json.loads(listed.stdout)
    assert sorted(r["title"] for r in rows) == ["Walrus 0", "Walrus 1", "Walrus 2"]
    assert {r["id"]: r["input_tokens"] for r in rows} == {"old-0": 0, "old-1": 10, "old-2": 20}
    out = tmp_path / "out.jsonl"
    exported = run_hermes(home, pg_cluster.dsn, "sessions", "export", "--all", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    text = out.read_text()
    assert text.count("walrus question") == 3 and text.count("walrus answer") == 3
    found = run_hermes(home, pg_cluster.dsn, "sessions", "search", "walrus", "question", "--json")
    hits = json.loads(found.stdout)
    assert sorted(h["session_id"] for h in hits if h["mode"] == "strict") == ["old-0", "old-1", "old-2"]
    assert all(h["lineage_root"] == h["session_id"] for h in hits)


def test_doctor_shows_versions_and_counts(home, pg_cluster) -> None:
    done = run_hermes(home, pg_cluster.dsn, "doctor")
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("check: postgres "))
    from hermes_postgres.schema import SCHEMA_VERSION

    assert f"schema hermes v{SCHEMA_VERSION}" in line and "0 sessions, 0 messages" in line and "role hermes_app" in line
    assert "hermes-test-secret" not in done.stdout + done.stderr


@pytest.mark.parametrize("case,fix", [
    ("down", "start PostgreSQL"), ("password", "user or password is wrong"), ("garbage", "not a valid DSN")])
def test_doctor_names_the_fix(home, pg_cluster, case: str, fix: str) -> None:
    dsn = {"down": f"host={pg_cluster.root}/gone port=9 user=hermes_app password=hunter2 dbname=hermes",
           "password": pg_cluster.dsn.replace("hermes-test-secret", "hunter2"),
           "garbage": "password=hunter2 this is not a dsn"}[case]
    done = run_hermes(home, dsn, "doctor")
    problem = [ln for ln in done.stdout.splitlines() if ln.startswith("problem: postgres")]
    assert len(problem) == 1 and fix in problem[0], done.stdout
    assert "Traceback" not in done.stdout + done.stderr and "hunter2" not in done.stdout + done.stderr
