"""The SQLite store against the store-agnostic conformance suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes.plugins.sessions.store import SQLiteSessionStore
from hermes.testing.conformance import SessionStoreConformance


class TestSQLiteConformance(SessionStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SQLiteSessionStore]:
        s = SQLiteSessionStore(tmp_path / "state.db")
        yield s
        s.close()
