"""hermes-mem0: long-term memory for Hermes on mem0 (hosted platform or local OSS).

Install with ``hermes plugins install ./contrib/hermes-mem0`` and select it with
``memory.provider: mem0``; settings live under ``plugins.mem0``. Importing this module is
cheap: the ``mem0`` SDK is imported only when the provider first talks to it.
"""

from __future__ import annotations

from typing import Any

import hermes

from .provider import DEFAULTS, Mem0Paused, Mem0Provider

__version__ = "0.1.0"
__all__ = ["DEFAULTS", "Mem0Paused", "Mem0Provider", "hermes_register_memory_providers"]


@hermes.hookimpl
def hermes_register_memory_providers(register: Any) -> None:
    """Register the ``mem0`` memory provider."""
    register("mem0", Mem0Provider, tools=("mem0_search", "mem0_add", "mem0_delete"),
             description="mem0 long-term memory: recall by search, fact extraction, mem0_* tools")
