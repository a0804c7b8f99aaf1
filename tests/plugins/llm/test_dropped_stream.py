"""A connection that drops in the middle of a streamed answer is reported as what it is
(the answer broke off; ask again), never as "cannot reach … check model.base_url and the
network", which sends the user to their settings although the server was reached and had
already answered. Real SDKs against the fake server's ``drop`` fault."""

from __future__ import annotations

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


def looks_like_a_setup_problem(message: str) -> bool:
    return any(s in message for s in ("cannot reach", "base_url", "network"))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_drop_mid_answer_says_the_answer_broke_off(provider, fake_llm):
    fake_llm.queue(Reply(text=TEXT, fault="drop"))
    shown: list[str] = []
    with pytest.raises(hermes.LLMUnavailableError) as info:
        for event in client(provider, fake_llm).stream(
                hermes.LLMRequest(model="fake-model", messages=[{"role": "user", "content": "deploy"}])):
            if event.kind == "text":
                shown.append(event.text)
    message = str(info.value)
    assert shown  # text had arrived: the server was reached
    assert "dropped in the middle of the answer" in message and "ask again" in message
    assert not looks_like_a_setup_problem(message), message
    assert "\n" not in message
    assert len(fake_llm.requests) == 1  # never silently restarted after text was shown


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_agents_notice_for_a_dropped_answer(provider, kernel_factory, fake_llm):
    cfg = fake_llm.config(provider=provider)
    cfg["memory"] = {"nudge_interval": 0}
    agent = Agent(kernel_factory(config=cfg))
    try:
        fake_llm.queue(Reply(text=TEXT, fault="drop"))
        result = agent.run_turn("deploy", on_text=lambda text: None)
        assert result.status == "incomplete"
        note = " ".join(result.notices)
        assert "cut off" in note and "dropped in the middle of the answer" in note
        assert not looks_like_a_setup_problem(note), note
    finally:
        agent.close()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_server_that_cannot_be_reached_still_says_so(provider, fake_llm):
    """Before any answer arrived, a refused connection is a setup question."""
    c = client(provider, fake_llm)
    c.base_url = "http://127.0.0.1:9" + ("/v1" if provider == "openai" else "")  # discard port: refused
    with pytest.raises(hermes.LLMUnavailableError) as info:
        list(c.stream(hermes.LLMRequest(model="fake-model", messages=[{"role": "user", "content": "x"}])))
    assert "cannot reach" in str(info.value)
