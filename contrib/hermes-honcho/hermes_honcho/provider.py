"""The Honcho memory provider.

Honcho (plastic-labs) models the people in a conversation. This provider maps a Hermes
home onto it as one **user peer** and one **assistant peer** in a workspace, one Honcho
**session** per conversation, every finished exchange synced as two messages in the
background, and the user's peer context (peer card + representation, focused on the
current message) recalled before each turn. Tools: ``honcho_profile``,
``honcho_search``, ``honcho_context``, ``honcho_conclude``.

``honcho`` (the ``honcho-ai`` SDK) is imported only when the provider first talks to the
server, never at import time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from typing import Any

import hermes
from hermes import is_trivial_prompt

log = logging.getLogger("hermes.honcho")

#: Settings under ``plugins.honcho`` and their defaults.
DEFAULTS: dict[str, Any] = {
    "base_url": None,  # default $HONCHO_URL, else Honcho's cloud
    "api_key": None,  # default $HONCHO_API_KEY; write it as {$env: HONCHO_API_KEY}
    "workspace": "hermes",
    "user_peer": None,  # default: the gateway user, else $USER, else "user"
    "ai_peer": "hermes",
    "timeout": 10.0,  # seconds per HTTP request
    "max_retries": 1,  # SDK retries on 429/5xx
    "prefetch_timeout": 3.0,  # seconds a turn waits for recalled context
    "sync_timeout": 5.0,  # seconds shutdown waits for queued messages
    "search_top_k": 10,  # conclusions recalled per turn
    "context_tokens": 2000,  # token budget of honcho_context
    "message_max_chars": 25000,  # longer messages are sent in pieces
    "breaker_threshold": 5,
    "breaker_cooldown": 120.0,
}

_SCHEMAS = [
    {
        "name": "honcho_profile",
        "description": "The user's peer card from Honcho: short, stable facts about who they are.",
        "parameters": {"type": "object", "properties": {}},
    },
    {
        "name": "honcho_search",
        "description": (
            "Search what Honcho knows about the user (its conclusions) and what the user said "
            "in earlier conversations."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50,
                          "description": "How many messages and conclusions (default 10)."},
            },
            "required": ["query"],
        },
    },
    {
        "name": "honcho_context",
        "description": (
            "This conversation as Honcho holds it: its summary, the recent messages within a "
            "token budget, and the user's representation and peer card."
        ),
        "parameters": {
            "type": "object",
            "properties": {"tokens": {"type": "integer", "minimum": 100,
                                      "description": "Token budget for messages (default 2000)."}},
        },
    },
    {
        "name": "honcho_conclude",
        "description": (
            "Record a conclusion about the user in Honcho (a durable fact you are sure of), "
            "or delete a wrong one by its id."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "conclusion": {"type": "string", "description": "The fact to record."},
                "delete_id": {"type": "string", "description": "Id of a conclusion to delete."},
            },
        },
    },
]

_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def honcho_id(value: str, fallback: str) -> str:
    """A Honcho resource name (``^[A-Za-z0-9_-]+$``, at most 512 characters)."""
    cleaned = _NOT_NAME.sub("-", str(value or "")).strip("-")[:512]
    return cleaned or fallback


class HonchoPaused(hermes.HermesError):
    """The circuit breaker is open: Honcho failed repeatedly and is skipped for a while."""


class HonchoProvider(hermes.BackgroundMemoryProvider):
    """User modelling in Honcho. Built by the kernel as ``HonchoProvider(kernel)``;
    ``settings`` (tests, embedding) overrides ``plugins.honcho`` from the config. The
    background skeleton is :class:`hermes.BackgroundMemoryProvider`."""

    settings_key = "honcho"
    defaults = DEFAULTS
    paused_error = HonchoPaused
    skip_trivial_prompts = False  # a greeting still gets the user's peer card

    def __init__(self, kernel: Any = None, *, settings: dict[str, Any] | None = None):
        super().__init__(kernel, settings=settings)
        merged = self.settings
        self._lock = threading.RLock()
        self._client: Any = None
        self._http: Any = None
        self._peer_objs: tuple[Any, Any] | None = None
        self._sessions: dict[str, Any] = {}
        self.user_peer_id = honcho_id(merged["user_peer"] or self.env.get("USER") or "", "user")
        self.ai_peer_id = honcho_id(merged["ai_peer"], "hermes")

    # -- identity and availability --------------------------------------------------------

    @property
    def name(self) -> str:
        return "honcho"

    @property
    def api_key(self) -> str:
        """``plugins.honcho.api_key``, else ``$HONCHO_API_KEY``."""
        return str(self.settings.get("api_key") or self.env.get("HONCHO_API_KEY") or "")

    @property
    def base_url(self) -> str:
        """``plugins.honcho.base_url``, else ``$HONCHO_URL``; ``""`` means Honcho's cloud."""
        return str(self.settings.get("base_url") or self.env.get("HONCHO_URL") or "")

    @property
    def workspace(self) -> str:
        """The Honcho workspace this home's peers live in."""
        return honcho_id(self.settings.get("workspace") or "", "hermes")

    def unavailable_reason(self) -> str:
        if self.config_error:
            return self.config_error
        if not hermes.importable("honcho"):
            return "the honcho-ai package is not installed (pip install honcho-ai)"
        if not self.api_key and not self.base_url:
            return ("no Honcho API key: set HONCHO_API_KEY (plugins.honcho.api_key: "
                    "{$env: HONCHO_API_KEY}), or plugins.honcho.base_url for a self-hosted server")
        return ""

    # -- lifecycle ------------------------------------------------------------------------

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        super().initialize(session_id, **kwargs)
        if kwargs.get("user_id"):
            # A gateway user is their own peer.
            self.user_peer_id = honcho_id(str(kwargs["user_id"]), "user")
            self._peer_objs = None
        self.session_id = honcho_id(session_id, "default")

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "",
                          reset: bool = False, **kwargs: Any) -> None:
        # A compaction continues the same conversation: keep its Honcho session. A reset
        # (/new) or an unrelated session starts a new one.
        if reset or not parent_session_id or not self.session_id:
            self.session_id = honcho_id(new_session_id, "default")

    def close_backend(self) -> None:
        with self._lock:
            http, self._http, self._client, self._closed = self._http, None, None, True
            self._peer_objs, self._sessions = None, {}
        if http is not None:
            with contextlib.suppress(Exception):
                http.close()

    def system_prompt_block(self) -> str:
        return (
            "# User model (Honcho)\n"
            "Honcho keeps a model of the user across conversations; what it knows that is "
            "relevant is recalled automatically. honcho_profile shows the user's peer card, "
            "honcho_search searches what is known and what was said, honcho_context shows this "
            "conversation as Honcho holds it, honcho_conclude records (or deletes) a fact."
        )

    # -- the client -------------------------------------------------------------------------

    def _get_client(self) -> Any:
        with self._lock:
            if self._closed:
                raise hermes.HermesError("honcho provider is shut down")
            if self._client is None:
                import httpx
                from honcho import Honcho

                timeout = float(self.settings["timeout"])
                self._http = httpx.Client(timeout=timeout)
                self._client = Honcho(
                    api_key=self.api_key or None, base_url=self.base_url or None,
                    workspace_id=self.workspace, timeout=timeout,
                    max_retries=int(self.settings["max_retries"]), http_client=self._http)
            return self._client

    def _peers(self) -> tuple[Any, Any]:
        """(user peer, assistant peer), created on the server on first use."""
        with self._lock:
            client = self._get_client()  # raises once shut down
            if self._peer_objs is None:
                self._peer_objs = (client.peer(self.user_peer_id), client.peer(self.ai_peer_id))
            return self._peer_objs

    def _session(self, session_id: str) -> Any:
        """The Honcho session for ``session_id``, with both peers in it."""
        with self._lock:
            if session_id not in self._sessions:
                user, ai = self._peers()
                self._sessions[session_id] = self._get_client().session(session_id, peers=[user, ai])
            return self._sessions[session_id]

    # -- recall -----------------------------------------------------------------------------

    def peer_context(self, query: str = "") -> tuple[list[str], str]:
        """(peer card, representation) of the user, focused on ``query`` when given."""
        def fetch() -> Any:
            user, _ = self._peers()
            if query and not is_trivial_prompt(query):
                return user.context(search_query=query,
                                    search_top_k=int(self.settings["search_top_k"]))
            return user.context()

        ctx = self.call(fetch)
        return list(ctx.peer_card or []), str(ctx.representation or "").strip()

    def recall(self, query: str) -> str:
        try:
            card, representation = self.peer_context(query)
        except Exception as exc:
            log.debug("honcho prefetch failed: %s", exc)
            return ""
        parts = []
        if card:
            parts.append("## Honcho: the user's peer card\n" + "\n".join(f"- {c}" for c in card))
        if representation:
            parts.append("## Honcho: what is known about the user\n" + representation)
        return "\n\n".join(parts)

    # -- sync -------------------------------------------------------------------------------

    def sync_turn(self, user_content: str, assistant_content: str, *,
                  session_id: str = "") -> None:
        if not self.writes_allowed():
            return
        if not (user_content or "").strip() and not (assistant_content or "").strip():
            return
        self.submit(self._send, self.session_id or honcho_id(session_id, "default"),
                            user_content or "", assistant_content or "")

    def _send(self, session_id: str, user_content: str, assistant_content: str) -> None:
        if not self.breaker.allow():
            log.debug("honcho paused; dropped a turn")
            return
        size = max(1, int(self.settings["message_max_chars"]))

        def send() -> None:
            user, ai = self._peers()
            messages = [peer.message(text[i:i + size])
                        for peer, text in ((user, user_content), (ai, assistant_content))
                        for i in range(0, len(text), size) if text[i:i + size].strip()]
            session = self._session(session_id)
            for start in range(0, len(messages), 100):  # the API takes 100 per call
                session.add_messages(messages[start:start + 100])

        try:
            self.call(send)
        except Exception as exc:
            log.warning("honcho sync failed: %s", exc)

    # -- tools --------------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [dict(s) for s in _SCHEMAS]

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            if tool_name == "honcho_profile":
                card = self.call(lambda: self._peers()[0].get_card()) or []
                return json.dumps({"peer": self.user_peer_id, "card": list(card)})
            if tool_name == "honcho_search":
                return self._search(args)
            if tool_name == "honcho_context":
                return self._context(args)
            if tool_name == "honcho_conclude":
                return self._conclude(args)
        except Exception as exc:
            return json.dumps({"error": f"{tool_name} failed: {exc}"})
        return json.dumps({"error": f"honcho has no tool {tool_name!r}"})

    def _search(self, args: dict[str, Any]) -> str:
        query = str(args.get("query") or "").strip()
        if not query:
            return json.dumps({"error": "query is required"})
        limit = max(1, min(50, int(args.get("limit") or 10)))

        def search() -> tuple[str, list[Any]]:
            user, _ = self._peers()
            representation = user.representation(search_query=query, search_top_k=limit)
            return representation, user.search(query, limit=limit)

        representation, messages = self.call(search)
        return json.dumps({
            "representation": representation or "",
            "messages": [{"content": m.content, "session": m.session_id,
                          "created_at": str(m.created_at)} for m in messages],
        })

    def _context(self, args: dict[str, Any]) -> str:
        tokens = max(100, int(args.get("tokens") or self.settings["context_tokens"]))
        ctx = self.call(lambda: self._session(self.session_id).context(
            summary=True, tokens=tokens, peer_target=self.user_peer_id))
        return json.dumps({
            "session": self.session_id,
            "summary": ctx.summary.content if ctx.summary else None,
            "representation": ctx.peer_representation,
            "card": ctx.peer_card,
            "messages": [{"peer": m.peer_id, "content": m.content} for m in ctx.messages],
        })

    def _conclude(self, args: dict[str, Any]) -> str:
        delete_id = str(args.get("delete_id") or "").strip()
        conclusion = str(args.get("conclusion") or "").strip()
        if bool(delete_id) == bool(conclusion):
            return json.dumps({"error": "give exactly one of conclusion or delete_id"})
        if delete_id:
            self.call(lambda: self._peers()[0].conclusions.delete(delete_id))
            return json.dumps({"success": True, "deleted": delete_id})

        def create() -> Any:
            user, _ = self._peers()
            self._session(self.session_id)  # a conclusion names an existing session
            return user.conclusions.create([{"content": conclusion, "session_id": self.session_id}])

        created = self.call(create)
        return json.dumps({"success": True, "id": created[0].id if created else None})

    # -- setup and status -------------------------------------------------------------------

    def get_config_schema(self) -> list[dict[str, Any]]:
        return [
            {"key": "api_key", "description": "Honcho API key", "secret": True,
             "required": False, "env_var": "HONCHO_API_KEY", "url": "https://app.honcho.dev"},
            {"key": "base_url", "description": "self-hosted Honcho server (blank: Honcho cloud)",
             "default": None, "env_var": "HONCHO_URL"},
            {"key": "workspace", "description": "Honcho workspace", "default": "hermes"},
            {"key": "user_peer", "description": "the user's peer id", "default": None},
            {"key": "ai_peer", "description": "the assistant's peer id", "default": "hermes"},
        ]

    def status(self) -> dict[str, Any]:
        """Where it points and circuit-breaker state, for status output."""
        return {**self.breaker_status(), "base_url": self.base_url or "(Honcho cloud)",
                "workspace": self.workspace, "user_peer": self.user_peer_id,
                "ai_peer": self.ai_peer_id, "session": self.session_id}
