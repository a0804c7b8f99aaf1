"""cache_control placement (system and last 3), on copies, idempotent, ≤ 4 breakpoints."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

import hermes
from hermes.plugins.llm.anthropic_plugin import AnthropicClient, to_anthropic
from hermes.plugins.llm.caching import (
    apply_cache_control,
    can_carry_marker,
    count_cache_markers,
    is_claude_model,
    strip_cache_control,
)
from hermes.plugins.llm.openai_plugin import OpenAIClient

EPH = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def call(cid):
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def transcript():
    return [
        {"role": "system", "content": "system prompt"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": "second"},
    ]


def test_system_and_last_three_native():
    out = apply_cache_control(transcript())
    assert out[0]["content"] == [{"type": "text", "text": "system prompt", "cache_control": EPH}]
    assert out[1] is transcript()[1] or out[1] == transcript()[1]  # untouched
    assert "cache_control" not in out[2] and "cache_control" not in out[1]
    assert out[3]["cache_control"] == EPH and out[3]["content"] == "result"  # tool: message level
    assert out[4]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": EPH}]
    assert out[5]["content"] == [{"type": "text", "text": "second", "cache_control": EPH}]
    assert count_cache_markers(out) == 4


def test_empty_content_and_tool_calls_get_a_message_level_marker_natively():
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": ""},
            {"role": "assistant", "content": "with text", "tool_calls": [call("c2")]},
            {"role": "tool", "tool_call_id": "c2", "content": "r"}]
    out = apply_cache_control(msgs)
    assert [("cache_control" in m) for m in out] == [False, True, True, True, True]
    assert out[3]["content"] == "with text"  # the whole message is covered, not just the text
    _, wire = to_anthropic(out)
    # each marker landed on the last block of its converted message
    assert wire[1]["content"][-1]["cache_control"] == EPH  # tool_use c1
    assert wire[2]["content"][0] == {"type": "tool_result", "tool_use_id": "c1", "cache_control": EPH}
    assert wire[3]["content"][-1]["type"] == "tool_use" and wire[3]["content"][-1]["cache_control"] == EPH
    assert wire[4]["content"][-1]["cache_control"] == EPH


def test_envelope_routes_skip_messages_that_cannot_carry_a_part_marker():
    out = apply_cache_control(transcript(), native=False)
    # tool row "result" can (string), empty assistant cannot: marks go further back
    marked = [i for i, m in enumerate(out) if count_cache_markers([m])]
    assert marked == [0, 3, 4, 5]
    assert out[3]["content"] == [{"type": "text", "text": "result", "cache_control": EPH}]
    assert all("cache_control" not in m for m in out)  # never message level on envelopes
    assert not can_carry_marker({"role": "assistant", "content": ""}, native=False)
    assert not can_carry_marker({"role": "user", "content": ["plain string part"]}, native=False)
    assert can_carry_marker({"role": "assistant", "content": ""}, native=True)


def test_no_system_means_four_message_breakpoints():
    out = apply_cache_control(transcript()[1:])
    assert count_cache_markers(out) == 4
    assert "cache_control" not in str(out[0])


def test_empty_system_gets_no_breakpoint():
    msgs = [{"role": "system", "content": ""}] + transcript()[1:]
    out = apply_cache_control(msgs)
    assert out[0] == {"role": "system", "content": ""}
    assert count_cache_markers(out) == 4


def test_one_hour_ttl():
    out = apply_cache_control(transcript(), ttl="1h")
    assert out[0]["content"][0]["cache_control"] == HOUR
    assert out[3]["cache_control"] == HOUR
    assert "1h" not in json.dumps(apply_cache_control(transcript(), ttl="5m"))


def test_short_and_empty_inputs():
    assert apply_cache_control([]) == []
    one = [{"role": "user", "content": "hi"}]
    assert apply_cache_control(one) == [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPH}]}]


def test_idempotent_and_never_more_than_four():
    once = apply_cache_control(transcript())
    assert apply_cache_control(once) == once
    hour = apply_cache_control(once, ttl="1h")  # re-decoration switches the TTL everywhere
    assert apply_cache_control(hour, ttl="1h") == hour == apply_cache_control(transcript(), ttl="1h")
    # foreign markers (a proxy, an earlier decoration) are replaced, not accumulated
    dirty = copy.deepcopy(transcript())
    dirty[1]["content"] = [{"type": "text", "text": "first", "cache_control": EPH}]
    dirty[2]["cache_control"] = EPH
    assert count_cache_markers(apply_cache_control(dirty)) == 4


def test_input_is_never_mutated():
    msgs = transcript()
    before = copy.deepcopy(msgs)
    out = apply_cache_control(msgs)
    assert msgs == before
    assert out is not msgs
    assert out[1] is msgs[1]  # unmarked rows are shared, marked ones copied
    assert out[5] is not msgs[5]


def as_parts(msgs):
    """Strings as one text part: what decoration does to content, markers aside."""
    return [dict(m, content=[{"type": "text", "text": m["content"]}])
            if isinstance(m.get("content"), str) and m["content"] else m for m in msgs]


def test_strip_restores_the_original():
    assert as_parts(strip_cache_control(apply_cache_control(transcript()))) == as_parts(transcript())


def test_claude_detection():
    assert is_claude_model("claude-haiku-4-5") and is_claude_model("anthropic/claude-3.5-sonnet")
    assert not is_claude_model("gpt-4o") and not is_claude_model("llama3.1")


def request(model, **kw):
    return hermes.LLMRequest(model=model, messages=transcript(), **kw)


def test_anthropic_request_builder_places_markers():
    params = AnthropicClient().build_params(request("claude-haiku-4-5", cache=True))
    text = json.dumps(params)
    assert text.count('"cache_control"') == 4
    assert params["system"][0]["cache_control"] == EPH
    assert AnthropicClient().build_params(request("claude-haiku-4-5", cache=True, cache_ttl="1h"))[
        "system"][0]["cache_control"] == HOUR
    assert "cache_control" not in json.dumps(AnthropicClient().build_params(request("claude-haiku-4-5")))


def test_caching_is_off_for_non_claude_models():
    for client in (AnthropicClient(), OpenAIClient()):
        assert not client.supports_prompt_caching("gpt-4o")
        params = client.build_params(request("gpt-4o", cache=True))
        assert "cache_control" not in json.dumps(params)


def test_openai_client_marks_claude_on_router_routes():
    client = OpenAIClient()
    assert client.supports_prompt_caching("anthropic/claude-sonnet-4.5")
    params = client.build_params(request("anthropic/claude-sonnet-4.5", cache=True))
    assert json.dumps(params).count('"cache_control"') == 4
    assert all("cache_control" not in m for m in params["messages"])  # parts only


def test_cached_prefix_is_read_on_the_next_turn(kernel_factory, fake_llm):
    client = kernel_factory(config=fake_llm.config(provider="anthropic", model="claude-haiku-4-5")).llm_client()
    messages = [{"role": "system", "content": "Rules of the house. " * 300}]
    usages = []
    for turn in range(3):
        messages.append({"role": "user", "content": f"question {turn} " + "detail " * 50})
        response = client.complete(hermes.LLMRequest(model="claude-haiku-4-5", messages=messages, cache=True))
        usages.append(response.usage)
        messages.append(response.as_message())
    assert usages[0].cache_read_tokens == 0 and usages[0].cache_write_tokens > 1024
    for previous, usage in zip(usages, usages[1:], strict=False):
        # everything the previous call sent is read back; only the new turn is written
        assert usage.cache_read_tokens == previous.prompt_tokens
        assert usage.input_tokens == 0
    for req in fake_llm.requests:
        assert 1 <= json.dumps(req.body).count('"cache_control"') <= 4


# -- property tests -------------------------------------------------------------------

texts = st.text(alphabet="abc xyz", max_size=8)
contents = st.one_of(
    st.none(), texts,
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=3),
)


@st.composite
def transcripts(draw):
    msgs = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(texts)})
    n = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "tools":
            ids = [f"c{n + i}" for i in range(draw(st.integers(1, 3)))]
            n += len(ids)
            msgs.append({"role": "assistant", "content": draw(contents),
                         "tool_calls": [call(i) for i in ids]})
            msgs += [{"role": "tool", "tool_call_id": i, "content": draw(contents)} for i in ids]
        else:
            msgs.append({"role": kind, "content": draw(contents)})
    return msgs


@settings(max_examples=200, deadline=None)
@given(transcripts(), st.booleans(), st.sampled_from(["5m", "1h"]))
def test_property_placement(msgs, native, ttl):
    before = copy.deepcopy(msgs)
    out = apply_cache_control(msgs, ttl=ttl, native=native)
    assert msgs == before  # never mutated
    assert len(out) == len(msgs)
    assert count_cache_markers(out) <= 4
    assert apply_cache_control(out, ttl=ttl, native=native) == out  # idempotent
    assert as_parts(strip_cache_control(out)) == as_parts(msgs)  # markers are the only change
    carriers = [m for m in msgs if m["role"] != "system" and can_carry_marker(m, native=native)]
    has_system = bool(msgs) and msgs[0]["role"] == "system" and bool(msgs[0]["content"])
    expected = min(len(carriers), 4 - has_system) + has_system
    assert count_cache_markers(out) == expected
    if native and msgs and msgs[-1]["role"] != "system":
        assert count_cache_markers([out[-1]]) == 1  # the newest message is always covered
    _, wire = to_anthropic(out)
    system, _ = to_anthropic(out[:1]) if has_system else ([], None)
    assert json.dumps(wire).count('"cache_control"') + json.dumps(system).count('"cache_control"') <= 4
