"""Hermes: a plugin-first microkernel for an LLM agent's memory and context.

The public API lives here; plugins (the default ones included) import only these names.

Names are imported on first use (PEP 562 ``__getattr__``): ``import hermes`` is done by
every plugin module, by ``hermes --help`` and by every pytest run in an environment with
Hermes installed (the ``pytest11`` plugin), so it must stay cheap. To export a name, add
it to its module's tuple in ``_EXPORTS`` and to ``__all__`` (tests/kernel/test_packaging.py
checks both, and that ``import hermes`` imports no submodule eagerly).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Bumped when a hook or contract changes incompatibly; plugins may check it.
PLUGIN_API_VERSION = 1

#: ``{module: (public names it defines)}``, imported lazily by ``__getattr__``.
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".config": ("Config",),
    ".contracts": (
        "CompactionEvent", "ContextEngine", "ForgetReport", "ForgetRequest", "LLMClient", "LLMRequest", "LLMResponse",
        "MemoryProvider", "MemoryWriteEvent", "Message", "PromptContext", "PromptLayer",
        "SearchHit", "SessionInfo", "SessionStore", "StreamEvent", "Tool", "ToolContext",
        "TurnEvent", "Usage",
    ),
    ".compaction": (
        "MEMORY_CONTEXT_MAX_CHARS", "SUMMARY_END_MARKER", "SUMMARY_PREFIX",
        "automatic_compaction_status_message", "call_compress", "content_text",
        "is_compaction_summary", "resolve_model_threshold", "sanitize_memory_context",
    ),
    ".redaction": (
        "SECRET_RULES", "RedactingFilter", "SecretMatch", "SecretRule", "find_secrets",
        "is_secret_key", "mask_secrets", "redact_secrets",
    ),
    ".core": ("Kernel",),
    ".session_rows": (
        "MAX_TITLE_LENGTH", "decode_json", "encode_json", "new_session_id", "sanitize_title",
        "stored_content", "MAX_LINEAGE_HOPS", "NUMBERED_TITLE_RE", "follow_continuations",
        "follow_parents", "message_time", "message_tokens", "next_numbered_title",
        "pick_titled_session", "session_preview", "title_base", "tool_call_count",
        "filter_values", "substring_snippet", "stored_text", "SESSION_FIELDS", "MESSAGE_FIELDS",
        "session_row", "message_row", "search_page",
    ),
    ".registry": ("COMPONENT_KINDS", "ComponentKind"),
    ".settings": ("Setting",),
    ".errors": (
        "ConfigError", "ConflictError", "ContextLengthError", "HermesError", "HomeError",
        "LLMAuthError", "LLMError", "LLMRateLimitError", "LLMUnavailableError", "PluginError",
        "StoreError", "UnknownPluginError",
    ),
    ".hookspecs": ("hookimpl",),
    ".manager": ("PluginFailure", "PluginRecord",),
    ".runtime.context_files": (
        "ContextFile", "build_context_files_prompt", "load_soul_md", "prepare_context_text", "scan_context_content",
        "strip_frontmatter", "truncate_content",
    ),
    ".runtime.prompt": (
        "BuiltPrompt", "LayerReport", "PromptBuilder", "preview_prompt", "prompt_hash",
    ),
    ".runtime.memory_manager": ("MemoryManager", "is_trivial_prompt"),
    ".runtime.session_lock": ("SessionBusyError", "WriterLock"),
    ".safety": ("Threat", "scan_for_threats",),
    ".session_refs": ("CONTINUED_REASONS", "live_tip", "resolve_session_ref"),
    ".search_plan": (
        "CJK_RANGES", "MAX_QUERY_CHARS", "MAX_TERMS", "NOISE_WORDS", "RELAX_BELOW", "STOP_WORDS",
        "ParsedSearch", "SearchStage", "SearchTerm", "cjk_bigrams", "has_cjk", "informative",
        "parse_search", "plan_search", "search_stem", "strict_groups",
    ),
    ".workers": ("BackgroundMemoryProvider", "BackgroundSlot", "CircuitBreaker", "SerialWorker",
                 "backoff_delay", "importable", "merge_settings", "retry_after"),
    ".testing.faults": ("fault_point",),
    ".util": (
        "atomic_write_text", "atomic_writer", "estimate_messages_tokens", "estimate_tokens", "file_lock",
        "is_cjk", "read_bounded", "FileTooLargeError", "NotRegularFileError",
    ),
}

_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # next time, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "MAX_TITLE_LENGTH",
    "decode_json",
    "encode_json",
    "new_session_id",
    "sanitize_title",
    "stored_content",
    "MAX_LINEAGE_HOPS",
    "NUMBERED_TITLE_RE",
    "follow_continuations",
    "follow_parents",
    "filter_values",
    "substring_snippet",
    "stored_text",
    "SESSION_FIELDS",
    "MESSAGE_FIELDS",
    "session_row",
    "message_row",
    "search_page",
    "message_time",
    "message_tokens",
    "next_numbered_title",
    "pick_titled_session",
    "session_preview",
    "title_base",
    "tool_call_count",
    "CONTINUED_REASONS",
    "live_tip",
    "resolve_session_ref",
    "BackgroundMemoryProvider",
    "BackgroundSlot",
    "CircuitBreaker",
    "SerialWorker",
    "backoff_delay",
    "importable",
    "merge_settings",
    "retry_after",
    "is_trivial_prompt",
    "MEMORY_CONTEXT_MAX_CHARS",
    "PLUGIN_API_VERSION",
    "SUMMARY_END_MARKER",
    "SUMMARY_PREFIX",
    "automatic_compaction_status_message",
    "call_compress",
    "content_text",
    "is_compaction_summary",
    "redact_secrets",
    "RedactingFilter",
    "SECRET_RULES",
    "SecretMatch",
    "SecretRule",
    "find_secrets",
    "is_secret_key",
    "mask_secrets",
    "resolve_model_threshold",
    "sanitize_memory_context",
    "BuiltPrompt",
    "COMPONENT_KINDS",
    "ComponentKind",
    "CompactionEvent",
    "Config",
    "ConfigError",
    "ConflictError",
    "ContextFile",
    "ContextEngine",
    "ForgetReport",
    "ForgetRequest",
    "ContextLengthError",
    "HermesError",
    "HomeError",
    "Kernel",
    "LayerReport",
    "LLMAuthError",
    "LLMClient",
    "LLMError",
    "LLMRateLimitError",
    "LLMRequest",
    "LLMResponse",
    "LLMUnavailableError",
    "MemoryManager",
    "MemoryProvider",
    "MemoryWriteEvent",
    "Message",
    "PluginError",
    "PluginFailure",
    "PluginRecord",
    "PromptBuilder",
    "PromptContext",
    "PromptLayer",
    "SearchHit",
    "CJK_RANGES", "MAX_QUERY_CHARS", "MAX_TERMS", "NOISE_WORDS", "RELAX_BELOW", "STOP_WORDS",
    "ParsedSearch", "SearchStage", "SearchTerm", "cjk_bigrams", "has_cjk", "informative",
    "parse_search", "plan_search", "search_stem", "strict_groups",
    "SessionBusyError",
    "SessionInfo",
    "Setting",
    "SessionStore",
    "StoreError",
    "StreamEvent",
    "Tool",
    "ToolContext",
    "Threat",
    "TurnEvent",
    "UnknownPluginError",
    "Usage",
    "WriterLock",
    "__version__",
    "atomic_write_text",
    "atomic_writer",
    "build_context_files_prompt",
    "prepare_context_text",
    "estimate_messages_tokens",
    "estimate_tokens",
    "fault_point",
    "file_lock",
    "hookimpl",
    "is_cjk",
    "read_bounded",
    "FileTooLargeError",
    "NotRegularFileError",
    "load_soul_md",
    "preview_prompt",
    "prompt_hash",
    "scan_context_content",
    "scan_for_threats",
    "strip_frontmatter",
    "truncate_content",
]
