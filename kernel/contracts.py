"""The contracts a plugin implements: context engines, memory providers, prompt layers,
tools, session stores and LLM clients, plus the small value types they exchange.

Messages inside the kernel are plain OpenAI-style dicts::

    {"role": "system" | "user" | "assistant" | "tool",
     "content": str | None,
     "tool_calls": [{"id": str, "type": "function",
                     "function": {"name": str, "arguments": str}}],   # assistant only
     "tool_call_id": str,                                             # tool only
     "name": str}                                                     # tool name, optional

LLM clients convert to and from their wire format at the edge. Names and semantics follow
the Hermes agent so that its plugin authors feel at home.
"""

from __future__ import annotations

import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from .runtime.session_lock import WriterLock

Message = dict[str, Any]

# --------------------------------------------------------------------------------------
# Value types
# --------------------------------------------------------------------------------------


@dataclass
class Usage:
    """Token usage of one model call, in the provider's own counts.

    ``input_tokens`` counts only the uncached prompt tokens; the whole prompt is
    ``input_tokens + cache_read_tokens + cache_write_tokens`` (:attr:`prompt_tokens`).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every token of the prompt, cached or not."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def as_dict(self) -> dict[str, int]:
        """The usage dict :meth:`ContextEngine.update_from_response` receives."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass
class LLMRequest:
    """One model call, in the kernel's normalized shape.

    ``messages`` starts with the system message (if any). ``tools`` are OpenAI function
    schemas (``{"name", "description", "parameters"}``). ``cache`` asks the client to
    place prompt-cache breakpoints where the provider supports them; ``cache_ttl`` is
    ``"5m"`` or ``"1h"``.
    """

    model: str
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    temperature: float | None = None
    cache: bool = False
    cache_ttl: str = "5m"
    timeout: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LLMResponse:
    """A model's answer: text, tool calls (OpenAI shape) and usage."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    reasoning: str | None = None

    def as_message(self) -> Message:
        """The assistant message to append to the transcript."""
        msg: Message = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            msg["tool_calls"] = [dict(tc) for tc in self.tool_calls]
        return msg


@dataclass
class StreamEvent:
    """One item of :meth:`LLMClient.stream`: ``kind`` is ``"text"`` (``text`` holds a
    chunk) or ``"done"`` (``response`` holds the complete :class:`LLMResponse`)."""

    kind: str
    text: str = ""
    response: LLMResponse | None = None


@dataclass
class SessionInfo:
    """What event hooks learn about a session."""

    id: str
    source: str = "cli"
    model: str = ""
    parent_session_id: str | None = None
    title: str | None = None


@dataclass
class TurnEvent:
    """Payload of ``hermes_turn_end``."""

    user_message: str
    answer: str
    status: str = "ok"  # "ok", "failed", "interrupted", "budget_exhausted"
    api_calls: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    error: str | None = None


@dataclass
class CompactionEvent:
    """Payload of ``hermes_compaction``."""

    parent_session_id: str
    child_session_id: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    focus_topic: str | None = None
    fallback_summary: bool = False


@dataclass
class MemoryWriteEvent:
    """Payload of ``hermes_memory_write``: one committed memory action."""

    action: str  # "add", "replace", "remove"
    target: str  # "memory", "user"
    content: str = ""
    old_text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ForgetRequest:
    """What ``hermes forget`` asks every store, context engine and memory provider to
    forget (their optional ``forget`` method).

    ``query`` is text to forget, matched case-insensitively as a substring (``""``: no
    text filter); ``session_ids`` limits the request to those sessions (without a query:
    forget those sessions entirely); ``before`` (unix seconds) limits it to what is older.
    With ``dry_run`` nothing is changed: the component only reports what it would remove.
    """

    query: str = ""
    session_ids: list[str] = field(default_factory=list)
    before: float | None = None
    dry_run: bool = True


@dataclass
class ForgetReport:
    """A component's answer to a :class:`ForgetRequest`.

    ``supported`` is ``False`` when the component cannot forget (``note`` says why and
    what the user can do instead); ``found`` lists one short line per matching item
    (what would be, or was, removed — never the full text); ``removed`` counts them once
    done; ``sessions`` names the sessions involved; ``note`` adds anything the user must
    know (for example, that a copy remains until a running chat closes)."""

    component: str = ""
    supported: bool = True
    found: list[str] = field(default_factory=list)
    removed: int = 0
    sessions: list[str] = field(default_factory=list)
    note: str = ""


def cannot_forget(component: Any) -> ForgetReport:
    """The default answer of a component without ``forget``."""
    name = getattr(component, "name", "") or type(component).__name__
    return ForgetReport(component=str(name), supported=False,
                        note=f"{name} cannot forget: it does not implement forget(); remove the "
                             "text with that component's own tools")


# --------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------


@dataclass
class ToolContext:
    """What a tool handler is given besides its arguments.

    ``kernel`` is the running :class:`hermes.Kernel`; ``agent`` the runtime agent that
    routed the call (``None`` outside a turn, e.g. from the CLI); ``messages`` the live
    transcript (read-only by convention).
    """

    kernel: Any
    session_id: str = ""
    agent: Any = None
    messages: list[Message] = field(default_factory=list)
    cwd: Path | None = None


@dataclass
class Tool:
    """A tool the model may call.

    ``schema`` is the OpenAI function schema ``{"name", "description", "parameters"}``.
    ``handler(args, ctx)`` returns a string (JSON by convention) and should not raise;
    the runtime turns an exception into a JSON error result. ``parallel_safe`` tools may
    run concurrently with other parallel-safe tools in one batch. ``toolset`` groups tools
    for enabling and guidance (``memory``, ``session_search``, ``skills`` …).
    ``available`` is an optional zero-argument check; a tool whose check is false is not
    offered to the model. ``subagents=False`` keeps a tool from sub-agents (an agent
    with a parent): it is neither offered to them nor run for them (``delegate_task``
    uses it so a sub-agent cannot delegate again).

    A *tool source* is a ``Tool`` with ``expand`` set: it is never offered itself;
    :meth:`hermes.Kernel.tools` replaces it by the tools ``expand(kernel)`` returns,
    each time it is called (so tools found at run time, e.g. an MCP server's, appear
    when an agent first asks and vanish when the source withdraws them; the source
    caches). ``close()``, when the source has it, is called by :meth:`hermes.Kernel.close`.
    """

    name: str
    schema: dict[str, Any]
    handler: Callable[[dict[str, Any], ToolContext], str]
    parallel_safe: bool = False
    toolset: str = ""
    available: Callable[[], bool] | None = None
    expand: Callable[[Any], list[Tool]] | None = None
    subagents: bool = True

    def openai_schema(self) -> dict[str, Any]:
        """The schema with its name filled in."""
        schema = dict(self.schema)
        schema.setdefault("name", self.name)
        schema.setdefault("parameters", {"type": "object", "properties": {}})
        return schema


# --------------------------------------------------------------------------------------
# LLM clients
# --------------------------------------------------------------------------------------


class LLMClient(ABC):
    """A chat model behind one provider's API.

    Implementations use the provider's official SDK, imported inside the factory or on
    first use so that ``hermes --help`` never imports it. They convert the kernel's
    OpenAI-style messages to the wire format, retry with backoff on 429/5xx/timeouts and
    raise :class:`hermes.LLMAuthError`, :class:`hermes.ContextLengthError` or another
    :class:`hermes.LLMError` for failures that retrying cannot fix.
    """

    #: Registry name (``anthropic``, ``openai`` …).
    name: str = ""

    @abstractmethod
    def complete(self, request: LLMRequest) -> LLMResponse:
        """Run one call and return the whole answer."""

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        """Yield text chunks as they arrive, then one ``done`` event with the full
        response. The default calls :meth:`complete` and yields its text in one piece."""
        response = self.complete(request)
        if response.content:
            yield StreamEvent("text", text=response.content)
        yield StreamEvent("done", response=response)

    def credentials_problem(self) -> str | None:
        """Why a call cannot work as configured (no API key …), checked without any
        network access; ``None`` when the client looks usable. ``hermes chat`` asks
        before it starts a session."""
        return None

    def supports_prompt_caching(self, model: str) -> bool:
        """Whether ``cache_control`` breakpoints help for this model on this route."""
        return False

    def context_length(self, model: str) -> int | None:
        """The model's context window in tokens, if this client knows it."""
        return None


# --------------------------------------------------------------------------------------
# Context engines
# --------------------------------------------------------------------------------------


class ContextEngine(ABC):
    """Decides when the conversation must shrink and how (Hermes' ``ContextEngine``).

    The runtime (the *host*) reads the attributes below directly, calls
    :meth:`update_from_response` after every model call, asks :meth:`should_compress_info`
    each turn and calls :meth:`compress` when it says yes. ``compress`` must return a
    valid transcript (no orphan tool call or result, no two consecutive user or assistant
    messages) that keeps the newest user message, and must never mutate its input. The
    conformance suite :class:`hermes.testing.conformance.ContextEngineConformance` checks
    all of this for any engine.

    Lifecycle: built by its factory → :meth:`update_model` → :meth:`on_session_start` →
    per model call :meth:`update_from_response` → per turn :meth:`should_compress_info`
    (and :meth:`should_compress_preflight` before a call) → :meth:`compress` when due →
    :meth:`on_session_end` at real boundaries; :meth:`on_session_reset` on ``/new``.
    """

    #: Prompt tokens the provider reported for the last call. ``0`` means "no real usage
    #: yet, use a rough estimate"; ``-1`` means "a compaction just ran, awaiting usage".
    last_prompt_tokens: int = 0
    last_completion_tokens: int = 0
    last_total_tokens: int = 0
    #: The compaction trigger in tokens (derived from the window in :meth:`update_model`).
    threshold_tokens: int = 0
    #: The main model's context window in tokens.
    context_length: int = 0
    #: Completed compactions this session.
    compression_count: int = 0
    #: Trigger as a fraction of the window (plugin-engine default; ``compressor`` uses 0.50).
    threshold_percent: float = 0.75
    #: Non-system head messages kept verbatim besides the system prompt.
    protect_first_n: int = 3
    #: Newest messages kept verbatim (a floor; engines may protect more by token budget).
    protect_last_n: int = 6
    #: ``False`` keeps successful automatic compactions silent (manual ones always report).
    emit_automatic_compaction_status: bool = True
    #: Per-model trigger overrides ``{model-substring: fraction}`` (``compression.model_thresholds``);
    #: the longest key contained in the model name wins (``provider:substring`` keys are
    #: scoped to one provider). Hosts set it before the first :meth:`update_model`.
    model_thresholds: dict[str, float] | None = None
    #: What the last :meth:`compress` did, for the host's report and the ``hermes_compaction``
    #: event (engine-defined; the ``compressor`` documents its keys), or ``None``.
    last_compression: dict[str, Any] | None = None

    @property
    @abstractmethod
    def name(self) -> str:
        """Short id; must equal the ``context.engine`` value that selects it (``compressor``,
        ``lcm`` …)."""

    @abstractmethod
    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Record the usage of the last model call; called after **every** call.

        ``usage`` is :meth:`hermes.Usage.as_dict`: ``prompt_tokens``,
        ``completion_tokens`` and ``total_tokens`` are always present; ``input_tokens``,
        ``output_tokens``, ``cache_read_tokens``, ``cache_write_tokens`` and
        ``reasoning_tokens`` may be missing on older hosts."""

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether to compact now (``prompt_tokens`` defaults to :attr:`last_prompt_tokens`)."""

    @abstractmethod
    def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[Message]:
        """Return a smaller, valid OpenAI-style transcript; never mutate ``messages``.

        ``messages`` starts with the system prompt when there is one. ``focus_topic``
        comes from ``/compress <focus>``; ``force`` bypasses engine-owned cooldowns and
        guards (manual ``/compress``, a context-overflow retry); ``memory_context`` is
        memory-provider text (``on_pre_compress``) for the summarizer. Hosts call this
        through :func:`hermes.call_compress`, which passes only the keyword arguments the
        engine's signature accepts, so older engines may omit the optional ones. Returning
        a list equal to the input means "nothing was compacted"."""

    # -- optional, with safe defaults -------------------------------------------------

    def should_compress_info(self, prompt_tokens: int | None = None) -> tuple[bool, str | None]:
        """``(should_compress, reason)``. ``reason`` is ``None`` unless compaction is due
        but blocked; engines with guards return a short reason (``"cooldown:<seconds>"``
        after a summary failure, ``"ineffective"`` from the anti-thrash guard,
        ``"frequency:<seconds>"``, ``"disabled"``) so the host can warn instead of
        silently skipping."""
        return self.should_compress(prompt_tokens), None

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        """A cheap check before a model call, on a rough estimate of ``messages`` (the
        system prompt included). Default: ``False``."""
        return False

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        """Whether a rough pre-call estimate over the threshold should wait for the
        provider's real count instead of compacting now. Default: ``False``."""
        return False

    def pending_compression_operation(self, messages: list[Message]) -> str | None:
        """``"sanitize"`` only when the next automatic :meth:`compress` is guaranteed to
        be pure sanitation of exactly these messages; ``None`` (default) otherwise."""
        return None

    def prune_tool_results_only(
        self, messages: list[Message], current_tokens: int | None = None
    ) -> tuple[list[Message], int]:
        """Cheap deterministic trimming of old tool output, independent of
        :meth:`should_compress`: ``(messages, n_pruned)``. A no-op returns the input
        object itself. Default: ``(messages, 0)``."""
        return messages, 0

    def select_context(
        self,
        request_messages: list[Message],
        *,
        conversation_messages: list[Message] | None = None,
        incoming_message: Message | None = None,
        budget_tokens: int = 0,
    ) -> list[Message] | None:
        """A request-only view of the messages for the next call (never persisted), or
        ``None`` (default) to send them unchanged. ``budget_tokens`` is the window or 0."""
        return None

    def on_turn_complete(
        self, messages: list[Message], usage: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Best-effort observation after each turn. ``messages`` is a read-only copy;
        ``usage`` is ``None`` when no model call answered; kwargs may include
        ``interrupted``, ``failed``, ``turn_id``, ``api_call_count``."""

    def get_automatic_compaction_status_message(
        self, *, phase: str, default_message: str, **context: Any
    ) -> str | None:
        """The status line for an automatic compaction (``phase`` is ``"preflight"`` or
        ``"compress"``; context carries ``approx_tokens``/``threshold_tokens``), or
        ``None`` to stay silent. Manual ``/compress``, warnings and errors always show."""
        return default_message if self.emit_automatic_compaction_status else None

    def has_content_to_compress(self, messages: list[Message]) -> bool:
        """``False`` lets ``/compress`` answer "nothing to compress yet". Default: ``True``."""
        return True

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """A session starts; kwargs may hold ``hermes_home``, ``platform``, ``model``,
        ``context_length``."""

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        """A session ends at a real boundary (exit, ``/new``, expiry), never per turn."""

    def forget(self, request: ForgetRequest) -> ForgetReport:
        """Forget what ``request`` names from everything this engine keeps (a lossless
        engine's own store of messages and summaries): with ``request.dry_run`` only
        report it. The text must be gone from the engine's indexes and files, not only
        hidden. The default says the engine cannot forget; an engine that keeps nothing
        between calls returns an empty, supported report."""
        return cannot_forget(self)

    def on_session_reset(self) -> None:
        """``/new`` or ``/reset``: zero the usage figures and the compaction count (to
        ``0``, deliberately not the ``-1`` "awaiting usage" sentinel)."""
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0
        self.compression_count = 0

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """Tools this engine offers the model (OpenAI function schemas); the host routes
        calls to them to :meth:`handle_tool_call`. Default: none."""
        return []

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run one of this engine's tools and return a JSON string (kwargs may carry
        ``messages``, the live transcript). Unknown names give a JSON error."""
        return json.dumps({"error": f"Unknown context engine tool: {name}"})

    def get_status(self) -> dict[str, Any]:
        """Figures for ``hermes doctor`` and the chat status line: ``last_prompt_tokens``
        (never negative), ``threshold_tokens``, ``context_length``, ``usage_percent``
        (at most 100; 0 without a window) and ``compression_count``. Engines add keys."""
        tokens = max(int(self.last_prompt_tokens or 0), 0)
        usage = min(100.0, tokens / self.context_length * 100) if self.context_length else 0.0
        return {
            "last_prompt_tokens": tokens,
            "threshold_tokens": self.threshold_tokens,
            "context_length": self.context_length,
            "usage_percent": usage,
            "compression_count": self.compression_count,
        }

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        """The main model (and so the window) is set or changed.

        The configured :attr:`threshold_percent` is remembered on the first call, so a
        later switch to a model without an override falls back to it rather than to the
        previous model's override; :attr:`model_thresholds` is resolved with
        :func:`hermes.resolve_model_threshold` and :attr:`threshold_tokens` recomputed."""
        from .compaction import resolve_model_threshold

        if "_config_threshold_percent" not in self.__dict__:
            self._config_threshold_percent = float(self.threshold_percent)
        self.threshold_percent = resolve_model_threshold(
            model, self.model_thresholds, self._config_threshold_percent, provider=provider
        )
        self.context_length = int(context_length or 0)
        self.threshold_tokens = int(self.context_length * self.threshold_percent)


# --------------------------------------------------------------------------------------
# Memory providers
# --------------------------------------------------------------------------------------


class MemoryProvider(ABC):
    """A memory backend. The kernel's memory manager runs the built-in file memory
    (named ``builtin``) plus at most one external provider selected by ``memory.provider``.

    Register a factory with ``hermes_register_memory_providers``; ``factory(kernel)``
    returns the provider, which keeps every path under ``kernel.home`` (profiles have
    their own home). Only :attr:`name`, :meth:`is_available`, :meth:`initialize` and
    :meth:`get_tool_schemas` are required; every other method has a no-op default.

    How the manager calls a provider (see ``docs/memory.md``):

    * every call is isolated: an exception is logged once per provider and method and
      the turn goes on;
    * :meth:`prefetch` runs before each user turn on its own thread, bounded by
      ``memory.prefetch_timeout`` seconds; its text is fenced in ``<memory-context>`` for
      that API call only and never stored;
    * :meth:`sync_turn`, :meth:`queue_prefetch`, :meth:`on_memory_write`,
      :meth:`on_session_end`, :meth:`on_session_switch` and :meth:`on_delegation` run in
      order on one background worker, drained (at most 5 s) at shutdown;
    * keyword arguments a method's signature does not accept are not passed, so a
      provider written against an older contract keeps working;
    * a provider's tool may not use the name of a core tool (``memory``,
      ``session_search``, any registered :class:`Tool`); such a tool is ignored. Declare
      the provider's tool names when registering it (``register(name, factory,
      tools=("mine_search",))``) and the kernel refuses, at start, another plugin's tool
      of the same name (a conflict naming both; the plugin loaded later fails).

    :class:`hermes.testing.conformance.MemoryProviderConformance` checks a provider
    against this contract.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """Short id (``builtin``, ``mem0``, ``honcho`` …). ``builtin`` is reserved for
        the file memory."""

    #: The name of this provider's tool that writes curated memory, or ``""``. The
    #: background memory review offers only this tool (of the built-in provider), a call
    #: to it counts as memory used this turn, and it is the ``tool_name`` reported with
    #: the provider's writes. The built-in provider's is ``memory``.
    memory_tool: str = ""

    @abstractmethod
    def is_available(self) -> bool:
        """Configured and its dependencies importable. Must be fast and must not touch
        the network. When false, :meth:`unavailable_reason` says why."""

    @abstractmethod
    def initialize(self, session_id: str, **kwargs: Any) -> None:
        """Once per agent, before the first turn. kwargs always hold ``hermes_home``,
        ``platform`` (``cli``, ``telegram`` …) and ``agent_context`` (``primary``,
        ``subagent``, ``cron``; non-primary contexts should not write), and may hold
        ``parent_session_id`` and ``user_id``. May open connections or threads."""

    @abstractmethod
    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas (``{"name", "description", "parameters"}``, or the
        ``{"type": "function", "function": {...}}`` form) of this provider's tools;
        ``[]`` for a context-only provider. Read once, when the provider is added."""

    def unavailable_reason(self) -> str:
        """Why :meth:`is_available` is false, as an actionable hint ("set MEM0_API_KEY",
        "pip install honcho-ai"). Shown by ``hermes memory status`` and logged once."""
        return ""

    def system_prompt_block(self) -> str:
        """Static text (instructions, status) for the cached system prompt; ``""`` to add
        nothing. Not for recalled facts: those belong in :meth:`prefetch`."""
        return ""

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        """Recalled context for this turn. Must be fast: return what
        :meth:`queue_prefetch` warmed in the background. ``""`` if nothing. Return plain
        text; the manager adds the ``<memory-context>`` fence."""
        return ""

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        """Warm results for the next turn's :meth:`prefetch` (runs on the worker)."""

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "") -> None:
        """Persist a completed exchange (runs on the worker, after the answer). Pick one
        place to extract facts — here or :meth:`on_session_end` — not both."""

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run one of this provider's tools and return a JSON string; a bad argument
        should come back as a JSON error, not an exception. kwargs may hold
        ``session_id``."""
        raise NotImplementedError(f"{self.name} has no tool {tool_name!r}")

    def shutdown(self) -> None:
        """Flush queues and close connections. Called once, bounded in time."""

    def forget(self, request: ForgetRequest) -> ForgetReport:
        """Forget what ``request`` names (matching memories, and what was stored from
        ``request.session_ids``), or with ``request.dry_run`` only report it
        (``hermes forget``). The default says the provider cannot forget, and the
        command tells the user."""
        return cannot_forget(self)

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        """A user turn starts (kwargs may hold ``model``, ``platform``)."""

    def on_session_end(self, messages: list[Message]) -> None:
        """The session ends at a real boundary (exit, ``/new``), never per turn;
        ``messages`` is the whole history."""

    def on_session_switch(
        self, new_session_id: str, *, parent_session_id: str = "", reset: bool = False, **kwargs: Any
    ) -> None:
        """The session id rotated without teardown: a compaction continuation
        (``parent_session_id`` is the old id) or, with ``reset``, a new conversation
        (flush per-session buffers)."""

    def on_pre_compress(self, messages: list[Message]) -> str:
        """Called before compaction discards ``messages``; the text returned is handed to
        the summarizer so it survives. ``""`` for nothing."""
        return ""

    def on_delegation(self, task: str, result: str, *, child_session_id: str = "", **kwargs: Any) -> None:
        """A sub-agent finished (called on the parent's providers; sub-agents run
        without memory)."""

    def on_memory_write(
        self, action: str, target: str, content: str, metadata: dict[str, Any] | None = None
    ) -> None:
        """Mirror one *committed* write of the built-in memory (``add``, ``replace`` or
        ``remove`` on ``memory`` or ``user``); refused writes and duplicate no-ops are
        never mirrored. ``metadata`` holds ``write_origin``, ``execution_context``,
        ``session_id``, ``platform``, ``tool_name``, ``old_text`` and
        ``previous_content``, and ``history`` (the change's record in the memory
        history). ``hermes memory undo`` is mirrored too: its inverse action, with
        ``metadata["undo_of"]`` naming the reverted change. Older three-argument
        signatures are still called."""

    def get_config_schema(self) -> list[dict[str, Any]]:
        """Fields for setup: ``key``, ``description``, ``secret``, ``required``, ``default``,
        ``choices``, ``env_var``, ``url``."""
        return []

    def save_config(self, values: dict[str, Any], hermes_home: str) -> None:
        """Write non-secret settings; secrets belong in ``$HERMES_HOME/.env``."""


# --------------------------------------------------------------------------------------
# Prompt layers
# --------------------------------------------------------------------------------------


@dataclass
class PromptContext:
    """What a prompt layer may read while rendering.

    ``kernel`` is the running :class:`hermes.Kernel` (its ``config`` is also reachable as
    :attr:`config`); ``home`` the Hermes home (``SOUL.md``, ``skills/``); ``cwd`` the
    working directory context files are discovered from. ``tool_names`` are the tools
    offered to the model this session, so guidance is given only for enabled tools.
    ``memory`` is the runtime's memory manager (or ``None``: memory layers then add
    nothing). ``skip_context_files`` is set for delegated sub-agents (no ``SOUL.md``, no
    project files).

    ``now`` is **the session's start time** (epoch seconds), not the wall clock at render
    time: the timestamp layer renders it, and a clock read while rendering would break the
    byte-stability of the cached prompt. ``extra`` holds per-call values for ephemeral
    layers: ``recalled`` (fenced recalled memory for this turn), ``ephemeral_system_prompt``
    (overrides ``prompt.ephemeral_system_prompt``) and ``prefill`` (a message list,
    overrides ``prompt.prefill_messages``).
    """

    kernel: Any
    session_id: str = ""
    home: Path | None = None
    cwd: Path | None = None
    model: str = ""
    platform: str = "cli"
    tool_names: frozenset[str] = frozenset()
    memory: Any = None
    skip_context_files: bool = False
    now: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> Any:
        """The kernel's :class:`hermes.Config`, or ``None`` without a kernel."""
        return getattr(self.kernel, "config", None)


class PromptLayer(ABC):
    """One section of the system prompt.

    Layers render in ascending ``order`` (ties by registered name). The defaults use
    orders 100, 200 … 1000 so that a plugin can slot a layer between two of them (see
    ``docs/prompt.md``). A ``cached`` layer is rendered once per session into the
    byte-stable system prompt (rebuilt only after a compaction); it must depend only on
    the context it is given and on state that is frozen for the session. An ephemeral
    layer (``cached = False``) is rendered at every API call and never persisted; its
    :attr:`placement` says where its text goes:

    * ``"system"`` — after the cached system text, in a second system content block, so
      the cached prefix stays byte-identical;
    * ``"user"`` — appended to the last user message of this call (recalled memory);
    * ``"messages"`` — the layer contributes prefill messages (any text goes with system).

    An ephemeral layer may return messages from :meth:`messages` (prefill); they are
    inserted right after the system message for this call only.

    ``render`` returns ``None`` or ``""`` to add nothing. A layer that raises is skipped
    with a logged warning; it never breaks the prompt.
    """

    name: str = ""
    order: int = 500
    cached: bool = True
    placement: str = "system"
    description: str = ""

    @abstractmethod
    def render(self, ctx: PromptContext) -> str | None:
        """This layer's text for the given context."""

    def messages(self, ctx: PromptContext) -> list[Message]:
        """Ephemeral layers only: messages to insert after the system message for this
        API call (prefill). The default adds none."""
        return []


# --------------------------------------------------------------------------------------
# Session stores
# --------------------------------------------------------------------------------------


class SearchHit(TypedDict, total=False):
    """One result of :meth:`SessionStore.search_messages` (a plain dict of this shape).

    ``id``, ``session_id``, ``role``, ``timestamp`` and ``tool_name`` describe the matched
    message (a tool result stored without a name, as OpenAI-format transcripts give it,
    is named after the earlier assistant call with its ``tool_call_id``, however far back
    in the session); ``source``, ``model``, ``session_started`` and ``session_title`` its session.
    ``snippet`` is a short excerpt with the matched text between ``>>>`` and ``<<<``.
    ``context`` holds the neighbouring messages of the same session (at most one before and
    one after, each ``{"id", "role", "content"}`` with content cut to 200 characters).
    ``mode`` says how the hit was found:

    * ``"strict"`` — every term of the query matched (word index, BM25 ranking);
    * ``"relaxed"`` — the fallback for natural-language questions: the informative terms
      (stop words dropped) OR-ed together, BM25 decides; used only when the strict query
      found too few hits, and always ranked after the strict hits;
    * ``"trigram"`` — a CJK query answered by the substring (trigram) index;
    * ``"like"`` — a query with CJK terms too short for the trigram index (one or two
      characters), answered by a substring scan.

    A mode ending in ``-recent`` (``"strict-recent"``) says the query matched so many
    messages (every term very common) that the newest matches are listed instead of the
    most relevant. ``position`` (optional) is the message's number in its session (1 =
    first), for display instead of the store's row id. ``score`` is the store's relevance
    (lower is better, BM25 convention); compare scores only between hits of one mode.
    """

    id: int
    session_id: str
    role: str
    snippet: str
    timestamp: float
    tool_name: str | None
    source: str
    model: str | None
    session_started: float
    session_title: str | None
    context: list[dict[str, Any]]
    mode: str
    score: float
    position: int


class SessionStore(ABC):
    """Where sessions and every message live, searchable at once.

    A **session** row (a plain dict) has: ``id``, ``source``, ``user_id``, ``model``,
    ``model_config`` (a dict, decoded), ``system_prompt``, ``parent_session_id``,
    ``started_at``, ``ended_at``, ``end_reason``, ``last_active_at``, ``message_count``,
    ``tool_call_count``, ``input_tokens``, ``output_tokens``, ``cache_read_tokens``,
    ``cache_write_tokens``, ``reasoning_tokens``, ``estimated_cost_usd``, ``title`` and
    ``cwd``. Times are unix seconds (floats).

    A **message** row has ``id`` (increasing in append order), ``session_id``, ``role``,
    ``content``, ``tool_call_id``, ``tool_calls`` (decoded list, OpenAI shape),
    ``tool_name``, ``timestamp``, ``token_count``, ``finish_reason`` and ``reasoning``.

    **Lineage.** ``parent_session_id`` links a session to the one it continues or was
    spawned from; the parent's ``end_reason`` says how (``compression``, ``delegation``,
    ``branched``, ``new_session``, ``user_exit`` …). A *compression continuation* is a
    child started at or after its parent ended with ``end_reason == "compression"``; a
    delegated sub-agent's session is a child started while the parent was still live.

    **Concurrency.** Several processes (the CLI, a second agent, an import) may use one
    store at once: writes never lose a message (they retry on contention for a bounded
    time and then raise :class:`hermes.StoreError`), readers are never blocked by writers.
    A store that cannot be opened (corrupt file, unreachable server) raises
    :class:`hermes.StoreError` naming what is wrong and what to do.

    Every method is safe to call from several threads. The conformance suite
    :class:`hermes.testing.conformance.SessionStoreConformance` pins the behaviour; a
    store that passes it works with every part of Hermes.
    """

    #: Registry name (``sqlite`` …).
    name: str = ""

    # -- sessions -----------------------------------------------------------------------

    @abstractmethod
    def create_session(
        self,
        session_id: str | None = None,
        *,
        source: str = "cli",
        model: str | None = None,
        model_config: dict | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        cwd: str | None = None,
        started_at: float | None = None,
    ) -> str:
        """Create a session and return its id.

        ``session_id=None`` generates a new unique id (``YYYYMMDD_HHMMSS_xxxxxx``).
        Creating an id that already exists changes nothing and returns the id, so callers
        may "ensure" a session. ``started_at`` defaults to now (importers pass the
        original time). A ``parent_session_id`` that names no session is stored as
        ``None`` rather than failing.
        """

    @abstractmethod
    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session row (see the class docstring), or ``None`` when there is none."""

    @abstractmethod
    def update_system_prompt(self, session_id: str, system_prompt: str) -> None:
        """Store the frozen system prompt of a session (replacing any earlier one)."""

    @abstractmethod
    def end_session(self, session_id: str, end_reason: str, *, ended_at: float | None = None) -> None:
        """Stamp ``ended_at`` (now, or the given time for imports) and ``end_reason``.

        The first end wins: ending an already-ended session changes nothing (so a late
        ``user_exit`` cannot hide that the session was split by ``compression``). Call
        :meth:`reopen_session` first to end it again.
        """

    @abstractmethod
    def reopen_session(self, session_id: str) -> None:
        """Clear ``ended_at`` and ``end_reason``: the session is resumed."""

    @abstractmethod
    def list_sessions(
        self,
        *,
        source: str | None = None,
        exclude_sources: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        roots_only: bool = True,
    ) -> list[dict[str, Any]]:
        """Sessions, most recently active first, for browsing.

        With ``roots_only`` (the default) there is one row per logical conversation: only
        sessions without a parent are listed, and every descendant (compression
        continuations, sub-agent sessions) is folded into its root. Each row is the
        session row plus:

        * ``preview`` — the first user message of the session, newlines as spaces, cut to
          60 characters plus ``"..."`` (63 at most); ``""`` when there is none;
        * ``last_active`` — the newest activity in the conversation (with
          ``roots_only``, across the whole lineage), else ``started_at``;
        * ``tip_id`` — :meth:`compression_tip` of the session (where to resume);
        * ``lineage_size`` / ``lineage_messages`` — sessions and messages in the
          lineage (1 and ``message_count`` without ``roots_only``).

        ``source`` / ``exclude_sources`` filter on the listed session's source.
        ``limit`` / ``offset`` page through it; bad bounds never raise
        (:func:`hermes.search_page`: not a number is the first page of 20).
        """

    @abstractmethod
    def resolve_session(self, ref: str) -> str | None:
        """The id ``ref`` refers to, or ``None``.

        Tried in order: an exact id; a title (the newest ``title #N`` continuation of it,
        else the exact title); a unique id prefix. An ambiguous prefix gives ``None``.
        ``%`` and ``_`` in ``ref`` are plain characters, never wildcards.
        """

    @abstractmethod
    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Set (or with ``None``/blank, clear) a session's title; returns the stored title.

        The title is cleaned first: control characters and invisible formatting
        characters (zero-width, bidi, BOM) are removed and whitespace runs collapse to one
        space. Raises ``ValueError`` when it is longer than 100 characters or already used
        by another session (titles are unique when set).
        """

    @abstractmethod
    def next_title_in_lineage(self, title: str) -> str:
        """The title for the next continuation of ``title``.

        A trailing `` #N`` is stripped to get the base; the result is the base when no
        session uses it or any ``base #N``, else ``base #(max N + 1)`` where the
        unnumbered base counts as #1 ("My project" → "My project #2" → "#3" …).
        """

    @abstractmethod
    def lineage_root(self, session_id: str) -> str:
        """Follow ``parent_session_id`` up to the first session without a parent.

        Cycle-safe and bounded; a missing parent ends the walk. Returns ``session_id``
        itself for a root or an unknown id.
        """

    @abstractmethod
    def compression_tip(self, session_id: str) -> str:
        """Follow continuations forward to the live end of a conversation.

        While the session ended with an ``end_reason`` in :data:`hermes.CONTINUED_REASONS`
        (``"compression"``: a compaction split; ``"undo"``: ``/undo`` kept the dropped
        exchange on the ended session as a branch), move to its newest
        child started at or after the parent's ``ended_at`` (sub-agent children started
        earlier are never followed). Cycle-safe and bounded. Returns ``session_id`` when
        it is not a compressed session.
        """

    @abstractmethod
    def children(self, session_id: str) -> list[dict[str, Any]]:
        """The direct children of a session (session rows), oldest first."""

    def lineage(self, session_id: str) -> list[str]:
        """Every session of the conversation ``session_id`` belongs to: its root first,
        then all descendants breadth-first (cycle-safe)."""
        root = self.lineage_root(session_id)
        out, seen, queue = [], {root}, [root]
        while queue:
            current = queue.pop(0)
            out.append(current)
            for child in self.children(current):
                if child["id"] not in seen:
                    seen.add(child["id"])
                    queue.append(child["id"])
        return out

    def split_session(
        self,
        parent_id: str,
        messages: list[Message],
        *,
        end_reason: str = "compression",
        source: str = "cli",
        model: str | None = None,
        model_config: dict | None = None,
        title: str | None = None,
        cwd: str | None = None,
    ) -> str:
        """End ``parent_id`` with ``end_reason`` and start its continuation: a new child
        session (``parent_session_id=parent_id``, started when the parent ended, so
        :meth:`compression_tip` follows it) holding ``messages`` (the shape
        :meth:`append_messages` reads) and, when given and still free, ``title``.
        Returns the child's id.

        A compaction splits a conversation this way. It must be one unit: a crash part
        way through leaves either the parent live and unchanged or the complete child,
        never an ended parent with an empty child. Stores should make it one
        transaction; the default runs the steps in the order that leaves the parent
        live until the child holds everything (a crash before the last step leaves an
        extra child that :meth:`compression_tip` does not follow)."""
        now = time.time()
        child = self.create_session(source=source, model=model, model_config=model_config,
                                    parent_session_id=parent_id, cwd=cwd, started_at=now)
        self.append_messages(child, messages)
        if title:
            try:
                self.set_title(child, title)
            except ValueError:
                pass  # taken meanwhile: the continuation stays untitled
        self.end_session(parent_id, end_reason, ended_at=now)
        return child

    @abstractmethod
    def update_token_counts(
        self,
        session_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        model: str | None = None,
        absolute: bool = False,
    ) -> None:
        """Add one model call's usage to the session's totals.

        With ``absolute=True`` the figures replace the totals instead (a caller that
        tracks cumulative usage itself). ``estimated_cost_usd`` is added (or set) only
        when given. ``model`` fills the session's model only when it has none.
        """

    @abstractmethod
    def delete_session(self, session_id: str) -> bool:
        """Delete one session and its messages (which leave the search index at once).

        Its children stay and become roots. Returns ``False`` when there was no such
        session.
        """

    @abstractmethod
    def prune_sessions(self, older_than_days: float = 90, source: str | None = None) -> int:
        """Delete *ended* sessions that started more than ``older_than_days`` ago
        (optionally only of one ``source``); live sessions are never pruned. Returns how
        many sessions were deleted."""

    # -- messages -----------------------------------------------------------------------

    @abstractmethod
    def append_message(
        self,
        session_id: str,
        role: str,
        content: str | None = None,
        *,
        tool_name: str | None = None,
        tool_calls: list[dict] | None = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        timestamp: float | None = None,
    ) -> int:
        """Append one message and return its id.

        Never loses a message: a session that does not exist yet is created (source
        ``"unknown"``), and contention is retried until the store's write timeout. The
        session's ``message_count`` grows by one, its ``tool_call_count`` by the number of
        ``tool_calls`` (assistant messages only; tool results count nothing), and its
        ``last_active_at`` becomes the message's timestamp. The message is searchable as
        soon as this returns.
        """

    def append_messages(self, session_id: str, messages: list[Message]) -> list[int]:
        """Append many OpenAI-style messages at once (an import, a compaction) and return
        their ids in order. Keys read: ``role``, ``content``, ``tool_calls``,
        ``tool_call_id``, ``name`` or ``tool_name``, ``timestamp``, ``token_count``,
        ``finish_reason``, ``reasoning``. Stores should make this one transaction; the
        default appends one by one."""
        return [
            self.append_message(
                session_id, m["role"], m.get("content"),
                tool_name=m.get("tool_name") or m.get("name"), tool_calls=m.get("tool_calls"),
                tool_call_id=m.get("tool_call_id"), token_count=m.get("token_count"),
                finish_reason=m.get("finish_reason"), reasoning=m.get("reasoning"),
                timestamp=m.get("timestamp"),
            )
            for m in messages
        ]

    @abstractmethod
    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        """Every stored message of one session (message rows), oldest first."""

    def get_conversation(self, session_id: str) -> list[Message]:
        """The session's messages as an OpenAI-style transcript (``role``, ``content``,
        ``tool_calls``, ``tool_call_id``, and ``name`` on tool results)."""
        out: list[Message] = []
        for row in self.get_messages(session_id):
            msg: Message = {"role": row["role"], "content": row.get("content")}
            if row.get("tool_calls"):
                msg["tool_calls"] = row["tool_calls"]
            if row.get("tool_call_id"):
                msg["tool_call_id"] = row["tool_call_id"]
            if row.get("tool_name") and row["role"] == "tool":
                msg["name"] = row["tool_name"]
            out.append(msg)
        return out

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """``{"session": <session row>, "messages": [<message rows>]}``, or ``None``."""
        session = self.get_session(session_id)
        if session is None:
            return None
        return {"session": session, "messages": self.get_messages(session_id)}

    def search_messages(
        self,
        query: str,
        *,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        session_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
        offset: int = 0,
        fallback: bool = True,
    ) -> list[SearchHit]:
        """Full-text search over every message (content, tool name, tool-call arguments).

        Accepts **any** string and never raises: FTS syntax is sanitized (balanced quoted
        phrases kept, ``deploy*`` prefixes kept, uppercase ``AND``/``OR``/``NOT`` honoured
        and dangling ones dropped, other specials stripped, dotted/hyphenated/underscored
        terms matched as phrases); an empty or unusable query returns ``[]``. CJK terms of
        three or more characters use a substring index (mode ``"trigram"``), shorter ones
        a substring scan (mode ``"like"``).

        Hits are ranked by relevance (BM25). When the query as typed finds fewer than
        five hits and ``fallback`` is true, the informative terms are searched OR-ed
        (mode ``"relaxed"``) and those hits follow the strict ones, so a question like
        "when did I move the staging database to Postgres?" still finds its answer.

        Filters: ``source_filter`` / ``exclude_sources`` (session sources),
        ``role_filter`` (message roles), ``session_id``, ``since`` / ``until``
        (message timestamps, inclusive). ``limit``/``offset`` page through one ordered
        result list (:func:`hermes.search_page`). Each hit is a :class:`SearchHit`.

        A store implements :meth:`_search_messages`; this method keeps the promise for
        every store: whatever that raises is logged once (a warning on ``hermes.sessions``
        naming the store, the query and the error) and gives ``[]``.
        """
        try:
            return self._search_messages(
                query, source_filter=source_filter, exclude_sources=exclude_sources,
                role_filter=role_filter, session_id=session_id, since=since, until=until,
                limit=limit, offset=offset, fallback=fallback)
        except Exception as exc:  # the contract: any input, never raises
            logging.getLogger("hermes.sessions").warning(
                "%s session search for %r failed: %s", self.name or type(self).__name__,
                str(query)[:200], exc)
            return []

    @abstractmethod
    def _search_messages(
        self,
        query: Any,
        *,
        source_filter: Any,
        exclude_sources: Any,
        role_filter: Any,
        session_id: Any,
        since: Any,
        until: Any,
        limit: Any,
        offset: Any,
        fallback: bool,
    ) -> list[SearchHit]:
        """The store's search behind :meth:`search_messages`, called with every argument
        as the caller gave it (any type: :func:`hermes.search_page` and
        :func:`hermes.filter_values` read them). It may raise; the public method turns a
        failure into ``[]``."""

    def batch(self) -> AbstractContextManager[None]:
        """A context manager grouping this thread's writes into one unit (imports): a
        store may make it one transaction and index the rows once at the end. Reads in
        the block see its writes; searches may not until it ends. The default does
        nothing special."""
        return nullcontext()

    def writer_lock(self, session_id: str) -> WriterLock | None:
        """The one-writer-per-conversation lock of ``session_id`` (optional), or ``None``.

        The runtime locks the lineage root of a conversation before writing to it, so
        that two ``hermes chat --continue`` never interleave one transcript. By default
        (``None``) it takes a file lock in ``$HERMES_HOME/locks``, which sees the
        processes of one machine only. A store shared by several machines returns a
        :class:`hermes.runtime.session_lock.WriterLock` that reaches all of them (the
        PostgreSQL store: an advisory lock on a connection of its own): ``acquire()``
        takes it or raises :class:`hermes.SessionBusyError` at once, naming the holder
        as well as the store can (``SessionBusyError(session_id=…, pid=…, host=…,
        lock=…)`` builds the standard message); ``release()`` gives it up; a holder
        that dies in any way (SIGKILL, a vanished machine) must not keep it.
        """
        return None

    # -- bookkeeping ----------------------------------------------------------------------

    @abstractmethod
    def get_meta(self, key: str) -> str | None:
        """A value from the store's key/value bookkeeping (``None`` when unset).

        Importers record per-session source fingerprints here (keys ``import:<id>``)."""

    @abstractmethod
    def set_meta(self, key: str, value: str | None) -> None:
        """Set (``None``: delete) a bookkeeping value."""

    def forget(self, request: ForgetRequest) -> ForgetReport:
        """Forget what ``request`` names (``hermes forget``): the text in messages, tool
        calls, titles and system prompts, or whole sessions; with ``request.dry_run``
        only report it. Removed text must be gone from the search indexes and from the
        files (for SQLite: secure_delete, an FTS optimize, VACUUM, a WAL truncation), not
        only hidden. The default says the store cannot forget."""
        return cannot_forget(self)

    def close(self) -> None:
        """Release connections. The store must not be used afterwards."""
