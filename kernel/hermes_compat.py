"""Hermes-style plugin directories: ``$HERMES_HOME/plugins/<name>/``.

The Hermes agent loads a memory provider from a directory holding an ``__init__.py``
and, optionally, a ``plugin.yaml`` manifest (``name``, ``description``, ``version``). The
package either

* calls ``ctx.register_memory_provider(provider)`` from a ``register(ctx)`` function, or
* defines a ``MemoryProvider`` subclass, instantiated with no arguments;

and imports the base class as ``from agent.memory_provider import MemoryProvider``. This
module loads such directories as plugins with source ``local``, each registering one
memory provider under the directory's name (what ``memory.provider`` selects), so a
provider written for Hermes runs here unchanged. In the code of such a package (at
import time and whenever it runs) ``agent.memory_provider`` resolves to
:class:`hermes.MemoryProvider`, and every other name Hermes Agent's bundled plugins import
(``tools.registry.tool_error``, ``hermes_constants.get_hermes_home``, …, listed in
:data:`hermes.hermes_shims.SHIMMED`) to this kernel's version of it. An import hook
answers those names *only to modules of a Hermes-style plugin package* (decided by the
importing module's name); ``sys.modules`` never holds them, so a real ``agent``,
``tools`` or ``utils`` package of the user's is never shadowed. ``plugins.memory.<name>``
and ``plugins.context_engine.<name>`` in that code are the plugin directories of the
same home.

Context engines written for Hermes Agent live in
``$HERMES_HOME/plugins/context_engine/<name>/`` (``register(ctx)`` calling
``ctx.register_context_engine(engine)``, or a ``ContextEngine`` subclass) and register
as the context engine ``<name>``.

A directory whose package defines ``@hermes.hookimpl`` functions is a plain Hermes-kernel
plugin that happens to be a package, and is registered as one.

Each directory's package is imported under a private name derived from its path
(``hermes_plugin_dirs.<name>_<hash>``), so relative imports between its files work and
two homes with a plugin of the same name never share code. Failures (an import error, a
package that provides nothing, a ``register`` that registers nothing) are recorded like
any plugin failure; the kernel goes on.
"""

from __future__ import annotations

import builtins
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

from .contracts import ContextEngine, MemoryProvider
from .errors import PluginError
from .hookspecs import hookimpl

log = logging.getLogger("hermes.plugins")

__all__ = ["HermesStyleEngine", "HermesStyleProvider", "hermes_agent_shim", "install_plugin_dir",
           "is_plugin_dir", "load_hermes_style_plugins", "load_plugin_dir", "manifest_reason",
           "plugin_dir_kind", "plugin_dirs", "read_manifest"]

#: The parent package of every imported plugin directory.
PACKAGE_ROOT = "hermes_plugin_dirs"

#: The manifest file of a plugin directory.
MANIFEST = "plugin.yaml"

#: The directory under ``$HERMES_HOME/plugins`` holding Hermes-style context engines.
ENGINE_DIR = "context_engine"

_SHIM_LOCK = threading.RLock()
_MISSING = object()


class _Scope:
    """What Hermes-style plugin code of one home sees: the shim modules built for that
    home, and its plugin directories as ``plugins.memory.<name>``."""

    def __init__(self, plugins_dir: Path):
        from .hermes_shims import build_shims

        self.plugins_dir = plugins_dir
        self.shims = build_shims(plugins_dir.parent)

    def _plugin_dir(self, name: str) -> tuple[Path, list[str]] | None:
        parts = name.split(".")
        if len(parts) < 3 or parts[0] != "plugins":
            return None
        if parts[1] == "memory":
            return self.plugins_dir / parts[2], parts[3:]
        if parts[1] == ENGINE_DIR:
            return self.plugins_dir / ENGINE_DIR / parts[2], parts[3:]
        return None

    def resolve(self, importer: Callable[..., Any], name: str, globals_: Any, locals_: Any,
                fromlist: Any) -> ModuleType:
        if name in self.shims:
            return self.shims[name] if fromlist else self.shims[name.split(".")[0]]
        if name.startswith("os."):  # `import os.path`: the real submodule, bound to our os
            module = importer(name, globals_, locals_, fromlist, 0)
            return module if fromlist else self.shims["os"]
        found = self._plugin_dir(name)
        if found is not None and (found[0] / "__init__.py").is_file():
            directory, rest = found
            private = _module_name(directory)
            if private not in sys.modules:
                _import_package(directory)
            module = importer(".".join([private, *rest]), globals_, locals_, fromlist or ("__name__",), 0)
            return module if fromlist else self.shims["plugins"]
        raise ModuleNotFoundError(
            f"No module named {name!r}: Hermes Agent's {name} is not provided to plugins by "
            "Hermes (docs/memory-providers.md lists the names that are)", name=name)


class _ScopedImport:
    """``builtins.__import__`` wrapped once per process: an absolute import of a shimmed
    name made by a module of a Hermes-style plugin package is answered from that
    package's :class:`_Scope`; every other import goes to the original, untouched. It is
    process-wide because imports are; it holds only the scopes of packages loaded so far."""

    def __init__(self, original: Callable[..., Any]):
        self.original = original
        self.scopes: dict[str, _Scope] = {}  # plugin package name -> its home's scope
        self.by_dir: dict[Path, _Scope] = {}

    def __call__(self, name: str, globals: Any = None, locals: Any = None,  # noqa: A002
                 fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and globals is not None:
            importer = globals.get("__name__") or ""
            if importer.startswith(PACKAGE_ROOT + ".") and name.split(".")[0] in _roots():
                scope = self.scopes.get(".".join(importer.split(".")[:2]))
                if scope is not None:
                    return scope.resolve(self.original, name, globals, locals, fromlist)
        return self.original(name, globals, locals, fromlist, level)

    def add(self, package: str, plugins_dir: Path) -> None:
        with _SHIM_LOCK:
            scope = self.by_dir.get(plugins_dir)
            if scope is None:
                scope = self.by_dir[plugins_dir] = _Scope(plugins_dir)
            self.scopes[package] = scope


def _roots() -> frozenset[str]:
    from .hermes_shims import ROOTS

    return ROOTS


def _scoped_import() -> _ScopedImport:
    """The process's import hook, installed on first use."""
    with _SHIM_LOCK:
        current = builtins.__import__
        if not isinstance(current, _ScopedImport):
            current = _ScopedImport(current)
            builtins.__import__ = current
        return current


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


#: A plugin.yaml names a plugin and its needs in a few lines; more is not read.
MANIFEST_MAX_BYTES = 1 << 20


def read_manifest(directory: Path) -> dict[str, Any]:
    """The ``plugin.yaml`` of a plugin directory (``{}`` when there is none or it is not
    a file). A manifest that cannot be read (:func:`hermes.read_bounded`: at most
    :data:`MANIFEST_MAX_BYTES`), is not UTF-8 or is not a YAML mapping raises
    :class:`hermes.PluginError`."""
    from .util import NotRegularFileError, read_bounded

    path = directory / MANIFEST
    try:
        text = read_bounded(path, MANIFEST_MAX_BYTES).decode("utf-8")
    except (FileNotFoundError, NotADirectoryError, NotRegularFileError):
        return {}
    except OSError as exc:
        raise PluginError(f"{path} cannot be read ({exc.strerror or exc}); fix it or move it "
                          "aside") from exc
    except UnicodeDecodeError as exc:
        raise PluginError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    try:
        data = yaml.safe_load(text)
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

    def register_context_engine(self, engine: Any) -> None:
        self.providers.append(engine)

    def __getattr__(self, name: str) -> Callable[..., None]:
        if not name.startswith("register_"):
            raise AttributeError(name)

        def ignored(*args: Any, **kwargs: Any) -> None:
            log.debug("plugin %s: ctx.%s() is ignored for a memory-provider plugin", self.plugin, name)

        return ignored


class _HermesStyle:
    """The pluggy plugin standing for one Hermes-style directory: ``name``, the
    zero-argument ``factory`` of what it registers, and a one-line ``description``."""

    def __init__(self, name: str, factory: Callable[[], Any], description: str = ""):
        self.name = name
        self.factory = factory
        self.description = description


class HermesStyleProvider(_HermesStyle):
    """The pluggy plugin standing for one Hermes-style provider directory: it registers
    ``factory`` as the memory provider ``name``."""

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
    plugins_dir = directory.parent.parent if directory.parent.name == ENGINE_DIR else directory.parent
    _scoped_import().add(name, plugins_dir.resolve())
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for stale in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[stale]
        raise
    return module


def _has_hookimpls(module: ModuleType) -> bool:
    return any(callable(v) and hasattr(v, "hermes_impl") for v in vars(module).values())


def _concrete_class(module: ModuleType, base: type) -> Any:
    """The first concrete subclass of ``base`` (MemoryProvider, ContextEngine) the
    package defines, else the first it imports; ``None`` when there is none. A class
    that another candidate extends is passed over: the package's ``__init__`` names the
    base it imports (from its own ``base.py`` too) before the class it builds on it."""
    found = [obj for obj in vars(module).values()
             if isinstance(obj, type) and issubclass(obj, base)
             and obj is not base and not inspect.isabstract(obj)]
    own = [cls for cls in found if cls.__module__.startswith(module.__name__)]
    candidates = own or found
    leaves = [c for c in candidates if not any(o is not c and issubclass(o, c) for o in candidates)]
    return leaves[0] if leaves else None


def _checked_factory(build: Callable[[], Any]) -> Callable[[], Any]:
    """A factory that calls ``build`` once now (checking the plugin as Hermes does when
    it loads it) and hands that object to its first caller; later calls build afresh."""
    first = [build()]
    return lambda: first.pop() if first else build()


def _collect(module: ModuleType, name: str) -> MemoryProvider:
    """Run the package's ``register(ctx)`` and return the provider it registered."""
    ctx = _Collector(name)
    module.register(ctx)
    if not ctx.providers:
        raise PluginError("register(ctx) did not call ctx.register_memory_provider(provider)")
    provider = ctx.providers[0]
    if not isinstance(provider, MemoryProvider):
        raise PluginError(f"ctx.register_memory_provider() got a {type(provider).__name__}, "
                          "not a MemoryProvider")
    return provider


class HermesStyleEngine(_HermesStyle):
    """The pluggy plugin standing for one ``plugins/context_engine/<name>/`` directory:
    it registers ``factory`` as the context engine ``name``."""

    @hookimpl
    def hermes_register_context_engines(self, register: Any) -> None:
        """Register this directory's engine."""
        register(self.name, self.factory, description=self.description)


def _engine_factory(module: ModuleType, name: str) -> Callable[[], ContextEngine]:
    """A zero-argument factory for a Hermes-style engine package (``register(ctx)``
    calling ``ctx.register_context_engine``, else its ``ContextEngine`` subclass),
    checked once now. Every later call builds a fresh engine."""

    def collect() -> ContextEngine:
        ctx = _Collector(name)
        module.register(ctx)
        engines = [e for e in ctx.providers if isinstance(e, ContextEngine)]
        if not engines:
            raise PluginError("register(ctx) did not call ctx.register_context_engine(engine) "
                              "with a ContextEngine")
        return engines[0]

    if callable(getattr(module, "register", None)):
        return _checked_factory(collect)
    cls = _concrete_class(module, ContextEngine)
    if cls is None:
        raise PluginError("defines no ContextEngine subclass and no register(ctx) function; "
                          "a context engine directory needs one of them")
    return cls


def manifest_reason(manifest: dict[str, Any], provider: Any, environ: Any = None) -> str:
    """Why a Hermes-style provider is unavailable, from what its ``plugin.yaml`` and
    config schema declare (Hermes Agent 0.19's providers give no reason themselves):
    unset required environment variables (in ``environ``, default the process's; the
    plugin's own sees its home's ``.env`` too), commands not on ``PATH``, packages not
    installed. ``""`` when none of those explains it."""
    import importlib.metadata
    import os
    import re
    import shutil

    environ = os.environ if environ is None else environ

    reasons: list[str] = []
    env = [str(v) for v in manifest.get("requires_env") or [] if v]
    try:
        schema = provider.get_config_schema() or []
    except Exception:  # a schema that cannot be read only loses the hint
        schema = []
    fields = [f for f in schema if isinstance(f, dict) and f.get("env_var")]
    env += [str(f["env_var"]) for f in fields if f.get("required")]
    missing_env = sorted({v for v in env if not environ.get(v)})
    if missing_env:
        reasons.append("set " + ", ".join(missing_env))
    for dep in manifest.get("external_dependencies") or []:
        if isinstance(dep, dict) and dep.get("name") and shutil.which(str(dep["name"])) is None:
            reasons.append(f"the `{dep['name']}` command is not installed"
                           + (f" ({dep['install']})" if dep.get("install") else ""))
    for requirement in manifest.get("pip_dependencies") or []:
        dist = re.split(r"[<>=!~\[; ]", str(requirement), maxsplit=1)[0]
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            reasons.append(f"pip install {requirement}")
    secrets = sorted({str(f["env_var"]) for f in fields if f.get("secret")
                      and not environ.get(str(f["env_var"]))})
    if not reasons and secrets:
        # nothing is declared required, but an unset key is the usual cause
        reasons.append(f"set {', '.join(secrets)} (or configure it in the provider's own config file)")
    return "; ".join(reasons)


def _with_reason(provider: MemoryProvider, manifest: dict[str, Any], environ: Any = None) -> MemoryProvider:
    """Give a provider that does not explain itself an ``unavailable_reason`` derived
    from its manifest (:func:`manifest_reason`)."""
    if type(provider).unavailable_reason is MemoryProvider.unavailable_reason:
        def unavailable_reason() -> str:
            return manifest_reason(manifest, provider, environ) or (
                "its is_available() returned false and it gives no reason; see its README")

        provider.unavailable_reason = unavailable_reason  # type: ignore[method-assign]
    return provider


def _provider_factory(module: ModuleType, name: str) -> Callable[[], MemoryProvider]:
    """A zero-argument factory for the package's provider, checked once now (as Hermes
    checks it when it loads the plugin). Every later call builds a fresh provider."""
    if callable(getattr(module, "register", None)):
        return _checked_factory(partial(_collect, module, name))
    cls = _concrete_class(module, MemoryProvider)
    if cls is None:
        raise PluginError(
            "defines no MemoryProvider subclass, no register(ctx) function and no "
            "@hermes.hookimpl; a plugin directory needs one of them")

    def from_class() -> MemoryProvider:
        return cls()

    return from_class


def _description(manifest: dict[str, Any], module: ModuleType) -> str:
    text = manifest.get("description") or (module.__doc__ or "").strip().split("\n")[0]
    return str(text or "")


def plugin_dirs(directory: Path) -> Iterator[Path]:
    """The Hermes-style package directories in ``directory``: ``<name>/`` with an
    ``__init__.py`` (names starting with ``_`` or ``.`` skipped)."""
    if directory.is_dir():
        for path in sorted(p for p in directory.iterdir() if p.is_dir()):
            if not path.name.startswith(("_", ".")) and (path / "__init__.py").is_file():
                yield path


def load_hermes_style_plugins(pm: Any, directory: Path) -> None:
    """Load every ``<name>/`` package in ``directory`` (memory providers) and in
    ``directory/context_engine`` (context engines) into the plugin manager ``pm``
    (source ``local``). Blocking is checked before any import."""
    from .manager import SOURCE_LOCAL

    for path in plugin_dirs(directory):
        meta: dict[str, Any] = {"path": str(path), "module": str(path)}
        pm.load_guarded(path.name, SOURCE_LOCAL, partial(_load_package, path, meta), meta)
    for path in plugin_dirs(directory / ENGINE_DIR):
        meta = {"path": str(path), "module": str(path)}
        pm.load_guarded(path.name, SOURCE_LOCAL, partial(_load_engine_package, path, meta), meta)


def _import_dir(path: Path, meta: dict[str, Any]) -> tuple[dict[str, Any], ModuleType]:
    """The manifest and the freshly imported package of a plugin directory; its version
    and module name go into ``meta`` for the plugin's record."""
    manifest = read_manifest(path)
    if manifest.get("version") is not None:
        meta["version"] = str(manifest["version"])
    module = _import_package(path)
    meta["module"] = module.__name__
    return manifest, module


def _load_engine_package(path: Path, meta: dict[str, Any]) -> Any:
    """Import a ``context_engine/<name>/`` package: the module itself when it has
    ``@hermes.hookimpl`` functions, else a :class:`HermesStyleEngine`."""
    manifest, module = _import_dir(path, meta)
    if _has_hookimpls(module):
        return module
    return HermesStyleEngine(path.name, _engine_factory(module, path.name), _description(manifest, module))


def _load_package(path: Path, meta: dict[str, Any]) -> Any:
    """Import the package at ``path``: the module itself when it has ``@hermes.hookimpl``
    functions, else a :class:`HermesStyleProvider` for its memory provider. The
    manifest's version and the module name go into ``meta`` for the plugin's record."""
    manifest, module = _import_dir(path, meta)
    if _has_hookimpls(module):
        return module
    factory = _provider_factory(module, path.name)
    scope = _scoped_import().by_dir.get(path.parent.resolve())
    environ = scope.shims["os"].environ if scope is not None else None  # what the plugin reads
    return HermesStyleProvider(path.name, lambda: _with_reason(factory(), manifest, environ),
                               _description(manifest, module))


def load_plugin_dir(path: Path, name: str | None = None) -> Any:
    """The plugin object for one Hermes-style directory — a memory provider
    (``<home>/plugins/<dir>``) or, under ``context_engine/``, an engine — for
    :meth:`hermes.Kernel.register_plugin`. ``name`` registers it under another name than
    the directory's (to run it beside a plugin that has that name)."""
    path = Path(path)
    meta: dict[str, Any] = {"path": str(path), "module": str(path)}
    engine = path.parent.name == ENGINE_DIR
    plugin = _load_engine_package(path, meta) if engine else _load_package(path, meta)
    if name and isinstance(plugin, (HermesStyleProvider, HermesStyleEngine)):
        plugin.name = name
    return plugin


def is_plugin_dir(path: Path) -> bool:
    """Whether ``path`` is a plugin directory in Hermes Agent's layout: a package
    (``__init__.py``) that is not a pip project (no ``pyproject.toml``/``setup.py``)."""
    return (path.is_dir() and (path / "__init__.py").is_file()
            and not any((path / f).exists() for f in ("pyproject.toml", "setup.py", "setup.cfg")))


def plugin_dir_kind(path: Path) -> str:
    """``context-engine`` or ``memory-provider`` (else ``plugin``), by what the
    package's ``__init__.py`` names — the same cheap text check Hermes Agent's loaders
    use, so nothing is imported to decide where it goes."""
    try:
        text = (path / "__init__.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "plugin"
    if "ContextEngine" in text or "register_context_engine" in text:
        return "context-engine"
    if "MemoryProvider" in text or "register_memory_provider" in text:
        return "memory-provider"
    return "plugin"


def install_plugin_dir(source: Path, plugins_dir: Path, *, upgrade: bool = False) -> tuple[str, str, Path]:
    """Copy a Hermes-layout plugin directory into ``plugins_dir`` (engines into its
    ``context_engine/``), check that it loads, and return ``(name, kind, target)``. A
    directory that does not load is removed again (a replaced one put back) and the
    failure raised as one :class:`PluginError` line."""
    import shutil
    import tempfile

    source = source.resolve()
    kind = plugin_dir_kind(source)
    parent = plugins_dir / ENGINE_DIR if kind == "context-engine" else plugins_dir
    target = parent / source.name
    if target.exists() and not upgrade:
        raise PluginError(f"{source.name} is already installed at {target}; "
                          "`hermes plugins install --upgrade PATH` replaces it")
    parent.mkdir(parents=True, exist_ok=True)
    backup = Path(tempfile.mkdtemp(prefix=f".{source.name}-", dir=parent)) / "old"
    if target.exists():
        target.rename(backup)
    try:
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        load_plugin_dir(target)
    except Exception as exc:
        shutil.rmtree(target, ignore_errors=True)
        if backup.exists():
            backup.rename(target)
        shutil.rmtree(backup.parent, ignore_errors=True)
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise PluginError(f"{source} does not load as a Hermes plugin, nothing was installed: "
                          f"{detail}") from exc
    shutil.rmtree(backup.parent, ignore_errors=True)
    return source.name, kind, target
