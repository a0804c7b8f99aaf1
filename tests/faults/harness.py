"""The fault-injection harness: real ``hermes`` processes, SIGKILL, invariants.

Each scenario prepares a temporary Hermes home, starts a real ``hermes`` subprocess
(``python -m hermes.cli``) against the loopback fake LLM server, kills it with SIGKILL
either after a seeded random delay or at a *fault point*, and then checks the home with
:class:`Checker`.

A fault point is a state of ``state.db`` ("the assistant's tool call is stored but its
result is not"). :func:`kill_at` polls for it while holding SQLite's write lock
(``BEGIN IMMEDIATE``), so when the state is seen the hermes process cannot commit
anything more before the SIGKILL lands, and the messages read under that lock are
exactly what was committed before the kill. Hermes' writer retries a busy database with
jittered sleeps, so holding the lock for a moment per poll only slows it down.
"""

from __future__ import annotations

import json
import os
import pty
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hermes.testing.fakellm import FakeLLMServer, Reply, Request

HERMES = [sys.executable, "-m", "hermes.cli"]
#: Environment variables of the developer's shell that must not reach a test process.
_SCRUB = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
          "HERMES_LOAD_PLUGINS", "HERMES_DISABLE_PLUGINS", "HERMES_NO_PLUGINS",
          "HERMES_STRICT_PLUGINS", "HERMES_TRACE_PLUGINS")
SUBTASK = "SUBTASK:"


# -- counting ---------------------------------------------------------------------------


@dataclass
class Stats:
    """What the suite did, for the closing summary line."""

    kills: int = 0
    completed: int = 0  # runs that finished before their kill was due
    points: dict[str, int] = field(default_factory=dict)  # kills that landed at each fault point
    invariants: int = 0
    failures: list[str] = field(default_factory=list)


# -- the fake server --------------------------------------------------------------------


class SlowFakeLLM(FakeLLMServer):
    """The fake LLM server with a pause between streamed chunks (``chunk_delay``
    seconds), so a kill can land in the middle of a streamed answer, and a network
    fault: ``cut_after = N`` drops the connection after the N-th event of the next
    streamed answer (a stream cut mid-answer, as a proxy or a dead link does it)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.chunk_delay = 0.0
        self.cut_after: int | None = None
        self.cuts = 0

    def _dispatch(self, h: Any, path: str, body: dict[str, Any]) -> None:
        delay = self.chunk_delay
        cut = self.cut_after if body.get("stream") and body.get("tools") else None
        if cut is not None:
            self.cut_after = None  # one cut per arming
        if delay > 0 or cut is not None:
            send = h._sse
            sent = [0]

            def slow(data: str, event: str | None = None) -> None:
                if cut is not None and sent[0] >= cut:
                    self.cuts += 1
                    h.close_connection = True
                    h.connection.shutdown(socket.SHUT_RDWR)
                    raise ConnectionResetError("stream cut by the test")
                send(data, event)
                sent[0] += 1
                if delay > 0:
                    time.sleep(delay)

            h._sse = slow  # this handler object serves one connection only
        super()._dispatch(h, path, body)


def is_summarizer(req: Request) -> bool:
    """A compaction or session_search summary request (they carry no tools)."""
    return not req.body.get("tools")


def first_user_text(req: Request) -> str:
    for msg in req.messages:
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return content
            return " ".join(b.get("text", "") for b in content or [] if b.get("type") == "text")
    return ""


def last_is_tool_result(req: Request) -> bool:
    """Whether the newest message answers a tool call (either wire format)."""
    if not req.messages:
        return False
    last = req.messages[-1]
    if last.get("role") == "tool":
        return True
    content = last.get("content")
    return (last.get("role") == "user" and isinstance(content, list)
            and any(b.get("type") == "tool_result" for b in content)
            and not any(b.get("type") == "text" and b.get("text") for b in content))


def non_system(req: Request) -> list[dict[str, Any]]:
    return [m for m in req.messages if m.get("role") not in ("system", "developer")]


# -- the home ---------------------------------------------------------------------------


def write_config(home: Path, server: FakeLLMServer | None, provider: str = "openai",
                 **extra: Any) -> None:
    """config.yaml pointing the main model at ``server``; background memory reviews off
    (they would race the kills with requests no scenario scripted)."""
    config: dict[str, Any] = {
        "model": {"provider": provider, "name": "fake-model", "api_key": "fake-key",
                  "base_url": (None if server is None else
                               server.url if provider == "anthropic" else server.openai_url),
                  "retry_base_delay": 0.01, "max_retries": 1, "timeout": 20.0},
        "memory": {"nudge_interval": 0, "memory_char_limit": 200_000, "user_char_limit": 50_000},
        "compression": {"protect_last_n": 4},
    }
    for dotted, value in extra.items():
        node = config
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    (home / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["HERMES_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- processes --------------------------------------------------------------------------


class Proc:
    """A running ``hermes`` process; ``tty=True`` gives it a pseudo-terminal as stdout
    (``hermes chat -q`` streams only to a terminal)."""

    def __init__(self, args: list[str], home: Path, *, stdin: str | None = None, tty: bool = False,
                 env: dict[str, str] | None = None):
        self.args = args
        self._master: int | None = None
        self._out: list[bytes] = []
        stdout: Any = subprocess.PIPE
        if tty:
            self._master, slave = pty.openpty()
            stdout = slave
        self.popen = subprocess.Popen(
            HERMES + args, env={**env_for(home), **(env or {})}, stdout=stdout, stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
        if tty:
            os.close(slave)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self._err: list[bytes] = []
        self._err_reader = threading.Thread(target=self._drain_err, daemon=True)
        self._err_reader.start()
        if stdin is not None:
            try:
                self.popen.stdin.write(stdin.encode())
                self.popen.stdin.close()
            except BrokenPipeError:
                pass

    def _drain(self) -> None:
        if self._master is not None:
            while True:
                try:
                    chunk = os.read(self._master, 4096)
                except OSError:
                    return
                if not chunk:
                    return
                self._out.append(chunk)
        else:
            for chunk in iter(lambda: self.popen.stdout.read(4096), b""):
                self._out.append(chunk)

    def _drain_err(self) -> None:
        for chunk in iter(lambda: self.popen.stderr.read(4096), b""):
            self._err.append(chunk)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> bool:
        """SIGKILL; ``True`` when the process was still running."""
        if self.popen.poll() is not None:
            return False
        os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        return True

    def wait(self, timeout: float = 60.0) -> int:
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"hermes {' '.join(self.args)} hung for {timeout}s; "
                                 f"stderr: {self.stderr[-2000:]}") from None
        self._reader.join(2)
        self._err_reader.join(2)
        if self._master is not None:
            os.close(self._master)
            self._master = None
        return code

    @property
    def stdout(self) -> str:
        return b"".join(self._out).decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return b"".join(self._err).decode("utf-8", "replace")


def run(args: list[str], home: Path, *, stdin: str | None = None, timeout: float = 60.0) -> Proc:
    """Run ``hermes args`` to the end."""
    proc = Proc(args, home, stdin=stdin)
    proc.wait(timeout)
    return proc


def kill_after(proc: Proc, delay: float, stats: Stats) -> bool:
    """SIGKILL ``proc`` after ``delay`` seconds unless it finished; ``True`` if killed."""
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and proc.alive():
        time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
    killed = proc.kill()
    proc.wait()
    if killed:
        stats.kills += 1
    else:
        stats.completed += 1
    return killed


# -- the database -----------------------------------------------------------------------


def db_path(home: Path) -> Path:
    return home / "state.db"


def connect(home: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db_path(home), timeout=30, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def messages_of(conn: sqlite3.Connection) -> dict[int, tuple[Any, ...]]:
    """Every stored message by id: what "committed" means for the loss check."""
    try:
        rows = conn.execute("SELECT id, session_id, role, content, tool_call_id, tool_calls "
                            "FROM messages").fetchall()
    except sqlite3.OperationalError:  # no schema yet
        return {}
    return {r[0]: tuple(r) for r in rows}


def read_messages(home: Path) -> dict[int, tuple[Any, ...]]:
    if not db_path(home).exists():
        return {}
    conn = connect(home)
    try:
        return messages_of(conn)
    finally:
        conn.close()


def kill_at(proc: Proc, home: Path, predicate: Callable[[sqlite3.Connection], bool],
            stats: Stats, *, name: str = "", timeout: float = 30.0, hold: float = 0.001,
            gap: float = 0.0002) -> dict[int, tuple[Any, ...]] | None:
    """Gate ``state.db`` until ``predicate(conn)`` holds, then SIGKILL ``proc`` while
    holding the write lock. Returns the messages committed at the kill, or ``None`` when
    the process ended (or the time ran out) first.

    The gate holds the write lock for ``hold`` seconds, checks the predicate, and opens
    for ``gap`` seconds; it takes the lock back the moment a hermes write commits (a
    tight retry), before hermes can start its next one. So hermes' writes pass one at
    a time and every state between two of its transactions is seen, which a plain poll
    would miss when two writes follow each other within a millisecond."""
    deadline = time.monotonic() + timeout
    conn: sqlite3.Connection | None = None
    try:
        while proc.alive() and time.monotonic() < deadline:
            if conn is None:
                if not db_path(home).exists():
                    time.sleep(0.002)
                    continue
                conn = sqlite3.connect(db_path(home), timeout=0, isolation_level=None)
                conn.row_factory = sqlite3.Row
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # hermes is writing: take it back right after
                continue  # (no sleep: hermes starts its next write within a millisecond)
            try:
                try:
                    hit = predicate(conn)
                except sqlite3.OperationalError:  # schema not created yet
                    hit = False
                if hit and proc.kill():
                    proc.wait()
                    stats.kills += 1
                    stats.points[name] = stats.points.get(name, 0) + 1
                    return messages_of(conn)
                time.sleep(hold)
            finally:
                conn.execute("ROLLBACK")
            time.sleep(gap)
    finally:
        if conn is not None:
            conn.close()
    if proc.alive():
        proc.kill()
        stats.kills += 1
        proc.wait()
        return read_messages(home)
    proc.wait()
    stats.completed += 1
    return None


# -- fault-point predicates -----------------------------------------------------------------


def _tip_rows(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Messages of the newest chat session (by rowid; sub-agents' sessions have their own
    source), oldest first."""
    sid = conn.execute("SELECT id FROM sessions WHERE source = 'cli' "
                       "ORDER BY rowid DESC LIMIT 1").fetchone()
    if sid is None:
        return []
    return conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id",
                        (sid[0],)).fetchall()


def unanswered_calls(rows: list[Any]) -> list[str]:
    """Ids of stored tool calls without a stored result (rows of one session)."""
    asked: list[str] = []
    answered = set()
    for row in rows:
        if row["role"] == "assistant" and row["tool_calls"]:
            try:
                calls = json.loads(row["tool_calls"])
            except ValueError:
                continue
            asked += [c.get("id") for c in calls if isinstance(c, dict)]
        elif row["role"] == "tool":
            answered.add(row["tool_call_id"])
    return [c for c in asked if c not in answered]


def point_user_stored(base: int) -> Callable[[sqlite3.Connection], bool]:
    """The new user message is stored, nothing after it yet."""
    def check(conn: sqlite3.Connection) -> bool:
        rows = _tip_rows(conn)
        return bool(rows) and rows[-1]["id"] > base and rows[-1]["role"] == "user"
    return check


def point_call_unanswered(base: int) -> Callable[[sqlite3.Connection], bool]:
    """An assistant tool call is stored and at least one of its results is not."""
    def check(conn: sqlite3.Connection) -> bool:
        rows = [r for r in _tip_rows(conn) if r["id"] > base]
        return bool(unanswered_calls(rows))
    return check


def point_results_stored(base: int) -> Callable[[sqlite3.Connection], bool]:
    """Every tool result is stored; the final answer is not."""
    def check(conn: sqlite3.Connection) -> bool:
        rows = [r for r in _tip_rows(conn) if r["id"] > base]
        return bool(rows) and rows[-1]["role"] == "tool" and not unanswered_calls(rows)
    return check


def point_parent_ended(parent: str) -> Callable[[sqlite3.Connection], bool]:
    """The compaction ended the parent session (the split has begun)."""
    def check(conn: sqlite3.Connection) -> bool:
        row = conn.execute("SELECT end_reason FROM sessions WHERE id = ?", (parent,)).fetchone()
        return row is not None and row[0] == "compression"
    return check


def point_child_created(parent: str) -> Callable[[sqlite3.Connection], bool]:
    """A continuation session of ``parent`` exists."""
    def check(conn: sqlite3.Connection) -> bool:
        return conn.execute("SELECT 1 FROM sessions WHERE parent_session_id = ? AND source = 'cli'",
                            (parent,)).fetchone() is not None
    return check


def point_child_filled(parent: str) -> Callable[[sqlite3.Connection], bool]:
    """The continuation holds its compacted transcript."""
    def check(conn: sqlite3.Connection) -> bool:
        return conn.execute(
            "SELECT 1 FROM messages m JOIN sessions s ON s.id = m.session_id "
            "WHERE s.parent_session_id = ? AND s.source = 'cli' LIMIT 1", (parent,)).fetchone() is not None
    return check


def point_messages_over(count: int) -> Callable[[sqlite3.Connection], bool]:
    """More than ``count`` messages are stored (an import's first batch committed)."""
    def check(conn: sqlite3.Connection) -> bool:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0] > count
    return check


# -- invariants -----------------------------------------------------------------------------


class Checker:
    """Checks one home after a kill; every violated invariant is recorded (with the
    scenario's seed) in ``stats.failures`` and in :attr:`problems`."""

    def __init__(self, home: Path, stats: Stats, label: str):
        self.home = home
        self.stats = stats
        self.label = label
        self.problems: list[str] = []

    def expect(self, ok: bool, what: str) -> bool:
        self.stats.invariants += 1
        if not ok:
            line = f"{self.label}: {what}"
            self.problems.append(line)
            self.stats.failures.append(line)
        return ok

    # files ------------------------------------------------------------------------------

    def files_parse(self) -> None:
        """Every file in the home can be read back in its format."""
        for path in sorted(self.home.rglob("*")):
            if not path.is_file() or path.name.endswith((".lock", "-wal", "-shm", "-journal")):
                continue
            rel = path.relative_to(self.home)
            if path.name.startswith(".") and path.name.endswith(".tmp"):
                continue  # a killed writer's temp file; the real file is checked
            try:
                data = path.read_bytes()
            except OSError as exc:
                self.expect(False, f"{rel} unreadable: {exc}")
                continue
            if data.startswith(b"SQLite format 3\x00"):
                self._sqlite_file(path, rel)
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.expect(False, f"{rel} is not UTF-8: {exc}")
                continue
            ok, why = True, ""
            try:
                if path.suffix in (".yaml", ".yml"):
                    yaml.safe_load(text)
                elif path.suffix == ".json":
                    json.loads(text)
                elif path.suffix == ".jsonl":
                    for line in text.splitlines():
                        if line.strip():
                            json.loads(line)
            except (ValueError, yaml.YAMLError) as exc:
                ok, why = False, str(exc)[:200]
            self.expect(ok, f"{rel} does not parse: {why}")

    def _sqlite_file(self, path: Path, rel: Path) -> None:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            self.expect(result == ["ok"], f"{rel}: PRAGMA integrity_check says {result[:5]}")
            tables = [name for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'")
                if re.search(r"USING\s+fts5\s*\(", sql or "", re.IGNORECASE)]  # not fts5vocab
            for table in tables:
                # The plain form: with rank=1 SQLite 3.40 fails ("SQL logic error") on an
                # external-content table over a view, even a sound one. fts_counts checks
                # index against content row by row instead.
                try:
                    conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
                    ok, why = True, ""
                except sqlite3.DatabaseError as exc:
                    ok, why = False, str(exc)
                self.expect(ok, f"{rel}: FTS5 integrity-check of {table} failed: {why}")
        finally:
            conn.close()

    # state.db ---------------------------------------------------------------------------------

    def fts_counts(self) -> None:
        """The search indexes hold exactly the rows the messages call for, compared id by
        id (one row per message in the word index, one per CJK message, with its current
        text, in the CJK index; no batch flag left): the store's own comparison, the
        one ``hermes doctor`` and ``hermes sessions check`` run."""
        from hermes.plugins.sessions.integrity import compare_indexes

        if not db_path(self.home).exists():
            return
        conn = connect(self.home)
        try:
            report = compare_indexes(conn)
        finally:
            conn.close()
        self.expect(report.complete, "the index comparison stopped before the last message")
        self.expect(not report.problems, "; ".join(report.problems))

    def nothing_lost(self, committed: dict[int, tuple[Any, ...]], when: str) -> None:
        """Every message committed earlier is still stored, unchanged."""
        now = read_messages(self.home)
        missing = [i for i in committed if i not in now]
        changed = [i for i in committed if i in now and now[i] != committed[i]]
        self.expect(not missing, f"{len(missing)} committed message(s) lost {when}: ids {missing[:5]}")
        self.expect(not changed, f"{len(changed)} committed message(s) changed {when}: ids {changed[:5]}")

    def memory_kept(self, acknowledged: dict[str, set[str]]) -> None:
        """Every memory entry a command acknowledged (exit 0) is in its file."""
        from hermes.plugins.memory.store import FILES, parse_entries

        for target, entries in acknowledged.items():
            path = self.home / "memories" / FILES[target]
            try:
                live = set(parse_entries(path.read_text(encoding="utf-8"))) if path.exists() else set()
            except (OSError, UnicodeDecodeError) as exc:
                self.expect(False, f"{FILES[target]} unreadable: {exc}")
                continue
            lost = sorted(entries - live)
            self.expect(not lost, f"{len(lost)} acknowledged {FILES[target]} entr(y/ies) lost: {lost[:3]}")

    def memory_tool_results_kept(self) -> None:
        """A memory tool call whose success result was stored (the model was told
        "saved") has its entry in MEMORY.md / USER.md."""
        if not db_path(self.home).exists():
            return
        conn = connect(self.home)
        try:
            calls: dict[str, dict[str, Any]] = {}
            for row in conn.execute("SELECT tool_calls FROM messages WHERE role = 'assistant' "
                                    "AND tool_calls IS NOT NULL"):
                for call in json.loads(row[0]):
                    fn = call.get("function") or {}
                    if fn.get("name") == "memory":
                        try:
                            calls[call.get("id")] = json.loads(fn.get("arguments") or "{}")
                        except ValueError:
                            pass
            acked: dict[str, set[str]] = {}
            for row in conn.execute("SELECT tool_call_id, content FROM messages WHERE role = 'tool'"):
                args = calls.get(row[0])
                if not args or args.get("action") != "add":
                    continue
                try:
                    ok = json.loads(row[1] or "{}").get("success")
                except (ValueError, AttributeError):
                    ok = False
                if ok:
                    acked.setdefault(args.get("target") or "memory", set()).add(str(args["content"]).strip())
        finally:
            conn.close()
        if acked:
            self.memory_kept(acked)

    def all_static(self) -> None:
        self.files_parse()
        self.fts_counts()


# -- the next conversation ------------------------------------------------------------------------


def continue_succeeds(check: Checker, server: FakeLLMServer, *, expect_history: list[str],
                      text: str = "are we still talking?", min_earlier: int = 1) -> Proc:
    """``hermes chat --continue -q`` against the validating server must answer: exit 0,
    a request the provider accepts, and the conversation's earlier messages in it."""
    server.reset()
    server.validate = True
    server.chunk_delay = 0.0
    server.handler = lambda req: Reply(text="continued fine")
    proc = run(["chat", "--continue", "-q", text], check.home)
    sent = [r for r in server.requests if not is_summarizer(r)]
    check.expect(proc.returncode == 0,
                 f"`hermes chat --continue` failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
    check.expect(bool(sent), "`hermes chat --continue` sent no request to the model")
    if sent:
        req = sent[-1]
        body = json.dumps(req.messages, ensure_ascii=False)
        missing = [h for h in expect_history if h not in body]
        check.expect(not missing, f"the resumed request lacks earlier messages {missing[:3]} "
                                  f"({len(non_system(req))} messages sent)")
        earlier = len(non_system(req)) - 1
        check.expect(earlier >= min_earlier, f"the resumed conversation is empty: {earlier} "
                                             "earlier message(s) sent with the new one")
    if proc.returncode == 0:
        # The repair is stored, not only sent: the conversation's stored transcript
        # answers every tool call.
        conn = connect(check.home)
        try:
            open_calls = unanswered_calls(_tip_rows(conn))
        finally:
            conn.close()
        check.expect(not open_calls, f"after --continue the stored transcript still has "
                                     f"unanswered tool calls {open_calls}")
    return proc


def seeded(seed: int, salt: str) -> random.Random:
    return random.Random(f"{salt}:{seed}")


def kill_when_tmp(proc: Proc, directory: Path, stats: Stats, *, timeout: float = 10.0) -> bool:
    """SIGKILL ``proc`` the moment a writer's temp file (``.NAME.*.tmp``) shows up in
    ``directory``: the kill lands inside an atomic write. ``True`` if killed."""
    deadline = time.monotonic() + timeout
    while proc.alive() and time.monotonic() < deadline:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            names = []
        if any(n.startswith(".") and n.endswith(".tmp") for n in names):
            break
        time.sleep(0.0005)
    else:
        names = []
    in_write = any(n.startswith(".") and n.endswith(".tmp") for n in names)
    killed = proc.kill()
    proc.wait()
    if killed:
        stats.kills += 1
        if in_write:
            stats.points["memory-temp-file"] = stats.points.get("memory-temp-file", 0) + 1
    else:
        stats.completed += 1
    return killed


def seed_session(home: Path, messages: list[dict[str, Any]], *, source: str = "cli",
                 started_at: float | None = None) -> str:
    """Store a finished conversation directly (the setup of a scenario, not under test)."""
    import hermes

    with hermes.Kernel(home=home, autoload=False) as kernel:
        store = kernel.session_store
        sid = store.create_session(source=source, model="fake-model", started_at=started_at)
        store.append_messages(sid, messages)
        return sid


def conversation(n: int, tag: str, *, bulk: int = 3) -> list[dict[str, Any]]:
    """``n`` alternating user/assistant messages about ``tag`` (some CJK text, so the
    trigram index has rows too); answers are ``bulk`` sentences long."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 2 == 0:
            out.append({"role": "user", "content": f"{tag} question {i}: how does part {i} work? 部品{i}の説明"})
        else:
            out.append({"role": "assistant", "content": f"{tag} answer {i}: part {i} works like this. " * bulk})
    return out


def write_import_file(path: Path, sizes: list[int], tag: str) -> dict[str, list[str]]:
    """A ``hermes sessions export``-style JSONL file with one session per size; returns
    each session's message contents in order (what a finished import must hold)."""
    expected: dict[str, list[str]] = {}
    with open(path, "w", encoding="utf-8") as f:
        for n, size in enumerate(sizes):
            sid = f"import-{tag}-{n}"
            f.write(json.dumps({"hermes_session": {"id": sid, "source": "import-test",
                                                   "title": f"imported {tag} {n}"}}) + "\n")
            contents = []
            for i, msg in enumerate(conversation(size, f"{tag}-{n}")):
                msg["content"] += f" #{i}"
                msg["timestamp"] = 1_700_000_000 + n * 100_000 + i
                contents.append(msg["content"])
                f.write(json.dumps(msg, ensure_ascii=False) + "\n")
            expected[sid] = contents
    return expected
