"""The Honcho provider: the real ``honcho-ai`` SDK against a loopback fake of Honcho's v3
REST API (``fake_honcho.py``; no Honcho server can run here). Every request below goes
through the SDK's own HTTP client, request building and response validation."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from typing import Any

import hermes_honcho
import pytest
from fake_honcho import FakeHoncho
from hermes_honcho import HonchoPaused, HonchoProvider, honcho_id

import hermes
from hermes.testing.conformance import MemoryProviderConformance

pytestmark = pytest.mark.skipif(importlib.util.find_spec("honcho") is None,
                                reason="honcho-ai is not installed")

WS = "hermes"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HONCHO_API_KEY", "HONCHO_URL", "HONCHO_WORKSPACE_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("USER", "ada")


@pytest.fixture
def server() -> Any:
    with FakeHoncho(api_key="hk-test") as s:
        yield s


def settings(server: Any, **over: Any) -> dict[str, Any]:
    return {"base_url": server.url, "api_key": "hk-test", "max_retries": 0,
            "prefetch_timeout": 10.0, "breaker_threshold": 3, **over}


@pytest.fixture
def provider(kernel_factory: Any, server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    # The key reaches the provider the way users are told to write it: {$env: ...}.
    monkeypatch.setenv("HONCHO_TEST_KEY", "hk-test")
    config = {"memory": {"provider": "honcho"},
              "plugins": {"honcho": {**settings(server), "api_key": {"$env": "HONCHO_TEST_KEY"}}}}
    p = kernel_factory(config=config, plugins=[hermes_honcho]).create("memory-provider")
    p.initialize("20260101_120000_abc123", hermes_home="/unused", platform="cli",
                 agent_context="primary")
    yield p
    p.shutdown()


def call(provider: Any, tool: str, **args: Any) -> dict[str, Any]:
    return json.loads(provider.handle_tool_call(tool, args))


# -- availability ----------------------------------------------------------------------------


def test_unavailable_without_key_or_server(kernel: Any) -> None:
    p = HonchoProvider(kernel)
    assert not p.is_available()
    assert "HONCHO_API_KEY" in p.unavailable_reason() and "base_url" in p.unavailable_reason()


def test_available_with_a_key_or_a_self_hosted_url(kernel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert HonchoProvider(kernel, settings={"base_url": "http://honcho.internal:8000"}).is_available()
    monkeypatch.setenv("HONCHO_API_KEY", "hk-env")
    p = HonchoProvider(kernel)
    assert p.is_available() and p.api_key == "hk-env" and p.base_url == ""


def test_missing_package_is_the_reason(kernel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "honcho", None)
    p = HonchoProvider(kernel, settings={"api_key": "hk"})
    assert not p.is_available() and "pip install honcho-ai" in p.unavailable_reason()


def test_an_unset_env_key_is_the_reason_not_a_crash(kernel_factory: Any) -> None:
    kernel = kernel_factory(config={"plugins": {"honcho": {
        "api_key": {"$env": "HONCHO_KEY_NOT_SET"}, "workspace": "team"}}})
    p = HonchoProvider(kernel)
    assert not p.is_available()
    assert "HONCHO_KEY_NOT_SET" in p.unavailable_reason()
    assert p.workspace == "team"  # the other settings still apply


def test_is_available_touches_no_network(kernel: Any, server: Any) -> None:
    assert HonchoProvider(kernel, settings=settings(server)).is_available()
    assert server.requests == []


def test_importing_the_plugin_does_not_import_honcho() -> None:
    code = "import sys, hermes_honcho; print('honcho' in sys.modules, 'httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_entry_point_registers_honcho(hermes_home: Any) -> None:
    from importlib_metadata import entry_points

    if not any(ep.name == "honcho" for ep in entry_points(group="hermes.plugins")):
        pytest.skip("hermes-honcho is not installed (pip install -e contrib/hermes-honcho)")
    with hermes.Kernel(home=hermes_home, load_plugins=["honcho"], check_selection=False) as k:
        entry = k.registries.memory_providers.get("honcho")
        assert entry.plugin == "honcho" and entry.factory is HonchoProvider


def test_ids_are_made_valid_honcho_names() -> None:
    assert honcho_id("alice@example.com", "user") == "alice-example-com"
    assert honcho_id("2026-01-01 12:00:00/x", "s") == "2026-01-01-12-00-00-x"
    assert honcho_id("@@@", "user") == "user"
    assert len(honcho_id("x" * 600, "u")) == 512


# -- sync ------------------------------------------------------------------------------------


def test_turns_sync_to_one_session_with_a_user_and_an_assistant_peer(provider: Any, server: Any) -> None:
    provider.sync_turn("I am training for a marathon", "Great, how many weeks to go?")
    provider.sync_turn("Twelve weeks", "Then let's plan long runs.")
    assert provider.flush(10)

    ws = server.workspace(WS)
    assert set(ws.peers) == {"ada", "hermes"}
    assert list(ws.sessions) == ["20260101_120000_abc123"]
    assert set(ws.sessions["20260101_120000_abc123"]["peers"]) == {"ada", "hermes"}
    said = [(m["peer_id"], m["content"]) for m in server.messages(WS)]
    assert said == [("ada", "I am training for a marathon"),
                    ("hermes", "Great, how many weeks to go?"),
                    ("ada", "Twelve weeks"), ("hermes", "Then let's plan long runs.")]
    # Every request carried the key that {$env: HONCHO_TEST_KEY} resolved to.
    assert all(r.headers.get("authorization") == "Bearer hk-test" for r in server.requests)


def test_long_messages_are_sent_in_pieces(provider: Any, server: Any) -> None:
    provider.settings["message_max_chars"] = 10
    provider.sync_turn("a" * 25, "ok")
    assert provider.flush(10)
    assert [m["content"] for m in server.messages(WS)] == ["a" * 10, "a" * 10, "a" * 5, "ok"]


def test_compaction_keeps_the_conversation_and_reset_starts_a_new_one(provider: Any, server: Any) -> None:
    provider.on_session_switch("child-1", parent_session_id="20260101_120000_abc123")
    provider.sync_turn("after compaction", "same conversation")
    provider.on_session_switch("fresh", reset=True)
    provider.sync_turn("a new conversation", "hello again")
    assert provider.flush(10)
    assert [(m["session_id"], m["content"]) for m in server.messages(WS) if m["peer_id"] == "ada"] == [
        ("20260101_120000_abc123", "after compaction"), ("fresh", "a new conversation")]


def test_gateway_users_are_their_own_peers(provider: Any, server: Any) -> None:
    provider.initialize("tg-42", user_id="telegram:4242", agent_context="primary")
    provider.sync_turn("hi from telegram", "hello!")
    assert provider.flush(10)
    assert server.messages(WS)[0]["peer_id"] == "telegram-4242"


def test_subagents_do_not_sync(provider: Any, server: Any) -> None:
    provider.initialize("child", agent_context="subagent")
    provider.sync_turn("do a subtask", "done")
    assert provider.flush(10)
    assert server.requests == []


# -- recall ----------------------------------------------------------------------------------


def test_prefetch_recalls_the_card_and_relevant_conclusions(provider: Any, server: Any) -> None:
    server.workspace(WS)
    provider.sync_turn("hello", "hi")  # creates the peers
    assert provider.flush(10)
    server.add_conclusion(WS, "ada", "ada", "Ada hikes in the Alps every summer")
    server.add_conclusion(WS, "ada", "ada", "Ada works as a compiler engineer")
    server.set_card(WS, "ada", ["Name: Ada", "Lives in Zurich"])

    recalled = provider.prefetch("any hiking tips for the Alps?")
    assert "## Honcho: the user's peer card\n- Name: Ada\n- Lives in Zurich" in recalled
    assert "Ada hikes in the Alps every summer" in recalled
    assert "compiler" not in recalled  # focused on the message
    context_calls = [r for r in server.requests if r.path.endswith("/peers/ada/context")]
    assert context_calls[-1].query["search_query"] == "any hiking tips for the Alps?"


def test_queue_prefetch_warms_the_next_turn(provider: Any, server: Any) -> None:
    provider.sync_turn("hello", "hi")
    assert provider.flush(10)
    server.set_card(WS, "ada", ["Prefers metric units"])
    provider.queue_prefetch("what units do I like?")
    provider._prefetch.join(10)
    sent = len(server.requests)
    assert "Prefers metric units" in provider.prefetch("next message")
    assert len(server.requests) == sent


def test_prefetch_wait_is_bounded(provider: Any, server: Any) -> None:
    provider.sync_turn("hello", "hi")
    assert provider.flush(10)
    server.set_card(WS, "ada", ["Drinks oat milk"])
    provider.settings["prefetch_timeout"] = 0.05
    server.delay_next(1.0)
    assert provider.prefetch("coffee?") == ""
    provider._prefetch.join(10)
    assert "Drinks oat milk" in provider.prefetch("anything")


# -- tools -----------------------------------------------------------------------------------


def test_tool_schemas() -> None:
    names = [s["name"] for s in HonchoProvider(settings={"api_key": "x"}).get_tool_schemas()]
    assert names == ["honcho_profile", "honcho_search", "honcho_context", "honcho_conclude"]


def test_profile_search_and_context(provider: Any, server: Any) -> None:
    provider.sync_turn("I keep bees on my roof", "How many hives?")
    provider.sync_turn("Three hives", "Nice.")
    assert provider.flush(10)
    server.set_card(WS, "ada", ["Beekeeper"])
    server.add_conclusion(WS, "ada", "ada", "Ada keeps three bee hives")

    assert call(provider, "honcho_profile") == {"peer": "ada", "card": ["Beekeeper"]}

    found = call(provider, "honcho_search", query="bee hives", limit=5)
    assert "Ada keeps three bee hives" in found["representation"]
    assert [m["content"] for m in found["messages"]][:1] == ["Three hives"]

    ctx = call(provider, "honcho_context", tokens=1000)
    assert ctx["session"] == "20260101_120000_abc123" and ctx["card"] == ["Beekeeper"]
    assert [m["content"] for m in ctx["messages"]] == [
        "I keep bees on my roof", "How many hives?", "Three hives", "Nice."]
    assert "Ada keeps three bee hives" in ctx["representation"]


def test_conclude_creates_and_deletes(provider: Any, server: Any) -> None:
    made = call(provider, "honcho_conclude", conclusion="Ada prefers dark roast coffee")
    assert made["success"] and made["id"]
    stored = server.workspace(WS).conclusions[made["id"]]
    assert (stored["observer_id"], stored["observed_id"], stored["session_id"]) == (
        "ada", "ada", "20260101_120000_abc123")
    assert "dark roast" in provider.prefetch("coffee roast")

    assert call(provider, "honcho_conclude", delete_id=made["id"]) == {
        "success": True, "deleted": made["id"]}
    assert made["id"] not in server.workspace(WS).conclusions
    assert "failed" in call(provider, "honcho_conclude", delete_id=made["id"])["error"]


def test_tool_argument_errors(provider: Any) -> None:
    assert "exactly one" in call(provider, "honcho_conclude")["error"]
    assert "exactly one" in call(provider, "honcho_conclude", conclusion="x", delete_id="y")["error"]
    assert "required" in call(provider, "honcho_search", query="  ")["error"]
    assert "no tool" in call(provider, "honcho_dream")["error"]


# -- failures --------------------------------------------------------------------------------


def test_a_wrong_key_is_an_error_not_a_crash(kernel: Any, server: Any) -> None:
    p = HonchoProvider(kernel, settings=settings(server, api_key="wrong"))
    p.initialize("s1")
    try:
        assert "honcho_profile failed" in call(p, "honcho_profile")["error"]
        p.sync_turn("hello", "hi")  # fails in the background, never raises
        assert p.flush(10)
        assert p.prefetch("hello there friend") == ""
    finally:
        p.shutdown()


def test_circuit_breaker_opens_after_repeated_failures(provider: Any, server: Any) -> None:
    server.fail_next(3, status=503)
    for _ in range(3):
        assert "failed" in call(provider, "honcho_profile")["error"]
    sent = len(server.requests)
    assert "paused" in call(provider, "honcho_profile")["error"]
    with pytest.raises(HonchoPaused):
        provider.peer_context()
    assert provider.prefetch("what do you know about me?") == ""
    provider.sync_turn("hello", "hi")
    assert provider.flush(10)
    assert len(server.requests) == sent
    assert provider.status()["breaker"]["open"] is True


def test_shutdown_drains_queued_messages(provider: Any, server: Any) -> None:
    provider.sync_turn("last words", "noted")
    provider.shutdown()
    provider.shutdown()  # idempotent
    assert [m["content"] for m in server.messages(WS)] == ["last words", "noted"]
    assert "shut down" in call(provider, "honcho_profile")["error"]


# -- the memory-provider conformance suite ---------------------------------------------------


class TestHonchoConformance(MemoryProviderConformance):
    """The shared contract. The fake server's stand-in deriver turns each synced message
    into a conclusion, so a synced fact comes back through the real recall path."""

    recalls_synced_turns = True

    @pytest.fixture
    def provider(self, kernel: Any) -> Any:
        with FakeHoncho(api_key="hk-test", deriver=True) as fake:
            p = HonchoProvider(kernel, settings=settings(fake))
            yield p
            p.shutdown()


# -- in the real turn loop ---------------------------------------------------------------------


def test_two_turns_through_the_agent(kernel_factory: Any, fake_llm: Any) -> None:
    """The runtime agent syncs turn 1 to Honcho and hands turn 2's model call the user's
    context, fenced in <memory-context> (the stand-in deriver turns turn 1 into a
    conclusion)."""
    from hermes.runtime.agent import Agent

    with FakeHoncho(api_key="hk-test", deriver=True) as fake:
        config = fake_llm.config(provider="openai")
        config["memory"] = {"provider": "honcho", "nudge_interval": 0}
        config["plugins"] = {"honcho": settings(fake)}
        agent = Agent(kernel_factory(config=config, plugins=[hermes_honcho]))
        try:
            agent.run_turn("I keep bees on my roof")
            assert agent.memory.flush(10)  # the user's think time: background sync lands
            agent.run_turn("How should I prepare the hives for winter?")
        finally:
            agent.close()
        said = [(m["peer_id"], m["content"]) for m in fake.messages(WS)]
        assert said[0] == ("ada", "I keep bees on my roof") and len(said) == 4
        assert {m["session_id"] for m in fake.messages(WS)} == {honcho_id(agent.session_id, "")}
    last_user = [m for m in fake_llm.requests[-1].messages if m["role"] == "user"][-1]
    text = last_user["content"] if isinstance(last_user["content"], str) else json.dumps(last_user["content"])
    fenced = text.split("<memory-context>", 1)[1].split("</memory-context>", 1)[0]
    assert "I keep bees on my roof" in fenced


def test_declared_tool_names_match_the_schemas(kernel_factory: Any) -> None:
    """The names registered with tools=(...) (which the kernel reserves) are the tools."""
    from hermes_honcho import HonchoProvider

    kernel = kernel_factory(autoload=True)
    entry = kernel.registries.memory_providers.get("honcho")
    names = {s.get("function", s)["name"] for s in HonchoProvider(kernel).get_tool_schemas()}
    assert set(entry.tools) == names
