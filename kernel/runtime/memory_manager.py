"""The memory manager: the built-in file memory plus at most one external provider.

The runtime builds one :class:`MemoryManager` per agent. It

* builds the provider registered as ``builtin`` (always first, never displaced) and the
  external provider named by ``memory.provider`` — an unavailable one is reported once
  with its :meth:`~hermes.MemoryProvider.unavailable_reason`, a second external one is
  refused with a message naming ``memory.provider``;
* routes tool calls by name (a provider may not shadow a core tool: see
  :attr:`MemoryManager.reserved_names`);
* isolates every provider call: an exception is logged once per provider and method,
  and the turn goes on;
* bounds :meth:`prefetch` by ``memory.prefetch_timeout`` and runs ``sync_turn``,
  ``queue_prefetch`` and the other write-side hooks on one background worker, drained
  (with a bound) by :meth:`shutdown`;
* mirrors only *committed* ``memory`` tool writes to the external provider
  (``on_memory_write``) and emits ``hermes_memory_write`` for each;
* redacts secrets (API keys, tokens, passwords) from everything it hands a provider
  about the conversation, since external providers usually store it off the machine.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from ..contracts import MemoryProvider, MemoryWriteEvent, Message
from ..redaction import redact_secrets
from ..workers import SerialWorker
from .fencing import fence

log = logging.getLogger("hermes.memory")

__all__ = ["MemoryManager", "is_trivial_prompt", "BUILTIN"]

#: The registry name of the built-in provider: a contract-level name (reserved by
#: :attr:`hermes.MemoryProvider.name`, documented for ``memory.provider``), not a
#: special case of one plugin: whichever plugin registers ``builtin`` is the built-in.
BUILTIN = "builtin"

#: Recalled text longer than this is cut, so one provider cannot flood a request.
MAX_PREFETCH_CHARS = 16_000

# One or more bare acknowledgements or greetings ("ok", "ok thanks!", "yes, go on"); words
# must be separated, so matching stays linear on any input.
_ACK = (r"(?:y|n|k|ok(?:ay)?|yes|yep|yeah|no|nope|sure|thanks?|thank you|thx|ty|hi|hello|hey|"
        r"continue|go on|go ahead|proceed|next|done|lgtm|cool|nice|great|good|perfect|got it|"
        r"right|fine|alright|np)")
_TRIVIAL = re.compile(rf"^{_ACK}(?:[\s,.!?]+{_ACK})*[\s,.!?]*$", re.IGNORECASE)

# Unavailable providers already reported, per kernel: "reported once", not once per agent.
_REPORTED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def is_trivial_prompt(text: str) -> bool:
    """Whether recall is pointless for ``text``: empty, a slash command, or a bare
    acknowledgement or greeting (``ok``, ``thanks!``, ``continue`` …)."""
    stripped = (text or "").strip()
    return not stripped or stripped.startswith("/") or bool(_TRIVIAL.match(stripped))


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _call_filtered(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with only the keyword arguments its signature accepts, so providers
    written for an older contract keep working."""
    return fn(*args, **{k: v for k, v in kwargs.items() if _accepts(fn, k)})


def _redacted(value: Any) -> Any:
    """A copy of ``value`` with secrets redacted from every string in it, however deep:
    message text, content parts, tool-call arguments, tool-call arguments' JSON."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    return value


def _redact_messages(messages: list[Message]) -> list[Message]:
    """Copies of ``messages`` with secrets redacted from all their text."""
    return [_redacted(message) for message in messages]


def _normalize_schema(schema: Any) -> dict[str, Any] | None:
    """A bare ``{name, description, parameters}`` schema, from either that shape or
    ``{"type": "function", "function": {...}}``; ``None`` for a nameless one."""
    if not isinstance(schema, dict):
        return None
    function = schema.get("function")
    fn = function if isinstance(function, dict) else schema
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return None
    return {
        "name": name,
        "description": str(fn.get("description") or ""),
        "parameters": fn.get("parameters") or {"type": "object", "properties": {}},
    }


class MemoryManager:
    """The memory of one agent: ``builtin`` plus at most one external provider.

    ``MemoryManager(kernel, *, platform="cli", agent_context="primary",
    skip_memory=False)``. With ``skip_memory`` (sub-agents, background reviews that must
    not write) no provider is built and every method is a harmless no-op. ``providers``
    replaces the configured ones (tests, embedding applications); the built-in provider
    is then whichever of them is named ``builtin``, if any.
    """

    def __init__(
        self,
        kernel: Any,
        *,
        platform: str = "cli",
        agent_context: str = "primary",
        skip_memory: bool = False,
        reserved_names: set[str] | frozenset[str] = frozenset(),
        providers: list[MemoryProvider] | None = None,
    ):
        self.kernel = kernel
        self.platform = platform
        self.agent_context = agent_context
        self.skip_memory = skip_memory
        #: Core tool names a provider may not shadow, besides the tools registered when
        #: the manager is built (the runtime adds the expanded tools); the built-in
        #: provider's own tools come first anyway.
        self.reserved_names: set[str] = set(reserved_names)
        # read once: a tool registered later is a conflict the kernel reports itself
        self._registered_tools = frozenset(t.name for t in kernel.tools(expand=False))
        self.providers: list[MemoryProvider] = []
        self.builtin: MemoryProvider | None = None
        self.external: MemoryProvider | None = None
        self.session_id = ""
        self.selected = ""
        self.external_available: bool | None = None
        self.external_reason = ""
        self.problems: list[str] = []
        self._schemas: dict[str, list[dict[str, Any]]] = {}
        self._reported: set[tuple[str, str]] = set()
        self._report_lock = threading.Lock()
        self._worker = SerialWorker("hermes-memory-worker")
        self._prefetch_thread: threading.Thread | None = None
        self._shut = False
        cfg = kernel.config
        self.prefetch_timeout = float(cfg.get("memory.prefetch_timeout") or 8.0)
        self.fence_note: str | None = cfg.get("memory.fence_note") or None
        if skip_memory:
            return
        if providers is None:
            self._build()
        else:
            for provider in providers:
                self.add_provider(provider)

    # -- building ---------------------------------------------------------------------------

    def _build(self) -> None:
        registry = self.kernel.registries.memory_providers
        if BUILTIN in registry:
            provider = self._create(BUILTIN)
            if provider is not None:
                self.add_provider(provider)
        else:
            self.problems.append("the built-in memory provider is not registered "
                                 "(is the builtin-memory plugin disabled?)")
        name = str(self.kernel.config.get("memory.provider") or "").strip()
        self.selected = "" if name == BUILTIN else name
        if not self.selected:
            return
        fallbacks = getattr(self.kernel, "selection_fallbacks", {})
        if name not in registry and "memory-provider" in fallbacks:
            # uninstalled, disabled or --no-plugins: built-in memory only, said in one line
            self.kernel.fall_back("memory-provider", name)
            self.external_available = False
            self.external_reason = (f"{name!r} is not registered (not installed, disabled or "
                                    "--no-plugins); using built-in memory only")
            return
        provider = self._create(self.selected)
        if provider is None:
            self.external_available = False
            return
        available, reason = self._availability(provider)
        self.external_available, self.external_reason = available, reason
        if not available:
            self._report_unavailable(self.selected, reason)
            return
        self.add_provider(provider)

    def _create(self, name: str) -> MemoryProvider | None:
        try:
            return self.kernel.create("memory-provider", name)
        except Exception as exc:
            reason = f"memory provider {name!r} could not be built: {exc}"
            if name != BUILTIN:
                self.external_reason = str(exc)
                self._report_unavailable(name, str(exc))
            else:
                log.warning(reason)
            self.problems.append(reason)
            return None

    def _availability(self, provider: MemoryProvider) -> tuple[bool, str]:
        try:
            available = bool(provider.is_available())
        except Exception as exc:
            return False, f"is_available() raised {type(exc).__name__}: {exc}"
        if available:
            return True, ""
        try:
            reason = str(provider.unavailable_reason() or "")
        except Exception as exc:
            reason = f"unavailable_reason() raised {type(exc).__name__}: {exc}"
        return False, reason or "is_available() returned false (no reason given)"

    def _report_unavailable(self, name: str, reason: str) -> None:
        reported = _REPORTED.setdefault(self.kernel, set())
        message = (f"memory provider {name!r} (memory.provider) is unavailable: "
                   f"{reason.rstrip('. ')}. Running with the built-in memory only.")
        if message not in self.problems:
            self.problems.append(message)
        if name not in reported:
            reported.add(name)
            log.warning(message)

    def add_provider(self, provider: MemoryProvider) -> bool:
        """Add a provider; ``False`` (with a logged reason) when it is refused: a second
        ``builtin``, or a second external provider."""
        name = self._name_of(provider)
        if name == BUILTIN:
            if self.builtin is not None:
                log.warning("memory: a second 'builtin' provider was refused")
                return False
        elif self.external is not None:
            message = (f"memory provider {name!r} refused: {self.external_name!r} is already the "
                       "external memory provider and only one can run. Choose one with "
                       "memory.provider in config.yaml.")
            log.warning(message)
            if message not in self.problems:
                self.problems.append(message)
            return False
        # Load schemas before changing any state, so a raising provider cannot leave the
        # manager half-updated.
        schemas = self._guard(provider, "get_tool_schemas", lambda: provider.get_tool_schemas(), [])
        normalized = [s for s in (_normalize_schema(x) for x in schemas or []) if s]
        if name == BUILTIN:
            self.builtin = provider
            self.providers.insert(0, provider)
        else:
            self.external = provider
            self.providers.append(provider)
        self._schemas[name] = normalized
        return True

    @staticmethod
    def _name_of(provider: MemoryProvider) -> str:
        try:
            return str(provider.name)
        except Exception:
            return type(provider).__name__

    @property
    def external_name(self) -> str:
        """The external provider's name, or ``""``."""
        return self._name_of(self.external) if self.external is not None else ""

    # -- isolation --------------------------------------------------------------------------

    def _guard(self, provider: MemoryProvider, method: str, call: Callable[[], Any], default: Any) -> Any:
        """Run one provider call; an exception is logged (once per provider and method)
        and ``default`` returned."""
        try:
            return call()
        except Exception as exc:
            key = (self._name_of(provider), method)
            with self._report_lock:
                first = key not in self._reported
                self._reported.add(key)
            if first:
                log.warning("memory provider %r failed in %s: %s: %s (further failures of this "
                            "call are logged at debug level)", key[0], method, type(exc).__name__, exc,
                            exc_info=exc)
            else:
                log.debug("memory provider %r failed in %s again: %s", key[0], method, exc)
            return default

    def _each(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method`` on every provider (kwargs filtered by signature), isolated."""
        out = []
        for provider in list(self.providers):
            fn = getattr(provider, method, None)
            if fn is None:
                continue
            out.append(self._guard(provider, method, partial(_call_filtered, fn, *args, **kwargs), None))
        return out

    def _in_background(self, method: str, *args: Any, **kwargs: Any) -> None:
        if self.providers and not self._worker.submit(lambda: self._each(method, *args, **kwargs)):
            log.debug("memory: %s after shutdown ignored", method)

    # -- lifecycle ---------------------------------------------------------------------------

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        """Initialise every provider (the built-in one freezes its snapshot now).
        ``hermes_home``, ``platform`` and ``agent_context`` are added when missing."""
        self.session_id = session_id
        kwargs.setdefault("hermes_home", str(self.kernel.home))
        kwargs.setdefault("platform", self.platform)
        kwargs.setdefault("agent_context", self.agent_context)
        for provider in list(self.providers):
            self._guard(provider, "initialize",
                        partial(_call_filtered, provider.initialize, session_id, **kwargs), None)

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        """A user turn starts (resets the memory tool's per-turn failure cap)."""
        self._each("on_turn_start", turn_number, redact_secrets(message), **kwargs)

    def on_pre_compress(self, messages: list[Message]) -> str:
        """Text the providers want the summarizer to keep, joined by blank lines."""
        parts = self._each("on_pre_compress", _redact_messages(messages))
        return "\n\n".join(p.strip() for p in parts if isinstance(p, str) and p.strip())

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "", reset: bool = False,
                          reason: str = "") -> None:
        """The session id rotated; ``reason`` says why (``compression``, ``new_session``,
        ``undo``) and reaches every provider that accepts it. With ``reset`` (a new
        conversation) or after a compaction the built-in snapshot is taken again from
        disk, so the system prompt rebuilt next shows what was written meanwhile (as
        Hermes Agent reloads its memory store when it rebuilds the prompt)."""
        self.session_id = new_session_id
        if (reset or reason == "compression") and self.builtin is not None:
            builtin = self.builtin
            self._guard(builtin, "initialize", lambda: _call_filtered(
                builtin.initialize, new_session_id, hermes_home=str(self.kernel.home),
                platform=self.platform, agent_context=self.agent_context), None)
        extra = {"reason": reason} if reason else {}
        self._in_background("on_session_switch", new_session_id,
                            parent_session_id=parent_session_id, reset=reset, **extra)

    def on_session_end(self, messages: list[Message]) -> None:
        """The session ended at a real boundary (queued behind pending syncs)."""
        self._in_background("on_session_end", _redact_messages(messages))

    def on_delegation(self, task: str, result: str, *, child_session_id: str = "") -> None:
        """A sub-agent finished (queued on the worker)."""
        self._in_background("on_delegation", redact_secrets(task), redact_secrets(result),
                            child_session_id=child_session_id)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait for queued provider calls; ``False`` if they did not finish in time."""
        return self._worker.flush(timeout)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Drain the worker for at most ``timeout`` seconds (the rest is dropped), then
        shut providers down in reverse order, each bounded by what is left of
        ``timeout``. Safe to call twice."""
        if self._shut:
            return
        self._shut = True
        deadline = time.monotonic() + timeout
        if not self._worker.close(timeout):
            log.warning("memory: provider calls still running after %.1fs at shutdown", timeout)
        for provider in reversed(self.providers):
            thread = threading.Thread(
                target=self._guard, args=(provider, "shutdown", provider.shutdown, None),
                name="hermes-memory-shutdown", daemon=True)
            thread.start()
            thread.join(max(0.05, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("memory provider %r did not shut down in time", self._name_of(provider))

    # -- prompt ------------------------------------------------------------------------------

    def builtin_block(self, target: str) -> str:
        """The frozen system-prompt block of ``target`` (``memory`` or ``user``), with
        its header and usage; ``""`` when that store is disabled or was empty."""
        builtin = self.builtin
        if builtin is None or not hasattr(builtin, "snapshot_block"):
            return ""
        block = self._guard(builtin, "snapshot_block", lambda: builtin.snapshot_block(target), "")
        return block if isinstance(block, str) else ""

    def external_system_prompt_block(self) -> str:
        """The external provider's static system-prompt text, or ``""``."""
        external = self.external
        if external is None:
            return ""
        block = self._guard(external, "system_prompt_block", external.system_prompt_block, "")
        return block.strip() if isinstance(block, str) else ""

    def memory_inventory(self) -> str:
        """Live entries of both built-in targets (for the background review and
        ``/memory``); ``""`` when empty or unavailable."""
        builtin = self.builtin
        if builtin is None or not hasattr(builtin, "inventory"):
            return ""
        text = self._guard(builtin, "inventory", builtin.inventory, "")
        return text if isinstance(text, str) else ""

    def live_changes(self) -> str:
        """The built-in memory's changes not yet shown to the model this session, as a
        block for the next user message (``memory.live_updates``); ``""`` when none."""
        builtin = self.builtin
        fn = getattr(builtin, "live_changes", None)
        if builtin is None or fn is None:
            return ""
        text = self._guard(builtin, "live_changes", fn, "")
        return text if isinstance(text, str) else ""

    def reset_live_changes(self) -> None:
        """Announce every change since the snapshot again (after a compaction)."""
        builtin = self.builtin
        fn = getattr(builtin, "reset_live_changes", None)
        if builtin is not None and fn is not None:
            self._guard(builtin, "reset_live_changes", fn, None)

    # -- recall ------------------------------------------------------------------------------

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        """Recalled text from the external provider for this turn, raw (unfenced).
        ``""`` for trivial prompts, without a provider, after ``memory.prefetch_timeout``
        seconds, or while the previous prefetch is still running."""
        external = self.external
        if external is None or is_trivial_prompt(query):
            return ""
        previous = self._prefetch_thread
        if previous is not None and previous.is_alive():
            log.debug("memory: previous prefetch still running; skipped this turn")
            return ""
        box: dict[str, Any] = {}
        sid = session_id or self.session_id
        query = redact_secrets(query)

        def run() -> None:
            box["result"] = self._guard(
                external, "prefetch", lambda: _call_filtered(external.prefetch, query, session_id=sid), "")

        thread = threading.Thread(target=run, name="hermes-memory-prefetch", daemon=True)
        self._prefetch_thread = thread
        thread.start()
        thread.join(self.prefetch_timeout)
        if thread.is_alive():
            key = (self.external_name, "prefetch-timeout")
            level = logging.DEBUG if key in self._reported else logging.WARNING
            self._reported.add(key)
            log.log(level, "memory provider %r prefetch took longer than %.1fs (memory.prefetch_timeout); "
                    "recall skipped this turn", key[0], self.prefetch_timeout)
            return ""
        text = box.get("result")
        if not isinstance(text, str):
            return ""
        text = text.strip()
        if len(text) > MAX_PREFETCH_CHARS:
            text = text[:MAX_PREFETCH_CHARS] + "\n[… recalled context cut …]"
        return text

    def fenced_prefetch(self, query: str, *, session_id: str = "") -> str:
        """:meth:`prefetch` wrapped in a ``<memory-context>`` fence with the system note
        (``memory.fence_note``), or ``""``. For the current API call only."""
        return fence(self.prefetch(query, session_id=session_id), self.fence_note)

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        """Ask providers to warm recall for the next turn (on the worker)."""
        self._in_background("queue_prefetch", redact_secrets(query), session_id=session_id or self.session_id)

    def sync_turn(self, user: str, assistant: str, *, session_id: str = "") -> None:
        """Hand a completed exchange to the providers (on the worker; never blocks)."""
        self._in_background("sync_turn", redact_secrets(user), redact_secrets(assistant),
                            session_id=session_id or self.session_id)

    # -- tools -------------------------------------------------------------------------------

    def _routes(self) -> dict[str, tuple[MemoryProvider, dict[str, Any]]]:
        """tool name → (provider, schema). The built-in provider comes first; the first
        provider to claim a name keeps it; reserved names go only to the built-in one."""
        reserved = self.reserved_names | self._registered_tools
        routes: dict[str, tuple[MemoryProvider, dict[str, Any]]] = {}
        for provider in self.providers:
            pname = self._name_of(provider)
            for schema in self._schemas.get(pname, []):
                tool = schema["name"]
                if tool in routes:
                    self._once(f"conflict:{tool}", "memory provider %r tool %r ignored: %r already "
                               "provides it", pname, tool, self._name_of(routes[tool][0]))
                    continue
                if provider is not self.builtin and tool in reserved:
                    self._once(f"reserved:{tool}", "memory provider %r may not shadow the core tool "
                               "%r; its tool is ignored", pname, tool)
                    continue
                routes[tool] = (provider, schema)
        return routes

    def _once(self, key: str, message: str, *args: Any) -> None:
        with self._report_lock:
            if ("_", key) in self._reported:
                return
            self._reported.add(("_", key))
        log.warning(message, *args)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas: the ``memory`` tool and the external provider's tools."""
        return [dict(schema) for _, schema in self._routes().values()]

    def memory_tool(self) -> str:
        """The built-in provider's curated-memory tool
        (:attr:`hermes.MemoryProvider.memory_tool`) when it is offered, else ``""``: what
        the background review offers and what counts as memory used this turn."""
        tool = getattr(self.builtin, "memory_tool", "") or ""
        return tool if tool and self.has_tool(tool) else ""

    def has_tool(self, name: str) -> bool:
        """Whether a memory provider handles the tool ``name``."""
        return name in self._routes()

    def handle_tool_call(self, name: str, args: dict[str, Any], *, session_id: str = "",
                         session: Any = None, origin: str = "tool") -> str:
        """Run a memory tool and return its JSON result; never raises. Each committed
        write of the ``memory`` tool emits ``hermes_memory_write`` and is mirrored to the
        external provider's ``on_memory_write`` (on the worker). ``origin`` (``tool``,
        ``review``) is the write's ``write_origin`` and goes into the memory history."""
        route = self._routes().get(name)
        if route is None:
            return json.dumps({"success": False, "error": f"No memory provider handles tool {name!r}"})
        provider, _ = route
        sid = session_id or self.session_id

        def call() -> Any:
            if provider is self.builtin:
                return _call_filtered(provider.handle_tool_call, name, args, session_id=sid, origin=origin,
                                      on_commit=lambda c: self.record_write(c, origin=origin, session_id=sid,
                                                                            session=session))
            # an external provider's tool usually stores or sends its arguments off the machine
            return _call_filtered(provider.handle_tool_call, name, _redacted(args), session_id=sid)

        sentinel = object()
        result = self._guard(provider, f"handle_tool_call({name})", call, sentinel)
        if result is sentinel:
            return json.dumps({"success": False, "error": f"Memory tool {name!r} failed; see the log."})
        return result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False)

    def record_write(self, change: Any, *, origin: str = "tool", session_id: str = "",
                     session: Any = None) -> None:
        """Report one committed built-in memory change (an object with ``action``,
        ``target``, ``content``, ``old_text``, ``previous_content`` and optionally
        ``record``, its history entry): emit ``hermes_memory_write`` and mirror it to the
        external provider. The CLI calls this for ``hermes memory undo``, so a provider's
        copy follows an undo like any other write (``metadata["undo_of"]`` names the
        reverted change)."""
        record = getattr(change, "record", None)
        metadata = {
            "write_origin": origin,
            "execution_context": self.agent_context,
            "session_id": session_id,
            "platform": self.platform,
            "tool_name": getattr(self.builtin, "memory_tool", "") or "",
            "old_text": getattr(change, "old_text", None),
            "previous_content": getattr(change, "previous_content", None),
        }
        if isinstance(record, dict):
            metadata["history"] = dict(record)
            if record.get("undo_of") is not None:
                metadata["undo_of"] = record["undo_of"]
        event = MemoryWriteEvent(action=change.action, target=change.target, content=change.content or "",
                                 old_text=getattr(change, "old_text", None), metadata=metadata)
        mirrored = MemoryWriteEvent(action=event.action, target=event.target,
                                    content=redact_secrets(event.content),
                                    old_text=_redacted(event.old_text), metadata=_redacted(metadata))
        try:
            self.kernel.emit("hermes_memory_write", session=session, event=event)
        except Exception as exc:  # observers are isolated by the kernel; this is a backstop
            log.debug("hermes_memory_write emit failed: %s", exc)
        external = self.external
        if external is not None:
            self._worker.submit(lambda: self._guard(
                external, "on_memory_write", lambda: self._mirror(external, mirrored), None))

    @staticmethod
    def _mirror(provider: MemoryProvider, event: MemoryWriteEvent) -> None:
        """Call ``on_memory_write`` in the shape the provider's signature takes:
        ``metadata=`` keyword, a fourth positional argument, or the older three."""
        fn = provider.on_memory_write
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if any(p.name == "metadata" or p.kind is p.VAR_KEYWORD for p in params) or not params:
            fn(event.action, event.target, event.content, metadata=event.metadata)
        elif len(positional) >= 4 or any(p.kind is p.VAR_POSITIONAL for p in params):
            fn(event.action, event.target, event.content, event.metadata)
        else:
            fn(event.action, event.target, event.content)

    # -- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What ``hermes memory status`` shows: the built-in provider, the selected
        external provider, whether it is available and why not, and its tools."""
        builtin: dict[str, Any] = {"active": self.builtin is not None}
        store = getattr(self.builtin, "store", None)
        if store is not None:
            for target in store.enabled:  # the store's targets (MEMORY.md, USER.md)
                try:
                    builtin[target] = {
                        "enabled": bool(store.enabled[target]),
                        "path": str(store.path(target)),
                        "entries": len(store.entries(target)),
                        "usage": store.usage(target),
                    }
                except Exception as exc:  # status must always answer
                    builtin[target] = {"error": str(exc)}
        return {
            "skip_memory": self.skip_memory,
            "builtin": builtin,
            "provider": self.selected,
            "external": {
                "name": self.selected,
                "active": self.external is not None,
                "available": self.external_available,
                "reason": self.external_reason,
                "tools": [s["name"] for s in self._schemas.get(self.external_name, [])]
                if self.external is not None else [],
            },
            "problems": list(self.problems),
        }
