"""The PostgreSQL store against the store-agnostic conformance suite, unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hermes_postgres.store import PostgresSessionStore

from hermes.testing.conformance import SessionStoreConformance


class TestPostgresConformance(SessionStoreConformance):
    @pytest.fixture
    def store(self, pg_cluster, pg_user) -> Iterator[PostgresSessionStore]:
        s = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=4)
        yield s
        s.close()
