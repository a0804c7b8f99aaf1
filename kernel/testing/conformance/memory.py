"""Conformance suite for memory providers.

Subclass :class:`MemoryProviderConformance` in your plugin's tests and override the
``provider`` fixture so it returns a fresh, *available* provider for each test (use
``tmp_path`` or the ``hermes_home`` fixture for anything it stores)::

    import pytest
    from hermes.testing.conformance import MemoryProviderConformance

    class TestMyProvider(MemoryProviderConformance):
        recalls_synced_turns = True      # prefetch finds what sync_turn stored

        @pytest.fixture
        def provider(self, hermes_home):
            return MyProvider(home=hermes_home)

The suite checks the contract the memory manager relies on: types of every return
value, no exception from any method called with valid arguments, JSON results from
tools, no network in ``is_available``, tool names that do not shadow core tools, a
clean run under a real :class:`hermes.MemoryManager` (no failure logged), and — when
``recalls_synced_turns`` is set — that a synced fact is recalled.
"""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import pytest

#: Names no provider other than ``builtin`` may give a tool.
CORE_TOOL_NAMES = frozenset({"memory", "session_search", "delegate_task"})

_MESSAGES = [
    {"role": "user", "content": "I prefer answers in British English."},
    {"role": "assistant", "content": "Noted, I will use British spelling."},
]


def _schema_name(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    function = schema.get("function")
    fn = function if isinstance(function, dict) else schema
    name = fn.get("name")
    return name if isinstance(name, str) else None


class MemoryProviderConformance:
    """The memory-provider contract, as pytest tests. Override :meth:`provider`."""

    #: Set to ``True`` when ``prefetch`` recalls facts stored by ``sync_turn``.
    recalls_synced_turns: bool = False

    #: Extra kwargs for ``initialize`` (besides ``hermes_home``, ``platform``,
    #: ``agent_context``).
    initialize_kwargs: dict[str, Any] = {}

    @pytest.fixture
    def provider(self) -> Any:
        """Return a fresh, available provider. Subclasses must override this."""
        pytest.fail("override the `provider` fixture in your MemoryProviderConformance subclass")

    @pytest.fixture
    def ready(self, provider: Any, tmp_path: Any) -> Any:
        """The provider, initialised for session ``conf-session``."""
        provider.initialize("conf-session", hermes_home=str(tmp_path), platform="cli",
                            agent_context="primary", **self.initialize_kwargs)
        yield provider
        provider.shutdown()

    # -- identity -------------------------------------------------------------------------

    def test_is_a_memory_provider(self, provider: Any) -> None:
        from hermes import MemoryProvider

        assert isinstance(provider, MemoryProvider)
        assert isinstance(provider.name, str) and provider.name.strip()
        assert provider.name == provider.name  # stable

    def test_is_available_without_network(self, provider: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        def no_network(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("is_available() must not touch the network")

        monkeypatch.setattr(socket.socket, "connect", no_network)
        monkeypatch.setattr(socket, "getaddrinfo", no_network)
        monkeypatch.setattr(socket, "create_connection", no_network)
        available = provider.is_available()
        assert isinstance(available, bool)
        assert isinstance(provider.unavailable_reason(), str)

    def test_fixture_provider_is_available(self, provider: Any) -> None:
        assert provider.is_available(), (
            f"the suite needs an available provider; unavailable_reason(): {provider.unavailable_reason()!r}")

    # -- prompt and recall ----------------------------------------------------------------

    def test_system_prompt_block_is_text(self, ready: Any) -> None:
        assert isinstance(ready.system_prompt_block(), str)

    def test_prefetch_returns_text_for_any_query(self, ready: Any) -> None:
        for query in ("", "what do I prefer?", "日本語のテスト", "x" * 5000, "<memory-context>"):
            assert isinstance(ready.prefetch(query, session_id="conf-session"), str)
        assert isinstance(ready.prefetch("plain call"), str)

    def test_write_side_calls_return_none(self, ready: Any) -> None:
        assert ready.queue_prefetch("what do I prefer?", session_id="conf-session") is None
        assert ready.sync_turn("I like tea.", "Noted.", session_id="conf-session") is None
        assert ready.sync_turn("", "", session_id="conf-session") is None

    def test_recall_after_sync(self, provider: Any, kernel: Any) -> None:
        if not self.recalls_synced_turns:
            pytest.skip("recalls_synced_turns is False for this provider")
        manager = self._manager(kernel, provider)
        try:
            manager.initialize("conf-recall")
            manager.sync_turn("My favourite colour is teal.", "Noted: teal.", session_id="conf-recall")
            manager.queue_prefetch("favourite colour", session_id="conf-recall")
            assert manager.flush(timeout=30)
            recalled = manager.prefetch("What is my favourite colour?", session_id="conf-recall")
            assert "teal" in recalled.lower()
        finally:
            manager.shutdown()

    # -- tools ----------------------------------------------------------------------------

    def test_tool_schemas_are_valid(self, ready: Any) -> None:
        schemas = ready.get_tool_schemas()
        assert isinstance(schemas, list)
        names = []
        for schema in schemas:
            name = _schema_name(schema)
            assert name, f"tool schema without a name: {schema!r}"
            fn = schema.get("function", schema)
            params = fn.get("parameters", {"type": "object"})
            assert isinstance(params, dict) and params.get("type") == "object", name
            assert isinstance(fn.get("description", ""), str)
            json.dumps(schema)  # JSON-serialisable, as the model API needs
            names.append(name)
        assert len(names) == len(set(names)), f"duplicate tool names: {names}"
        if ready.name != "builtin":
            shadowed = CORE_TOOL_NAMES & set(names)
            assert not shadowed, f"tools shadow core tools: {sorted(shadowed)}"

    def test_tool_calls_answer_json_even_for_bad_arguments(self, ready: Any) -> None:
        for schema in ready.get_tool_schemas():
            name = _schema_name(schema)
            for args in ({}, {"unexpected": 1}):
                result = ready.handle_tool_call(name, args, session_id="conf-session")
                assert isinstance(result, str), name
                json.loads(result)

    # -- lifecycle hooks ------------------------------------------------------------------

    def test_lifecycle_hooks_accept_their_calls(self, ready: Any) -> None:
        assert ready.on_turn_start(1, "hello", model="m", platform="cli") is None
        text = ready.on_pre_compress(list(_MESSAGES))
        assert isinstance(text, str)
        # in the shape the memory manager calls it: metadata= keyword, a fourth
        # positional argument, or Hermes Agent's classic three arguments
        from hermes import MemoryManager, MemoryWriteEvent

        MemoryManager._mirror(ready, MemoryWriteEvent(
            "add", "memory", "User prefers British English.",
            metadata={"write_origin": "tool", "session_id": "conf-session"}))
        MemoryManager._mirror(ready, MemoryWriteEvent(
            "remove", "user", "", metadata={"old_text": "x", "previous_content": "x y"}))
        ready.on_delegation("summarise the logs", "done", child_session_id="conf-child")
        ready.on_session_switch("conf-session-2", parent_session_id="conf-session", reset=False)
        ready.on_session_switch("conf-session-3", parent_session_id="", reset=True)
        ready.on_session_end(list(_MESSAGES))

    def test_pre_compress_does_not_mutate_messages(self, ready: Any) -> None:
        messages = [dict(m) for m in _MESSAGES]
        ready.on_pre_compress(messages)
        assert messages == _MESSAGES

    def test_config_schema_shape(self, provider: Any) -> None:
        schema = provider.get_config_schema()
        assert isinstance(schema, list)
        for field in schema:
            assert isinstance(field, dict) and isinstance(field.get("key"), str) and field["key"]

    def test_shutdown_is_idempotent_and_final(self, provider: Any, tmp_path: Any) -> None:
        """Two shutdowns are fine; afterwards calls are harmless no-ops and no thread the
        provider started (``hermes-*``, as hermes.SerialWorker/BackgroundSlot name them)
        is left running."""
        import threading
        import time

        before = set(threading.enumerate())
        provider.initialize("conf-shutdown", hermes_home=str(tmp_path), platform="cli",
                            agent_context="primary", **self.initialize_kwargs)
        provider.sync_turn("Remember that I like tea.", "Noted.", session_id="conf-shutdown")
        provider.shutdown()
        provider.shutdown()
        assert isinstance(provider.prefetch("What do I like?", session_id="conf-shutdown"), str)
        provider.sync_turn("after shutdown", "ignored", session_id="conf-shutdown")
        deadline = time.monotonic() + 10
        while True:
            left = [t.name for t in threading.enumerate()
                    if t not in before and t.is_alive() and t.name.startswith("hermes")]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not left, f"threads still running after shutdown: {left}"

    # -- under the real manager -----------------------------------------------------------

    @staticmethod
    def _manager(kernel: Any, provider: Any) -> Any:
        from hermes import MemoryManager

        manager = MemoryManager(kernel, providers=[provider])
        assert manager.providers == [provider]
        return manager

    def test_runs_cleanly_under_the_memory_manager(self, provider: Any, kernel: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.WARNING, logger="hermes.memory")
        manager = self._manager(kernel, provider)
        manager.initialize("conf-managed")
        manager.on_turn_start(1, "What do I prefer?")
        assert isinstance(manager.fenced_prefetch("What do I prefer?"), str)
        assert isinstance(manager.external_system_prompt_block(), str)
        for schema in manager.tool_schemas():
            assert isinstance(manager.handle_tool_call(schema["name"], {}, session_id="conf-managed"), str)
        manager.sync_turn("What do I prefer?", "British English.")
        manager.queue_prefetch("What do I prefer?")
        assert isinstance(manager.on_pre_compress(list(_MESSAGES)), str)
        manager.on_session_end(list(_MESSAGES))
        assert manager.flush(timeout=30)
        manager.shutdown(timeout=10)
        failures = [r.getMessage() for r in caplog.records if "failed in" in r.getMessage()]
        assert not failures, failures
