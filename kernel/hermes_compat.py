"""Hermes-style plugin directories: ``$HERMES_HOME/plugins/<name>/``.

The Hermes agent loads a memory provider from a directory holding an ``__init__.py``
and, optionally, a ``plugin.yaml`` manifest (``name``, ``description``, ``version``). The
package either

* calls ``ctx.register_memory_provider(provider)`` from a ``register(ctx)`` function, or
* defines a ``MemoryProvider`` subclass, instantiated with no arguments;

and imports the base class as ``from agent.memory_provider import MemoryProvider``. This
module loads such directories as plugins with source ``local``, each registering one
memory provider under the directory's name (what ``memory.provider`` selects), so a
provider written for Hermes runs here unchanged. While such a package is imported, and
while its provider is built, ``agent.memory_provider`` resolves to
:class:`hermes.MemoryProvider` (a temporary shim; a real ``agent`` package is put back
afterwards).

A directory whose package defines ``@hermes.hookimpl`` functions is a plain Hermes-kernel
plugin that happens to be a package, and is registered as one.

Each directory's package is imported under a private name derived from its path
(``hermes_plugin_dirs.<name>_<hash>``), so relative imports between its files work and
two homes with a plugin of the same name never share code. Failures (an import error, a
package that provides nothing, a ``register`` that registers nothing) are recorded like
any plugin failure; the kernel goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from .contracts import MemoryProvider
from .errors import PluginError
from .hookspecs import hookimpl

log = logging.getLogger("hermes.plugins")

__all__ = ["HermesStyleProvider", "hermes_agent_shim", "load_hermes_style_plugins", "read_manifest"]

#: The parent package of every imported plugin directory.
PACKAGE_ROOT = "hermes_plugin_dirs"

#: The manifest file of a plugin directory.
MANIFEST = "plugin.yaml"

_SHIM_LOCK = threading.RLock()
_MISSING = object()


@contextlib.contextmanager
def hermes_agent_shim() -> Iterator[None]:
    """While active, ``from agent.memory_provider import MemoryProvider`` gives
    :class:`hermes.MemoryProvider`. Whatever ``sys.modules`` held before is restored."""
    with _SHIM_LOCK:
        names = ("agent", "agent.memory_provider")
        saved = {name: sys.modules.get(name, _MISSING) for name in names}
        agent = ModuleType("agent", "Hermes compatibility shim (hermes.hermes_compat).")
        agent.__path__ = []  # a package, so the submodule import resolves
        provider_module = ModuleType("agent.memory_provider", "Hermes compatibility shim.")
        provider_module.MemoryProvider = MemoryProvider  # type: ignore[attr-defined]
        agent.memory_provider = provider_module  # type: ignore[attr-defined]
        sys.modules["agent"], sys.modules["agent.memory_provider"] = agent, provider_module
        try:
            yield
        finally:
            for name, module in saved.items():
                if module is _MISSING:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module  # type: ignore[assignment]


def read_manifest(directory: Path) -> dict[str, Any]:
    """The ``plugin.yaml`` of a plugin directory (``{}`` when there is none). A manifest
    that is not a YAML mapping raises :class:`hermes.PluginError`."""
    path = directory / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise PluginError(f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PluginError(f"{path} must be a YAML mapping (name, description, version)")
    return data


class _Collector:
    """The ``ctx`` handed to a Hermes plugin's ``register(ctx)``: it keeps the memory
    provider; other ``register_*`` calls (tools, hooks, skills) are ignored, as Hermes'
    memory-provider loader ignores them."""

    def __init__(self, plugin: str):
        self.plugin = plugin
        self.providers: list[Any] = []

    def register_memory_provider(self, provider: Any) -> None:
        self.providers.append(provider)

    def __getattr__(self, name: str) -> Callable[..., None]:
        if not name.startswith("register_"):
            raise AttributeError(name)

        def ignored(*args: Any, **kwargs: Any) -> None:
            log.debug("plugin %s: ctx.%s() is ignored for a memory-provider plugin", self.plugin, name)

        return ignored


class HermesStyleProvider:
    """The pluggy plugin standing for one Hermes-style provider directory: it registers
    ``factory`` as the memory provider ``name``."""

    def __init__(self, name: str, factory: Callable[[], MemoryProvider], description: str = ""):
        self.name = name
        self.factory = factory
        self.description = description

    @hookimpl
    def hermes_register_memory_providers(self, register: Any) -> None:
        """Register this directory's provider."""
        register(self.name, self.factory, description=self.description)


def _module_name(directory: Path) -> str:
    digest = hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in directory.name)
    return f"{PACKAGE_ROOT}.{safe}_{digest}"


def _import_package(directory: Path) -> ModuleType:
    """Import ``directory`` as a fresh package (its own submodules re-imported too)."""
    if PACKAGE_ROOT not in sys.modules:
        root = ModuleType(PACKAGE_ROOT, "Hermes-style plugin directories.")
        root.__path__ = []
        sys.modules[PACKAGE_ROOT] = root
    name = _module_name(directory)
    for stale in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[stale]
    spec = importlib.util.spec_from_file_location(
        name, directory / "__init__.py", submodule_search_locations=[str(directory)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {directory}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with hermes_agent_shim():
            spec.loader.exec_module(module)
    except BaseException:
        for stale in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[stale]
        raise
    return module


def _has_hookimpls(module: ModuleType) -> bool:
    return any(callable(v) and hasattr(v, "hermes_impl") for v in vars(module).values())


def _provider_class(module: ModuleType) -> type[MemoryProvider] | None:
    """The first concrete MemoryProvider subclass the package defines (else imports)."""
    found = [obj for obj in vars(module).values()
             if isinstance(obj, type) and issubclass(obj, MemoryProvider)
             and obj is not MemoryProvider and not inspect.isabstract(obj)]
    own = [cls for cls in found if cls.__module__.startswith(module.__name__)]
    candidates = own or found
    return candidates[0] if candidates else None


def _collect(module: ModuleType, name: str) -> MemoryProvider:
    """Run the package's ``register(ctx)`` and return the provider it registered."""
    ctx = _Collector(name)
    with hermes_agent_shim():
        module.register(ctx)
    if not ctx.providers:
        raise PluginError("register(ctx) did not call ctx.register_memory_provider(provider)")
    provider = ctx.providers[0]
    if not isinstance(provider, MemoryProvider):
        raise PluginError(f"ctx.register_memory_provider() got a {type(provider).__name__}, "
                          "not a MemoryProvider")
    return provider


def _provider_factory(module: ModuleType, name: str) -> Callable[[], MemoryProvider]:
    """A zero-argument factory for the package's provider, checked once now (as Hermes
    checks it when it loads the plugin). Every later call builds a fresh provider."""
    if callable(getattr(module, "register", None)):
        first = [_collect(module, name)]

        def from_register() -> MemoryProvider:
            return first.pop() if first else _collect(module, name)

        return from_register
    cls = _provider_class(module)
    if cls is None:
        raise PluginError(
            "defines no MemoryProvider subclass, no register(ctx) function and no "
            "@hermes.hookimpl; a plugin directory needs one of them")

    def from_class() -> MemoryProvider:
        with hermes_agent_shim():
            return cls()

    return from_class


def _description(manifest: dict[str, Any], module: ModuleType) -> str:
    text = manifest.get("description") or (module.__doc__ or "").strip().split("\n")[0]
    return str(text or "")


def load_hermes_style_plugins(pm: Any, directory: Path) -> None:
    """Load every ``<name>/`` package in ``directory`` into the plugin manager ``pm``
    (source ``local``). Names starting with ``_`` or ``.`` and directories without an
    ``__init__.py`` are skipped; blocking is checked before any import."""
    from .manager import SOURCE_LOCAL

    if not directory.is_dir():
        return
    for path in sorted(p for p in directory.iterdir() if p.is_dir()):
        if path.name.startswith(("_", ".")) or not (path / "__init__.py").is_file():
            continue
        meta: dict[str, Any] = {"path": str(path), "module": str(path)}
        pm.load_guarded(path.name, SOURCE_LOCAL, partial(_load_package, path, meta), meta)


def _load_package(path: Path, meta: dict[str, Any]) -> Any:
    """Import the package at ``path``: the module itself when it has ``@hermes.hookimpl``
    functions, else a :class:`HermesStyleProvider` for its memory provider. The
    manifest's version and the module name go into ``meta`` for the plugin's record."""
    manifest = read_manifest(path)
    if manifest.get("version") is not None:
        meta["version"] = str(manifest["version"])
    module = _import_package(path)
    meta["module"] = module.__name__
    if _has_hookimpls(module):
        return module
    return HermesStyleProvider(path.name, _provider_factory(module, path.name),
                               _description(manifest, module))
