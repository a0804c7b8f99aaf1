"""Opening the store: migrations on first use (two processes at once), a newer schema,
and a server that is down or a DSN that is wrong (one line, password masked)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import psycopg
import pytest
from hermes_postgres.schema import SCHEMA_VERSION
from hermes_postgres.store import PostgresSessionStore, mask_dsn

import hermes

OPEN = """
import sys
from hermes_postgres.store import PostgresSessionStore
s = PostgresSessionStore(sys.argv[1], user="u", schema=sys.argv[2])
s.append_message("x", "user", "hello from " + sys.argv[3])
s.close()
"""


def test_processes_starting_at_once_migrate_once(pg_cluster) -> None:
    schema = f"mig_{uuid.uuid4().hex[:8]}"
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, pg_cluster.dsn, schema, str(i)],
                              stderr=subprocess.PIPE, text=True) for i in range(6)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    with psycopg.connect(pg_cluster.dsn) as conn:
        versions = conn.execute(f"SELECT version FROM {schema}.hermes_schema ORDER BY version").fetchall()
    assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]  # each migration ran once
    store = PostgresSessionStore(pg_cluster.dsn, user="u", schema=schema)
    assert len(store.get_messages("x")) == 6
    store.close()


def test_newer_schema_is_refused(pg_cluster) -> None:
    schema = f"mig_{uuid.uuid4().hex[:8]}"
    PostgresSessionStore(pg_cluster.dsn, user="u", schema=schema).close()
    with psycopg.connect(pg_cluster.dsn) as conn:
        conn.execute(f"INSERT INTO {schema}.hermes_schema (version) VALUES (99)")
    with pytest.raises(hermes.StoreError, match="newer"):
        PostgresSessionStore(pg_cluster.dsn, user="u", schema=schema)


@pytest.mark.parametrize("case", ["down", "password", "database"])
def test_unreachable_or_wrong_dsn_is_one_clear_line(pg_cluster, case: str) -> None:
    dsn = {
        "down": f"host={pg_cluster.root}/nowhere port=1 user=hermes_app password=hunter2 dbname=hermes",
        "password": pg_cluster.dsn.replace("hermes-test-secret", "hunter2"),
        "database": pg_cluster.dsn.replace("password=hermes-test-secret", "password=hunter2") + "x",
    }[case]
    if case == "database":
        dsn = f"postgresql://hermes_app:hermes-test-secret@/hermesx?host={pg_cluster.root}&port={pg_cluster.port}"
    with pytest.raises(hermes.StoreError) as info:
        PostgresSessionStore(dsn, user="u", connect_timeout=3)
    text = str(info.value)
    assert "\n" not in text and "hunter2" not in text and "hermes-test-secret" not in text
    fix = {"down": "start PostgreSQL", "password": "password is wrong", "database": "CREATE DATABASE"}[case]
    assert fix in text


def test_mask_dsn() -> None:
    assert "s3cret" not in mask_dsn("postgresql://me:s3cret@db.example:5432/hermes")
    assert "s3cret" not in mask_dsn("host=db user=me password=s3cret dbname=hermes")
    assert "db.example" in mask_dsn("postgresql://me:s3cret@db.example:5432/hermes")
