"""The built-in provider and a small file-backed test provider pass the memory-provider
conformance suite."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

import hermes
from hermes.plugins.memory.provider import BuiltinMemoryProvider
from hermes.plugins.memory.store import MemoryStore
from hermes.testing.conformance import MemoryProviderConformance


class NotesProvider(hermes.MemoryProvider):
    """Keeps every synced exchange in ``notes.jsonl`` and recalls lines sharing a word
    with the query (warmed by ``queue_prefetch``)."""

    def __init__(self, home: Path):
        self.path = Path(home) / "notes.jsonl"
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()
        self.closed = 0

    @property
    def name(self) -> str:
        return "notes"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def _search(self, query: str) -> str:
        words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 3}
        if not words or not self.path.exists():
            return ""
        hits = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            text = json.loads(line)["text"]
            if words & set(re.findall(r"\w+", text.lower())):
                hits.append(f"- {text}")
        return "\n".join(hits[-5:])

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        with self._lock:
            cached = self._cache.pop(session_id, None)
        return cached if cached is not None else self._search(query)

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        result = self._search(query)
        with self._lock:
            self._cache[session_id] = result

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "") -> None:
        if not user_content.strip():
            return
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"text": user_content, "session": session_id}) + "\n")

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [{"name": "notes_search", "description": "Search saved notes.",
                 "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                "required": ["query"]}}]

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query:
            return json.dumps({"error": "query is required"})
        return json.dumps({"result": self._search(query)})

    def shutdown(self) -> None:
        self.closed += 1


class TestBuiltinProviderConformance(MemoryProviderConformance):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> BuiltinMemoryProvider:
        return BuiltinMemoryProvider(MemoryStore(tmp_path / "memories"))


class TestNotesProviderConformance(MemoryProviderConformance):
    recalls_synced_turns = True

    @pytest.fixture
    def provider(self, tmp_path: Path) -> NotesProvider:
        return NotesProvider(tmp_path)


class TestSuiteCatchesBrokenProviders:
    """The suite is not vacuous: a provider breaking the contract fails it."""

    def test_shadowing_a_core_tool_fails(self, tmp_path: Path) -> None:
        class Shadowing(NotesProvider):
            def get_tool_schemas(self) -> list[dict[str, Any]]:
                return [{"name": "memory", "parameters": {"type": "object"}}]

        provider = Shadowing(tmp_path)
        provider.initialize("s")
        with pytest.raises(AssertionError, match="shadow core tools"):
            MemoryProviderConformance().test_tool_schemas_are_valid(provider)

    def test_raising_tool_fails(self, tmp_path: Path) -> None:
        class Raising(NotesProvider):
            def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
                raise KeyError("query")

        with pytest.raises(KeyError):
            MemoryProviderConformance().test_tool_calls_answer_json_even_for_bad_arguments(Raising(tmp_path))

    def test_forgetful_provider_fails_recall(self, tmp_path: Path, kernel: Any) -> None:
        class Forgetful(NotesProvider):
            def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "") -> None:
                pass

        suite = MemoryProviderConformance()
        suite.recalls_synced_turns = True
        with pytest.raises(AssertionError):
            suite.test_recall_after_sync(Forgetful(tmp_path), kernel)
