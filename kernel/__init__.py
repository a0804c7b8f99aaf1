"""Hermes: a plugin-first microkernel for an LLM agent's memory and context.

The public API lives here; plugins (the default ones included) import only these names.
"""

from __future__ import annotations

from .config import Config
from .contracts import (
    CompactionEvent,
    ContextEngine,
    LLMClient,
    LLMRequest,
    LLMResponse,
    MemoryProvider,
    MemoryWriteEvent,
    Message,
    PromptContext,
    PromptLayer,
    SearchHit,
    SessionInfo,
    SessionStore,
    StreamEvent,
    Tool,
    ToolContext,
    TurnEvent,
    Usage,
)
from .compaction import (
    MEMORY_CONTEXT_MAX_CHARS,
    SUMMARY_END_MARKER,
    SUMMARY_PREFIX,
    automatic_compaction_status_message,
    call_compress,
    is_compaction_summary,
    redact_secrets,
    resolve_model_threshold,
    sanitize_memory_context,
)
from .core import Kernel
from .errors import (
    ConfigError,
    ConflictError,
    ContextLengthError,
    HermesError,
    HomeError,
    LLMAuthError,
    LLMError,
    LLMRateLimitError,
    LLMUnavailableError,
    PluginError,
    StoreError,
    UnknownPluginError,
)
from .hookspecs import hookimpl
from .manager import PluginFailure, PluginRecord
from .runtime.context_files import (
    ContextFile,
    build_context_files_prompt,
    load_soul_md,
    scan_context_content,
    strip_frontmatter,
    truncate_content,
)
from .runtime.prompt import BuiltPrompt, LayerReport, PromptBuilder, preview_prompt, prompt_hash
from .runtime.memory_manager import MemoryManager
from .safety import Threat, scan_for_threats
from .util import atomic_write_text, estimate_messages_tokens, estimate_tokens, file_lock, is_cjk

__version__ = "0.1.0"

#: Bumped when a hook or contract changes incompatibly; plugins may check it.
PLUGIN_API_VERSION = 1

__all__ = [
    "MEMORY_CONTEXT_MAX_CHARS",
    "PLUGIN_API_VERSION",
    "SUMMARY_END_MARKER",
    "SUMMARY_PREFIX",
    "automatic_compaction_status_message",
    "call_compress",
    "is_compaction_summary",
    "redact_secrets",
    "resolve_model_threshold",
    "sanitize_memory_context",
    "BuiltPrompt",
    "CompactionEvent",
    "Config",
    "ConfigError",
    "ConflictError",
    "ContextFile",
    "ContextEngine",
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
    "SessionInfo",
    "SessionStore",
    "StoreError",
    "StreamEvent",
    "Tool",
    "ToolContext",
    "Threat",
    "TurnEvent",
    "UnknownPluginError",
    "Usage",
    "__version__",
    "atomic_write_text",
    "build_context_files_prompt",
    "estimate_messages_tokens",
    "estimate_tokens",
    "file_lock",
    "hookimpl",
    "is_cjk",
    "load_soul_md",
    "preview_prompt",
    "prompt_hash",
    "scan_context_content",
    "scan_for_threats",
    "strip_frontmatter",
    "truncate_content",
]
