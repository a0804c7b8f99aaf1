"""Whether the search indexes match the messages, row by row.

SQLite's ``PRAGMA quick_check`` and FTS5's ``integrity-check`` only say that each index
is sound in itself: an index that lost rows (a bug, a hand edit, a batch whose flag
leaked) passes both while searches silently miss those messages. This compares the
indexes with ``messages`` (the same definitions the triggers use):

* ``messages_fts`` (word search) holds exactly one row per message;
* ``messages_fts_trigram`` (CJK search) holds exactly one row per message with CJK text,
  carrying that message's current text;
* ``messages_fts_split`` holds exactly one row per message where CJK text touches a
  Latin word (its text is split in Python, so its content is not compared);
* no write left ``fts_deferred`` in ``state_meta`` (while it is there the triggers index
  nothing new).

It **streams** over the message ids in ranges of :data:`STEP` (every row is compared,
none sampled) inside one read transaction, so it sees one snapshot and never holds the
write lock. Given a time ``budget`` it stops after the range in which the budget ran out
and says how far it got; the rest is then unchecked, never guessed. One copy, used by
:meth:`SQLiteSessionStore.check_integrity` (``hermes doctor``) and by the fault-injection
suite's invariants.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import _has_cjk, _sentinel, split_wanted

#: Message ids compared per query.
STEP = 20_000

_CJK = f"({_has_cjk('m.content')} OR {_has_cjk('m.tool_calls')})"
FIX = "run `hermes sessions reindex` to rebuild the search indexes from the messages"


@dataclass
class IndexReport:
    """What :func:`compare_indexes` found."""

    problems: list[str] = field(default_factory=list)
    #: ids ``1..checked_to`` were compared (``None``: there was nothing to compare)
    checked_to: int | None = None
    #: the highest id in ``messages`` or either index
    last_id: int = 0

    @property
    def complete(self) -> bool:
        return self.checked_to is None or self.checked_to >= self.last_id


def _ids(rows: list[tuple[int]]) -> str:
    shown = ", ".join(str(r[0]) for r in rows[:5])
    return shown + (", …" if len(rows) > 5 else "")


# (what is wrong, query for the ids of the offending rows in [lo, hi])
_CHECKS: list[tuple[str, str]] = [
    ("messages_fts (word search) is missing {n} message(s) (ids {ids})",
     "SELECT m.id FROM messages m WHERE m.id BETWEEN ? AND ? AND NOT EXISTS "
     "(SELECT 1 FROM messages_fts_docsize d WHERE d.id = m.id)"),
    ("messages_fts (word search) holds {n} row(s) of messages that no longer exist (ids {ids})",
     "SELECT d.id FROM messages_fts_docsize d WHERE d.id BETWEEN ? AND ? AND NOT EXISTS "
     "(SELECT 1 FROM messages m WHERE m.id = d.id)"),
    ("messages_fts_trigram (CJK search) is missing {n} message(s) with CJK text (ids {ids})",
     f"SELECT m.id FROM messages m WHERE m.id BETWEEN ? AND ? AND {_CJK} AND NOT EXISTS "
     "(SELECT 1 FROM messages_fts_trigram t WHERE t.rowid = m.id)"),
    ("messages_fts_trigram (CJK search) holds {n} row(s) that are not a current CJK message (ids {ids})",
     f"SELECT t.rowid FROM messages_fts_trigram t WHERE t.rowid BETWEEN ? AND ? AND NOT EXISTS "
     f"(SELECT 1 FROM messages m WHERE m.id = t.rowid AND {_CJK})"),
    ("messages_fts_trigram (CJK search) holds outdated text for {n} message(s) (ids {ids})",
     f"SELECT m.id FROM messages m JOIN messages_fts_trigram t ON t.rowid = m.id "
     f"WHERE m.id BETWEEN ? AND ? AND t.content IS NOT {_sentinel('m.content')}"),
    ("messages_fts_split (words glued to CJK) is missing {n} message(s) (ids {ids})",
     f"SELECT m.id FROM messages m WHERE m.id BETWEEN ? AND ? AND {split_wanted('m')} AND NOT EXISTS "
     "(SELECT 1 FROM messages_fts_split t WHERE t.rowid = m.id)"),
    ("messages_fts_split (words glued to CJK) holds {n} row(s) that are not a current glued message (ids {ids})",
     f"SELECT t.rowid FROM messages_fts_split t WHERE t.rowid BETWEEN ? AND ? AND NOT EXISTS "
     f"(SELECT 1 FROM messages m WHERE m.id = t.rowid AND {split_wanted('m')})"),
]


def compare_indexes(conn: sqlite3.Connection, *, budget: float | None = None) -> IndexReport:
    """Compare both search indexes of ``state.db`` with ``messages`` (see the module
    docstring); ``budget`` bounds the seconds spent (``None``: compare everything). A
    database without the tables (older or foreign) yields an empty report."""
    report = IndexReport()
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    if not {"messages", "messages_fts_docsize", "messages_fts_trigram", "state_meta"} <= tables:
        return report
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")  # one snapshot for every range; readers never block writers
    try:
        if conn.execute("SELECT 1 FROM state_meta WHERE key = 'fts_deferred'").fetchone():
            report.problems.append("state_meta still holds fts_deferred (a bulk write's flag leaked: "
                                   "new messages are not indexed)")
        report.last_id = max(int(conn.execute(f"SELECT coalesce(max({col}), 0) FROM {table}").fetchone()[0])
                             for table, col in (("messages", "id"), ("messages_fts_docsize", "id"),
                                                ("messages_fts_trigram", "rowid"))
                             + ((("messages_fts_split", "rowid"),) if "messages_fts_split" in tables else ()))
        if report.last_id == 0:
            return report
        # (a v4 database, before the split index, is compared on the other two)
        checks = [c for c in _CHECKS if "messages_fts_split" in tables or "messages_fts_split" not in c[1]]
        found: list[list[tuple[int]]] = [[] for _ in checks]
        start = time.monotonic()
        lo = 0
        while lo <= report.last_id:
            hi = lo + STEP - 1
            for rows, (_, sql) in zip(found, checks, strict=True):
                rows.extend(conn.execute(sql, (lo, hi)).fetchall())
            report.checked_to = min(hi, report.last_id)
            lo = hi + 1
            if budget is not None and time.monotonic() - start > budget:
                break
        for rows, (what, _) in zip(found, checks, strict=True):
            if rows:
                report.problems.append(what.format(n=len(rows), ids=_ids(rows)))
    finally:
        if own:
            conn.execute("COMMIT")
    return report


#: Seconds ``hermes doctor`` spends comparing (``hermes sessions check`` compares all).
DOCTOR_BUDGET = 2.0


def doctor(kernel: Any, store_path: Path) -> tuple[list[str], list[str]]:
    """``(lines, problems)`` for ``hermes doctor``: the comparison, bounded by
    :data:`DOCTOR_BUDGET`, on an existing ``state.db`` (doctor creates no database)."""
    if not store_path.exists():
        return [f"session store: {store_path} does not exist yet (created by the first chat)"], []
    report = kernel.session_store.compare_indexes(budget=DOCTOR_BUDGET)
    if report.problems:
        return [], [f"session search index: {p}; {FIX}" for p in report.problems]
    if report.complete:
        return [f"session search indexes: match the messages ({report.last_id} ids compared)"], []
    return [f"session search indexes: ids 1-{report.checked_to} of {report.last_id} match the "
            f"messages (stopped after {DOCTOR_BUDGET:g} s; `hermes sessions check` compares all)"], []
