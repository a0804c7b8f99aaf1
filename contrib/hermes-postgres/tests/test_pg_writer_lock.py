"""One writer per conversation across machines: the runtime takes the store's writer
lock (a PostgreSQL advisory lock) instead of the file lock in ``$HERMES_HOME``.

Two "machines" are two HERMES_HOMEs (so two separate lock directories) pointed at the
same database as the same user: with the file lock only, both would write into one
conversation. The second is refused with the kernel's message, naming the holder
(pid@host); a SIGKILLed holder leaves the lock free at once.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hermes_postgres.store import PostgresSessionStore

import hermes
from hermes.testing.fakellm import Reply

HERMES = [sys.executable, "-m", "hermes.cli"]


def _config(fake_llm, dsn: str, user: str) -> dict:
    cfg = fake_llm.config(provider="openai")
    cfg.setdefault("memory", {})["nudge_interval"] = 0
    cfg["sessions"] = {"store": "postgres"}
    cfg.setdefault("plugins", {})["postgres"] = {"dsn": dsn, "user": user, "pool_max": 2}
    return cfg


def test_a_second_home_on_the_same_database_is_refused(kernel_factory, fake_llm, pg_cluster, pg_user,
                                                       tmp_path) -> None:
    from hermes.runtime.agent import Agent

    homes = [tmp_path / "machine-a", tmp_path / "machine-b"]
    kernels = []
    for home in homes:
        home.mkdir()
        kernels.append(kernel_factory(config=_config(fake_llm, pg_cluster.dsn, pg_user), home=home,
                                      autoload=True, check_selection=True))
    first = Agent(kernels[0])
    try:
        assert first.run_turn("hello from machine a").status == "ok"
        with pytest.raises(hermes.SessionBusyError) as info:
            Agent(kernels[1], session_id=first.session_id)
        text = str(info.value)
        assert first.session_id in text and info.value.session_id == first.session_id
        assert f"process {os.getpid()}@{socket.gethostname()}" in text, text
        assert info.value.pid == os.getpid() and info.value.host == socket.gethostname()
        # No lock file was needed: the lock lives in the database.
        assert [p for home in homes for p in (home / "locks").glob("*.lock")] == []
    finally:
        first.close()
    second = Agent(kernels[1], session_id=first.session_id)  # closed: free again
    try:
        assert second.run_turn("hello from machine b").status == "ok"
    finally:
        second.close()


def _hermes(home: Path, fake_llm, *args: str, **popen: object):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(HERMES_HOME=str(home), OPENAI_API_KEY="fake-key", NO_COLOR="1")
    flags = ["--provider", "openai", "--base-url", fake_llm.openai_url, "--model", "fake-model"]
    return subprocess.Popen(HERMES + ["chat", *flags, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **popen)


def _run(home: Path, fake_llm, *args: str) -> tuple[int, str]:
    proc = _hermes(home, fake_llm, *args)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.slow  # three hermes processes; the in-process test above stays in the fast target
def test_two_machines_continue_one_conversation_the_second_is_refused(fake_llm, pg_cluster, pg_user,
                                                                      tmp_path) -> None:
    config = ("sessions:\n  store: postgres\nplugins:\n  postgres:\n"
              f"    dsn: {json.dumps(pg_cluster.dsn)}\n    user: {json.dumps(pg_user)}\n")
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    for home in (a, b):
        home.mkdir(mode=0o700)
        (home / "config.yaml").write_text(config)
    code, err = _run(a, fake_llm, "-q", "first message")
    assert code == 0, err
    store = PostgresSessionStore(pg_cluster.dsn, user=pg_user, pool_max=1)
    session = store.list_sessions(limit=1)[0]["id"]
    fake_llm.queue(Reply(text="slow answer", delay=60))
    before = len(fake_llm.requests)
    holder = _hermes(a, fake_llm, "-c", "-q", "slow question")
    try:
        deadline = time.monotonic() + 60
        while len(fake_llm.requests) <= before:  # the holder is inside its turn
            assert holder.poll() is None and time.monotonic() < deadline, holder.stderr.read()
            time.sleep(0.05)
        code, err = _run(b, fake_llm, "-c", "-q", "interleaved?")
        assert code == 1 and "Traceback" not in err, err
        assert session in err and f"process {holder.pid}@{socket.gethostname()}" in err, err
        assert not any("interleaved?" in json.dumps(r.body) for r in fake_llm.requests)

        holder.kill()  # SIGKILL: the server ends its backend and drops the advisory lock
        holder.wait(timeout=30)
        deadline = time.monotonic() + 30
        while True:  # the server notices the closed socket within moments
            code, err = _run(b, fake_llm, "-c", "-q", "after the crash")
            if code == 0 or "in use" not in err or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == 0, err
        users = [m["content"] for m in store.get_conversation(session) if m["role"] == "user"]
        assert users == ["first message", "slow question", "after the crash"]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        for stream in (holder.stdout, holder.stderr):
            stream.close()
        store.close()
