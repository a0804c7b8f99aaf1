"""Typed registries filled by the ``hermes_register_*`` hooks.

Each entry remembers which plugin registered it. Two plugins registering one name for
one kind is a :class:`~hermes.ConflictError` naming both; registering the identical
factory twice (a double install, a symlinked site-packages) is a no-op.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import ConflictError, UnknownPluginError


@dataclass(frozen=True)
class ComponentKind:
    """One kind of component a plugin can register. :data:`COMPONENT_KINDS` is the one
    table the registries, the registration hooks' order, selection by config, the
    ``hermes plugins select`` choices, ``hermes doctor`` and the docs are derived from:
    adding a kind means adding a row (and its hookspec)."""

    #: The name the CLI and ``Kernel.create`` use (``context-engine``).
    name: str
    #: The :class:`Registries` attribute (``context_engines``).
    attr: str
    #: The registration hook that fills it.
    hook: str
    #: The public contract (a ``hermes`` name) its factories build.
    contract: str
    #: The config key that selects one (``context.engine``); ``""`` when every
    #: registered component is used (prompt layers, tools).
    setting: str = ""
    #: One line for docs and help.
    description: str = ""


#: Every kind of component, in the order the kernel calls their registration hooks.
COMPONENT_KINDS: tuple[ComponentKind, ...] = (
    ComponentKind("llm", "llm_clients", "hermes_register_llm_clients", "LLMClient",
                  "model.provider", "the client of the model API"),
    ComponentKind("session-store", "session_stores", "hermes_register_session_stores",
                  "SessionStore", "sessions.store", "where conversations are stored and searched"),
    ComponentKind("memory-provider", "memory_providers", "hermes_register_memory_providers",
                  "MemoryProvider", "memory.provider",
                  "the external memory next to the built-in MEMORY.md / USER.md"),
    ComponentKind("context-engine", "context_engines", "hermes_register_context_engines",
                  "ContextEngine", "context.engine", "what happens when the context fills up"),
    ComponentKind("prompt-layer", "prompt_layers", "hermes_register_prompt_layers",
                  "PromptLayer", "", "a part of the system prompt"),
    ComponentKind("tool", "tools", "hermes_register_tools", "Tool", "",
                  "a tool the model may call (when its availability check passes)"),
)

#: The kinds of registry, by the names the CLI uses (``hermes plugins select KIND``).
KINDS = {kind.name: kind.attr for kind in COMPONENT_KINDS}

#: The config key each selectable kind is chosen by.
SELECTION_KEYS = {kind.name: kind.setting for kind in COMPONENT_KINDS if kind.setting}


def kind_of(name: str) -> ComponentKind:
    """The row of :data:`COMPONENT_KINDS` for a kind name, attribute or hook name."""
    for kind in COMPONENT_KINDS:
        if name in (kind.name, kind.attr, kind.hook):
            return kind
    raise ValueError(f"unknown kind {name!r}; choose one of: {', '.join(KINDS)}")


class Register(Protocol):
    """The ``register`` a registration hook receives (every kind but tools)."""

    def __call__(self, name: str, factory: Any, *, description: str = "",
                 tools: Iterable[str] = ()) -> Entry: ...


class RegisterTool(Protocol):
    """The ``register`` ``hermes_register_tools`` receives: takes a :class:`hermes.Tool`."""

    def __call__(self, tool: Any) -> Entry: ...


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
    """All registries of one kernel, one per row of :data:`COMPONENT_KINDS` (the
    attributes are declared for type checkers; the table creates them)."""

    llm_clients: Registry
    session_stores: Registry
    memory_providers: Registry
    context_engines: Registry
    prompt_layers: Registry
    tools: Registry

    def __init__(self) -> None:
        for kind in COMPONENT_KINDS:
            setattr(self, kind.attr, Registry(kind.name))

    def by_kind(self, kind: str) -> Registry:
        """The registry for a kind name (``context-engine``), attribute or hook name."""
        registry: Registry = getattr(self, kind_of(kind).attr)
        return registry

    def all(self) -> list[Registry]:
        """Every registry, in :data:`COMPONENT_KINDS` order."""
        return [self.by_kind(k.name) for k in COMPONENT_KINDS]

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
