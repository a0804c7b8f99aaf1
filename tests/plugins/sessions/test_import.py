"""Importing Hermes state.db files, OpenAI JSONL and Claude Code transcripts; exporting
again; re-imports that add nothing twice; bad lines reported and skipped."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hermes.plugins.sessions.store import SQLiteSessionStore
from hermes.plugins.sessions.transfer import (
    ImportReport,
    detect,
    expand,
    export_jsonl_lines,
    export_markdown,
    import_sessions,
    read,
)


@pytest.fixture
def store(tmp_path: Path):
    s = SQLiteSessionStore(tmp_path / "state.db")
    yield s
    s.close()


def run_import(store: SQLiteSessionStore, *paths: Path) -> ImportReport:
    report = ImportReport()
    for path in expand(paths):
        import_sessions(store, read(path, detect(path), report.problems), report)
    return report


# -- Hermes agent state.db ----------------------------------------------------------------

# The classic upstream layout (schema v7): schema_version table, billing columns, no FTS
# needed for import.
AGENT_V7 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version VALUES (7);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, model TEXT, model_config TEXT,
    system_prompt TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0, billing_provider TEXT, billing_base_url TEXT,
    billing_mode TEXT, estimated_cost_usd REAL, actual_cost_usd REAL, cost_status TEXT,
    cost_source TEXT, pricing_version TEXT, title TEXT, exit_summary TEXT, cwd TEXT
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, role TEXT NOT NULL,
    content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL NOT NULL,
    token_count INTEGER, finish_reason TEXT, reasoning TEXT, reasoning_details TEXT,
    codex_reasoning_items TEXT
);
"""


def make_agent_db(path: Path, *, active_column: bool = False) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(AGENT_V7)
    if active_column:  # later upstream versions hide rewound rows with active = 0
        conn.execute("ALTER TABLE messages ADD COLUMN active INTEGER DEFAULT 1")
    conn.execute("INSERT INTO sessions (id, source, model, model_config, started_at, ended_at, "
                 "end_reason, title, input_tokens, output_tokens, estimated_cost_usd, cwd) VALUES "
                 "('20260301_100000_aaaaaa', 'telegram', 'claude-x', '{\"t\": 1}', 1000, 1500, "
                 "'compression', 'Garden plans', 120, 30, 0.01, '/home/u')")
    conn.execute("INSERT INTO sessions (id, source, parent_session_id, started_at, title) VALUES "
                 "('20260301_102500_bbbbbb', 'telegram', '20260301_100000_aaaaaa', 1500, 'Garden plans #2')")
    call = json.dumps([{"id": "c1", "type": "function",
                        "function": {"name": "weather", "arguments": "{\"city\": \"Lyon\"}"}}])
    rows = [
        ("20260301_100000_aaaaaa", "user", "When should I plant tomatoes?", None, None, None, 1001),
        ("20260301_100000_aaaaaa", "assistant", "", call, None, None, 1002),
        ("20260301_100000_aaaaaa", "tool", "frost until April", None, "weather", "c1", 1003),
        ("20260301_100000_aaaaaa", "assistant", "After the last frost in April.", None, None, None, 1004),
        ("20260301_102500_bbbbbb", "user", "And basil?", None, None, None, 1501),
    ]
    for sid, role, content, calls, tool, call_id, ts in rows:
        conn.execute("INSERT INTO messages (session_id, role, content, tool_calls, tool_name, "
                     "tool_call_id, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (sid, role, content, calls, tool, call_id, ts))
    if active_column:
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp, active) VALUES "
                     "('20260301_102500_bbbbbb', 'user', 'rewound away', 1502, 0)")
    conn.commit()
    conn.close()


def test_import_hermes_agent_db(store: SQLiteSessionStore, tmp_path: Path) -> None:
    src = tmp_path / "agent-state.db"
    make_agent_db(src, active_column=True)
    report = run_import(store, src)
    assert (report.sessions_added, report.messages_added, report.problems) == (2, 5, [])
    root = store.get_session("20260301_100000_aaaaaa")
    assert root["source"] == "telegram" and root["title"] == "Garden plans"
    assert root["model_config"] == {"t": 1} and root["cwd"] == "/home/u"
    assert (root["input_tokens"], root["output_tokens"]) == (120, 30)
    assert root["estimated_cost_usd"] == pytest.approx(0.01)
    assert root["started_at"] == 1000 and root["ended_at"] == 1500 and root["end_reason"] == "compression"
    assert root["message_count"] == 4 and root["tool_call_count"] == 1
    assert store.compression_tip("20260301_100000_aaaaaa") == "20260301_102500_bbbbbb"
    assert store.resolve_session("Garden plans") == "20260301_102500_bbbbbb"
    msgs = store.get_messages("20260301_100000_aaaaaa")
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "weather"
    assert msgs[2]["tool_name"] == "weather" and msgs[2]["tool_call_id"] == "c1"
    assert [m["timestamp"] for m in msgs] == [1001, 1002, 1003, 1004]
    assert [m["content"] for m in store.get_messages("20260301_102500_bbbbbb")] == ["And basil?"]
    assert [h["session_id"] for h in store.search_messages("Lyon")] == ["20260301_100000_aaaaaa"]


def test_reimport_adds_nothing_and_picks_up_growth(store: SQLiteSessionStore, tmp_path: Path) -> None:
    src = tmp_path / "agent-state.db"
    make_agent_db(src)
    run_import(store, src)
    again = run_import(store, src)
    assert (again.sessions_added, again.messages_added, again.sessions_unchanged) == (0, 0, 2)
    conn = sqlite3.connect(src)
    conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES "
                 "('20260301_102500_bbbbbb', 'assistant', 'Basil after tomatoes.', 1502)")
    conn.commit()
    conn.close()
    grown = run_import(store, src)
    assert (grown.sessions_updated, grown.messages_added, grown.sessions_unchanged) == (1, 1, 1)
    assert store.get_session("20260301_102500_bbbbbb")["message_count"] == 2
    assert len(store.search_messages("Basil after tomatoes", fallback=False)) == 1
    conn = sqlite3.connect(src)
    conn.execute("UPDATE messages SET content = 'edited history' WHERE content = 'And basil?'")
    conn.commit()
    conn.close()
    changed = run_import(store, src)
    assert changed.sessions_skipped == 1 and changed.messages_added == 0
    assert "changed since it was imported" in changed.problems[0]


def test_native_session_with_same_id_is_not_overwritten(store: SQLiteSessionStore, tmp_path: Path) -> None:
    store.create_session("20260301_100000_aaaaaa", source="cli")
    src = tmp_path / "agent-state.db"
    make_agent_db(src)
    report = run_import(store, src)
    assert report.sessions_added == 1 and report.sessions_skipped == 1
    assert store.get_session("20260301_100000_aaaaaa")["source"] == "cli"


def test_import_a_kernel_state_db(store: SQLiteSessionStore, tmp_path: Path) -> None:
    other = SQLiteSessionStore(tmp_path / "other.db")
    sid = other.create_session(source="cli", started_at=50)
    other.append_message(sid, "user", "from another kernel", timestamp=51)
    other.close()
    report = run_import(store, tmp_path / "other.db")
    assert report.sessions_added == 1
    assert store.get_messages(sid)[0]["content"] == "from another kernel"


def test_unreadable_db_is_reported(store: SQLiteSessionStore, tmp_path: Path) -> None:
    src = tmp_path / "empty.db"
    conn = sqlite3.connect(src)
    conn.execute("CREATE TABLE unrelated (x)")
    conn.commit()
    conn.close()
    report = run_import(store, src)
    assert report.sessions_added == 0 and "not a Hermes state.db" in report.problems[0]


# -- OpenAI JSONL ---------------------------------------------------------------------------


def test_openai_jsonl_with_bad_lines(store: SQLiteSessionStore, tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    lines = [
        json.dumps({"role": "system", "content": "Be brief."}),
        json.dumps({"role": "user", "content": [{"type": "text", "text": "What is a quasar?"}],
                    "timestamp": "2026-03-01T10:00:00Z"}),
        "{not json",
        json.dumps({"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "quasar"}}}]}),
        json.dumps(["a", "list"]),
        json.dumps({"role": "wizard", "content": "?"}),
        json.dumps({"role": "tool", "tool_call_id": "t1", "name": "lookup", "content": "an active galactic nucleus"}),
        json.dumps({"nothing": "useful"}),
        "",
        json.dumps({"role": "assistant", "content": "A very bright galactic core."}),
    ]
    src.write_text("\n".join(lines) + "\n")
    report = run_import(store, src)
    assert report.sessions_added == 1 and report.messages_added == 4
    assert [p.split(": ")[0] for p in report.problems] == [f"{src}:3", f"{src}:5", f"{src}:6", f"{src}:8"]
    assert "unknown role 'wizard'" in report.problems[2]
    (row,) = store.list_sessions()
    assert row["system_prompt"] == "Be brief." and row["source"] == "jsonl"
    msgs = store.get_messages(row["id"])
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == '{"q": "quasar"}'
    assert msgs[0]["timestamp"] == pytest.approx(1772359200.0)
    assert run_import(store, src).messages_added == 0  # same file again: nothing new
    assert len(store.search_messages("galactic", fallback=False)) == 2


def test_one_conversation_per_line(store: SQLiteSessionStore, tmp_path: Path) -> None:
    src = tmp_path / "dataset.jsonl"
    src.write_text("\n".join(json.dumps({"messages": [
        {"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]})
        for i in range(3)) + "\n")
    report = run_import(store, src)
    assert report.sessions_added == 3 and report.messages_added == 6
    assert run_import(store, src).sessions_unchanged == 3


def test_export_jsonl_round_trip(store: SQLiteSessionStore, tmp_path: Path) -> None:
    root = store.create_session(source="cli", model="m", started_at=100, cwd="/p")
    store.set_title(root, "Round trip")
    store.append_message(root, "user", "ping 数据库", timestamp=101)
    store.append_message(root, "assistant", "", timestamp=102, tool_calls=[
        {"id": "c", "type": "function", "function": {"name": "echo", "arguments": "{}"}}])
    store.append_message(root, "tool", "pong", tool_name="echo", tool_call_id="c", timestamp=103)
    store.update_token_counts(root, input_tokens=7, output_tokens=3)
    store.end_session(root, "compression", ended_at=110)
    child = store.create_session(parent_session_id=root, started_at=110)
    store.append_message(child, "user", "continued", timestamp=111)
    out = tmp_path / "export.jsonl"
    out.write_text("".join(line + "\n" for sid in (root, child)
                           for line in export_jsonl_lines(store.export_session(sid))))
    fresh = SQLiteSessionStore(tmp_path / "fresh.db")
    report = run_import(fresh, out)
    assert report.sessions_added == 2 and report.problems == []
    for sid in (root, child):
        a, b = store.export_session(sid), fresh.export_session(sid)
        strip = lambda rows: [{k: v for k, v in r.items() if k != "id"} for r in rows]  # noqa: E731
        assert strip(a["messages"]) == strip(b["messages"])
        for key in ("source", "model", "title", "started_at", "ended_at", "end_reason",
                    "parent_session_id", "cwd", "input_tokens", "output_tokens", "message_count"):
            assert a["session"][key] == b["session"][key], key
    assert fresh.compression_tip(root) == child
    assert run_import(fresh, out).sessions_unchanged == 2
    fresh.close()


def test_markdown_export(store: SQLiteSessionStore) -> None:
    sid = store.create_session(source="cli")
    store.set_title(sid, "Notes")
    store.append_message(sid, "user", "hello")
    store.append_message(sid, "assistant", "", tool_calls=[
        {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}])
    store.append_message(sid, "tool", "a ``` b", tool_name="ls", tool_call_id="c")
    md = export_markdown(store.export_session(sid))
    assert md.startswith("# Notes\n") and "## User\n\nhello" in md
    assert "`ls`" in md and "### Tool result: ls" in md and md.count("```") == 2


# -- Claude Code ------------------------------------------------------------------------------

SID = "5b1c0d1e-7c8f-4b47-9d7a-1f2e3d4c5b6a"


def cc_line(kind: str, content, *, msg_id: str | None = None, ts: str = "2026-02-01T09:00:00.000Z",
            **extra) -> str:
    message = {"role": kind, "content": content}
    if kind == "assistant":
        message.update(id=msg_id or "msg_1", model="claude-sonnet-4-5", type="message")
    return json.dumps({"type": kind, "sessionId": SID, "uuid": "u", "parentUuid": None,
                       "timestamp": ts, "cwd": "/home/u/proj", "message": message, **extra})


def test_claude_code_transcript(store: SQLiteSessionStore, tmp_path: Path) -> None:
    project = tmp_path / "projects" / "-home-u-proj"
    project.mkdir(parents=True)
    src = project / f"{SID}.jsonl"
    lines = [
        json.dumps({"type": "summary", "summary": "Fix flaky login test", "leafUuid": "x"}),
        cc_line("user", "The login test is flaky, fix it"),
        cc_line("assistant", [{"type": "thinking", "thinking": "look at the test"}], msg_id="msg_1"),
        cc_line("assistant", [{"type": "text", "text": "Let me read it."}], msg_id="msg_1"),
        cc_line("assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                               "input": {"file_path": "tests/test_login.py"}}], msg_id="msg_1"),
        "garbage{",
        cc_line("user", [{"type": "tool_result", "tool_use_id": "toolu_1",
                          "content": [{"type": "text", "text": "def test_login(): sleep(0.1)"}]}],
                ts="2026-02-01T09:00:05.000Z"),
        cc_line("assistant", [{"type": "text", "text": "Replaced the sleep with a wait."}], msg_id="msg_2"),
        cc_line("user", "side quest", isSidechain=True),
        cc_line("user", "<command-name>/clear</command-name>", isMeta=True),
        json.dumps({"type": "file-history-snapshot", "snapshot": {}}),
        json.dumps({"type": "user", "sessionId": SID, "message": "not an object"}),
    ]
    src.write_text("\n".join(lines) + "\n")
    assert detect(src) == "claude-code"
    report = run_import(store, tmp_path / "projects")  # a directory is searched
    assert report.sessions_added == 1 and report.messages_added == 4
    assert [p.split(": ")[0] for p in report.problems] == [f"{src}:6", f"{src}:12"]
    session = store.get_session(SID)
    assert session["source"] == "claude-code" and session["cwd"] == "/home/u/proj"
    assert session["model"] == "claude-sonnet-4-5" and session["title"] == "Fix flaky login test"
    msgs = store.get_messages(SID)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[1]["content"] == "Let me read it." and msgs[1]["reasoning"] == "look at the test"
    assert msgs[1]["tool_calls"] == [{"id": "toolu_1", "type": "function", "function": {
        "name": "Read", "arguments": json.dumps({"file_path": "tests/test_login.py"})}}]
    assert msgs[2]["tool_name"] == "Read" and msgs[2]["tool_call_id"] == "toolu_1"
    assert msgs[2]["content"] == "def test_login(): sleep(0.1)"
    assert msgs[2]["timestamp"] == pytest.approx(1769936405.0)
    assert [h["role"] for h in store.search_messages("test_login.py")] == ["assistant"]
    # the transcript grows (Claude Code appends while the session is live)
    with open(src, "a") as f:
        f.write(cc_line("user", "thanks!", ts="2026-02-01T09:01:00.000Z") + "\n")
    grown = run_import(store, src)
    assert grown.sessions_updated == 1 and grown.messages_added == 1
    assert store.get_messages(SID)[-1]["content"] == "thanks!"


def test_detect_formats(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"role": "user", "content": "x"}) + "\n")
    (tmp_path / "b.jsonl").write_text(cc_line("user", "x") + "\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"hermes_session": {"id": "x"}}) + "\n")
    assert detect(tmp_path / "a.jsonl") == "jsonl"
    assert detect(tmp_path / "b.jsonl") == "claude-code"
    assert detect(tmp_path / "c.jsonl") == "jsonl"
