"""The fake LLM server, driven by the real ``openai`` and ``anthropic`` SDKs."""

from __future__ import annotations

import json
import math

import anthropic
import openai
import pytest

from hermes import estimate_tokens
from hermes.testing.fakellm import FakeLLMServer, Reply, embed

WORDS = "lorem ipsum dolor sit amet " * 120  # ~750 tokens of stable text


@pytest.fixture
def server():
    with FakeLLMServer(min_cache_tokens=200) as srv:
        yield srv


@pytest.fixture
def oai(server):
    return openai.OpenAI(base_url=server.openai_url, api_key="k", max_retries=0, timeout=5)


@pytest.fixture
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0, timeout=5)


def user(text):
    return {"role": "user", "content": text}


# -- OpenAI ---------------------------------------------------------------------------


def test_openai_default_echo_and_recording(server, oai):
    out = oai.chat.completions.create(model="fake-model", messages=[user("what is up")])
    assert out.choices[0].message.content == "echo: what is up"
    assert out.choices[0].finish_reason == "stop"
    req = server.requests[-1]
    assert (req.api, req.path, req.model) == ("openai", "/v1/chat/completions", "fake-model")
    assert req.body["messages"] == [user("what is up")]
    assert req.headers["authorization"] == "Bearer k"
    assert out.usage.prompt_tokens > 0
    assert out.usage.completion_tokens == estimate_tokens("echo: what is up")


def test_openai_queue_then_handler_then_echo(server, oai):
    server.queue(Reply(text="queued"))
    server.handler = lambda req: Reply(text="handled " + req.last_user_text)
    texts = [oai.chat.completions.create(model="m", messages=[user(f"q{i}")]).choices[0].message.content
             for i in range(2)]
    assert texts == ["queued", "handled q1"]
    server.handler = None
    assert oai.chat.completions.create(model="m", messages=[user("x")]).choices[0].message.content == "echo: x"
    server.reset()
    assert server.requests == [] and server.pending == 0


def test_openai_tool_calls_round_trip(server, oai):
    server.queue(Reply(tool_calls=[{"name": "lookup", "arguments": {"key": "a"}, "id": "call_1"},
                                   {"name": "lookup", "arguments": {"key": "b"}}]))
    out = oai.chat.completions.create(model="m", messages=[user("look")])
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls[0].id == "call_1"
    assert [json.loads(c.function.arguments) for c in msg.tool_calls] == [{"key": "a"}, {"key": "b"}]
    history = [user("look"), msg.model_dump(exclude_none=True)]
    history += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in msg.tool_calls]
    assert oai.chat.completions.create(model="m", messages=history).choices[0].message.content


def test_openai_stream_text_tools_and_usage(server, oai):
    server.queue(Reply(text="a streamed answer that is long enough to be chunked",
                       tool_calls=[{"name": "f", "arguments": {"x": [1, 2, 3], "y": "zzzzzzzzzzzz"}}]))
    stream = oai.chat.completions.create(model="m", messages=[user("s")], stream=True,
                                         stream_options={"include_usage": True})
    text, args, usage, finish, names = [], {}, None, None, {}
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            if choice.delta.content:
                text.append(choice.delta.content)
            for call in choice.delta.tool_calls or []:
                args[call.index] = args.get(call.index, "") + (call.function.arguments or "")
                if call.function.name:
                    names[call.index] = call.function.name
    assert len(text) > 1 and "".join(text) == "a streamed answer that is long enough to be chunked"
    assert names == {0: "f"} and json.loads(args[0]) == {"x": [1, 2, 3], "y": "zzzzzzzzzzzz"}
    assert finish == "tool_calls"
    assert usage is not None and usage.completion_tokens > 0


def test_openai_automatic_prefix_caching(server, oai):
    system = {"role": "system", "content": WORDS}
    first = oai.chat.completions.create(model="m", messages=[system, user("one")])
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = oai.chat.completions.create(model="m", messages=[system, user("two")])
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 200 <= cached < second.usage.prompt_tokens


@pytest.mark.parametrize("status,exc", [(429, openai.RateLimitError), (500, openai.InternalServerError),
                                        (401, openai.AuthenticationError),
                                        (403, openai.PermissionDeniedError)])
def test_openai_errors(server, oai, status, exc):
    server.queue(Reply(error=status))
    with pytest.raises(exc) as info:
        oai.chat.completions.create(model="m", messages=[user("x")])
    assert info.value.status_code == status
    assert "message" in info.value.body


def test_openai_context_length_error(server, oai):
    server.queue(Reply(error="context_length"))
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model="m", messages=[user("x")])
    assert info.value.code == "context_length_exceeded"
    assert "maximum context length" in str(info.value)


def test_context_window_rejects_long_requests():
    with FakeLLMServer(context_window=100) as srv:
        client = openai.OpenAI(base_url=srv.openai_url, api_key="k", max_retries=0)
        client.chat.completions.create(model="m", messages=[user("short")])
        with pytest.raises(openai.BadRequestError, match="maximum context length is 100"):
            client.chat.completions.create(model="m", messages=[user(WORDS)])


def test_openai_orphan_tool_result_is_rejected(server, oai):
    with pytest.raises(openai.BadRequestError, match="must be a response to a preceeding"):
        oai.chat.completions.create(model="m", messages=[
            user("x"), {"role": "tool", "tool_call_id": "nope", "content": "r"}])
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    with pytest.raises(openai.BadRequestError, match="did not have response messages: c1"):
        oai.chat.completions.create(model="m", messages=[
            user("x"), {"role": "assistant", "content": None, "tool_calls": calls}, user("y")])


def test_timeout_reply_outlasts_the_client_timeout(server):
    client = openai.OpenAI(base_url=server.openai_url, api_key="k", max_retries=0, timeout=0.3)
    server.queue(Reply(error="timeout"))
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[user("x")])
    # the server keeps serving afterwards
    assert client.chat.completions.create(model="m", messages=[user("y")]).choices[0].message.content == "echo: y"


def test_handler_exception_becomes_a_server_error(server, oai):
    server.handler = lambda req: 1 / 0
    with pytest.raises(openai.InternalServerError, match="ZeroDivisionError"):
        oai.chat.completions.create(model="m", messages=[user("x")])


# -- embeddings -----------------------------------------------------------------------


def test_embeddings_are_deterministic_unit_vectors(server, oai):
    out = oai.embeddings.create(model="e", input=["alpha", "beta", "alpha"])  # base64 on the wire
    vectors = [d.embedding for d in out.data]
    assert len(vectors[0]) == 64
    assert vectors[0] == pytest.approx(vectors[2]) and vectors[0] != pytest.approx(vectors[1])
    assert math.isclose(sum(v * v for v in vectors[0]), 1.0, rel_tol=1e-5)
    assert vectors[0] == pytest.approx(embed("alpha", 64), abs=1e-6)
    floats = oai.embeddings.create(model="e", input="alpha", dimensions=8, encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(embed("alpha", 8))
    assert server.requests[-1].api == "embeddings"


def test_embedding_requests_do_not_consume_chat_replies(server, oai):
    server.queue(Reply(text="for chat"))
    server.queue(Reply(error=500), api="embeddings")
    with pytest.raises(openai.InternalServerError):
        oai.embeddings.create(model="e", input="x")
    oai.embeddings.create(model="e", input="x")
    assert oai.chat.completions.create(model="m", messages=[user("x")]).choices[0].message.content == "for chat"


# -- Anthropic ------------------------------------------------------------------------


def test_anthropic_text_and_tool_use(server, claude):
    server.queue(Reply(text="let me look", tool_calls=[{"name": "lookup", "arguments": {"k": 1}}]))
    msg = claude.messages.create(model="claude-x", max_tokens=50, messages=[user("hi")])
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    use = msg.content[1]
    assert (use.name, use.input) == ("lookup", {"k": 1})
    follow = claude.messages.create(model="claude-x", max_tokens=50, messages=[
        user("hi"), {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42"}]}])
    assert follow.content[0].text == "echo: 42"
    assert server.requests[-1].api == "anthropic"
    headers = server.requests[-1].headers
    assert headers.get("x-api-key") == "k" or headers.get("authorization") == "Bearer k"


def test_anthropic_stream(server, claude):
    server.queue(Reply(text="streaming text in several small pieces",
                       tool_calls=[{"name": "f", "arguments": {"a": "b" * 30}}]))
    with claude.messages.stream(model="c", max_tokens=50, messages=[user("hi")]) as stream:
        chunks = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(chunks) > 1 and "".join(chunks) == "streaming text in several small pieces"
    assert final.content[1].input == {"a": "b" * 30}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens > 1 and final.usage.input_tokens > 0


def test_anthropic_cache_accounting(server, claude):
    marker = {"type": "ephemeral"}
    system = [{"type": "text", "text": WORDS, "cache_control": marker}]
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]

    def call(messages):
        return claude.messages.create(model="c", max_tokens=10, system=system, tools=tools,
                                      messages=messages).usage

    first = call([user("first question")])
    assert first.cache_read_input_tokens == 0
    assert first.cache_creation_input_tokens >= 200
    assert first.cache_creation.ephemeral_5m_input_tokens == first.cache_creation_input_tokens
    second = call([user("second question, a different one")])
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.input_tokens == estimate_tokens("second question, a different one")
    # markers on the conversation: the previous breakpoint is found by lookback
    turn1 = [{"role": "user", "content": [{"type": "text", "text": WORDS + "x", "cache_control": marker}]}]
    u1 = call(turn1)
    assert u1.cache_read_input_tokens == first.cache_creation_input_tokens
    assert u1.cache_creation_input_tokens == estimate_tokens(WORDS + "x")
    turn2 = [{"role": "user", "content": WORDS + "x"}, {"role": "assistant", "content": "ok"},
             {"role": "user", "content": [{"type": "text", "text": "more", "cache_control": marker}]}]
    u2 = call(turn2)
    assert u2.cache_read_input_tokens == first.cache_creation_input_tokens + u1.cache_creation_input_tokens
    assert u2.cache_creation_input_tokens == estimate_tokens("ok") + estimate_tokens("more")
    assert u2.input_tokens == 0


def test_anthropic_short_prefixes_are_not_cached(server, claude):
    system = [{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):
        usage = claude.messages.create(model="c", max_tokens=5, system=system, messages=[user("q")]).usage
        assert usage.cache_creation_input_tokens == 0 and usage.cache_read_input_tokens == 0


def test_anthropic_one_hour_ttl_is_reported(server, claude):
    system = [{"type": "text", "text": WORDS, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    usage = claude.messages.create(model="c", max_tokens=5, system=system, messages=[user("q")]).usage
    assert usage.cache_creation.ephemeral_1h_input_tokens == usage.cache_creation_input_tokens > 0


def test_anthropic_more_than_four_breakpoints_is_rejected(server, claude):
    marker = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": marker} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks with cache_control"):
        claude.messages.create(model="c", max_tokens=5, system=blocks, messages=[user("q")])


@pytest.mark.parametrize("messages,match", [
    ([{"role": "user", "content": ""}], "non-empty content"),
    ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "text content blocks must be non-empty"),
    ([user("a"), {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
      user("b")], "without `tool_result`"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "r"}]}],
     "unexpected `tool_use_id`"),
    ([{"role": "system", "content": "s"}, user("a")], "user' or 'assistant"),
])
def test_anthropic_validation(server, claude, messages, match):
    with pytest.raises(anthropic.BadRequestError, match=match):
        claude.messages.create(model="c", max_tokens=5, messages=messages)


@pytest.mark.parametrize("status,exc", [(429, anthropic.RateLimitError), (500, anthropic.InternalServerError),
                                        (529, anthropic.InternalServerError),
                                        (401, anthropic.AuthenticationError),
                                        (403, anthropic.PermissionDeniedError)])
def test_anthropic_errors(server, claude, status, exc):
    server.queue(Reply(error=status))
    with pytest.raises(exc) as info:
        claude.messages.create(model="c", max_tokens=5, messages=[user("x")])
    assert info.value.status_code == status
    assert info.value.body["type"] == "error"


def test_anthropic_context_length_message(server, claude):
    server.queue(Reply(error="context_length"))
    with pytest.raises(anthropic.BadRequestError, match=r"prompt is too long: \d+ tokens > 200000 maximum"):
        claude.messages.create(model="c", max_tokens=5, messages=[user("x")])


def test_count_tokens(server, claude):
    count = claude.messages.count_tokens(model="c", messages=[user(WORDS)])
    assert count.input_tokens == estimate_tokens(WORDS)


def test_config_points_a_kernel_at_the_server(fake_llm):
    cfg = fake_llm.config(provider="anthropic", model="claude-x")
    assert cfg["model"]["base_url"] == fake_llm.url and cfg["model"]["name"] == "claude-x"
    assert fake_llm.config()["model"]["base_url"] == fake_llm.openai_url
    cfg["model"]["name"] = "edited"
    assert fake_llm.config()["model"]["name"] == "fake-model"
    with pytest.raises(ValueError):
        fake_llm.config(provider="gemini")


def test_config_is_accepted_by_the_kernel(fake_llm, kernel_factory):
    kernel = kernel_factory(config=fake_llm.config(provider="openai"))
    assert kernel.config.get("model.base_url") == fake_llm.openai_url
