"""Stand-ins for the smallest plugin a test needs (``hermes.testing.stubs``).

``StubMemoryProvider`` is an external memory provider that is available, starts with
nothing to do and offers no tools: a test subclasses it and overrides only the method it
records or breaks. ``memory_provider_plugin(provider)`` is the plugin that registers one
provider instance, to pass to ``Kernel(plugins=[...])``, ``kernel.register_plugin`` or the
``agent_factory`` fixture's ``plugins``.
"""

from __future__ import annotations

from typing import Any

from hermes.contracts import MemoryProvider
from hermes.hookspecs import hookimpl


class StubMemoryProvider(MemoryProvider):
    """Available, nothing to initialize, no tools; named ``stub`` unless a subclass sets
    ``name``. Every other method keeps the contract's harmless default."""

    name = "stub"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        pass

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return []


class _ProviderPlugin:
    def __init__(self, provider: MemoryProvider, name: str):
        self.provider = provider
        self.name = name

    @hookimpl
    def hermes_register_memory_providers(self, register: Any) -> None:
        """Register the one provider instance (every ``create`` gets the same object)."""
        register(self.provider.name, lambda *args: self.provider)


def memory_provider_plugin(provider: MemoryProvider, name: str | None = None) -> Any:
    """A plugin (named ``name``, default ``plugin-<provider.name>``) that registers
    ``provider`` itself as the memory provider ``provider.name``, so a test can select
    it (``memory.provider``) and then look at what it recorded."""
    return _ProviderPlugin(provider, name or f"plugin-{provider.name}")
