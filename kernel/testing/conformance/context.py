"""Conformance suite for context engines.

Subclass :class:`ContextEngineConformance` in your plugin's tests and override the
``engine`` fixture so it returns a fresh engine for each test, built the way the runtime
builds it (through your factory)::

    import pytest
    from hermes.testing.conformance import ContextEngineConformance

    class TestMyEngine(ContextEngineConformance):
        @pytest.fixture
        def engine(self, kernel_factory, register_plugin):
            kernel = kernel_factory()
            kernel.register_plugin(my_plugin, "my-engine")
            return kernel.create("context-engine", "my-engine")

Alternatively set ``engine_name = "<name>"`` and let the default ``engine`` fixture build
it from a kernel with the default plugins. To also run the tests that need a working
summarizer, override ``fake_summarizer`` to return a :class:`hermes.testing.fakellm.FakeLLMServer`
that your engine's auxiliary model points at (``llm_config`` is handed to the default
``engine`` fixture's kernel)::

        @pytest.fixture
        def fake_summarizer(self, fake_llm):
            return fake_llm

        @pytest.fixture
        def llm_config(self, fake_summarizer):
            return fake_summarizer.config(provider="openai")

What is checked, on long tool-using conversations: ``compress`` returns a valid
transcript (system prompt first and only there, the first other message from the user, no
two consecutive user or assistant messages, every tool result right after the call it
answers, every call answered, arguments valid JSON), no orphan tool call or result, the
newest user message and the system prompt survive, the input is never mutated, the
result is smaller and fits the window, repeated compactions stay valid with at most one
summary, optional keyword arguments are accepted through :func:`hermes.call_compress`,
usage is recorded, ``get_status`` has its keys, tools answer in JSON, and
``on_session_reset`` zeroes the counters.

:func:`transcript_problems` and :func:`make_conversation` are public: use them in your
own property tests.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

__all__ = ["ContextEngineConformance", "make_conversation", "transcript_problems"]

_TOOLS = ("read_file", "terminal", "search_files", "write_file", "web_search")
_WORDS = ("alpha", "bravo", "cache", "delta", "engine", "fixture", "gamma", "hermes", "index",
          "json", "kernel", "lambda", "module", "node", "output", "parser", "query", "router")


def transcript_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Everything that makes ``messages`` an invalid OpenAI-style transcript for the
    providers Hermes supports; ``[]`` when it is valid. Rules: dicts with a known role;
    a system message only first; the first non-system message from the user; no two
    consecutive user or assistant messages; tool results only right after the assistant
    message whose call they answer (each call once); every call answered; tool-call
    arguments valid JSON."""
    problems: list[str] = []
    open_calls: list[str] = []
    answered: set[str] = set()
    prev_role = None
    first_other = True
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "user", "assistant", "tool"):
            problems.append(f"[{i}] not a message with a known role: {msg!r:.80}")
            continue
        role = msg["role"]
        if role != "tool" and open_calls:
            missing = [c for c in open_calls if c not in answered]
            if missing:
                problems.append(f"[{i}] tool call(s) {missing} left without a result")
            open_calls = []
        if role == "system":
            if i != 0:
                problems.append(f"[{i}] system message after the start")
        elif first_other:
            first_other = False
            if role != "user":
                problems.append(f"[{i}] the first non-system message is {role!r}, not 'user'")
        if role == "tool":
            cid = str(msg.get("tool_call_id") or "")
            if prev_role not in ("assistant", "tool") or cid not in open_calls:
                problems.append(f"[{i}] orphan tool result {cid!r}")
            elif cid in answered:
                problems.append(f"[{i}] tool call {cid!r} answered twice")
            answered.add(cid)
        elif role in ("user", "assistant") and role == prev_role:
            problems.append(f"[{i}] two consecutive {role} messages")
        if role == "assistant" and msg.get("tool_calls"):
            open_calls, answered = [], set()
            for call in msg["tool_calls"]:
                cid = str((call or {}).get("id") or "")
                if not cid:
                    problems.append(f"[{i}] tool call without an id")
                open_calls.append(cid)
                args = ((call or {}).get("function") or {}).get("arguments")
                if isinstance(args, str):
                    try:
                        json.loads(args or "{}")
                    except ValueError:
                        problems.append(f"[{i}] tool call {cid!r} has invalid JSON arguments")
        prev_role = role
    if open_calls:
        missing = [c for c in open_calls if c not in answered]
        if missing:
            problems.append(f"[end] tool call(s) {missing} left without a result")
    return problems


def make_conversation(turns: int, *, seed: int = 0, system: str | None = "You are a careful assistant.",
                      result_chars: tuple[int, int] = (200, 2400), start_id: int = 0,
                      end_with_user: bool = True) -> list[dict[str, Any]]:
    """A deterministic, valid, tool-heavy conversation: each turn is a user request, zero
    to three rounds of one to three tool calls (results of ``result_chars`` characters,
    some repeated, some errors, some with long JSON arguments) and an answer. With
    ``end_with_user`` a last user request closes it (the state before a model call)."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    n = start_id
    last_result = ""

    def words(k: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(k))

    for turn in range(turns):
        msgs.append({"role": "user", "content": f"Request {seed}-{turn}: please {words(rng.randint(4, 30))}."})
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            calls: list[dict[str, Any]] = []
            for _ in range(rng.randint(1, 3)):
                n += 1
                tool = rng.choice(_TOOLS)
                args: dict[str, Any] = {"path": f"src/{rng.choice(_WORDS)}_{n}.py"}
                if tool == "write_file" and rng.random() < 0.5:
                    args["content"] = "x = 1\n" * rng.randint(100, 300)
                if tool == "terminal":
                    args = {"command": f"pytest -q tests/test_{rng.choice(_WORDS)}.py"}
                calls.append({"id": f"call_{n}", "type": "function",
                              "function": {"name": tool, "arguments": json.dumps(args)}})
            text = words(rng.randint(3, 12)) if rng.random() < 0.3 else ""
            msgs.append({"role": "assistant", "content": text, "tool_calls": calls})
            for call in calls:
                if last_result and rng.random() < 0.15:
                    result = last_result  # an exact repeat of an earlier output
                elif rng.random() < 0.1:
                    result = f"Error: {words(6)}\nTraceback (most recent call last):\n" + words(40)
                else:
                    size = rng.randint(*result_chars)
                    result = (words(12) + "\n") * max(1, size // 80)
                last_result = result
                msgs.append({"role": "tool", "tool_call_id": call["id"],
                             "name": call["function"]["name"], "content": result})
        msgs.append({"role": "assistant", "content": f"Done with {seed}-{turn}: {words(rng.randint(5, 40))}."})
    if end_with_user:
        msgs.append({"role": "user", "content": f"Final request {seed}: now {words(10)}."})
    return msgs


def _tokens(messages: list[dict[str, Any]]) -> int:
    from hermes import estimate_messages_tokens

    return estimate_messages_tokens(messages)


def _text(msg: dict[str, Any]) -> str:
    from hermes import content_text

    return content_text(msg.get("content"))


def _newest_user_text(messages: list[dict[str, Any]]) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user" and _text(msg).strip():
            return _text(msg)
    raise AssertionError("no user message")


class ContextEngineConformance:
    """The context-engine contract, as pytest tests. Override :meth:`engine` (or set
    :attr:`engine_name`)."""

    #: Build the engine by this registered name from a kernel (default ``engine`` fixture).
    engine_name: str | None = None
    #: The window the suite sets with ``update_model``.
    context_length: int = 8_000
    #: The model name the suite sets with ``update_model``.
    model: str = "conformance-model"

    @pytest.fixture
    def fake_summarizer(self) -> Any:
        """A fake LLM server the engine's summarizer talks to, or ``None`` (default: the
        tests that need one are skipped)."""
        return None

    @pytest.fixture
    def llm_config(self) -> dict[str, Any]:
        """Config for the default ``engine`` fixture's kernel (e.g. ``fake_llm.config()``)."""
        return {}

    @pytest.fixture
    def engine(self, kernel_factory: Any, llm_config: dict[str, Any]) -> Any:
        """A fresh engine. Override it, or set :attr:`engine_name`."""
        if not self.engine_name:
            pytest.fail("override the `engine` fixture (or set engine_name) in your "
                        "ContextEngineConformance subclass")
        kernel = kernel_factory(config=llm_config or None)
        return kernel.create("context-engine", self.engine_name)

    @pytest.fixture
    def ready(self, engine: Any, tmp_path: Any) -> Any:
        """The engine with the model window set and a session started, as the runtime does."""
        engine.update_model(self.model, self.context_length)
        engine.on_session_start("conformance-session", hermes_home=str(tmp_path), platform="cli",
                                model=self.model, context_length=self.context_length)
        yield engine
        engine.on_session_end("conformance-session", [])

    def long_conversation(self, seed: int = 0) -> list[dict[str, Any]]:
        """A valid conversation about three windows long."""
        turns = 4
        while True:
            msgs = make_conversation(turns, seed=seed)
            if _tokens(msgs) >= 3 * self.context_length:
                return msgs
            turns += 4

    def compress(self, engine: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
        from hermes import call_compress

        kwargs.setdefault("current_tokens", _tokens(messages))
        return call_compress(engine, messages, **kwargs)

    def assert_valid(self, out: Any, source: list[dict[str, Any]]) -> None:
        assert isinstance(out, list), f"compress returned {type(out).__name__}, not a list"
        problems = transcript_problems(out)
        assert not problems, "invalid transcript after compress:\n" + "\n".join(problems[:10])
        assert out and out[0].get("role") == "system", "the system prompt must stay first"
        original = _text(source[0])
        assert _text(out[0]).startswith(original), "the system prompt must be kept (a note may be appended)"
        newest = _newest_user_text(source)
        assert any(m.get("role") == "user" and newest in _text(m) for m in out), \
            "the newest user message must survive"

    # -- identity and attributes -------------------------------------------------------------

    def test_is_a_context_engine(self, engine: Any) -> None:
        from hermes import ContextEngine

        assert isinstance(engine, ContextEngine)
        assert isinstance(engine.name, str) and engine.name.strip()

    def test_attributes_after_update_model(self, ready: Any) -> None:
        assert ready.context_length == self.context_length
        assert 0 < ready.threshold_tokens <= self.context_length
        for attr in ("last_prompt_tokens", "last_completion_tokens", "last_total_tokens",
                     "compression_count", "protect_first_n", "protect_last_n"):
            assert isinstance(getattr(ready, attr), int), attr
        assert isinstance(ready.threshold_percent, float)
        assert isinstance(ready.emit_automatic_compaction_status, bool)

    def test_update_model_rederives_the_trigger(self, ready: Any) -> None:
        before = ready.threshold_tokens
        ready.update_model(self.model, self.context_length * 4)
        assert ready.context_length == self.context_length * 4
        assert ready.threshold_tokens > before

    def test_get_status_has_its_keys(self, ready: Any) -> None:
        from hermes import Usage

        ready.update_from_response(Usage(input_tokens=self.context_length // 4, output_tokens=10).as_dict())
        status = ready.get_status()
        for key in ("last_prompt_tokens", "threshold_tokens", "context_length", "usage_percent",
                    "compression_count"):
            assert key in status, key
        assert status["last_prompt_tokens"] == self.context_length // 4
        assert 0 <= status["usage_percent"] <= 100
        json.dumps(status, default=str)  # printable by `hermes doctor --json`

    def test_status_never_reports_negative_tokens(self, ready: Any) -> None:
        ready.last_prompt_tokens = -1  # the "awaiting usage after compaction" sentinel
        assert ready.get_status()["last_prompt_tokens"] >= 0

    # -- usage and the trigger ------------------------------------------------------------------

    def test_update_from_response_records_usage(self, ready: Any) -> None:
        from hermes import Usage

        usage = Usage(input_tokens=700, output_tokens=40, cache_read_tokens=300)
        ready.update_from_response(usage.as_dict())
        assert ready.last_prompt_tokens == 1000
        assert ready.last_completion_tokens == 40
        ready.update_from_response({"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6})
        assert ready.last_prompt_tokens == 5  # older hosts send only the three basic counts

    def test_should_compress_follows_the_trigger(self, ready: Any) -> None:
        low, high = max(0, ready.threshold_tokens // 10), self.context_length * 2
        assert ready.should_compress(low) is False
        assert ready.should_compress(high) is True
        for tokens in (low, high):
            info = ready.should_compress_info(tokens)
            assert isinstance(info, tuple) and len(info) == 2
            assert info[0] == ready.should_compress(tokens)
            assert info[1] is None or isinstance(info[1], str)

    def test_preflight_and_content_checks_return_bools(self, ready: Any) -> None:
        msgs = self.long_conversation()
        assert isinstance(ready.should_compress_preflight(msgs), bool)
        assert ready.has_content_to_compress(msgs) is True
        assert isinstance(ready.has_content_to_compress(msgs[:2]), bool)

    # -- compress -------------------------------------------------------------------------

    def test_compress_returns_a_valid_smaller_transcript(self, ready: Any) -> None:
        msgs = self.long_conversation()
        out = self.compress(ready, msgs, force=True)
        self.assert_valid(out, msgs)
        assert _tokens(out) < _tokens(msgs)
        assert _tokens(out) <= self.context_length, "the compacted transcript must fit the window"
        assert ready.compression_count == 1

    def test_compress_never_mutates_its_input(self, ready: Any) -> None:
        msgs = self.long_conversation(seed=1)
        snapshot = copy.deepcopy(msgs)
        out = self.compress(ready, msgs, force=True)
        assert msgs == snapshot
        assert out is not msgs

    def test_automatic_compress_when_due(self, ready: Any) -> None:
        from hermes import Usage

        msgs = self.long_conversation(seed=2)
        ready.update_from_response(Usage(input_tokens=_tokens(msgs)).as_dict())
        assert ready.should_compress() is True
        out = self.compress(ready, msgs)
        self.assert_valid(out, msgs)

    def test_repeated_compactions_stay_valid_with_one_summary(self, ready: Any) -> None:
        from hermes import is_compaction_summary

        msgs = self.long_conversation(seed=3)
        for round_ in range(3):
            out = self.compress(ready, msgs, force=True)
            self.assert_valid(out, msgs)
            assert sum(1 for m in out if is_compaction_summary(m)) <= 1
            more = make_conversation(6, seed=100 + round_, system=None, start_id=10_000 * (round_ + 1))
            msgs = out + more

    def test_newest_user_message_survives_a_long_tool_chain(self, ready: Any) -> None:
        # One request followed by a long run of tool calls: the request must stay.
        msgs = make_conversation(3, seed=4, end_with_user=False)
        msgs.append({"role": "user", "content": "Refactor every module, one by one."})
        chain = make_conversation(40, seed=5, system=None, start_id=50_000, end_with_user=False)
        msgs += [m for m in chain if m["role"] != "user"
                 and not (m["role"] == "assistant" and not m.get("tool_calls"))]
        assert not transcript_problems(msgs)
        out = self.compress(ready, msgs, force=True)
        self.assert_valid(out, msgs)

    def test_transcript_ending_in_tool_results(self, ready: Any) -> None:
        msgs = self.long_conversation(seed=6)[:-1]
        msgs.append({"role": "user", "content": "Check the build."})
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": "last_call", "type": "function",
             "function": {"name": "terminal", "arguments": json.dumps({"command": "make"})}}]})
        msgs.append({"role": "tool", "tool_call_id": "last_call", "name": "terminal", "content": "ok"})
        out = self.compress(ready, msgs, force=True)
        self.assert_valid(out, msgs)
        assert out[-1] == msgs[-1], "a pending tool result must stay where the model expects it"

    def test_short_transcript_is_safe(self, ready: Any) -> None:
        msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
        out = self.compress(ready, msgs, force=True)
        self.assert_valid(out, msgs)

    def test_optional_arguments_are_accepted(self, ready: Any) -> None:
        msgs = self.long_conversation(seed=7)
        out = self.compress(ready, msgs, force=True, focus_topic="the parser module",
                            memory_context="The user prefers small commits.",
                            some_future_argument=True)
        self.assert_valid(out, msgs)

    def test_compress_reports_on_itself(self, ready: Any) -> None:
        msgs = self.long_conversation(seed=8)
        self.compress(ready, msgs, force=True)
        info = getattr(ready, "last_compression", None)
        assert info is None or isinstance(info, dict)
        if isinstance(info, dict):
            assert "aborted" in info and "fallback" in info

    # -- tools and lifecycle ----------------------------------------------------------------

    def test_tools_answer_in_json(self, ready: Any) -> None:
        schemas = ready.get_tool_schemas()
        assert isinstance(schemas, list)
        names = []
        for schema in schemas:
            fn = schema.get("function", schema)
            assert isinstance(fn.get("name"), str) and fn["name"], schema
            names.append(fn["name"])
        assert len(names) == len(set(names)), "tool names must be unique"
        msgs = self.long_conversation(seed=9)
        for name in [*names, "no_such_context_engine_tool"]:
            result = ready.handle_tool_call(name, {}, messages=msgs)
            assert isinstance(result, str)
            json.loads(result)

    def test_on_session_reset_zeroes_counters(self, ready: Any) -> None:
        from hermes import Usage

        ready.update_from_response(Usage(input_tokens=1234, output_tokens=5).as_dict())
        self.compress(ready, self.long_conversation(seed=10), force=True)
        ready.on_session_reset()
        assert ready.last_prompt_tokens == 0
        assert ready.last_completion_tokens == 0
        assert ready.compression_count == 0

    # -- with a working summarizer -----------------------------------------------------------

    def test_summarizer_output_reaches_the_transcript(self, ready: Any, fake_summarizer: Any) -> None:
        if fake_summarizer is None:
            pytest.skip("no fake_summarizer fixture: the engine's summarizer is not wired")
        from hermes.testing.fakellm import Reply

        marker = "CONFORMANCE-SUMMARY-7f3a"
        fake_summarizer.handler = lambda req: Reply(text=f"## Goal\n{marker} the work so far.")
        msgs = self.long_conversation(seed=11)
        out = self.compress(ready, msgs, force=True)
        self.assert_valid(out, msgs)
        assert fake_summarizer.requests, "the summarizer was never called"
        assert any(marker in _text(m) for m in out), "the model's summary is not in the result"
