"""Property tests of the ``compressor`` over random tool-using transcripts: the result is
a valid transcript (alternation, every tool result right after its call, no orphans), the
head and the newest user message survive verbatim, exactly one summary remains after
repeated compactions, and the input is never mutated — with the local fallback summary
and with real summaries from the fake LLM server."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hermes
from hermes.plugins.compressor.engine import Compressor
from hermes.plugins.compressor.transcript import classify
from hermes.testing.conformance.context import transcript_problems
from hermes.testing.fakellm import FakeLLMServer, Reply

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOOLS = ("read_file", "terminal", "search_files", "write_file")

text = st.one_of(
    st.text(alphabet="abcdefghij klmnop\n", min_size=1, max_size=300),
    st.sampled_from(["修复测试", "日本語のテキスト", "ok", "Résumé café"]).map(lambda s: s * 20),
)
result_sizes = st.sampled_from([0, 40, 250, 900, 2_500, 6_000])


@st.composite
def transcripts(draw: Any, max_turns: int = 24, start_id: int = 0, system: bool = True) -> list[dict]:
    """A valid conversation: user requests, tool-call rounds (parallel calls, repeated
    outputs, long JSON arguments), answers; it may end on a request, a reply or results."""
    msgs: list[dict] = [{"role": "system", "content": draw(text)}] if system else []
    n = start_id
    turns = draw(st.integers(1, max_turns))
    previous = "same output\n" * 30
    for turn in range(turns):
        msgs.append({"role": "user", "content": f"request {start_id}-{turn}: " + draw(text)})
        last_turn = turn == turns - 1
        for _ in range(draw(st.integers(0, 3))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                n += 1
                args: dict[str, Any] = {"path": f"src/m{n}.py"}
                if draw(st.booleans()):
                    args["content"] = "payload " * draw(st.sampled_from([1, 100, 400]))
                calls.append({"id": f"call_{n}", "type": "function", "function": {
                    "name": draw(st.sampled_from(TOOLS)), "arguments": json.dumps(args)}})
            msgs.append({"role": "assistant", "content": draw(st.sampled_from(["", "checking", None])),
                         "tool_calls": calls})
            for call in calls:
                size = draw(result_sizes)
                body = previous if draw(st.integers(0, 9)) == 0 else ("result line\n" * (size // 12))
                previous = body
                msgs.append({"role": "tool", "tool_call_id": call["id"],
                             "name": call["function"]["name"], "content": body})
        if last_turn and draw(st.booleans()):
            break  # end on a request or on tool results (the state before a model call)
        msgs.append({"role": "assistant", "content": "answer: " + draw(text)})
    assert not transcript_problems(msgs), transcript_problems(msgs)
    return msgs


def newest_user_content(messages: list[dict]) -> Any:
    """The newest user request, as the user wrote it (a request that an earlier
    compaction merged with its summary counts by its own text, not the summary's)."""
    for msg in reversed(messages):
        if msg["role"] == "user" and (msg.get("content") or "").strip():
            return genuine(msg)
    return None


def genuine(msg: dict) -> Any:
    shape = classify(msg)
    return msg.get("content") if shape is None else shape.genuine


def summaries(messages: list[dict]) -> int:
    return sum(1 for m in messages if hermes.is_compaction_summary(m))


def engine_for(window: int, **kwargs: Any) -> Compressor:
    engine = Compressor(**kwargs)
    engine.update_model("m", window)
    return engine


windows = st.sampled_from([4_000, 8_000, 32_000])


def check(engine: Compressor, before: list[dict], out: list[dict], *, first: bool) -> None:
    problems = transcript_problems(out)
    assert not problems, problems
    info = engine.last_compression
    if not info["committed"]:
        assert out == before
        return
    assert summaries(out) == 1
    assert out[0]["role"] == "system" and out[0]["content"].startswith(before[0]["content"])
    newest = newest_user_content(before)
    if newest is not None:
        assert any(m["role"] == "user" and genuine(m) == newest for m in out), "newest request lost"
    if first:  # the head (first exchange) is kept verbatim on the first compaction
        head = engine._plan(before).head_end
        assert out[1:head] == before[1:head]
    if not info["forced"]:  # an automatic compaction that frees nothing is refused
        assert hermes.estimate_messages_tokens(out) < hermes.estimate_messages_tokens(before)


@SETTINGS
@given(transcripts(), windows, st.booleans())
def test_compress_gives_a_valid_transcript_and_never_mutates(msgs, window, force):
    engine = engine_for(window)
    snapshot = copy.deepcopy(msgs)
    out = engine.compress(msgs, force=force)
    assert msgs == snapshot
    check(engine, msgs, out, first=True)


@SETTINGS
@given(transcripts(max_turns=12), st.lists(transcripts(max_turns=6, system=False), min_size=1, max_size=4),
       windows)
def test_repeated_compactions_keep_exactly_one_summary(msgs, later, window):
    engine = engine_for(window)
    current = msgs
    for i, more in enumerate(later):
        out = engine.compress(current, force=True)
        check(engine, current, out, first=engine.compression_count <= 1 and i == 0)
        # continue the conversation (renumber ids so they stay unique)
        tail = json.loads(json.dumps(more).replace('"call_', f'"c{i}_'))
        if out[-1]["role"] == "user" and tail and tail[0]["role"] == "user":
            tail = tail[1:]
        if out[-1]["role"] == "assistant" and tail and tail[0]["role"] == "assistant":
            tail = tail[1:]
        current = out + tail
        if transcript_problems(current):
            return  # the joined continuation itself was not a valid conversation
    if engine.compression_count:
        assert summaries(current) <= 1


@SETTINGS
@given(transcripts(), st.integers(1, 30))
def test_prune_only_is_valid_and_keeps_the_tail(msgs, protect_last_n):
    engine = engine_for(8_000, protect_last_n=protect_last_n)
    snapshot = copy.deepcopy(msgs)
    out, n = engine.prune_tool_results_only(msgs)
    assert msgs == snapshot
    assert not transcript_problems(out)
    assert len(out) == len(msgs)
    if n == 0:
        assert out is msgs
    keep = min(protect_last_n, len(msgs))
    for a, b in zip(out[-keep:], msgs[-keep:], strict=True):
        if a["role"] == "tool" and a["content"] != b["content"]:
            assert a["content"].startswith("[Duplicate tool output")  # only lossless dedup there
        else:
            assert a == b
    for a, b in zip(out, msgs, strict=True):
        for ca, cb in zip(a.get("tool_calls") or [], b.get("tool_calls") or [], strict=True):
            json.loads(ca["function"]["arguments"])  # shrunk arguments stay valid JSON
            assert ca["id"] == cb["id"]


@pytest.fixture(scope="module")
def summarizer_server():
    with FakeLLMServer() as server:
        server.handler = lambda req: Reply(text="## Goal\nSummarized " + str(len(req.messages[0]["content"])))
        yield server


@pytest.mark.slow  # summaries from a fake server per example; the other compression properties stay fast
def test_with_real_summaries(summarizer_server, tmp_path):
    config = summarizer_server.config(provider="openai")
    config["model"]["max_retries"] = 0
    kernel = hermes.Kernel(config=config, home=tmp_path, autoload=False, check_selection=False)

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(transcripts(max_turns=16), st.lists(transcripts(max_turns=5, system=False), max_size=2))
    def run(msgs, later):
        engine = kernel.create("context-engine", "compressor")
        engine.update_model("fake-model", 8_000, provider="openai")
        current = msgs
        for i, more in enumerate([[], *later]):
            snapshot = copy.deepcopy(current)
            out = engine.compress(current, force=True)
            assert current == snapshot
            check(engine, current, out, first=i == 0)
            if engine.last_compression["committed"]:
                assert not engine.last_compression["fallback"], engine.last_compression
            tail = json.loads(json.dumps(more).replace('"call_', f'"r{i}_'))
            if tail and out[-1]["role"] == tail[0]["role"]:
                tail = tail[1:]
            current = out + tail
            if transcript_problems(current):
                return

    try:
        run()
    finally:
        kernel.close()


@SETTINGS
@given(transcripts(max_turns=6))
def test_fast_token_sizes_match_the_kernel_estimate(msgs):
    from hermes.plugins.compressor.transcript import messages_tokens

    assert messages_tokens(msgs) == hermes.estimate_messages_tokens(msgs)
