"""The plugin manager: default plugins, guarded entry-point and local loading, blocking,
recorded failures and tracing.

Every :class:`~hermes.Kernel` builds its own manager; nothing here is global. Default
plugins go through the same ``register`` path as third-party ones, so they can be blocked
the same way. A plugin that fails to import, names a hook that does not exist, or raises
while registering is unregistered, recorded as a :class:`PluginFailure`, reported in one
line on stderr, and the kernel goes on — unless strict mode asks for the exception.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from .errors import PluginError

log = logging.getLogger("hermes.plugins")

ENTRY_POINT_GROUP = "hermes.plugins"

SOURCE_DEFAULT = "default"
SOURCE_ENTRYPOINT = "entrypoint"
SOURCE_LOCAL = "local"
SOURCE_REGISTERED = "registered"  # added by code (tests, embedding applications)


@dataclass
class PluginFailure:
    """Why a plugin is not active: the exception and its formatted traceback."""

    name: str
    dist: str | None
    version: str | None
    error: str
    traceback: str = ""
    stage: str = "load"  # "load", "register", "hook"

    def line(self) -> str:
        """The one-line report printed on stderr."""
        who = f"{self.name} ({self.dist} {self.version})" if self.dist else self.name
        return (
            f"hermes: plugin {who} failed to {self.stage}: {self.error}. "
            f"Run `hermes plugins info {self.name}` for details, or "
            f"`hermes plugins disable {self.name}` to skip it."
        )


@dataclass
class PluginRecord:
    """One plugin the kernel knows of, whatever its state."""

    name: str
    source: str
    status: str = "active"  # "active", "blocked", "failed"
    dist: str | None = None
    version: str | None = None
    module: str | None = None
    path: str | None = None
    hooks: list[str] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)
    failure: PluginFailure | None = None
    blocked_by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The stable shape of ``hermes plugins list --json``."""
        return {
            "name": self.name,
            "distribution": self.dist,
            "version": self.version,
            "source": self.source,
            "status": self.status,
            "module": self.module,
            "hooks": list(self.hooks),
            "registered": {k: list(v) for k, v in self.registered.items()},
            "blocked_by": self.blocked_by,
            "error": self.failure.error if self.failure else None,
        }


@dataclass
class LoadSwitches:
    """Which plugins may load. Built from the environment, CLI flags and config."""

    only: set[str] | None = None  # HERMES_LOAD_PLUGINS: only these entry points / locals
    disabled: set[str] = field(default_factory=set)  # HERMES_DISABLE_PLUGINS + plugins.disabled
    disabled_by_config: set[str] = field(default_factory=set)
    safe_mode: bool = False  # HERMES_NO_PLUGINS
    strict: bool = False  # HERMES_STRICT_PLUGINS
    trace: bool = False  # HERMES_TRACE_PLUGINS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> LoadSwitches:
        env = os.environ if env is None else env
        only = None
        if "HERMES_LOAD_PLUGINS" in env:
            only = _split(env["HERMES_LOAD_PLUGINS"])
        return cls(
            only=only,
            disabled=_split(env.get("HERMES_DISABLE_PLUGINS", "")),
            safe_mode=_truthy(env.get("HERMES_NO_PLUGINS")),
            strict=_truthy(env.get("HERMES_STRICT_PLUGINS")),
            trace=_truthy(env.get("HERMES_TRACE_PLUGINS")),
        )

    def block_reason(self, name: str, source: str) -> str | None:
        """Why ``name`` must not load, or ``None``. Checked before any import."""
        if name in self.disabled:
            return "disabled by config" if name in self.disabled_by_config else "disabled by HERMES_DISABLE_PLUGINS"
        if source in (SOURCE_ENTRYPOINT, SOURCE_LOCAL):
            if self.safe_mode:
                return "safe mode (HERMES_NO_PLUGINS)"
            if self.only is not None and name not in self.only:
                return "not in HERMES_LOAD_PLUGINS"
        return None


def _split(value: str) -> set[str]:
    return {part.strip() for part in value.split(",") if part.strip()}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


class HermesPluginManager(pluggy.PluginManager):
    """A pluggy manager with Hermes' loading rules. One per kernel."""

    def __init__(self, switches: LoadSwitches | None = None):
        super().__init__("hermes")
        self.add_hookspecs(hookspecs)
        self.switches = switches or LoadSwitches()
        self.records: dict[str, PluginRecord] = {}
        #: The last error each (plugin, event hook) raised; shown by `hermes doctor`.
        self.hook_errors: dict[tuple[str, str], str] = {}
        self._undo_trace = None
        if self.switches.trace:
            self.enable_tracing()

    # -- records --------------------------------------------------------------------

    @property
    def failures(self) -> list[PluginFailure]:
        return [r.failure for r in self.records.values() if r.failure is not None]

    def record_failure(self, record: PluginRecord, exc: BaseException, stage: str) -> None:
        record.status = "failed"
        record.failure = PluginFailure(
            name=record.name,
            dist=record.dist,
            version=record.version,
            error=f"{type(exc).__name__}: {exc}",
            traceback="".join(traceback.format_exception(exc)),
            stage=stage,
        )
        plugin = self.get_plugin(record.name)
        if plugin is not None:
            try:
                self.unregister(plugin=plugin, name=record.name)
            except Exception:  # pragma: no cover - pluggy keeps no partial state we can't drop
                pass
        print(record.failure.line(), file=sys.stderr)
        log.debug("plugin %s failed", record.name, exc_info=exc)
        if self.switches.strict:
            raise PluginError(record.failure.line()) from exc

    # -- registration ---------------------------------------------------------------

    def add_plugin(
        self,
        plugin: Any,
        name: str,
        *,
        source: str,
        dist: str | None = None,
        version: str | None = None,
        path: str | None = None,
    ) -> PluginRecord:
        """Register an object or module as a plugin; failures are recorded, not raised."""
        record = PluginRecord(name=name, source=source, dist=dist, version=version, path=path)
        record.module = getattr(plugin, "__name__", type(plugin).__name__)
        self.records[name] = record
        reason = self.switches.block_reason(name, source)
        if reason:
            record.status, record.blocked_by = "blocked", reason
            return record
        try:
            self.register(plugin, name=name)
            unknown = self._unknown_hooks(name)
            if unknown:
                raise PluginError(
                    f"implements unknown hook(s) {', '.join(unknown)}; "
                    f"valid hooks are: {', '.join(sorted(self._spec_names()))}"
                )
        except Exception as exc:
            self.record_failure(record, exc, "load")
            return record
        record.hooks = sorted(c.name for c in self.get_hookcallers(self.get_plugin(name)) or [])
        return record

    def _spec_names(self) -> set[str]:
        return {n for n, c in vars(self.hook).items() if isinstance(c, pluggy.HookCaller) and c.spec}

    def _unknown_hooks(self, name: str) -> list[str]:
        plugin = self.get_plugin(name)
        return sorted(
            caller.name
            for caller in self.get_hookcallers(plugin) or []
            if caller.spec is None
        )

    def load_defaults(self, modules: Iterable[tuple[str, str]]) -> None:
        """Register the default plugins, given as ``(name, module path)`` pairs."""
        for name, module_path in modules:
            if self.switches.block_reason(name, SOURCE_DEFAULT):
                self.add_plugin(None, name, source=SOURCE_DEFAULT)
                self.records[name].module = module_path
                continue
            try:
                module = importlib.import_module(module_path)
            except Exception as exc:
                record = PluginRecord(name=name, source=SOURCE_DEFAULT, module=module_path)
                self.records[name] = record
                self.record_failure(record, exc, "load")
                continue
            self.add_plugin(module, name, source=SOURCE_DEFAULT)

    def load_entrypoints(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Load every entry point of ``group``, guarded, blocking before import."""
        from importlib_metadata import entry_points  # local: keeps `hermes --version` light

        seen: set[tuple[str | None, str]] = set()
        for ep in entry_points(group=group):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            key = (dist_name, ep.name)
            if key in seen:
                continue
            seen.add(key)
            if ep.name in self.records and self.records[ep.name].status != "blocked":
                continue  # the same plugin reached twice (e.g. two paths to one site-packages)
            reason = self.switches.block_reason(ep.name, SOURCE_ENTRYPOINT)
            if reason:
                record = PluginRecord(ep.name, SOURCE_ENTRYPOINT, "blocked", dist_name, version,
                                      module=ep.value, blocked_by=reason)
                self.records[ep.name] = record
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                record = PluginRecord(ep.name, SOURCE_ENTRYPOINT, dist=dist_name, version=version, module=ep.value)
                self.records[ep.name] = record
                self.record_failure(record, exc, "load")
                continue
            self.add_plugin(plugin, ep.name, source=SOURCE_ENTRYPOINT, dist=dist_name, version=version)
            self.records[ep.name].module = ep.value

    def load_local(self, directory: Path) -> None:
        """Load ``*.py`` files in ``directory`` (``$HERMES_HOME/plugins``) as plugins."""
        if not directory.is_dir():
            return
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = path.stem
            if self.switches.block_reason(name, SOURCE_LOCAL):
                record = PluginRecord(name, SOURCE_LOCAL, "blocked", path=str(path),
                                      blocked_by=self.switches.block_reason(name, SOURCE_LOCAL))
                self.records[name] = record
                continue
            try:
                module = _import_file(path, f"hermes_local_plugins.{name}")
            except Exception as exc:
                record = PluginRecord(name, SOURCE_LOCAL, path=str(path), module=str(path))
                self.records[name] = record
                self.record_failure(record, exc, "load")
                continue
            self.add_plugin(module, name, source=SOURCE_LOCAL, path=str(path))

    # -- calling --------------------------------------------------------------------

    def emit(self, hook_name: str, **kwargs: Any) -> None:
        """Fan an event out to every implementation, isolating each one."""
        caller = getattr(self.hook, hook_name)
        for impl in reversed(caller.get_hookimpls()):
            try:
                if self.switches.trace:
                    print(f"hermes trace: {hook_name} -> {impl.plugin_name}", file=sys.stderr)
                impl.function(**{k: kwargs.get(k) for k in impl.argnames})
            except Exception as exc:
                # One warning per (plugin, hook): a broken observer must not flood the log.
                key = (impl.plugin_name, hook_name)
                if key not in self.hook_errors:
                    log.warning("plugin %s raised in %s: %s", impl.plugin_name, hook_name, exc, exc_info=exc)
                self.hook_errors[key] = f"{type(exc).__name__}: {exc}"

    def enable_tracing(self) -> None:
        def before(hook_name: str, impls: list, kwargs: dict) -> None:
            names = ", ".join(i.plugin_name for i in impls)
            print(f"hermes trace: {hook_name}({', '.join(kwargs)}) -> [{names}]", file=sys.stderr)

        def after(outcome: Any, hook_name: str, impls: list, kwargs: dict) -> None:
            print(f"hermes trace: {hook_name} done", file=sys.stderr)

        self._undo_trace = self.add_hookcall_monitoring(before, after)


def _import_file(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
