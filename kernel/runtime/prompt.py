"""Prompt assembly: the byte-stable cached system prompt and the per-call additions.

:class:`PromptBuilder` collects the registered prompt layers (``factory(kernel)`` →
:class:`hermes.PromptLayer`), drops those named in ``prompt.disabled_layers`` and sorts
the rest by ``(order, name)``.

* :meth:`PromptBuilder.build` renders the **cached** layers into one text (layers joined
  by a blank line). The runtime builds it once per session and after each compaction,
  stores it with the session and sends it byte for byte on every turn and on
  ``--continue``; :attr:`BuiltPrompt.hash` makes a change detectable.
* :meth:`PromptBuilder.apply_ephemeral` returns a **new** message list for one API call:
  the ephemeral system text after the cached system text, prefill messages after the
  system message, recalled memory appended to the last user message. Nothing it adds is
  ever stored.

Why the ephemeral system text goes into a second content block. Anthropic caches the
request prefix up to a ``cache_control`` breakpoint, byte for byte: concatenating per-call
text into the cached system string changes that prefix and turns every call into a cache
miss (the upstream bug of Hermes PR #2530). So when there is ephemeral system text, the
system message becomes ``[{"type": "text", "text": <cached>}, {"type": "text", "text":
<ephemeral>}]``: block 0 is exactly the stored prompt, and a client that puts the
breakpoint on block 0 keeps the cached prefix valid however the ephemeral block changes.
With no ephemeral system text the system message stays the plain stored string. OpenAI
Chat Completions accepts text-part arrays for system messages too; a client for a server
that does not may join the parts with a blank line.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from ..contracts import Message, PromptContext, PromptLayer
from ..util import estimate_tokens

log = logging.getLogger("hermes.prompt")

#: Between two rendered layers of the cached prompt.
LAYER_SEPARATOR = "\n\n"
#: Where an ephemeral layer's output goes (``PromptLayer.placement``): ``system`` (a
#: second system block), ``user`` (the last user message) or ``messages`` (a layer that
#: contributes prefill messages through ``messages()``; text it renders goes with system).
PLACEMENTS = ("system", "user", "messages")

__all__ = ["BuiltPrompt", "EphemeralParts", "LayerReport", "PromptBuilder", "preview_prompt", "prompt_hash"]


def prompt_hash(text: str) -> str:
    """The stability hash of a system prompt: sha256 of its UTF-8 bytes, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LayerReport:
    """One layer as rendered: what ``hermes prompt show`` prints.

    ``plugin`` is the plugin that registered the layer (its source); ``text`` what it
    rendered (``""`` for nothing); ``tokens`` a rough estimate; ``error`` the exception
    text when the layer raised and was skipped. ``placement`` is ``"cached"`` for cached
    layers, else the ephemeral layer's declared placement (``system``, ``user``,
    ``messages``); ``messages`` holds the prefill messages it returned.
    """

    name: str
    order: int
    cached: bool
    plugin: str
    placement: str
    text: str = ""
    description: str = ""
    messages: tuple[Message, ...] = ()
    error: str | None = None

    @property
    def chars(self) -> int:
        """Characters rendered (prefill messages' contents included)."""
        return len(self.text) + sum(len(str(m.get("content") or "")) for m in self.messages)

    @property
    def tokens(self) -> int:
        """Rough token estimate of what was rendered."""
        return estimate_tokens(self.text) + sum(estimate_tokens(str(m.get("content") or "")) for m in self.messages)

    @property
    def empty(self) -> bool:
        """The layer added nothing."""
        return not self.text and not self.messages

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``hermes prompt show --json``)."""
        out: dict[str, Any] = {
            "name": self.name, "order": self.order,
            "kind": "cached" if self.cached else "ephemeral", "placement": self.placement,
            "plugin": self.plugin, "description": self.description,
            "chars": self.chars, "tokens": self.tokens, "text": self.text, "error": self.error,
        }
        if self.messages:
            out["messages"] = [dict(m) for m in self.messages]
        return out


@dataclass(frozen=True)
class BuiltPrompt:
    """The result of :meth:`PromptBuilder.build`.

    ``text`` is the cached system prompt (byte-stable for a given context and state),
    ``hash`` its :func:`prompt_hash`, ``layers`` a report per active layer in render order
    (ephemeral ones only when asked for), ``disabled`` the names turned off by
    ``prompt.disabled_layers``.
    """

    text: str
    hash: str
    layers: tuple[LayerReport, ...] = ()
    disabled: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        """Rough token estimate of :attr:`text`."""
        return estimate_tokens(self.text)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``hermes prompt show --json``)."""
        return {
            "hash": self.hash, "chars": len(self.text), "tokens": self.tokens,
            "layers": [layer.as_dict() for layer in self.layers],
            "disabled": list(self.disabled), "text": self.text,
        }


@dataclass
class EphemeralParts:
    """What the ephemeral layers rendered for one API call."""

    system: str = ""
    prefill: list[Message] = field(default_factory=list)
    user: str = ""
    layers: list[LayerReport] = field(default_factory=list)


@dataclass
class _Slot:
    name: str
    plugin: str
    description: str
    layer: PromptLayer
    order: float
    cached: bool
    placement: str


class PromptBuilder:
    """Assembles prompts from the kernel's registered prompt layers.

    ``PromptBuilder(kernel)`` instantiates every registered layer not named in
    ``prompt.disabled_layers`` (``disabled`` overrides the config). A factory that raises
    or returns something that is not a layer is skipped with a warning (see
    :attr:`failures`). Build one per agent; it holds no per-session state.
    """

    def __init__(self, kernel: Any, *, disabled: list[str] | tuple[str, ...] | None = None):
        self.kernel = kernel
        if disabled is None:
            disabled = kernel.config.get("prompt.disabled_layers") or []
        wanted_off = set(disabled)
        self.failures: dict[str, str] = {}
        self._warned: set[tuple[str, str]] = set()
        self._slots: list[_Slot] = []
        off: list[str] = []
        for entry in kernel.registries.prompt_layers:
            if entry.name in wanted_off:
                off.append(entry.name)
                continue
            slot = self._instantiate(entry)
            if slot is not None:
                self._slots.append(slot)
        self._slots.sort(key=lambda s: (s.order, s.name))
        self.disabled: tuple[str, ...] = tuple(off)
        unknown = wanted_off - {e.name for e in kernel.registries.prompt_layers}
        if unknown:
            log.warning("prompt.disabled_layers names unknown layers: %s", ", ".join(sorted(unknown)))

    def _instantiate(self, entry: Any) -> _Slot | None:
        try:
            layer = entry.build(self.kernel)
            if not isinstance(layer, PromptLayer) and not callable(getattr(layer, "render", None)):
                raise TypeError(f"factory returned {type(layer).__name__}, not a PromptLayer")
            order = getattr(layer, "order", 500)
            if isinstance(order, bool) or not isinstance(order, int | float):
                raise TypeError(f"order must be a number, got {order!r}")
            cached = bool(getattr(layer, "cached", True))
            placement = str(getattr(layer, "placement", "system") or "system")
            if not cached and placement not in PLACEMENTS:
                raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        except Exception as exc:
            self.failures[entry.name] = f"{type(exc).__name__}: {exc}"
            log.warning("prompt layer %s (plugin %s) skipped: %s", entry.name, entry.plugin, exc)
            return None
        return _Slot(entry.name, entry.plugin, entry.description or getattr(layer, "description", ""),
                     layer, order, cached, "cached" if cached else placement)

    @property
    def layer_names(self) -> list[str]:
        """Active layer names in render order (cached and ephemeral)."""
        return [s.name for s in self._slots]

    # -- rendering ------------------------------------------------------------------------

    def _render(self, slot: _Slot, ctx: PromptContext) -> LayerReport:
        text, error = "", None
        messages: tuple[dict[str, Any], ...] = ()
        try:
            out = slot.layer.render(ctx)
            if out is not None and not isinstance(out, str):
                raise TypeError(f"render() returned {type(out).__name__}, not str or None")
            text = (out or "").strip()
            if not slot.cached:
                extra = slot.layer.messages(ctx) if hasattr(slot.layer, "messages") else []
                messages = tuple(_check_message(m) for m in extra or ())
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            text, messages = "", ()
            # Ephemeral layers render on every call: warn once per layer and error.
            level = logging.DEBUG if (slot.name, error) in self._warned else logging.WARNING
            self._warned.add((slot.name, error))
            log.log(level, "prompt layer %s (plugin %s) failed and was skipped: %s",
                    slot.name, slot.plugin, error, exc_info=exc)
        return LayerReport(slot.name, int(slot.order), slot.cached, slot.plugin, slot.placement,
                           text, slot.description, messages, error)

    def build(self, ctx: PromptContext, *, include_ephemeral: bool = False) -> BuiltPrompt:
        """Render the cached layers into the system prompt.

        Deterministic for a given context and on-disk state: the same inputs give the
        same bytes. ``include_ephemeral`` also renders the ephemeral layers into
        :attr:`BuiltPrompt.layers` (for ``hermes prompt show``); they never enter ``text``.
        """
        reports: list[LayerReport] = []
        parts: list[str] = []
        for slot in self._slots:
            if not slot.cached and not include_ephemeral:
                continue
            report = self._render(slot, ctx)
            reports.append(report)
            if slot.cached and report.text:
                parts.append(report.text)
        text = LAYER_SEPARATOR.join(parts)
        return BuiltPrompt(text, prompt_hash(text), tuple(reports), self.disabled)

    def render_ephemeral(self, ctx: PromptContext) -> EphemeralParts:
        """Render the ephemeral layers for one API call."""
        parts = EphemeralParts()
        system: list[str] = []
        user: list[str] = []
        for slot in self._slots:
            if slot.cached:
                continue
            report = self._render(slot, ctx)
            parts.layers.append(report)
            if report.text:
                (user if slot.placement == "user" else system).append(report.text)
            parts.prefill.extend(dict(m) for m in report.messages)
        parts.system = LAYER_SEPARATOR.join(system)
        parts.user = LAYER_SEPARATOR.join(user)
        return parts

    def apply_ephemeral(self, messages: list[Message], ctx: PromptContext) -> list[Message]:
        """A new message list for this API call only, with the ephemeral layers applied.

        ``messages`` (normally ``[system, *transcript]``) is never mutated; messages that
        change are copied. The cached system text stays byte-identical as block 0 of the
        system message (see the module docstring), prefill messages follow the system
        message, and user-placed text (recalled memory) is appended to the last user
        message after a blank line.
        """
        parts = self.render_ephemeral(ctx)
        out = list(messages)
        if parts.user:
            # Before prefill goes in: recalled text belongs to the conversation's own
            # latest user message, never to a prefill example.
            for i in range(len(out) - 1, -1, -1):
                if out[i].get("role") == "user":
                    out[i] = _with_appended_text(out[i], parts.user)
                    break
            else:
                log.debug("no user message to append %d chars of ephemeral text to", len(parts.user))
        has_system = bool(out) and out[0].get("role") == "system"
        if parts.system:
            if has_system:
                out[0] = _with_system_block(out[0], parts.system)
            else:
                out.insert(0, {"role": "system", "content": parts.system})
                has_system = True
        if parts.prefill:
            at = 1 if has_system else 0
            out[at:at] = parts.prefill
        return out


def with_notes(messages: list[Message], notes: dict[int, str]) -> list[Message]:
    """``messages`` with ``notes[id(message)]`` appended to the messages it names (copies;
    the input is never mutated). The runtime keys each live memory-updates block to the
    user message of the turn that first carried it, so every later request sends that
    message with the same bytes and the cached history stays valid."""
    if not notes:
        return messages
    return [_with_appended_text(m, notes[id(m)]) if id(m) in notes else m for m in messages]


def _check_message(message: Any) -> Message:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
        raise ValueError(f"prefill messages need a role of user, assistant or system, got {message!r}")
    return dict(message)


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [dict(part) if isinstance(part, dict) else part for part in content]
    return [{"type": "text", "text": content or ""}] if content else []


def _with_system_block(message: Message, text: str) -> Message:
    copy = dict(message)
    copy["content"] = [*_text_blocks(message.get("content")), {"type": "text", "text": text}]
    return copy


def _with_appended_text(message: Message, text: str) -> Message:
    copy = dict(message)
    content = message.get("content")
    if isinstance(content, list):
        copy["content"] = [*_text_blocks(content), {"type": "text", "text": text}]
    else:
        copy["content"] = f"{content}\n\n{text}" if content else text
    return copy


def preview_prompt(
    kernel: Any,
    *,
    cwd: Any = None,
    platform: str | None = None,
    model: str | None = None,
    session_id: str = "",
    skip_context_files: bool = False,
    extra: dict[str, Any] | None = None,
) -> BuiltPrompt:
    """The prompt a new session would get now, ephemeral layers rendered too
    (``hermes prompt show``).

    Mirrors what the runtime passes to the layers: the tools it would offer (registered
    tools, the memory manager's tools, the context engine's), a memory manager
    initialised on the kernel's home (its frozen snapshots), the configured platform and
    model, the current time as the session start. Nothing is stored."""
    import os
    import time
    from pathlib import Path

    memory = _preview_memory(kernel, platform, session_id or "prompt-preview")
    try:
        names = {t.name for t in kernel.tools()}
        if memory is not None:
            names |= {s.get("name", "") for s in _schemas(memory.tool_schemas)}
        try:
            engine = kernel.create("context-engine")
            names |= {s.get("function", s).get("name", "") for s in _schemas(engine.get_tool_schemas)}
        except Exception as exc:  # no engine: preview without its tools
            log.debug("prompt preview without context-engine tools: %s", exc)
        ctx = PromptContext(
            kernel=kernel, session_id=session_id, home=kernel.home,
            cwd=Path(cwd) if cwd is not None else Path(os.getcwd()),
            model=model or str(kernel.config.get("model.name") or ""),
            platform=platform or str(kernel.config.get("agent.platform") or "cli"),
            tool_names=frozenset(n for n in names if n), memory=memory,
            skip_context_files=skip_context_files, now=time.time(), extra=dict(extra or {}),
        )
        return PromptBuilder(kernel).build(ctx, include_ephemeral=True)
    finally:
        if memory is not None:
            try:
                memory.shutdown()
            except Exception as exc:  # a preview must not fail on cleanup
                log.debug("memory shutdown after preview failed: %s", exc)


def _schemas(getter: Any) -> list[dict[str, Any]]:
    try:
        return [s for s in (getter() or []) if isinstance(s, dict)]
    except Exception as exc:
        log.debug("tool schemas unavailable for the preview: %s", exc)
        return []


def _preview_memory(kernel: Any, platform: str | None, session_id: str) -> Any:
    """A memory manager for the preview, or ``None`` when memory cannot be loaded."""
    try:
        from .memory_manager import MemoryManager
    except ImportError:
        return None
    try:
        memory = MemoryManager(kernel, platform=platform or "cli", agent_context="primary")
        memory.initialize(session_id, hermes_home=str(kernel.home), platform=platform or "cli")
        return memory
    except Exception as exc:
        log.warning("memory could not be loaded for the prompt preview: %s", exc)
        return None
