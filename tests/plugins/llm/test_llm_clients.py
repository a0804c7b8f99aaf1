"""The anthropic and openai clients, through the real SDKs, against the fake server."""

from __future__ import annotations

import json
import socket

import pytest

import hermes
from hermes.plugins.llm.anthropic_plugin import AnthropicClient, to_anthropic
from hermes.plugins.llm.common import backoff_delay, is_context_length_message, known_context_length
from hermes.plugins.llm.openai_plugin import OpenAIClient, to_openai
from hermes.testing.fakellm import FakeLLMServer, Reply

PROVIDERS = ["anthropic", "openai"]
TOOLS = [{"name": "lookup", "description": "Look a key up.",
          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}]


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def client_for(kernel_factory, fake_llm):
    def make(provider, model="claude-haiku-4-5", **model_cfg):
        cfg = fake_llm.config(provider=provider, model=model)
        cfg["model"].update(model_cfg)
        return kernel_factory(config=cfg).llm_client()

    return make


def ask(text, **kw):
    return hermes.LLMRequest(model=kw.pop("model", "claude-haiku-4-5"),
                             messages=[{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": text}], **kw)


def test_kernel_builds_each_registered_client(client_for):
    assert isinstance(client_for("anthropic"), AnthropicClient)
    assert isinstance(client_for("openai"), OpenAIClient)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_answer(client_for, fake_llm, provider):
    fake_llm.queue(Reply(text="Paris."))
    response = client_for(provider).complete(ask("Capital of France?", max_tokens=50, temperature=0.2))
    assert response.content == "Paris." and response.finish_reason == "stop"
    assert response.tool_calls == [] and response.model == "claude-haiku-4-5"
    assert response.usage.output_tokens == hermes.estimate_tokens("Paris.")
    assert response.usage.prompt_tokens > 0
    body = fake_llm.requests[-1].body
    assert body.get("max_tokens") == 50 and body["temperature"] == 0.2
    if provider == "anthropic":
        assert body["system"] == [{"type": "text", "text": "Be brief."}]
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]}]
    else:
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_streaming_yields_chunks_then_done(client_for, fake_llm, provider):
    answer = "A fairly long streamed answer, cut into several chunks by the server."
    fake_llm.queue(Reply(text=answer))
    events = list(client_for(provider).stream(ask("stream please")))
    texts = [e.text for e in events if e.kind == "text"]
    assert len(texts) > 1 and "".join(texts) == answer
    assert events[-1].kind == "done" and events[-1].response.content == answer
    assert events[-1].response.usage.output_tokens > 0
    assert fake_llm.requests[-1].stream


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("streaming", [False, True])
def test_tool_call_round_trip(client_for, fake_llm, provider, streaming):
    client = client_for(provider)
    fake_llm.queue(Reply(text="Checking.", tool_calls=[
        {"name": "lookup", "arguments": {"key": "alpha"}},
        {"name": "lookup", "arguments": {"key": "beta", "nested": {"x": [1, 2]}}}]))
    request = hermes.LLMRequest(model="claude-haiku-4-5", tools=TOOLS,
                                messages=[{"role": "user", "content": "look both up"}])
    if streaming:
        response = list(client.stream(request))[-1].response
    else:
        response = client.complete(request)
    assert response.finish_reason == "tool_calls"
    assert [json.loads(c["function"]["arguments"]) for c in response.tool_calls] == [
        {"key": "alpha"}, {"key": "beta", "nested": {"x": [1, 2]}}]
    assert all(c["type"] == "function" and c["id"] for c in response.tool_calls)
    sent_tools = fake_llm.requests[-1].body["tools"]
    if provider == "anthropic":
        assert sent_tools[0]["input_schema"] == TOOLS[0]["parameters"]
    else:
        assert sent_tools[0] == {"type": "function", "function": TOOLS[0]}
    # feed the results back: the fake validates pairing exactly like the real API
    messages = request.messages + [response.as_message()] + [
        {"role": "tool", "tool_call_id": c["id"], "name": "lookup", "content": f"value of {i}"}
        for i, c in enumerate(response.tool_calls)]
    fake_llm.handler = lambda req: Reply(text="got " + req.last_user_text)
    final = client.complete(hermes.LLMRequest(model="claude-haiku-4-5", messages=messages, tools=TOOLS))
    assert final.content.startswith("got ")
    last = fake_llm.requests[-1].body["messages"]
    if provider == "anthropic":
        # both results travel in one user message, as tool_result blocks, in order
        assert last[-1]["role"] == "user"
        assert [b["tool_use_id"] for b in last[-1]["content"]] == [c["id"] for c in response.tool_calls]
        assert [b["type"] for b in last[-2]["content"]] == ["text", "tool_use", "tool_use"]
    else:
        assert [m["role"] for m in last] == ["user", "assistant", "tool", "tool"]
        assert "name" not in last[-1]


def test_anthropic_usage_maps_cache_tokens(client_for, fake_llm):
    client = client_for("anthropic")
    system = "You are a careful assistant. " * 300  # > 1024 tokens: cacheable
    first = client.complete(hermes.LLMRequest(
        model="claude-haiku-4-5", cache=True,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "one"}]))
    assert first.usage.cache_write_tokens >= 1024 and first.usage.cache_read_tokens == 0
    second = client.complete(hermes.LLMRequest(
        model="claude-haiku-4-5", cache=True,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "two, longer"}]))
    assert second.usage.cache_read_tokens == hermes.estimate_tokens(system)
    wire = fake_llm.requests[-1].body
    assert second.usage.prompt_tokens == sum(
        hermes.estimate_tokens(b["text"]) for b in wire["system"] + wire["messages"][0]["content"])
    assert second.usage.input_tokens + second.usage.cache_write_tokens == hermes.estimate_tokens("two, longer")


def test_openai_usage_maps_cached_tokens(client_for, fake_llm):
    client = client_for("openai", model="gpt-4o")
    system = {"role": "system", "content": "Stable instructions. " * 400}
    client.complete(hermes.LLMRequest(model="gpt-4o", messages=[system, {"role": "user", "content": "a"}]))
    fake_llm.queue(Reply(text="ok", usage={"completion_tokens_details": {"reasoning_tokens": 7}}))
    usage = client.complete(hermes.LLMRequest(
        model="gpt-4o", messages=[system, {"role": "user", "content": "b"}])).usage
    assert usage.cache_read_tokens >= 1024
    assert usage.input_tokens + usage.cache_read_tokens == usage.prompt_tokens
    assert usage.input_tokens > 0 and usage.reasoning_tokens == 7


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retries_then_success(client_for, fake_llm, provider):
    fake_llm.queue(Reply(error=500), Reply(error=429), Reply(error=529 if provider == "anthropic" else 503),
                   Reply(text="finally"))
    assert client_for(provider).complete(ask("x")).content == "finally"
    assert len(fake_llm.requests) == 4


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stream_retries_before_the_first_chunk(client_for, fake_llm, provider):
    fake_llm.queue(Reply(error=500), Reply(text="after a retry"))
    events = list(client_for(provider).stream(ask("x")))
    assert events[-1].response.content == "after a retry"
    assert len(fake_llm.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status,error", [(500, hermes.LLMUnavailableError), (429, hermes.LLMRateLimitError)])
def test_retry_exhaustion_raises(client_for, fake_llm, provider, status, error):
    fake_llm.handler = lambda req: Reply(error=status)
    with pytest.raises(error) as info:
        client_for(provider, max_retries=2).complete(ask("x"))
    assert len(fake_llm.requests) == 3
    assert info.value.status == status and info.value.retryable
    assert "3 attempts" in str(info.value)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_zero_retries_means_one_attempt(client_for, fake_llm, provider):
    fake_llm.queue(Reply(error=500), Reply(text="never reached"))
    with pytest.raises(hermes.LLMUnavailableError):
        client_for(provider, max_retries=0).complete(ask("x"))
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize("provider,env", [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")])
@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_are_not_retried_and_name_the_setting(client_for, fake_llm, provider, env, status):
    fake_llm.queue(Reply(error=status))
    with pytest.raises(hermes.LLMAuthError) as info:
        client_for(provider).complete(ask("x"))
    assert len(fake_llm.requests) == 1
    assert env in str(info.value) and "model.api_key" in str(info.value)
    assert info.value.status == status and not info.value.retryable


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("streaming", [False, True])
def test_context_length_error(client_for, fake_llm, provider, streaming):
    fake_llm.queue(Reply(error="context_length"))
    client = client_for(provider)
    with pytest.raises(hermes.ContextLengthError):
        if streaming:
            list(client.stream(ask("x")))
        else:
            client.complete(ask("x"))
    assert len(fake_llm.requests) == 1


def test_small_window_server_gives_context_length_error(kernel_factory):
    with FakeLLMServer(context_window=50) as small:
        client = kernel_factory(config=small.config(provider="openai")).llm_client()
        assert client.complete(ask("short")).content == "echo: short"
        with pytest.raises(hermes.ContextLengthError, match="maximum context length is 50"):
            client.complete(ask("long " * 200))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_timeout_is_retried_then_unavailable(client_for, fake_llm, provider):
    fake_llm.queue(Reply(error="timeout"), Reply(text="in time"))
    assert client_for(provider, timeout=0.3).complete(ask("x")).content == "in time"
    fake_llm.queue(Reply(error="timeout"))
    with pytest.raises(hermes.LLMUnavailableError, match="timed out"):
        client_for(provider, timeout=0.3, max_retries=0).complete(ask("x"))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_unreachable_server(kernel_factory, provider):
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = {"model": {"provider": provider, "base_url": f"http://127.0.0.1:{port}/v1",
                        "api_key": "k", "max_retries": 1, "retry_base_delay": 0.0}}
    client = kernel_factory(config=config).llm_client()
    with pytest.raises(hermes.LLMUnavailableError, match="cannot reach"):
        client.complete(ask("x"))


@pytest.mark.parametrize("provider,env", [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")])
def test_missing_credentials_explain_how_to_configure(kernel_factory, provider, env):
    kernel = kernel_factory(config={"model": {"provider": provider}})
    client = kernel.llm_client()  # building the client never fails
    with pytest.raises(hermes.LLMAuthError) as info:
        client.complete(ask("x"))
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert env in lines[0] and "model.api_key" in lines[0]
    assert "model.base_url" in lines[1] and "OpenAI-compatible" in lines[1]
    with pytest.raises(hermes.LLMAuthError):
        list(client.stream(ask("x")))


def test_local_openai_compatible_server_needs_no_key(kernel_factory, fake_llm):
    # like `--base-url http://localhost:11434/v1` for Ollama: no key anywhere
    kernel = kernel_factory(config={"model": {"provider": "openai", "name": "llama3.1",
                                              "base_url": fake_llm.openai_url}})
    assert kernel.llm_client().complete(ask("hi", model="llama3.1")).content == "echo: hi"
    assert fake_llm.requests[-1].headers["authorization"] == "Bearer no-key-required"


def test_explicit_base_url_and_key_win(kernel, fake_llm):
    client = kernel.llm_client("openai", base_url=fake_llm.openai_url, api_key="explicit")
    assert client.complete(ask("hi")).content == "echo: hi"
    assert fake_llm.requests[-1].headers["authorization"] == "Bearer explicit"


def test_env_variables_are_the_fallback(kernel_factory, fake_llm, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env-too")
    kernel = kernel_factory(config={"model": {"provider": "openai"}})
    kernel.llm_client().complete(ask("x"))
    assert fake_llm.requests[-1].headers["authorization"] == "Bearer from-env"
    kernel.llm_client("anthropic").complete(ask("x"))
    headers = fake_llm.requests[-1].headers
    assert "from-env-too" in (headers.get("x-api-key", "") + headers.get("authorization", ""))


def test_env_reference_in_config_is_resolved(kernel_factory, fake_llm, monkeypatch):
    monkeypatch.setenv("MY_KEY", "secret-from-env")
    cfg = fake_llm.config(provider="openai")
    cfg["model"]["api_key"] = {"$env": "MY_KEY"}
    kernel_factory(config=cfg).llm_client().complete(ask("x"))
    assert fake_llm.requests[-1].headers["authorization"] == "Bearer secret-from-env"


def test_model_section_applies_only_to_the_configured_provider(kernel_factory, fake_llm):
    kernel = kernel_factory(config=fake_llm.config(provider="openai"))
    other = kernel.llm_client("anthropic")
    assert other.base_url is None and other.api_key() is None


def test_openai_reasoning_models_take_max_completion_tokens(client_for, fake_llm):
    client = client_for("openai", model="o3-mini")
    client.complete(hermes.LLMRequest(model="o3-mini", messages=[{"role": "user", "content": "x"}],
                                      max_tokens=99, extra={"reasoning_effort": "low"}))
    body = fake_llm.requests[-1].body
    assert body["max_completion_tokens"] == 99 and "max_tokens" not in body
    assert body["reasoning_effort"] == "low"


def test_anthropic_max_tokens_default_and_config(client_for, fake_llm):
    client_for("anthropic").complete(ask("x"))
    assert fake_llm.requests[-1].body["max_tokens"] == 8192
    client_for("anthropic", max_tokens=321).complete(ask("x"))
    assert fake_llm.requests[-1].body["max_tokens"] == 321


# -- conversion -----------------------------------------------------------------------


def call(cid, name="f", args='{"a": 1}'):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def test_to_anthropic_shapes():
    system, msgs = to_anthropic([
        {"role": "system", "content": "S"},
        {"role": "user", "content": "u1"},
        {"role": "user", "content": [{"type": "text", "text": "u2"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": "", "tool_calls": [call("t1"), call("t2", args="not json")]},
        {"role": "tool", "tool_call_id": "t1", "content": "r1"},
        {"role": "tool", "tool_call_id": "t2", "content": ""},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": "done"},
    ])
    assert system == [{"type": "text", "text": "S"}]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[0]["content"] == [
        {"type": "text", "text": "u1"}, {"type": "text", "text": "u2"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]
    assert msgs[1]["content"] == [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                                  {"type": "tool_use", "id": "t2", "name": "f", "input": {"_raw": "not json"}}]
    assert msgs[2]["content"] == [{"type": "tool_result", "tool_use_id": "t1", "content": "r1"},
                                  {"type": "tool_result", "tool_use_id": "t2"},
                                  {"type": "text", "text": "next"}]
    assert msgs[3]["content"] == [{"type": "text", "text": "done"}]


def test_to_openai_drops_non_wire_keys():
    assert to_openai({"role": "tool", "tool_call_id": "c", "name": "f", "content": None,
                      "timestamp": 1}) == {"role": "tool", "tool_call_id": "c", "content": ""}
    assert to_openai({"role": "assistant", "content": "", "tool_calls": [call("c")], "reasoning": "r"}) == {
        "role": "assistant", "content": None, "tool_calls": [call("c")]}
    assert to_openai({"role": "user", "content": None, "_meta": 1}) == {"role": "user", "content": ""}


# -- tables and helpers ---------------------------------------------------------------


@pytest.mark.parametrize("model,window", [
    ("claude-sonnet-4-5", 200_000), ("claude-haiku-4-5", 200_000), ("anthropic/claude-3.5-sonnet", 200_000),
    ("claude-opus-4-6", 1_000_000), ("gpt-4o", 128_000), ("gpt-4o-mini", 128_000),
    ("openai/gpt-4o-2024-08-06", 128_000), ("gpt-4.1-mini", 1_047_576), ("gpt-4", 8_192),
    ("gpt-5-mini", 400_000), ("o3-mini", 200_000), ("qwen2.5-coder:32b", 131_072),
    ("llama3.1:8b", 131_072), ("deepseek-chat", 128_000), ("gemini-2.5-pro", 1_048_576),
    ("my-local-model", None), ("foo1", None), ("", None),
])
def test_known_context_lengths(model, window):
    assert known_context_length(model) == window
    assert OpenAIClient().context_length(model) == window == AnthropicClient().context_length(model)


@pytest.mark.parametrize("text", [
    "prompt is too long: 210000 tokens > 200000 maximum",
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    "input length and `max_tokens` exceed context limit: 190000 + 21333 > 200000",
    "The prompt (9000 tokens) is longer than max_model_len (8192)",
    "Error code: context_length_exceeded",
])
def test_context_length_messages_are_recognized(text):
    assert is_context_length_message(text)


def test_other_messages_are_not_context_errors():
    assert not is_context_length_message("Invalid model name")
    assert not is_context_length_message("")


def test_backoff_grows_and_is_capped():
    delays = [backoff_delay(n, 1.0) for n in range(4)]
    assert all(0.5 * 2**n <= d < 1.5 * 2**n for n, d in enumerate(delays))
    assert backoff_delay(20, 1.0) == 60.0
    assert backoff_delay(0, 0.01, retry_after=2.0) == 2.0
    assert backoff_delay(0, 0.0) == 0.0
