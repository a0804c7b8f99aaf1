"""Crash consistency of the runtime: real processes killed with SIGKILL at the worst
moments, then resumed with the real SDKs against the fake server (``validate=True``
rejects malformed transcripts with the provider's 400, as the real APIs do)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hermes
from hermes.runtime.agent import Agent
from hermes.runtime.transcript import INTERRUPTED_ANSWER, missing_results, unanswered_tail
from hermes.testing.fakellm import Reply

HERMES = [sys.executable, "-m", "hermes.cli"]

# A child process: one agent turn whose tool (or whatever ``KILL_AT`` names) kills the
# process with SIGKILL, the way a crash, an OOM kill or a closed laptop lid does.
_CHILD = textwrap.dedent("""
    import json, os, signal, sys
    import hermes
    from hermes.runtime.agent import Agent

    provider, url, message = sys.argv[1], sys.argv[2], sys.argv[3]
    config = {"model": {"provider": provider, "name": "fake-model", "base_url": url,
                        "api_key": "fake-key", "retry_base_delay": 0.01, "timeout": 10.0},
              "memory": {"nudge_interval": 0}}

    class Crash:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(
                name="deploy", schema={"description": "deploy", "parameters": {
                    "type": "object", "properties": {}}},
                handler=lambda args, ctx: os.kill(os.getpid(), signal.SIGKILL)))

    kernel = hermes.Kernel(config=config, home=os.environ["HERMES_HOME"], autoload=False)
    kernel.register_plugin(Crash(), "crash")
    agent = Agent(kernel)
    print(agent.session_id, flush=True)
    agent.run_turn(message)
""")


def run_child(home: Path, provider: str, url: str, message: str, env: dict | None = None):
    full = {**os.environ, "HERMES_HOME": str(home), **(env or {})}
    return subprocess.run([sys.executable, "-c", _CHILD, provider, url, message],
                          capture_output=True, text=True, env=full, timeout=120)


def chat(home: Path, fake_llm, *args: str, provider: str = "openai"):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(HERMES_HOME=str(home), OPENAI_API_KEY="fake-key", ANTHROPIC_API_KEY="fake-key")
    url = fake_llm.openai_url if provider == "openai" else fake_llm.url
    flags = ["--provider", provider, "--base-url", url, "--model", "fake-model"]
    return subprocess.run(HERMES + ["chat", *flags, *args], capture_output=True, text=True,
                          env=env, timeout=120)


def url_of(fake_llm, provider: str) -> str:
    return fake_llm.openai_url if provider == "openai" else fake_llm.url


# -- 1. a crash while a tool runs ---------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.slow  # a hermes process killed per provider; the fast target keeps the streamed-answer crash
def test_crash_while_a_tool_runs_can_be_continued(tmp_path, fake_llm, provider):
    fake_llm.queue(Reply(tool_calls=[{"name": "deploy", "arguments": {}, "id": "call_deploy_1"}]))
    child = run_child(tmp_path, provider, url_of(fake_llm, provider), "deploy the site")
    assert child.returncode == -signal.SIGKILL, child.stderr
    session_id = child.stdout.split()[0]

    proc = chat(tmp_path, fake_llm, "-c", "-q", "did it work?", provider=provider)
    assert proc.returncode == 0, proc.stderr
    assert "echo: did it work?" in proc.stdout
    # The repair is stored, right after the unanswered call, so it persists.
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        stored = kernel.session_store.get_conversation(session_id)
    roles = [m["role"] for m in stored]
    assert roles == ["user", "assistant", "tool", "user", "assistant"], roles
    assert stored[2]["tool_call_id"] == "call_deploy_1"
    assert "interrupted" in json.loads(stored[2]["content"])["error"]
    assert missing_results(stored) == []


# A hermes process killed per provider: the fast target keeps openai.
@pytest.mark.parametrize("provider", ["openai", pytest.param("anthropic", marks=pytest.mark.slow)])
def test_crash_while_an_answer_streams_closes_the_turn(tmp_path, fake_llm, provider):
    """The answer of a killed run was never stored: the user turn is closed with an
    interrupted answer before the next message (so roles keep alternating)."""
    fake_llm.queue(Reply(tool_calls=[{"name": "deploy", "arguments": {}}]))
    run_child(tmp_path, provider, url_of(fake_llm, provider), "first")
    # simulate the kill while streaming: drop everything after the user message
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        store = kernel.session_store
        sid = store.list_sessions(limit=1)[0]["id"]
        first_user = store.get_messages(sid)[0]
        store.delete_session(sid)
        store.create_session(sid, source="cli")
        store.append_message(sid, "user", first_user["content"])
    proc = chat(tmp_path, fake_llm, "-c", "-q", "second", provider=provider)
    assert proc.returncode == 0, proc.stderr
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        rows = kernel.session_store.get_messages(sid)
    assert [r["role"] for r in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[1]["content"] == INTERRUPTED_ANSWER and rows[1]["finish_reason"] == "interrupted"


def test_unanswered_calls_in_the_middle_are_repaired_in_every_request(agent_factory, fake_llm):
    """Old transcripts may hold a gap before later turns; the request carries a repaired
    copy (the provider would reject it otherwise)."""
    agent = agent_factory()
    store = agent.store
    sid = agent.session_id
    call = {"id": "call_a", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    store.append_message(sid, "user", "one")
    store.append_message(sid, "assistant", "", tool_calls=[call])
    store.append_message(sid, "user", "two")
    store.append_message(sid, "assistant", "ok")
    agent.close()
    resumed = agent_factory(session_id=sid)
    result = resumed.run_turn("three")
    assert result.status == "ok", result.error
    sent = fake_llm.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user",
                                         "assistant", "user"]


def test_unanswered_tail_and_missing_results_units():
    call = {"id": "c1", "function": {"name": "deploy"}}
    call2 = {"id": "c2", "function": {"name": "lint"}}
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [call, call2]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    tail = unanswered_tail(msgs)
    assert [m["tool_call_id"] for m in tail] == ["c2"]
    assert unanswered_tail(msgs + tail) == []
    assert unanswered_tail([{"role": "user", "content": "hi"}])[0]["role"] == "assistant"
    assert unanswered_tail([]) == []


# -- 2. a crash during the compaction split ------------------------------------------------

_COMPACT_CHILD = textwrap.dedent("""
    import os, sys
    import hermes
    from hermes.runtime.agent import Agent

    url = sys.argv[1]
    config = {"model": {"provider": "openai", "name": "fake-model", "base_url": url,
                        "api_key": "fake-key", "retry_base_delay": 0.01, "timeout": 10.0},
              "memory": {"nudge_interval": 0}}
    kernel = hermes.Kernel(config=config, home=os.environ["HERMES_HOME"], autoload=False)
    agent = Agent(kernel)
    agent.run_turn("my name is Ada and I deploy with rsync " + "filler " * 60)
    for i in range(5):
        agent.run_turn(f"question {i} " + "filler " * 60)
    print(agent.session_id, flush=True)
    agent.compact(force=True, reason="manual")
    print("compacted", agent.session_id, flush=True)
""")


@pytest.mark.slow  # a hermes process killed mid-split; the fast target keeps the streamed-answer crash
def test_crash_during_the_compaction_split_resumes_the_conversation(tmp_path, fake_llm):
    fake_llm.handler = lambda req: (Reply(text="ok") if req.body.get("tools")
                                    else Reply(text="## Goal\nsummary: the user is Ada"))
    env = {**os.environ, "HERMES_HOME": str(tmp_path), "HERMES_FAULT_POINT": "compaction-split"}
    child = subprocess.run([sys.executable, "-c", _COMPACT_CHILD, fake_llm.openai_url],
                           capture_output=True, text=True, env=env, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    parent = child.stdout.split()[0]

    proc = chat(tmp_path, fake_llm, "-c", "-q", "what is my name?")
    assert proc.returncode == 0, proc.stderr
    sent = fake_llm.requests[-1].body["messages"]
    users = [m["content"] for m in sent if m["role"] == "user"]
    # the conversation so far travelled with the new message (not an empty transcript)
    assert any("my name is Ada" in u for u in users), users
    assert users[-1] == "what is my name?"
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        store = kernel.session_store
        tip = store.compression_tip(parent)
        assert tip == parent  # the split never happened: the parent is live again
        assert store.get_session(parent)["end_reason"] == "user_exit"
        assert store.children(parent) == []  # the killed split left nothing behind
        assert store.get_messages(tip)[-1]["content"] == "ok"
        # no empty continuation is left behind
        for sid in store.lineage(parent):
            assert store.get_messages(sid), f"session {sid} is empty"


def test_an_empty_continuation_falls_back_to_its_parent(agent_factory, fake_llm):
    """What a crash mid-split left before splits were one transaction: an ended parent
    and an empty child. Resuming the child continues the parent."""
    first = agent_factory()
    first.run_turn("my name is Ada")
    parent = first.session_id
    first.close()
    store = first.store
    store.end_session(parent, "compression")
    store.reopen_session(parent)
    store.end_session(parent, "compression")
    empty = store.create_session(parent_session_id=parent, source="cli")
    assert store.compression_tip(parent) == empty
    resumed = agent_factory(session_id=empty)
    assert resumed.session_id == parent
    assert resumed.run_turn("what is my name?").status == "ok"
    users = [m["content"] for m in fake_llm.requests[-1].body["messages"] if m["role"] == "user"]
    assert users == ["my name is Ada", "what is my name?"]
    assert store.get_session(empty) is None


# -- 3. one writer per conversation ---------------------------------------------------------


def _wait_for(predicate, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow  # two hermes processes; test_session_lock_in_process stays in the fast target
def test_two_chats_on_one_session_the_second_is_refused(tmp_path, fake_llm):
    assert chat(tmp_path, fake_llm, "-q", "first message").returncode == 0
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(HERMES_HOME=str(tmp_path), OPENAI_API_KEY="fake-key")
    flags = ["--provider", "openai", "--base-url", fake_llm.openai_url, "--model", "fake-model"]
    # The holder waits for a slow answer, inside its turn, holding the conversation.
    fake_llm.queue(Reply(text="slow answer", delay=60))
    before = len(fake_llm.requests)
    holder = subprocess.Popen(HERMES + ["chat", *flags, "-c", "-q", "slow question"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    try:
        _wait_for(lambda: len(fake_llm.requests) > before)
        with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
            session = kernel.session_store.list_sessions(limit=1)[0]["id"]

        second = chat(tmp_path, fake_llm, "-c", "-q", "interleaved?")
        assert second.returncode == 1
        assert "Traceback" not in second.stderr
        assert session in second.stderr and f"process {holder.pid}" in second.stderr, second.stderr
        assert not any("interleaved?" in json.dumps(r.body) for r in fake_llm.requests)

        holder.kill()  # SIGKILL: the OS drops the lock with the process
        holder.wait(timeout=30)
        third = chat(tmp_path, fake_llm, "-c", "-q", "after the crash")
        assert third.returncode == 0, third.stderr
        with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
            users = [m["content"] for m in kernel.session_store.get_conversation(session)
                     if m["role"] == "user"]
        assert users == ["first message", "slow question", "after the crash"]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        for stream in (holder.stdout, holder.stderr):
            stream.close()


def test_session_lock_in_process(tmp_path):
    from hermes.runtime.session_lock import SessionBusyError, SessionLock

    first = SessionLock(tmp_path, "s1")
    first.acquire()
    with pytest.raises(SessionBusyError) as info:
        SessionLock(tmp_path, "s1").acquire()
    assert info.value.pid == os.getpid() and "s1" in str(info.value)
    SessionLock(tmp_path, "s2").acquire()  # other conversations are independent
    first.release()
    assert not first.path.exists()
    again = SessionLock(tmp_path, "s1")
    again.acquire()
    again.release()


# -- 5. writes that cannot land --------------------------------------------------------------


def _users(store, session_id):
    return [m["content"] for m in store.get_conversation(session_id) if m["role"] == "user"]


def test_a_locked_database_fails_the_turn_and_keeps_the_message(agent_factory, fake_llm, hermes_home):
    import sqlite3

    agent = agent_factory(config={"plugins": {"sqlite-sessions": {"write_timeout": 0.3}}})
    agent.run_turn("hello")
    other = sqlite3.connect(hermes_home / "state.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    try:
        requests = len(fake_llm.requests)
        result = agent.run_turn("remember the blue door")
        assert result.status == "failed"
        assert "locked" in result.error and "kept" in result.error, result.error
        assert len(fake_llm.requests) == requests  # nothing was sent without being stored
        assert agent.unsaved_messages == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
    result = agent.run_turn("and the red key")
    assert result.status == "ok", result.error
    assert agent.unsaved_messages == 0
    assert _users(agent.store, agent.session_id) == ["hello", "remember the blue door",
                                                     "and the red key"]
    sent = [m["content"] for m in fake_llm.requests[-1].body["messages"] if m["role"] == "user"]
    assert sent == ["hello", "remember the blue door", "and the red key"]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 4 MB tmpfs (needs root): a disk that really fills up."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: Path) -> None:
    with open(path, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


def test_a_full_disk_fails_the_turn_and_keeps_the_message(tiny_disk, kernel_factory, fake_llm):
    cfg = fake_llm.config(provider="openai")
    cfg["memory"] = {"nudge_interval": 0}
    kernel = kernel_factory(config=cfg, home=tiny_disk)
    agent = Agent(kernel)
    try:
        assert agent.run_turn("hello").status == "ok"
        filler = tiny_disk / "filler"
        _fill(filler)
        result = agent.run_turn("the meeting moved to Tuesday " * 200)
        assert result.status == "failed"
        assert "disk" in result.error.lower() and "kept" in result.error, result.error
        filler.unlink()
        assert agent.run_turn("thanks").status == "ok"
        users = _users(agent.store, agent.session_id)
        assert users[0] == "hello" and users[-1] == "thanks"
        assert users[1].startswith("the meeting moved to Tuesday")
        assert agent.store.check_integrity() == []
    finally:
        agent.close()


def test_an_unwritable_lock_directory_is_one_clear_error(tmp_path):
    from hermes.runtime.session_lock import SessionLock

    (tmp_path / "locks").write_text("not a directory")
    with pytest.raises(hermes.HermesError) as info:
        SessionLock(tmp_path, "s1").acquire()
    assert "locks" in str(info.value) and "writable" in str(info.value)
