"""Every secret format, end to end: real Agent turns against the loopback fake LLM server
(real OpenAI SDK), a recording external memory provider registered by a plugin, the
built-in memory tool, the provider's own tool, a delegation, a manual compaction (the
summariser's request) and the session end. Nothing the provider or the summariser
receives may contain a secret; the local transcript keeps the original."""

from __future__ import annotations

import json
from typing import Any

import pytest
from secret_corpus import FORMATS

import hermes
from hermes.testing.fakellm import Reply
from hermes.testing.stubs import memory_provider_plugin


class Recorder(hermes.MemoryProvider):
    """An external provider that records everything it is handed."""

    name = "recorder"  # type: ignore[assignment]

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def _rec(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((method, json.dumps([args, kwargs], default=str, ensure_ascii=False)))

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        self._rec("initialize", session_id)

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [{"name": "recorder_store", "description": "Store a note in the remote memory.",
                 "parameters": {"type": "object", "properties": {"note": {"type": "string"}}}}]

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        self._rec("handle_tool_call", name, args)
        return json.dumps({"success": True})

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        self._rec("prefetch", query)
        return ""

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        self._rec("queue_prefetch", query)

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "") -> None:
        self._rec("sync_turn", user_content, assistant_content)

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        self._rec("on_turn_start", turn_number, message)

    def on_memory_write(self, action: str, target: str, content: str, metadata: Any = None) -> None:
        self._rec("on_memory_write", action, target, content, metadata)

    def on_pre_compress(self, messages: list[Any]) -> str:
        self._rec("on_pre_compress", messages)
        return ""

    def on_session_end(self, messages: list[Any]) -> None:
        self._rec("on_session_end", messages)

    def on_delegation(self, task: str, result: str, **kwargs: Any) -> None:
        self._rec("on_delegation", task, result)


@pytest.mark.slow  # every secret format through full turns; the LCM variant stays fast
def test_no_secret_format_reaches_a_memory_provider_or_the_summariser(kernel_factory: Any, fake_llm: Any) -> None:
    from hermes.runtime.agent import Agent

    provider = Recorder()
    cfg = fake_llm.config(provider="openai")
    cfg["memory"] = {"nudge_interval": 0, "provider": provider.name, "memory_char_limit": 500_000}
    cfg.setdefault("agent", {})["max_iterations"] = 1000
    kernel = kernel_factory(config=cfg)
    if "sqlite" not in kernel.registries.session_stores:
        pytest.skip("no session store registered")
    kernel.register_plugin(memory_provider_plugin(provider))
    agent = Agent(kernel, memory_review=False)
    try:
        for fmt in FORMATS:
            fake_llm.queue(Reply(tool_calls=[
                {"name": "memory", "arguments": {"action": "add", "target": "memory", "content": fmt.text}},
                {"name": "recorder_store", "arguments": {"note": fmt.text}},
            ]))
            fake_llm.queue(Reply(text=f"Saved it: {fmt.text}"))
            assert agent.run_turn(f"Please remember this: {fmt.text}").status == "ok", fmt.id
        everything = "\n".join(f.text for f in FORMATS)
        fake_llm.queue(Reply(text=f"Deployed. {everything}"))
        agent.delegate(f"deploy with these: {everything}")
        agent.memory.flush(10)
        original_session = agent.session_id
        first_summary_request = len(fake_llm.requests)
        fake_llm.handler = lambda request: Reply(text="## Goal\nKeep notes.")
        assert agent.compact(force=True), "the compaction must run so the summariser sees the turns"
        summariser = [json.dumps(r.body, ensure_ascii=False) for r in fake_llm.requests[first_summary_request:]]
    finally:
        agent.close()

    received = "\n".join(payload for _, payload in provider.calls)
    methods = {method for method, _ in provider.calls}
    # Every boundary was really crossed, so "no secret" is not vacuous.
    assert {"on_turn_start", "prefetch", "queue_prefetch", "sync_turn", "handle_tool_call",
            "on_pre_compress", "on_session_end", "on_delegation"} <= methods, methods
    assert sum(m == "sync_turn" for m, _ in provider.calls) >= len(FORMATS)
    assert summariser, "the compaction made no summariser request"
    leaked_to_provider = [f.id for f in FORMATS if f.secret in received]
    leaked_to_summariser = [f.id for f in FORMATS if any(f.secret in body for body in summariser)]
    covered = len(FORMATS) - len(set(leaked_to_provider) | set(leaked_to_summariser))
    print(f"redaction coverage end to end: {covered}/{len(FORMATS)} formats")
    assert leaked_to_provider == []
    assert leaked_to_summariser == []
    mirrored = [p for m, p in provider.calls if m == "on_memory_write"]
    assert mirrored and all("[REDACTED]" in p for p in mirrored)
    # The local transcript keeps what the user typed: redaction is for what leaves.
    stored = json.dumps(agent.store.get_conversation(original_session), ensure_ascii=False)
    assert all(json.dumps(f.secret)[1:-1] in stored for f in FORMATS)


def test_no_secret_format_reaches_the_lcm_summariser(kernel_factory: Any, fake_llm: Any) -> None:
    # hermes-lcm summarises through its own prompts; it uses the same public function.
    hermes_lcm = pytest.importorskip("hermes_lcm")
    cfg = fake_llm.config(provider="openai")
    cfg["plugins"] = {"lcm": {"fresh_tail_count": 4, "leaf_fanout": 2, "summary_max_tokens": 300}}
    kernel = kernel_factory(config=cfg)
    kernel.register_plugin(hermes_lcm, "lcm")
    engine = kernel.create("context-engine", "lcm")
    engine.update_model("fake-model", 8_000)
    engine.on_session_start("session-1", hermes_home=str(kernel.home))
    fake_llm.handler = lambda request: Reply(text="## Goal\nKeep notes.")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are careful."}]
    for fmt in FORMATS:
        messages += [{"role": "user", "content": f"Please keep this: {fmt.text}"},
                     {"role": "assistant", "content": f"Kept: {fmt.text}"}]
    everything = "\n".join(f.text for f in FORMATS)
    hermes.call_compress(engine, messages, force=True, focus_topic="deploys",
                         memory_context=f"KEYRING {everything}")
    bodies = [json.dumps(r.body, ensure_ascii=False) for r in fake_llm.requests]
    assert bodies, "the lcm engine made no summariser request"
    leaked = [f.id for f in FORMATS if any(f.secret in body for body in bodies)]
    assert leaked == []
    # not vacuous: the memory context carrying every format reached the summariser
    assert any("KEYRING" in body for body in bodies)
    assert sum(body.count("[REDACTED]") for body in bodies) >= len(FORMATS)
