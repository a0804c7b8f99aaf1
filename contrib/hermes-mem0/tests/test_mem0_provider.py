"""The mem0 provider against the real ``mem0ai`` library in local mode.

mem0's LLM and embedder talk to the loopback fake LLM server (``fake_llm``) through the
real OpenAI SDK; vectors live in a real local Qdrant directory and the history in real
SQLite, both under a temporary Hermes home. Nothing about mem0 is mocked: the fake
server's handler answers mem0's own fact-extraction prompt with the JSON it asks for.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import hermes_mem0
import pytest
from hermes_mem0 import Mem0Paused, Mem0Provider

import hermes
from hermes import CircuitBreaker, is_trivial_prompt
from hermes.testing.conformance import MemoryProviderConformance
from hermes.testing.fakellm import Reply

# mem0 reads these when first imported: no telemetry, no files in ~/.mem0.
os.environ.setdefault("MEM0_TELEMETRY", "false")
os.environ.setdefault("MEM0_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "hermes-mem0-tests"))

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mem0") is None,
                                reason="mem0ai is not installed")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for var in ("MEM0_API_KEY", "MEM0_HOST", "MEM0_USER_ID", "MEM0_AGENT_ID", "OPENAI_API_KEY",
                "OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path / "mem0-dir"))


def extraction_handler(request: Any) -> Reply | None:
    """Answer mem0's extraction prompt: one memory per user line of "New Messages"."""
    if "Memory Extractor" not in request.system:
        return None
    prompt = request.last_user_text
    section = prompt.split("## New Messages", 1)[-1].split("##", 1)[0]
    facts = [line[len("user: "):].strip() for line in section.splitlines()
             if line.startswith("user: ")]
    return Reply(text=json.dumps({"memory": [{"text": f} for f in facts if f]}))


def local_settings(server: Any, **over: Any) -> dict[str, Any]:
    settings = {
        "mode": "local",
        "llm": {"base_url": server.openai_url, "api_key": "fake-key", "model": "fake-model"},
        "embedder": {"model": "fake-embed", "dims": 64},
        "prefetch_timeout": 10.0,
        "breaker_threshold": 3,
    }
    settings.update(over)
    return settings


@pytest.fixture
def provider(kernel_factory: Any, fake_llm: Any) -> Any:
    fake_llm.handler = extraction_handler
    kernel = kernel_factory(config={"memory": {"provider": "mem0"},
                                    "plugins": {"mem0": local_settings(fake_llm)}},
                            plugins=[hermes_mem0])
    p = kernel.create("memory-provider")
    p.initialize("s1", hermes_home=str(kernel.home), platform="cli", agent_context="primary")
    yield p
    p.shutdown()


def api_calls(server: Any, api: str) -> int:
    return sum(1 for r in server.requests if r.api == api)


# -- availability ------------------------------------------------------------------------


def test_unavailable_without_key_or_endpoint_names_both(kernel: Any) -> None:
    p = Mem0Provider(kernel)
    assert not p.is_available()
    assert "MEM0_API_KEY" in p.unavailable_reason()
    assert "plugins.mem0.llm.base_url" in p.unavailable_reason()


def test_platform_mode_from_env_key_is_available_without_network(
        kernel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM0_API_KEY", "m0-test")
    p = Mem0Provider(kernel, settings={"host": "http://127.0.0.1:9"})  # nothing listens there
    assert p.is_available() and p.mode == "platform" and p.unavailable_reason() == ""


def test_explicit_modes_explain_what_is_missing(kernel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "MEM0_API_KEY" in Mem0Provider(kernel, settings={"mode": "platform"}).unavailable_reason()
    assert "base_url" in Mem0Provider(kernel, settings={"mode": "local"}).unavailable_reason()
    assert "auto, platform or local" in Mem0Provider(kernel, settings={"mode": "cloud"}).unavailable_reason()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert Mem0Provider(kernel, settings={"mode": "local"}).is_available()


def test_missing_package_is_the_reason(kernel: Any, monkeypatch: pytest.MonkeyPatch,
                                       fake_llm: Any) -> None:
    monkeypatch.setitem(sys.modules, "mem0", None)  # how Python spells "not importable"
    p = Mem0Provider(kernel, settings=local_settings(fake_llm))
    assert not p.is_available()
    assert "pip install mem0ai" in p.unavailable_reason()


def test_an_unset_env_key_is_the_reason_not_a_crash(kernel_factory: Any) -> None:
    kernel = kernel_factory(config={"plugins": {"mem0": {
        "api_key": {"$env": "MEM0_KEY_NOT_SET"}, "user_id": "ada"}}})
    p = Mem0Provider(kernel)
    assert not p.is_available()
    assert "MEM0_KEY_NOT_SET" in p.unavailable_reason()
    assert p.user_id == "ada"  # the other settings still apply


def test_is_available_touches_no_network(kernel: Any, fake_llm: Any) -> None:
    p = Mem0Provider(kernel, settings=local_settings(fake_llm))
    assert p.is_available()
    assert fake_llm.requests == []


def test_importing_the_plugin_does_not_import_mem0() -> None:
    code = "import sys, hermes_mem0; print('mem0' in sys.modules, 'qdrant_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# -- kernel wiring --------------------------------------------------------------------------


def test_config_reaches_the_provider(provider: Any, fake_llm: Any) -> None:
    assert isinstance(provider, Mem0Provider) and isinstance(provider, hermes.MemoryProvider)
    assert provider.name == "mem0" and provider.mode == "local"
    cfg = provider.local_config()
    assert cfg["llm"]["config"]["openai_base_url"] == fake_llm.openai_url
    assert cfg["embedder"]["config"]["openai_base_url"] == fake_llm.openai_url  # inherited
    assert cfg["vector_store"]["config"]["path"].startswith(str(provider.home / "mem0"))


def test_entry_point_registers_mem0(hermes_home: Any) -> None:
    from importlib_metadata import entry_points

    if not any(ep.name == "mem0" for ep in entry_points(group="hermes.plugins")):
        pytest.skip("hermes-mem0 is not installed (pip install -e contrib/hermes-mem0)")
    with hermes.Kernel(home=hermes_home, load_plugins=["mem0"], check_selection=False) as k:
        entry = k.registries.memory_providers.get("mem0")
        assert entry.plugin == "mem0" and entry.factory is Mem0Provider


# -- recall and sync, through real mem0 -------------------------------------------------------


def test_sync_turn_extracts_facts_and_next_prefetch_recalls_them(provider: Any, fake_llm: Any) -> None:
    provider.sync_turn("I drink green tea every morning", "Noted, green tea it is.")
    assert provider.flush(30)
    # mem0 asked the LLM to extract facts with its own prompt, as JSON.
    chat = [r for r in fake_llm.requests if r.api == "openai"]
    assert chat and chat[0].body.get("response_format") == {"type": "json_object"}
    assert "I drink green tea every morning" in chat[0].last_user_text

    recalled = provider.prefetch("I drink green tea every morning")
    assert recalled.startswith("## Mem0 memories")
    assert "- I drink green tea every morning" in recalled


def test_queue_prefetch_warms_the_next_turn(provider: Any, fake_llm: Any) -> None:
    provider.add("The user's dog is called Rex", infer=False)
    provider.queue_prefetch("The user's dog is called Rex")
    provider._prefetch.join(10)
    before = api_calls(fake_llm, "embeddings")
    # The next turn's prefetch serves the warmed result without another search.
    assert "Rex" in provider.prefetch("what was my dog's name again?")
    assert api_calls(fake_llm, "embeddings") == before


def test_prefetch_wait_is_bounded_and_a_late_result_serves_the_next_turn(
        provider: Any, fake_llm: Any) -> None:
    provider.add("The user lives in Lisbon", infer=False)
    provider.settings["prefetch_timeout"] = 0.05
    fake_llm.queue(Reply(delay=1.0), api="embeddings")  # the search's embedding is slow
    assert provider.prefetch("The user lives in Lisbon") == ""
    provider._prefetch.join(10)
    assert "Lisbon" in provider.prefetch("anything")


def test_trivial_prompts_skip_the_search(provider: Any, fake_llm: Any) -> None:
    assert provider.prefetch("ok thanks!") == ""
    provider.queue_prefetch("/help")
    assert fake_llm.requests == []
    assert is_trivial_prompt("lgtm") and not is_trivial_prompt("ok, now fix the tests")


def test_subagents_do_not_write(provider: Any, fake_llm: Any) -> None:
    provider.initialize("child", agent_context="subagent")
    provider.sync_turn("remember that I like jazz", "ok")
    provider.on_memory_write("add", "user", "likes jazz")
    assert provider.flush(10)
    assert fake_llm.requests == []


def test_memories_persist_across_provider_instances(kernel_factory: Any, fake_llm: Any) -> None:
    fake_llm.handler = extraction_handler
    config = {"plugins": {"mem0": local_settings(fake_llm)}}
    first = kernel_factory(config=config, plugins=[hermes_mem0]).create("memory-provider", "mem0")
    first.add("The user prefers tabs over spaces", infer=False)
    first.shutdown()  # releases the local Qdrant lock
    second = kernel_factory(config=config, plugins=[hermes_mem0]).create("memory-provider", "mem0")
    try:
        hits = second.search("The user prefers tabs over spaces")
        assert hits and hits[0]["memory"] == "The user prefers tabs over spaces"
    finally:
        second.shutdown()


def test_users_are_isolated(provider: Any) -> None:
    provider.add("Alice is allergic to peanuts", infer=False)
    provider.initialize("s2", user_id="bob")
    assert provider.search("Alice is allergic to peanuts") == []


# -- tools ------------------------------------------------------------------------------------


def test_tools_add_search_delete(provider: Any) -> None:
    names = [s["name"] for s in provider.get_tool_schemas()]
    assert names == ["mem0_search", "mem0_add", "mem0_delete"]

    added = json.loads(provider.handle_tool_call("mem0_add", {"content": "Deploys go out on Fridays"}))
    assert added["success"] and len(added["ids"]) == 1
    found = json.loads(provider.handle_tool_call("mem0_search", {"query": "Deploys go out on Fridays"}))
    assert found["count"] >= 1 and found["results"][0]["memory"] == "Deploys go out on Fridays"
    assert found["results"][0]["id"] == added["ids"][0]

    gone = json.loads(provider.handle_tool_call("mem0_delete", {"memory_id": added["ids"][0]}))
    assert gone == {"success": True, "deleted": added["ids"][0]}
    again = json.loads(provider.handle_tool_call("mem0_search", {"query": "Deploys go out on Fridays"}))
    assert all(r["id"] != added["ids"][0] for r in again["results"])


def test_tool_errors_are_json(provider: Any) -> None:
    assert "required" in json.loads(provider.handle_tool_call("mem0_search", {}))["error"]
    assert "required" in json.loads(provider.handle_tool_call("mem0_add", {"content": " "}))["error"]
    bad = json.loads(provider.handle_tool_call("mem0_delete", {"memory_id": "no-such-id"}))
    assert "mem0_delete failed" in bad["error"]
    assert "no tool" in json.loads(provider.handle_tool_call("mem0_fly", {}))["error"]


# -- mirroring built-in memory writes -----------------------------------------------------------


def memories(provider: Any, text: str) -> list[str]:
    return [h["memory"] for h in provider.search(text, top_k=20)]


def test_built_in_writes_are_mirrored(provider: Any) -> None:
    provider.on_memory_write("add", "user", "Prefers concise answers")
    assert provider.flush(10)
    assert "Prefers concise answers" in memories(provider, "Prefers concise answers")

    # The shapes the memory manager sends: old_text names the entry, previous_content is it.
    provider.on_memory_write("replace", "user", "Prefers detailed answers",
                             {"old_text": "concise", "previous_content": "Prefers concise answers"})
    assert provider.flush(10)
    assert "Prefers concise answers" not in memories(provider, "Prefers concise answers")
    assert "Prefers detailed answers" in memories(provider, "Prefers detailed answers")

    provider.on_memory_write("remove", "user", "",
                             {"old_text": "detailed", "previous_content": "Prefers detailed answers"})
    assert provider.flush(10)
    assert "Prefers detailed answers" not in memories(provider, "Prefers detailed answers")


def test_the_memory_tool_is_mirrored_through_the_memory_manager(kernel_factory: Any, fake_llm: Any) -> None:
    """The whole path: the built-in memory tool commits, the manager mirrors the
    committed writes to mem0, mem0 holds the entry and then lets it go."""
    fake_llm.handler = extraction_handler
    kernel = kernel_factory(config={"memory": {"provider": "mem0"},
                                    "plugins": {"mem0": local_settings(fake_llm)}},
                            plugins=[hermes_mem0])
    manager = hermes.MemoryManager(kernel)
    try:
        manager.initialize("s1")
        assert isinstance(manager.external, Mem0Provider)
        for args in ({"action": "add", "target": "user", "content": "Ada uses metric units"},
                     {"action": "replace", "target": "user", "old_text": "metric",
                      "content": "Ada uses imperial units"}):
            assert json.loads(manager.handle_tool_call("memory", args)).get("success") is True
        assert manager.flush(10) and manager.external.flush(30)
        assert "Ada uses metric units" not in memories(manager.external, "Ada uses metric units")
        assert "Ada uses imperial units" in memories(manager.external, "Ada uses imperial units")
    finally:
        manager.shutdown()


# -- failures -----------------------------------------------------------------------------------


def test_circuit_breaker_opens_after_repeated_failures(provider: Any, fake_llm: Any) -> None:
    for _ in range(3):
        fake_llm.queue(Reply(error=401), api="embeddings")  # not retried by the SDK
    for _ in range(3):
        out = json.loads(provider.handle_tool_call("mem0_search", {"query": "anything at all"}))
        assert "failed" in out["error"]
    sent = len(fake_llm.requests)
    # Open: no request reaches the backend, tools say why, recall and writes are skipped.
    paused = json.loads(provider.handle_tool_call("mem0_search", {"query": "anything at all"}))
    assert "paused" in paused["error"]
    with pytest.raises(Mem0Paused):
        provider.search("anything at all")
    assert provider.prefetch("what do you know about me?") == ""
    provider.sync_turn("hello there, remember me", "sure")
    assert provider.flush(10)
    assert len(fake_llm.requests) == sent
    assert provider.status()["breaker"]["open"] is True


def test_breaker_half_opens_after_the_cooldown() -> None:
    now = [0.0]
    breaker = CircuitBreaker(threshold=2, cooldown=10, clock=lambda: now[0])
    breaker.failure("boom")
    assert breaker.allow()
    breaker.failure("boom")
    assert not breaker.allow() and breaker.retry_in() == 10
    now[0] = 10.0
    assert breaker.allow()  # one probe
    breaker.failure("still down")
    assert not breaker.allow()  # re-opened at once
    now[0] = 20.0
    assert breaker.allow()
    breaker.success()
    assert breaker.allow() and breaker.failures == 0 and not breaker.is_open


def test_a_failing_write_never_raises_into_the_turn(provider: Any, fake_llm: Any) -> None:
    fake_llm.handler = lambda req: Reply(error=400)
    provider.sync_turn("I moved to Berlin last year", "Noted!")  # extraction fails in mem0
    assert provider.flush(10)
    assert provider.breaker.failures == 1


def test_shutdown_drains_queued_writes(provider: Any) -> None:
    provider.on_memory_write("add", "memory", "Project Hermes uses pluggy")
    provider.shutdown()
    provider.shutdown()  # idempotent
    assert provider.prefetch("Project Hermes uses pluggy") == ""
    assert "shut down" in json.loads(provider.handle_tool_call("mem0_search", {"query": "x y"}))["error"]
    # The queued write landed before shutdown closed the store.
    reopened = Mem0Provider(settings=provider.settings)
    reopened.initialize("s2", hermes_home=str(provider.home))
    try:
        assert "Project Hermes uses pluggy" in memories(reopened, "Project Hermes uses pluggy")
    finally:
        reopened.shutdown()


# -- the memory-provider conformance suite ---------------------------------------------------


class TestMem0Conformance(MemoryProviderConformance):
    """The shared contract, on real mem0 in local mode. ``recalls_synced_turns`` stays
    False: the fake server's embeddings are hashes, not semantics, so a paraphrased
    question cannot find a fact here; recall of synced facts by their own words is
    covered above (test_sync_turn_extracts_facts_and_next_prefetch_recalls_them)."""

    @pytest.fixture
    def provider(self, kernel: Any, fake_llm: Any) -> Any:
        fake_llm.handler = extraction_handler
        p = Mem0Provider(kernel, settings=local_settings(fake_llm))
        yield p
        p.shutdown()


# -- in the real turn loop ---------------------------------------------------------------------


def test_two_turns_through_the_agent(kernel_factory: Any, fake_llm: Any) -> None:
    """The runtime agent syncs turn 1 to mem0 (extraction by the fake model, through
    mem0's own prompt) and hands turn 2's model call the recalled fact, fenced."""
    from hermes.runtime.agent import Agent

    fake_llm.handler = extraction_handler  # None for the main model: it echoes
    config = fake_llm.config(provider="openai")
    config["memory"] = {"provider": "mem0", "nudge_interval": 0}
    config["plugins"] = {"mem0": local_settings(fake_llm)}
    agent = Agent(kernel_factory(config=config, plugins=[hermes_mem0]))
    try:
        agent.run_turn("I drink green tea every morning")
        assert agent.memory.flush(10)  # the user's think time: background sync lands
        agent.run_turn("What should I have for breakfast?")
    finally:
        agent.close()
    main = [r for r in fake_llm.requests if r.api == "openai" and "Memory Extractor" not in r.system]
    last_user = [m for m in main[-1].messages if m["role"] == "user"][-1]
    text = last_user["content"] if isinstance(last_user["content"], str) else json.dumps(last_user["content"])
    fenced = text.split("<memory-context>", 1)[1].split("</memory-context>", 1)[0]
    assert "- I drink green tea every morning" in fenced


def test_declared_tool_names_match_the_schemas(kernel_factory: Any) -> None:
    """The names registered with tools=(...) (which the kernel reserves) are the tools."""
    kernel = kernel_factory(autoload=True)
    entry = kernel.registries.memory_providers.get("mem0")
    names = {s.get("function", s)["name"] for s in Mem0Provider(kernel).get_tool_schemas()}
    assert set(entry.tools) == names
