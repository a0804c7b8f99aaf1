"""The mem0 memory provider.

Two modes, one code path: **platform** talks to the hosted Mem0 API through
``mem0.MemoryClient`` (``MEM0_API_KEY``); **local** runs the open-source ``mem0.Memory``
in-process, its LLM and embedder pointed at any OpenAI-compatible endpoint and its vectors
in a local Qdrant directory under ``$HERMES_HOME/mem0/`` (any store mem0 supports can be
configured instead). Both clients share ``add`` / ``search`` / ``delete``.

``mem0`` is imported only when the provider first talks to it, never at import time, so
``hermes --help`` and ``hermes plugins list`` stay light.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import hermes

log = logging.getLogger("hermes.mem0")

#: Settings under ``plugins.mem0`` and their defaults.
DEFAULTS: dict[str, Any] = {
    "mode": "auto",  # auto | platform | local
    "api_key": None,  # platform; default $MEM0_API_KEY
    "host": None,  # platform; default $MEM0_HOST, else the SDK's default
    "user_id": None,  # default $MEM0_USER_ID, else "hermes-user"
    "agent_id": None,  # default $MEM0_AGENT_ID, else "hermes"
    "top_k": 5,  # memories recalled per turn
    "rerank": False,  # platform reranking of searches
    "infer": True,  # let mem0's LLM extract facts from synced turns
    "prefetch_timeout": 3.0,  # seconds a turn waits for recalled memories
    "sync_timeout": 5.0,  # seconds shutdown waits for queued writes
    "breaker_threshold": 5,  # consecutive failures before pausing
    "breaker_cooldown": 120.0,  # seconds paused
    "mirror_builtin": True,  # copy built-in MEMORY.md/USER.md writes into mem0
    "llm": {"model": "gpt-4.1-nano", "base_url": None, "api_key": None},
    "embedder": {"model": "text-embedding-3-small", "base_url": None, "api_key": None,
                 "dims": 1536},
    "vector_store": {"provider": "qdrant", "path": None, "collection": "hermes"},
    "history_db_path": None,
    "config": {},  # raw mem0 MemoryConfig dict, merged over the generated one
}

_SEARCH_SCHEMA = {
    "name": "mem0_search",
    "description": (
        "Search long-term memory (mem0) for facts about the user, their projects and "
        "preferences from earlier conversations. Relevant memories are already recalled "
        "each turn; search when you need something specific."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in plain words."},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 50,
                      "description": "How many memories to return (default 10)."},
        },
        "required": ["query"],
    },
}
_ADD_SCHEMA = {
    "name": "mem0_add",
    "description": (
        "Store one durable fact in long-term memory (mem0), verbatim: a preference, a "
        "decision, a stable detail about the user or their work. One self-contained "
        "sentence; not for transient task state."
    ),
    "parameters": {
        "type": "object",
        "properties": {"content": {"type": "string", "description": "The fact to remember."}},
        "required": ["content"],
    },
}
_DELETE_SCHEMA = {
    "name": "mem0_delete",
    "description": "Delete one memory from mem0 by its id (from mem0_search), e.g. when it is wrong or outdated.",
    "parameters": {
        "type": "object",
        "properties": {"memory_id": {"type": "string", "description": "The memory's id."}},
        "required": ["memory_id"],
    },
}


class Mem0Paused(hermes.HermesError):
    """The circuit breaker is open: mem0 failed repeatedly and is skipped for a while."""


def _results(response: Any) -> list[dict[str, Any]]:
    """The memory list of a mem0 response, whichever client and version answered."""
    if isinstance(response, dict):
        response = response.get("results", response.get("memories", []))
    return [r for r in (response or []) if isinstance(r, dict)]


class Mem0Provider(hermes.BackgroundMemoryProvider):
    """Long-term memory in mem0: recall by search before each turn, extraction of new
    facts from each finished exchange, three tools, and a circuit breaker (the
    background skeleton is :class:`hermes.BackgroundMemoryProvider`).

    Built by the kernel as ``Mem0Provider(kernel)``; ``settings`` (tests, embedding)
    overrides ``plugins.mem0`` from the config.
    """

    settings_key = "mem0"
    defaults = DEFAULTS
    paused_error = Mem0Paused

    def __init__(self, kernel: Any = None, *, settings: dict[str, Any] | None = None):
        super().__init__(kernel, settings=settings)
        s = self.settings
        self._client: Any = None
        self._client_lock = threading.Lock()
        # Local Qdrant is not thread-safe: serialize every call in local mode.
        self._io_lock: Any = threading.RLock()
        self.user_id = str(s["user_id"] or self.env.get("MEM0_USER_ID") or "hermes-user")
        self.agent_id = str(s["agent_id"] or self.env.get("MEM0_AGENT_ID") or "hermes")

    # -- identity and availability ------------------------------------------------------

    @property
    def name(self) -> str:
        return "mem0"

    @property
    def api_key(self) -> str:
        """The platform API key: ``plugins.mem0.api_key``, else ``$MEM0_API_KEY``."""
        return str(self.settings.get("api_key") or self.env.get("MEM0_API_KEY") or "")

    @property
    def mode(self) -> str:
        """``platform`` or ``local`` as configured; ``auto`` picks platform when an API key
        is set and local when a local endpoint is; ``""`` when neither is."""
        mode = str(self.settings.get("mode") or "auto").lower()
        if mode in ("platform", "local"):
            return mode
        if self.api_key:
            return "platform"
        return "local" if self._local_endpoint() else ""

    def _local_endpoint(self) -> str:
        """Where the local LLM lives: a configured base URL, a raw mem0 ``llm`` config,
        or OpenAI itself when ``$OPENAI_API_KEY`` is set; ``""`` when none is."""
        llm = self.settings["llm"]
        if llm.get("base_url") or self.env.get("OPENAI_BASE_URL"):
            return str(llm.get("base_url") or self.env["OPENAI_BASE_URL"])
        if (self.settings.get("config") or {}).get("llm"):
            return "(plugins.mem0.config.llm)"
        if llm.get("api_key") or self.env.get("OPENAI_API_KEY"):
            return "https://api.openai.com/v1"
        return ""

    def unavailable_reason(self) -> str:
        if self.config_error:
            return self.config_error
        if not hermes.importable("mem0"):
            return "the mem0ai package is not installed (pip install mem0ai)"
        mode = str(self.settings.get("mode") or "auto").lower()
        if mode not in ("auto", "platform", "local"):
            return f"plugins.mem0.mode is {mode!r}; use auto, platform or local"
        if mode == "platform" and not self.api_key:
            return "platform mode needs an API key: set MEM0_API_KEY (or plugins.mem0.api_key)"
        if mode == "local" and not self._local_endpoint():
            return ("local mode needs an OpenAI-compatible endpoint: set "
                    "plugins.mem0.llm.base_url (or OPENAI_API_KEY)")
        if not self.mode:
            return ("no MEM0_API_KEY for the Mem0 platform and no local endpoint "
                    "(plugins.mem0.llm.base_url) for local mode")
        return ""

    # -- lifecycle ------------------------------------------------------------------------

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        super().initialize(session_id, **kwargs)
        if kwargs.get("user_id"):
            self.user_id = str(kwargs["user_id"])  # a gateway user gets their own memories

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "",
                          reset: bool = False, **kwargs: Any) -> None:
        self.session_id = new_session_id

    def close_backend(self) -> None:
        with self._client_lock:
            client, self._client, self._closed = self._client, None, True
        if client is not None:
            with self._io_lock:
                _close_client(client)

    def system_prompt_block(self) -> str:
        return (
            "# Long-term memory (mem0)\n"
            "Memories from earlier conversations are recalled automatically when relevant. "
            "Use mem0_search to look for something specific, mem0_add to store a durable "
            "fact verbatim, and mem0_delete to remove a memory that is wrong."
        )

    # -- the client -----------------------------------------------------------------------

    def _data_dir(self) -> Path:
        home = self.home or Path(self.env.get("HERMES_HOME") or "~/.hermes").expanduser()
        return home / "mem0"

    def local_config(self) -> dict[str, Any]:
        """The ``mem0.Memory.from_config`` dict local mode uses."""
        s = self.settings
        llm, emb, store = s["llm"], s["embedder"], s["vector_store"]
        base_url = llm.get("base_url") or self.env.get("OPENAI_BASE_URL")
        # A local server ignores the key but the OpenAI SDK insists on one.
        api_key = llm.get("api_key") or self.env.get("OPENAI_API_KEY") or (
            "not-needed" if base_url else None)
        emb_url = emb.get("base_url") or base_url
        emb_key = emb.get("api_key") or api_key
        dims = int(emb.get("dims") or 1536)
        data = self._data_dir()
        provider = str(store.get("provider") or "qdrant")
        store_cfg: dict[str, Any] = {"collection_name": store.get("collection") or "hermes",
                                     "embedding_model_dims": dims}
        if provider in ("qdrant", "faiss", "chroma"):
            store_cfg["path"] = str(store.get("path") or data / provider)
        if provider == "qdrant":
            store_cfg["on_disk"] = True
        config = {
            "llm": {"provider": "openai", "config": {
                "model": llm.get("model"), "api_key": api_key, "openai_base_url": base_url,
                "temperature": 0.0}},
            "embedder": {"provider": "openai", "config": {
                "model": emb.get("model"), "api_key": emb_key, "openai_base_url": emb_url,
                "embedding_dims": dims}},
            "vector_store": {"provider": provider, "config": store_cfg},
            "history_db_path": str(s.get("history_db_path") or data / "history.db"),
        }
        return hermes.merge_settings(config, s.get("config") or {})

    def _get_client(self) -> Any:
        with self._client_lock:
            if self._closed:
                raise hermes.HermesError("mem0 provider is shut down")
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def _build_client(self) -> Any:
        mode = self.mode
        if not mode:
            raise hermes.HermesError(self.unavailable_reason())
        data = self._data_dir()
        data.mkdir(parents=True, exist_ok=True)
        # Read by mem0 at import: keep its files in this home and never phone home.
        os.environ.setdefault("MEM0_DIR", str(data))
        os.environ.setdefault("MEM0_TELEMETRY", "false")
        if mode == "platform":
            from mem0 import MemoryClient

            host = self.settings.get("host") or self.env.get("MEM0_HOST") or None
            self._io_lock = contextlib.nullcontext()  # httpx is thread-safe
            return MemoryClient(api_key=self.api_key, host=host)
        from mem0 import Memory

        return Memory.from_config(self.local_config())

    def _call(self, fn: Any) -> Any:
        """Run ``fn(client)`` through the circuit breaker."""

        def with_client() -> Any:
            client = self._get_client()
            with self._io_lock:
                return fn(client)

        return self.call(with_client)

    # -- operations -------------------------------------------------------------------------

    def search(self, query: str, top_k: int | None = None) -> list[dict[str, Any]]:
        """Memories of this user that match ``query``, best first."""
        k = max(1, min(50, int(top_k or self.settings["top_k"])))
        kwargs: dict[str, Any] = {"filters": {"user_id": self.user_id}, "top_k": k}
        if self.settings.get("rerank") and self.mode == "platform":
            kwargs["rerank"] = True
        return _results(self._call(lambda c: c.search(query, **kwargs)))[:k]

    def add(self, content: str | list[dict[str, str]], *, infer: bool,
            metadata: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Store messages (or one text); ``infer`` lets mem0's LLM extract facts."""
        meta = {"source": "hermes", "platform": self.platform, **(metadata or {})}
        if self.session_id:
            meta.setdefault("session_id", self.session_id)
        return _results(self._call(lambda c: c.add(
            content, user_id=self.user_id, agent_id=self.agent_id, metadata=meta, infer=infer)))

    def delete(self, memory_id: str) -> None:
        """Delete one memory by id."""
        self._call(lambda c: c.delete(memory_id))

    # -- recall -----------------------------------------------------------------------------

    def recall(self, query: str) -> str:
        try:
            hits = self.search(query)
        except Exception as exc:
            log.debug("mem0 prefetch failed: %s", exc)
            return ""
        lines = [f"- {h.get('memory')}" for h in hits if h.get("memory")]
        return "## Mem0 memories\n" + "\n".join(lines) if lines else ""


    # -- writes -----------------------------------------------------------------------------

    def sync_turn(self, user_content: str, assistant_content: str, *,
                  session_id: str = "") -> None:
        if not self.writes_allowed() or not (user_content or "").strip():
            return
        messages = [{"role": "user", "content": user_content}]
        if (assistant_content or "").strip():
            messages.append({"role": "assistant", "content": assistant_content})
        meta = {"session_id": session_id or self.session_id}
        self.submit(self._background_write, messages, bool(self.settings["infer"]), meta)

    def _background_write(self, content: Any, infer: bool, meta: dict[str, Any]) -> None:
        if not self.breaker.allow():
            log.debug("mem0 paused; dropped a write")
            return
        try:
            self.add(content, infer=infer, metadata=meta)
        except Exception as exc:
            log.warning("mem0 write failed: %s", exc)

    def on_memory_write(self, action: str, target: str, content: str,
                        metadata: dict[str, Any] | None = None) -> None:
        if not self.writes_allowed() or not self.settings.get("mirror_builtin", True):
            return
        metadata = metadata or {}
        # previous_content is the whole old entry; old_text only the substring naming it.
        old = metadata.get("previous_content") or metadata.get("old_text")
        self.submit(self._mirror, action, target, content or "", old)

    def _mirror(self, action: str, target: str, content: str, old: str | None) -> None:
        """Mirror one committed built-in write: a removal or replacement deletes the
        memories holding exactly the old text; an addition stores the new text verbatim."""
        try:
            if action in ("replace", "remove"):
                gone = (old or (content if action == "remove" else "")).strip()
                if gone:
                    for hit in self.search(gone, top_k=10):
                        if str(hit.get("memory", "")).strip() == gone and hit.get("id"):
                            self.delete(str(hit["id"]))
            if action in ("add", "replace") and content.strip():
                self.add(content, infer=False,
                         metadata={"source": "hermes-builtin", "target": target})
        except Exception as exc:
            log.warning("mem0 mirror of a built-in %s failed: %s", action, exc)

    # -- tools ----------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [_SEARCH_SCHEMA, _ADD_SCHEMA, _DELETE_SCHEMA]

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            if tool_name == "mem0_search":
                query = str(args.get("query") or "").strip()
                if not query:
                    return json.dumps({"error": "query is required"})
                hits = self.search(query, top_k=int(args.get("top_k") or 10))
                results = [{"id": h.get("id"), "memory": h.get("memory"),
                            "score": h.get("score")} for h in hits]
                return json.dumps({"results": results, "count": len(results)})
            if tool_name == "mem0_add":
                content = str(args.get("content") or "").strip()
                if not content:
                    return json.dumps({"error": "content is required"})
                added = self.add(content, infer=False)
                return json.dumps({"success": True, "ids": [a.get("id") for a in added]})
            if tool_name == "mem0_delete":
                memory_id = str(args.get("memory_id") or "").strip()
                if not memory_id:
                    return json.dumps({"error": "memory_id is required"})
                self.delete(memory_id)
                return json.dumps({"success": True, "deleted": memory_id})
        except Exception as exc:
            return json.dumps({"error": f"{tool_name} failed: {exc}"})
        return json.dumps({"error": f"mem0 has no tool {tool_name!r}"})

    # -- setup and status -------------------------------------------------------------------

    def get_config_schema(self) -> list[dict[str, Any]]:
        return [
            {"key": "api_key", "description": "Mem0 platform API key", "secret": True,
             "required": False, "env_var": "MEM0_API_KEY", "url": "https://app.mem0.ai"},
            {"key": "mode", "description": "auto, platform or local", "default": "auto",
             "choices": ["auto", "platform", "local"]},
            {"key": "user_id", "description": "whose memories", "default": "hermes-user",
             "env_var": "MEM0_USER_ID"},
            {"key": "llm.base_url", "description": "OpenAI-compatible endpoint for local mode",
             "default": None},
            {"key": "llm.model", "description": "model for fact extraction (local mode)",
             "default": DEFAULTS["llm"]["model"]},
            {"key": "embedder.model", "description": "embedding model (local mode)",
             "default": DEFAULTS["embedder"]["model"]},
        ]

    def status(self) -> dict[str, Any]:
        """Mode, scope and circuit-breaker state, for status output."""
        return {**self.breaker_status(), "mode": self.mode or None, "user_id": self.user_id}


def _close_client(client: Any) -> None:
    """Release what a mem0 client holds: its SQLite history and the local Qdrant lock
    (``Memory.close`` leaves the vector store open)."""
    for closer in (getattr(client, "close", None),
                   getattr(getattr(getattr(client, "vector_store", None), "client", None),
                           "close", None)):
        if callable(closer):
            try:
                closer()
            except Exception as exc:  # closing must never fail shutdown
                log.debug("mem0 close: %s", exc)
