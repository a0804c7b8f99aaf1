"""Typed registries filled by the ``hermes_register_*`` hooks.

Each entry remembers which plugin registered it. Two plugins registering one name for
one kind is a :class:`~hermes.ConflictError` naming both; registering the identical
factory twice (a double install, a symlinked site-packages) is a no-op.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import ConflictError, UnknownPluginError

#: The kinds of registry, by the names the CLI uses (``hermes plugins select KIND``).
KINDS = {
    "context-engine": "context_engines",
    "memory-provider": "memory_providers",
    "session-store": "session_stores",
    "llm": "llm_clients",
    "prompt-layer": "prompt_layers",
    "tool": "tools",
}

#: The config key each selectable kind is chosen by.
SELECTION_KEYS = {
    "context-engine": "context.engine",
    "memory-provider": "memory.provider",
    "session-store": "sessions.store",
    "llm": "model.provider",
}


@dataclass
class Entry:
    """One registered component: its name, factory (or object, for tools), the plugin
    that registered it, and a one-line description."""

    kind: str
    name: str
    factory: Any
    plugin: str
    description: str = ""
    #: Names of the tools the component offers itself (a memory provider's tools),
    #: declared at registration; no other plugin may register a tool of these names.
    tools: tuple[str, ...] = ()

    def build(self, kernel: Any) -> Any:
        """Call the factory, passing the kernel when it accepts an argument."""
        factory = self.factory
        try:
            params = inspect.signature(factory).parameters.values()
        except (TypeError, ValueError):
            return factory(kernel)
        positional = [
            p for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        return factory(kernel) if positional else factory()


class Registry:
    """Entries of one kind, in registration order."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def add(self, name: str, factory: Any, plugin: str, description: str = "",
            tools: Iterable[str] = ()) -> Entry:
        """Add an entry; :class:`ConflictError` when another plugin has ``name``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} names must be non-empty strings, got {name!r} from {plugin!r}")
        existing = self._entries.get(name)
        if existing is not None:
            if existing.factory is factory:
                return existing
            if existing.plugin == plugin:
                raise ValueError(f"plugin {plugin!r} registered the {self.kind} {name!r} twice "
                                 f"with different factories; register each name once")
            raise ConflictError(self.kind, name, existing.plugin, plugin)
        if not description:
            doc = inspect.getdoc(factory) or ""
            description = doc.strip().splitlines()[0] if doc.strip() else ""
        entry = Entry(self.kind, name, factory, plugin, description, tuple(tools))
        self._entries[name] = entry
        return entry

    def get(self, name: str, *, setting: str = "") -> Entry:
        """The entry called ``name``; :class:`UnknownPluginError` lists the valid names."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownPluginError(self.kind, name, list(self._entries), setting=setting) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._entries)

    def remove_plugin(self, plugin: str) -> None:
        """Forget everything ``plugin`` registered (used when its registration fails)."""
        for name in [n for n, e in self._entries.items() if e.plugin == plugin]:
            del self._entries[name]


class Registries:
    """All registries of one kernel."""

    def __init__(self) -> None:
        self.context_engines = Registry("context-engine")
        self.memory_providers = Registry("memory-provider")
        self.session_stores = Registry("session-store")
        self.llm_clients = Registry("llm")
        self.prompt_layers = Registry("prompt-layer")
        self.tools = Registry("tool")

    def by_kind(self, kind: str) -> Registry:
        """The registry for a CLI kind name (``context-engine``) or attribute name."""
        attr = KINDS.get(kind, kind)
        registry = getattr(self, attr, None)
        if not isinstance(registry, Registry):
            raise ValueError(f"unknown kind {kind!r}; choose one of: {', '.join(KINDS)}")
        return registry

    def all(self) -> list[Registry]:
        """Every registry, in :data:`KINDS` order."""
        return [self.by_kind(k) for k in KINDS]

    def remove_plugin(self, plugin: str) -> None:
        """Forget everything ``plugin`` registered, in every registry."""
        for registry in self.all():
            registry.remove_plugin(plugin)

    def registered_by(self, plugin: str) -> dict[str, list[str]]:
        """``{kind: [names]}`` of what ``plugin`` registered."""
        out: dict[str, list[str]] = {}
        for registry in self.all():
            names = [e.name for e in registry if e.plugin == plugin]
            if names:
                out[registry.kind] = names
        return out


def make_register(registry: Registry, plugin: str, *, tools: bool = False) -> Callable[..., Any]:
    """The ``register`` callable handed to one plugin's registration hook."""
    if tools:
        def register_tool(tool: Any) -> Any:
            name = getattr(tool, "name", None)
            schema = getattr(tool, "schema", None)
            if not name or not callable(getattr(tool, "handler", None)) or not isinstance(schema, dict):
                raise TypeError(f"register(tool) expects a hermes.Tool (name, schema dict, handler), "
                                f"got {tool!r} from {plugin!r}")
            return registry.add(name, tool, plugin, str(schema.get("description", "")))
        return register_tool

    def register(name: str, factory: Any, *, description: str = "", tools: Iterable[str] = ()) -> Entry:
        if not callable(factory):
            raise TypeError(f"register({name!r}, ...) expects a class or callable, got {factory!r} from {plugin!r}")
        if isinstance(tools, str):
            raise TypeError(f"register({name!r}, ..., tools=...) expects a tuple of tool names, "
                            f"got the string {tools!r} from {plugin!r}")
        return registry.add(name, factory, plugin, description, tools)

    return register
