"""Broken answers from a flaky proxy or a wrong base_url, through the real SDKs against
the fake server's fault modes: a stream cut mid-answer is marked incomplete (never a
complete answer), a 200 with a body that is not the API's answer is one clear
LLMError (never an AssertionError or JSONDecodeError traceback), and a connection that
drops mid-answer says the answer broke off (ask again), never "cannot reach … check
model.base_url and the network": the server was reached and had already answered."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import hermes
from hermes.plugins.llm.anthropic_plugin import AnthropicClient
from hermes.plugins.llm.openai_plugin import OpenAIClient
from hermes.runtime.agent import Agent
from hermes.testing.fakellm import Reply

TEXT = "The deployment finished and every check passed without a warning. " * 3
PROVIDERS = ["openai", "anthropic"]


def client(provider: str, fake_llm):
    cls, url = ((OpenAIClient, fake_llm.openai_url) if provider == "openai"
                else (AnthropicClient, fake_llm.url))
    return cls(base_url=url, api_key="fake-key", max_retries=1, retry_base_delay=0.01, timeout=10)


def request() -> hermes.LLMRequest:
    return hermes.LLMRequest(model="fake-model", messages=[{"role": "user", "content": "deploy"}])


def looks_like_a_setup_problem(message: str) -> bool:
    return any(s in message for s in ("cannot reach", "base_url", "network"))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_cut_mid_answer_is_incomplete(provider, fake_llm):
    fake_llm.queue(Reply(text=TEXT, fault="cut",
                         tool_calls=[{"name": "rollback", "arguments": {"all": True}}]))
    events = list(client(provider, fake_llm).stream(request()))
    response = events[-1].response
    assert response.finish_reason == "incomplete"
    assert 0 < len(response.content) < len(TEXT) and TEXT.startswith(response.content)
    assert response.tool_calls == []  # a half-received tool call is never run


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault", ["plain", "truncated", "html"])
@pytest.mark.parametrize("mode", ["stream", "complete"])
def test_a_body_that_is_not_the_api_answer_is_one_clear_error(provider, fault, mode, fake_llm):
    c = client(provider, fake_llm)
    fake_llm.queue(Reply(text=TEXT, fault=fault), Reply(text=TEXT, fault=fault))
    if fault == "plain" and mode == "complete":
        assert c.complete(request()).content == TEXT  # a plain body is right for complete()
        return
    with pytest.raises(hermes.LLMError) as info:
        if mode == "stream":
            list(c.stream(request()))
        else:
            c.complete(request())
    message = str(info.value)
    assert "not a valid" in message and "model.base_url" in message and "\n" not in message
    assert type(info.value) is hermes.LLMError  # not retried: trying again cannot help


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_drop_mid_answer_says_the_answer_broke_off(provider, fake_llm):
    fake_llm.queue(Reply(text=TEXT, fault="drop"))
    shown: list[str] = []
    with pytest.raises(hermes.LLMUnavailableError) as info:
        for event in client(provider, fake_llm).stream(request()):
            if event.kind == "text":
                shown.append(event.text)
    message = str(info.value)
    assert shown  # text had arrived: the server was reached
    assert "dropped in the middle of the answer" in message and "ask again" in message
    assert not looks_like_a_setup_problem(message), message
    assert "\n" not in message
    assert len(fake_llm.requests) == 1  # never silently restarted after text was shown


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_server_that_cannot_be_reached_still_says_so(provider, fake_llm):
    """Before any answer arrived, a refused connection is a setup question."""
    c = client(provider, fake_llm)
    c.base_url = "http://127.0.0.1:9" + ("/v1" if provider == "openai" else "")  # discard port: refused
    with pytest.raises(hermes.LLMUnavailableError) as info:
        list(c.stream(request()))
    assert "cannot reach" in str(info.value)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault", ["cut", "drop"])
def test_the_agent_stores_a_cut_answer_marked_incomplete(provider, fault, kernel_factory, fake_llm):
    cfg = fake_llm.config(provider=provider)
    cfg["memory"] = {"nudge_interval": 0}
    agent = Agent(kernel_factory(config=cfg))
    try:
        fake_llm.queue(Reply(text=TEXT, fault=fault))
        shown: list[str] = []
        result = agent.run_turn("deploy", on_text=shown.append)
        assert result.status == "incomplete"
        assert result.answer == "".join(shown) and 0 < len(result.answer) < len(TEXT)
        note = " ".join(result.notices)
        assert "cut off" in note
        if fault == "drop":
            assert "dropped in the middle of the answer" in note
            assert not looks_like_a_setup_problem(note), note
        stored = agent.store.get_messages(agent.session_id)[-1]
        assert stored["role"] == "assistant" and stored["finish_reason"] == "incomplete"
        assert stored["content"] == result.answer
        # the next turn goes on normally (the transcript is valid)
        assert agent.run_turn("again", on_text=shown.append).status == "ok"
    finally:
        agent.close()


@pytest.mark.slow  # a hermes process; the in-process broken-response tests stay fast
def test_hermes_chat_against_a_web_page_prints_one_line(tmp_path, fake_llm):
    fake_llm.handler = lambda req: Reply(text="x", fault="html")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(HERMES_HOME=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "hermes.cli", "chat", "--provider", "openai", "--base-url",
         fake_llm.openai_url, "--model", "fake-model", "-q", "hello"],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "not a valid openai API response" in proc.stderr and "model.base_url" in proc.stderr
