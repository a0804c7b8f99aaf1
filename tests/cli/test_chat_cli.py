"""`hermes chat`, run as a real subprocess against the loopback fake server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hermes

HERMES = [sys.executable, "-m", "hermes.cli"]


def run(args, home: Path, *, input: str | None = None, env: dict | None = None):
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    full_env.update(HERMES_HOME=str(home), **(env or {}))
    return subprocess.run(HERMES + args, input=input, capture_output=True, text=True,
                          env=full_env, timeout=120)


@pytest.fixture
def flags(fake_llm):
    return ["--provider", "openai", "--base-url", fake_llm.openai_url, "--model", "fake-model"]


def test_no_credentials_explains_in_two_lines(tmp_path):
    proc = run(["chat", "-q", "hello"], tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr
    assert "ANTHROPIC_API_KEY" in lines[0]
    assert "base_url" in lines[1]
    assert "Traceback" not in proc.stderr
    # nothing was started: no session was recorded
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        assert kernel.session_store.list_sessions() == []


def test_one_shot_answer_is_scriptable(tmp_path, fake_llm, flags):
    proc = run(["chat", *flags, "-q", "what is two plus two?"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "echo: what is two plus two?"
    assert fake_llm.requests[-1].body["model"] == "fake-model"


def test_continue_resumes_the_latest_session(tmp_path, fake_llm, flags):
    assert run(["chat", *flags, "-q", "my name is Ada"], tmp_path).returncode == 0
    proc = run(["chat", *flags, "-c", "-q", "what is my name?"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    sent = fake_llm.requests[-1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["my name is Ada", "what is my name?"]
    # the frozen system prompt of the first run is reused byte for byte
    assert sent[0]["content"] == fake_llm.requests[0].body["messages"][0]["content"]


def test_interactive_commands(tmp_path, fake_llm, flags):
    script = "/help\n/title Demo chat\nhello there\n/memory\n/new\nsecond session\n/exit\n"
    proc = run(["chat", *flags], tmp_path, input=script)
    assert proc.returncode == 0, proc.stderr
    assert "echo: hello there" in proc.stdout
    assert "/compress" in proc.stdout  # /help
    assert "prompt caching off" in proc.stderr
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        rows = kernel.session_store.list_sessions(limit=10)
        titled = [r for r in rows if r.get("title") == "Demo chat"]
        assert titled and titled[0]["end_reason"] == "new_session"
        assert len(rows) == 2
