"""`hermes chat`, run as a real subprocess against the loopback fake server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hermes
from hermes.testing.fakellm import Reply

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


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_continue_resumes_the_latest_session(tmp_path, fake_llm, flags):
    assert run(["chat", *flags, "-q", "my name is Ada"], tmp_path).returncode == 0
    proc = run(["chat", *flags, "-c", "-q", "what is my name?"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    sent = fake_llm.requests[-1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["my name is Ada", "what is my name?"]
    # the frozen system prompt of the first run is reused byte for byte
    assert sent[0]["content"] == fake_llm.requests[0].body["messages"][0]["content"]


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_piped_stdin_is_one_message(tmp_path, fake_llm, flags):
    proc = run(["chat", *flags], tmp_path, input="first line\n/help\nthird line\n")
    assert proc.returncode == 0, proc.stderr
    assert fake_llm.requests[-1].last_user_text == "first line\n/help\nthird line"
    assert proc.stdout.strip() == "echo: first line\n/help\nthird line"
    assert "\x1b[" not in proc.stdout  # no styling when stdout is not a terminal


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_query_dash_reads_stdin(tmp_path, fake_llm, flags):
    proc = run(["chat", *flags, "-q", "-"], tmp_path, input="from stdin\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "echo: from stdin"


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_empty_stdin_is_a_usage_error(tmp_path, fake_llm, flags):
    proc = run(["chat", *flags], tmp_path, input="")
    assert proc.returncode == 2
    assert "standard input was empty" in proc.stderr


def test_json_prints_one_object(tmp_path, fake_llm, flags):
    proc = run(["chat", *flags, "-q", "hi there", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["answer"] == "echo: hi there"
    assert data["status"] == "ok"
    assert data["usage"]["input_tokens"] > 0 and data["usage"]["output_tokens"] > 0
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        assert kernel.session_store.get_session(data["session_id"]) is not None


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_json_reports_a_failed_call_with_status_1(tmp_path, fake_llm, flags):
    (tmp_path / "config.yaml").write_text("model:\n  max_retries: 0\n")
    fake_llm.queue(Reply(error=500))
    proc = run(["chat", *flags, "-q", "hi", "--json"], tmp_path)
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["status"] == "failed" and "500" in data["error"]


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_provider_failure_is_one_line(tmp_path, fake_llm, flags):
    (tmp_path / "config.yaml").write_text("model:\n  max_retries: 0\n")
    fake_llm.queue(Reply(error=500))
    proc = run(["chat", *flags, "-q", "hi"], tmp_path)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if "500" in ln]
    assert len(lines) == 1, proc.stderr
    assert "openai: openai:" not in proc.stderr


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_resume_by_title_and_by_id_prefix(tmp_path, fake_llm, flags):
    first = json.loads(run(["chat", *flags, "-q", "my name is Ada", "--json"], tmp_path).stdout)
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        kernel.session_store.set_title(first["session_id"], "Ada intro")
    proc = run(["chat", *flags, "--resume", "Ada intro", "-q", "what is my name?"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [m["content"] for m in fake_llm.requests[-1].messages if m["role"] == "user"] == [
        "my name is Ada", "what is my name?"]
    proc = run(["chat", *flags, "-r", first["session_id"][:-2], "-q", "and again?"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len([m for m in fake_llm.requests[-1].messages if m["role"] == "user"]) == 3


def test_ambiguous_id_prefix_lists_the_candidates(tmp_path, fake_llm, flags):
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        for sid in ("abc-one", "abc-two", "xyz"):
            kernel.session_store.create_session(sid)
    proc = run(["chat", *flags, "-r", "abc", "-q", "hi"], tmp_path)
    assert proc.returncode == 1
    assert "ambiguous" in proc.stderr and "abc-one" in proc.stderr and "abc-two" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run(["chat", *flags, "-r", "nope", "-q", "hi"], tmp_path)
    assert proc.returncode == 1 and "no session" in proc.stderr


@pytest.mark.slow  # a hermes process per run; the fast target keeps one per feature
def test_usage_errors_exit_2(tmp_path, fake_llm, flags):
    proc = run(["chat", *flags, "-c", "-r", "x", "-q", "hi"], tmp_path)
    assert proc.returncode == 2 and "either --continue or --resume" in proc.stderr


def test_markdown_is_rendered_on_a_terminal_only(tmp_path):
    from hermes.runtime.render import render_markdown

    out = render_markdown("# Plan\n\n- **fast** path\n\n```sh\necho '**not bold**'\n```\n")
    assert "\x1b[1m" in out and "• " in out
    assert "echo '**not bold**'\n" in out  # code stays verbatim, copyable


ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab *`#->_[]()\n1.~")), max_size=120),
       cuts=st.lists(st.integers(min_value=1, max_value=9), max_size=40))
def test_streamed_markdown_shows_the_same_text_as_rendering_it_whole(text, cuts):
    """However the answer is cut into streamed pieces, the screen shows the same
    characters as rendering the whole answer (styles aside): nothing lost or doubled."""
    from hermes.runtime.render import MarkdownStream, render_markdown

    out: list[str] = []
    stream = MarkdownStream(out.append)
    pos = 0
    for n in cuts:
        stream.feed(text[pos:pos + n])
        pos += n
    stream.feed(text[pos:])
    stream.flush()
    assert ANSI_RE.sub("", "".join(out)) == ANSI_RE.sub("", render_markdown(text))


def test_help_does_not_import_the_terminal_libraries(tmp_path):
    env = {**os.environ, "HERMES_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hermes.cli", "--help"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    imported = proc.stderr
    assert "chat" in proc.stdout
    assert "prompt_toolkit" not in imported and "hermes.runtime.chat" not in imported


def test_history_file_is_private_and_bounded(tmp_path):
    from hermes.runtime.chat import HISTORY_MAX_BYTES, history_file

    path = tmp_path / "chat_history"
    entries = [f"\n# 2026-01-01 00:00:{i % 60:02d}\n+message number {i}\n+second line {i}\n" for i in range(60_000)]
    path.write_text("".join(entries))
    path.chmod(0o644)
    assert path.stat().st_size > HISTORY_MAX_BYTES
    assert history_file(tmp_path) == path
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    text = path.read_text()
    assert len(text.encode()) <= HISTORY_MAX_BYTES // 2
    assert text.startswith("\n# ") and text.endswith(entries[-1])  # whole entries, newest kept


def test_title_requests_carry_no_secrets(kernel_factory, fake_llm):
    """The first exchange sent to the auxiliary model for a title is redacted like every
    other text handed to a summariser."""
    from hermes.runtime.chat import make_title

    kernel = kernel_factory(config=fake_llm.config("openai"))
    store = kernel.session_store
    store.create_session("titled", source="cli")
    secret = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc9Xk2Lq"
    fake_llm.handler = lambda req: Reply(text="Stripe setup")
    make_title(kernel, store, "titled", f"my stripe key is {secret}, set up billing", "Done.")
    bodies = [json.dumps(r.body) for r in fake_llm.requests]
    assert bodies and any("billing" in b for b in bodies)
    assert not any(secret in b for b in bodies)
    assert store.get_session("titled")["title"] == "Stripe setup"
