"""A throwaway PostgreSQL server for the whole test session (see hermes_postgres.testing)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hermes_postgres.testing import Cluster, find_bin, start_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    if find_bin() is None:
        pytest.skip("no PostgreSQL server binaries (initdb/pg_ctl): install postgresql-15 or set PG_BIN")
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


_users = itertools.count()


@pytest.fixture
def pg_user(request: pytest.FixtureRequest) -> str:
    """A user nobody else in the run uses: row-level security gives it an empty store."""
    return f"u{next(_users)}-{request.node.name[:40]}"
