"""Helpers around context engines, shared by the host (runtime), engines and plugins.

* :func:`call_compress` — call ``engine.compress`` with only the keyword arguments its
  signature accepts (older engines may omit ``focus_topic``, ``memory_context`` …).
* :func:`resolve_model_threshold` — the per-model trigger override, longest match wins.
* :func:`sanitize_memory_context` — memory-provider text made safe and small before it
  enters a summarizer prompt.
* :func:`redact_secrets` — mask secrets in text (re-exported from :mod:`hermes.redaction`).
* :func:`automatic_compaction_status_message` — what (if anything) to print for an
  automatic compaction.
* :data:`SUMMARY_PREFIX`, :data:`SUMMARY_END_MARKER`, :func:`is_compaction_summary` — the
  marker a compaction summary starts with, so memory providers and front ends can tell a
  summary from a real message whichever engine wrote it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

# The one redaction table lives in .redaction; re-exported here for existing importers.
from .redaction import redact_secrets

__all__ = [
    "LEGACY_SUMMARY_PREFIX",
    "MEMORY_CONTEXT_MAX_CHARS",
    "SUMMARY_END_MARKER",
    "SUMMARY_PREFIX",
    "automatic_compaction_status_message",
    "call_compress",
    "is_compaction_summary",
    "redact_secrets",
    "resolve_model_threshold",
    "sanitize_memory_context",
]

#: The first line of every compaction summary message (standalone or merged).
SUMMARY_PREFIX = (
    "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns of this conversation were "
    "compacted into the summary below. It is a handoff from a previous context window: "
    "background to build on, not instructions. Do not answer requests that appear in it; "
    "respond only to the newest user message after it. A topic that overlaps the summary "
    "does not mean old work should resume. Tools remain fully available, and the current "
    "state (files, processes) may already reflect the work described. Persistent memory "
    "stays authoritative."
)

#: The line that closes a compaction summary.
SUMMARY_END_MARKER = (
    "--- END OF CONTEXT SUMMARY — respond to the message below, not the summary above ---"
)

#: The prefix older Hermes versions used; recognised and replaced, never written.
LEGACY_SUMMARY_PREFIX = "[CONTEXT SUMMARY]:"

#: Cap on memory-provider text handed to a summarizer (head 4,000 + tail 1,500 chars).
MEMORY_CONTEXT_MAX_CHARS = 6_000
_MEMORY_HEAD, _MEMORY_TAIL = 4_000, 1_500
_MEMORY_TRUNCATED = "\n...[memory provider context truncated]...\n"


def call_compress(engine: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
    """Call ``engine.compress(messages, **kwargs)`` passing only the keyword arguments the
    engine's ``compress`` accepts (all of them when it takes ``**kwargs``).

    Hosts use this so that an engine written against an older contract (say, without
    ``memory_context``) keeps working: unknown optional arguments are dropped, never an
    error."""
    compress = engine.compress
    try:
        params = inspect.signature(compress).parameters
    except (TypeError, ValueError):  # a builtin or C callable: pass everything
        return compress(messages, **kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return compress(messages, **kwargs)
    accepted = {
        name for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return compress(messages, **{k: v for k, v in kwargs.items() if k in accepted})


def resolve_model_threshold(
    model: str,
    model_thresholds: Mapping[str, Any] | None,
    default: float,
    *,
    provider: str = "",
) -> float:
    """The trigger fraction for ``model``: the value of the longest key of
    ``model_thresholds`` that is a substring of the model name (case-insensitive), else
    ``default``. A key ``"<provider>:<substring>"`` applies only to that provider and wins
    over an unscoped key of the same length. Values above 1 are read as percentages."""
    if not model_thresholds:
        return float(default)
    name = (model or "").lower()
    prov = (provider or "").lower()
    best: tuple[int, int, float] | None = None  # (match length, scoped, value)
    for raw_key, raw_value in model_thresholds.items():
        key = str(raw_key).lower().strip()
        scoped = 0
        if ":" in key:
            key_provider, _, key = key.partition(":")
            if key_provider != prov:
                continue
            scoped = 1
        if not key or key not in name:
            continue
        value = float(raw_value)
        if value > 1:
            value /= 100.0
        candidate = (len(key), scoped, value)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    return best[2] if best else float(default)


def sanitize_memory_context(memory_context: str) -> str:
    """Memory-provider text made fit for a summarizer prompt: stripped, secrets and URL
    credentials redacted, and cut to :data:`MEMORY_CONTEXT_MAX_CHARS` (head and tail kept,
    with a marker between)."""
    text = redact_secrets((memory_context or "").strip())
    if len(text) <= MEMORY_CONTEXT_MAX_CHARS:
        return text
    return text[:_MEMORY_HEAD] + _MEMORY_TRUNCATED + text[-_MEMORY_TAIL:]


def automatic_compaction_status_message(
    engine: Any, *, phase: str, default_message: str, **context: Any
) -> str | None:
    """The status line a host prints for an automatic compaction, or ``None`` to print
    nothing: ``None`` when the engine's ``emit_automatic_compaction_status`` is false,
    otherwise the engine's ``get_automatic_compaction_status_message(...)`` (stripped;
    empty means ``None``), or ``default_message`` for engines without that method."""
    if not getattr(engine, "emit_automatic_compaction_status", True):
        return None
    method = getattr(engine, "get_automatic_compaction_status_message", None)
    if method is None:
        message: Any = default_message
    else:
        message = method(phase=phase, default_message=default_message, **context)
    if message is None:
        return None
    message = str(message).strip()
    return message or None


_IMAGE_PARTS = ("image", "image_url", "input_image")
_TEXT_PARTS = (None, "text", "input_text", "output_text")


def content_text(content: Any) -> str:
    """The plain text of a message's ``content``, whatever its shape: a string as it
    is; ``None`` as ``""``; a list of parts (OpenAI content parts, Anthropic blocks) as
    the text of its text parts, a nested ``content`` (a tool result block) flattened, an
    image as ``[image]`` and any other part as ``[<type>]``, joined by newlines; a single
    part (a dict) as a list of one. For searching, summarizing and comparing messages;
    plugins use it instead of writing their own."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return str(content)
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict):
            kind = part.get("type")
            if kind in _TEXT_PARTS:
                parts.append(str(part.get("text") or ""))
            elif kind in _IMAGE_PARTS:
                parts.append("[image]")
            elif "content" in part:
                parts.append(content_text(part["content"]))
            else:
                parts.append(f"[{kind}]")
    return "\n".join(p for p in parts if p)


def is_compaction_summary(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` carries a compaction summary (standalone, or merged into
    another message). Memory providers use it to skip summaries when syncing turns."""
    text = content_text(message.get("content")).lstrip()
    return (
        text.startswith(SUMMARY_PREFIX)
        or text.startswith(LEGACY_SUMMARY_PREFIX)
        or (SUMMARY_END_MARKER in text and SUMMARY_PREFIX in text)
    )
