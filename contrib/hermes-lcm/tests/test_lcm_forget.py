"""``forget`` on the lossless store (issue 20): ``hermes forget`` reaches the lcm engine's
own database — original messages and summaries — and the text leaves the file, while the
store stays append-only for everything else."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from lcm_helpers import FACT, conversation, drive

import hermes

WORD = "rotation day"


def raw(engine: Any) -> bytes:
    path = engine.db_path
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file()).lower()


def test_forget_scrubs_messages_and_summaries_and_keeps_the_store_append_only(make_engine: Any,
                                                                              deterministic: Any) -> None:
    engine = make_engine(deterministic, window=3_000)
    drive(engine, iter(list(conversation(60, seed=3, fact_turn=2))))
    assert engine.compression_count >= 1
    assert WORD.encode() in raw(engine)

    request = hermes.ForgetRequest(query="Rotation Day")
    dry = engine.forget(request)
    assert dry.supported and dry.found and dry.removed == 0
    assert any("lcm message" in line for line in dry.found)
    assert WORD.encode() in raw(engine)  # a dry run changes nothing

    request.dry_run = False
    done = engine.forget(request)
    assert done.removed == len(dry.found)
    engine.close()
    assert WORD.encode() not in raw(engine)
    conv = engine.conversation_id
    stored = [m.message() for m in engine.store.messages_in_range(conv, -1, 10**9)]
    assert any("[forgotten]" in str(m.get("content")) for m in stored)
    assert FACT.replace(WORD, "[forgotten]") in " ".join(str(m.get("content")) for m in stored)
    con = sqlite3.connect(engine.db_path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("UPDATE messages SET text = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("DELETE FROM nodes")
    con.close()


def test_whole_sessions_are_refused_with_a_reason(make_engine: Any, deterministic: Any) -> None:
    engine = make_engine(deterministic)
    report = engine.forget(hermes.ForgetRequest(session_ids=["session-1"]))
    assert not report.supported and "QUERY" in report.note
