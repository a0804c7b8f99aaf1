"""`hermes chat -q` whose answer is cut off mid-stream (a proxy timeout, a dropped
connection): a script must be able to tell. A real process streams into a
pseudo-terminal (so the answer streams) against the loopback fake server's ``cut`` and
``drop`` faults; stderr is a pipe of its own so the notice's place is checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hermes
from hermes.testing.fakellm import Reply

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")

TEXT = "The deployment finished and every check passed without a warning. " * 4
#: ``hermes chat -q``: the answer was cut off before it was complete (docs/cli.md)
EXIT_INCOMPLETE = 3


def run_one_shot(home: Path, server, provider: str) -> tuple[int, str, str]:
    """``hermes chat -q`` with stdout on a pty (streamed) and stderr on a pipe."""
    (home / "config.yaml").write_text("model:\n  context_length: 100000\n  max_retries: 0\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "NO_COLOR")}
    env.update(HERMES_HOME=str(home), TERM="dumb", ANTHROPIC_API_KEY="fake-key")
    url = server.openai_url if provider == "openai" else server.url
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes.cli", "chat", "--plain", "--provider", provider,
             "--base-url", url, "--model", "fake-model", "-q", "deploy it"],
            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=env)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        err = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        os.close(master)
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


@pytest.mark.slow  # a hermes process per provider and fault
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("fault", ["cut", "drop"])
def test_a_cut_one_shot_answer_exits_nonzero_and_keeps_the_partial_answer(
        provider, fault, fake_llm, tmp_path):
    fake_llm.queue(Reply(text=TEXT, fault=fault))
    status, out, err = run_one_shot(tmp_path, fake_llm, provider)
    assert status == EXIT_INCOMPLETE, (out, err)
    assert "Traceback" not in out + err
    # the notice is on stderr, not mixed into the answer
    assert "cut off" in err and "cut off" not in out
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        sid = kernel.session_store.list_sessions(limit=1)[0]["id"]
        stored = kernel.session_store.get_messages(sid)[-1]
    assert stored["role"] == "assistant" and stored["finish_reason"] == "incomplete"
    assert 0 < len(stored["content"]) < len(TEXT) and TEXT.startswith(stored["content"])
    # what was printed is what was stored
    assert stored["content"].strip() in " ".join(out.split())


@pytest.mark.slow
def test_a_whole_one_shot_answer_still_exits_0(fake_llm, tmp_path):
    fake_llm.queue(Reply(text=TEXT))
    status, out, err = run_one_shot(tmp_path, fake_llm, "openai")
    assert status == 0, (out, err)
    assert "cut off" not in err


CUT_CLIENT = '''
import hermes


class CutClient(hermes.LLMClient):
    """A client whose non-streaming answer comes back marked incomplete."""

    def __init__(self, kernel=None, **kwargs):
        pass

    def complete(self, request):
        return hermes.LLMResponse(content="The deployment fin", finish_reason="incomplete")

    def context_length(self, model):
        return 100000


@hermes.hookimpl
def hermes_register_llm_clients(register):
    register("cutllm", CutClient)
'''


@pytest.mark.slow  # a hermes process
def test_json_says_incomplete_and_exits_nonzero(tmp_path):
    """``--json`` asks for the answer in one piece; a client that still returns it cut
    (a third-party client whose server ends early) is reported the same way."""
    import json

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "t_cutllm.py").write_text(CUT_CLIENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(tmp_path), HERMES_LOAD_PLUGINS="t_cutllm")
    proc = subprocess.run([sys.executable, "-m", "hermes.cli", "chat", "--provider", "cutllm", "--model", "m",
                           "--json", "-q", "deploy it"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == EXIT_INCOMPLETE, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "incomplete" and out["answer"] == "The deployment fin"
    assert any("cut off" in n for n in out["notices"])
