"""The plugin manager: default plugins, guarded entry-point and local loading, blocking,
recorded failures and tracing.

Every :class:`~hermes.Kernel` builds its own manager; nothing here is global. Default
plugins go through the same ``add_plugin`` path as third-party ones, so they can be
blocked the same way. A plugin that fails to import, names a hook that does not exist, or
raises while registering is unregistered, recorded as a :class:`PluginFailure`, reported
in one line on stderr, and the kernel goes on — unless strict mode asks for the exception.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
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

#: A hook-call monitor: ``monitor(hook_name, plugin_names, kwargs)``.
Monitor = Callable[[str, list[str], dict[str, Any]], None]


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space:
    failure reports must stay on one line, whatever the exception said."""
    return " ".join(str(text).split())


@dataclass
class PluginFailure:
    """Why a plugin is not active: the exception, its formatted traceback and the stage
    (``load``, ``register``, ``register (name conflict)``, ``register commands``)."""

    name: str
    dist: str | None
    version: str | None
    error: str
    traceback: str = ""
    stage: str = "load"

    def line(self) -> str:
        """The one-line report: the culprit, what went wrong and what to do."""
        who = f"{self.name} ({self.dist} {self.version})" if self.dist else self.name
        error = self.error if self.error.endswith((".", "!", "?")) else f"{self.error}."
        return (
            f"plugin {who} failed to {self.stage}: {error} "
            f"Run `hermes plugins info {self.name}` for details, or "
            f"`hermes plugins disable {self.name}` to skip it."
        )


@dataclass
class PluginRecord:
    """One plugin the kernel knows of, whatever its state (``active``, ``blocked`` or
    ``failed``), with where it came from and what it registered."""

    name: str
    source: str
    status: str = "active"
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
            "path": self.path,
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
    def from_env(cls, env: Mapping[str, str] | None = None) -> LoadSwitches:
        """Read the ``HERMES_*_PLUGINS`` switches. ``HERMES_LOAD_PLUGINS`` set but empty
        means "no third-party plugin"; unset means "all of them"."""
        env = os.environ if env is None else env
        only = _split(env["HERMES_LOAD_PLUGINS"]) if "HERMES_LOAD_PLUGINS" in env else None
        return cls(
            only=only,
            disabled=_split(env.get("HERMES_DISABLE_PLUGINS", "")),
            safe_mode=truthy(env.get("HERMES_NO_PLUGINS")),
            strict=truthy(env.get("HERMES_STRICT_PLUGINS")),
            trace=truthy(env.get("HERMES_TRACE_PLUGINS")),
        )

    def block_reason(self, name: str, source: str) -> str | None:
        """Why ``name`` must not load, or ``None``. Checked before any import, so a
        blocked plugin's code never runs."""
        if name in self.disabled:
            if name in self.disabled_by_config:
                return "disabled in config (plugins.disabled)"
            return "disabled by HERMES_DISABLE_PLUGINS / --disable"
        if source in (SOURCE_ENTRYPOINT, SOURCE_LOCAL):
            if self.safe_mode:
                return "safe mode (HERMES_NO_PLUGINS / --no-plugins)"
            if self.only is not None and name not in self.only:
                return "not in HERMES_LOAD_PLUGINS / --load"
        return None


def _split(value: str) -> set[str]:
    return {part.strip() for part in value.split(",") if part.strip()}


def truthy(value: str | None) -> bool:
    """Whether an environment switch is on (``1``, ``true``, ``yes``, ``on``)."""
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


#: Load order rank of each source: default plugins first, then plugins registered by
#: code, entry-point and local plugins (see :meth:`HermesPluginManager.ordered_impls`).
SOURCE_RANK = {SOURCE_DEFAULT: 0, SOURCE_REGISTERED: 1, SOURCE_ENTRYPOINT: 2, SOURCE_LOCAL: 3}


class _StdoutRouter(io.TextIOBase):
    """Stands in for ``sys.stdout`` while plugin code runs: writes from a thread that is
    running plugin code go to that thread's buffer, every other write (the host's own
    output, other threads) to the real stream. Installed and removed by
    :func:`_capture_stdout`; it lives only on ``sys.stdout``, never in a module global."""

    def __init__(self, stream: Any):
        super().__init__()
        self.stream = stream
        self.buffers: dict[int, list[io.StringIO]] = {}

    def write(self, text: str) -> int:
        stack = self.buffers.get(threading.get_ident())
        return (stack[-1] if stack else self.stream).write(text)

    def flush(self) -> None:
        self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(self.stream.isatty())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        # Never an ASCII codec: click would then re-wrap ``buffer`` (the real stream's) and
        # a plugin's click.echo would bypass the capture.
        import codecs

        encoding = str(getattr(self.stream, "encoding", None) or "utf-8")
        try:
            return "utf-8" if codecs.lookup(encoding).name == "ascii" else encoding
        except LookupError:
            return "utf-8"

    def fileno(self) -> int:
        return int(self.stream.fileno())

    def __getattr__(self, name: str) -> Any:  # buffer, reconfigure, …: the real stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def _capture_stdout() -> Iterator[io.StringIO]:
    """Collect what the current thread prints to ``sys.stdout`` (``print``,
    ``click.echo``) into the yielded buffer; other threads print as usual."""
    if sys.stdout is None:  # pythonw, a closed stream: nothing to keep clean
        yield io.StringIO()
        return
    router = sys.stdout if isinstance(sys.stdout, _StdoutRouter) else _StdoutRouter(sys.stdout)
    sys.stdout = router
    buffer = io.StringIO()
    stack = router.buffers.setdefault(threading.get_ident(), [])
    stack.append(buffer)
    try:
        yield buffer
    finally:
        stack.remove(buffer)
        if not stack:
            router.buffers.pop(threading.get_ident(), None)
        if not router.buffers and sys.stdout is router:
            sys.stdout = router.stream


class PluginExit(PluginError):
    """A plugin called ``sys.exit()`` (raised ``SystemExit``) in its own code; the host
    treats it as the plugin's failure, never as the end of the process."""


class HermesPluginManager(pluggy.PluginManager):
    """A pluggy manager with Hermes' loading rules. One per kernel.

    ``records`` holds every plugin seen (keyed by plugin name), ``failures`` the ones that
    did not make it, ``hook_errors`` the last error of each ``(plugin, event hook)``.
    """

    def __init__(self, switches: LoadSwitches | None = None):
        super().__init__("hermes")
        self.add_hookspecs(hookspecs)
        self.switches = switches or LoadSwitches()
        self.records: dict[str, PluginRecord] = {}
        #: The last error each (plugin, event hook) raised; shown by `hermes doctor`.
        self.hook_errors: dict[tuple[str, str], str] = {}
        self._monitors: list[Monitor] = []
        if self.switches.trace:
            self.enable_tracing()

    # -- records --------------------------------------------------------------------

    @property
    def failures(self) -> list[PluginFailure]:
        """Every recorded failure, in load order."""
        return [r.failure for r in self.records.values() if r.failure is not None]

    def record_failure(self, record: PluginRecord, exc: BaseException, stage: str) -> None:
        """Mark ``record`` failed, unregister whatever part of the plugin was registered,
        print the one-line report; in strict mode raise :class:`PluginError`."""
        import traceback  # only on failure: keeps the happy path's imports small

        record.status = "failed"
        record.hooks = []
        record.failure = PluginFailure(
            name=record.name,
            dist=record.dist,
            version=record.version,
            error=one_line(f"{type(exc).__name__}: {exc}"),
            traceback="".join(traceback.format_exception(exc)),
            stage=stage,
        )
        plugin = self.get_plugin(record.name)
        if plugin is not None:
            self.unregister(plugin=plugin, name=record.name)
        print(f"hermes: {record.failure.line()}", file=sys.stderr)
        log.debug("plugin %s failed", record.name, exc_info=exc)
        if self.switches.strict:
            raise PluginError(record.failure.line()) from exc

    def _new_record(self, name: str, source: str, **kwargs: Any) -> PluginRecord:
        """A record for ``name``; a name already taken gets a failure record under
        ``name@dist`` (or ``name@source``) instead, so the first plugin keeps working."""
        if name not in self.records:
            record = PluginRecord(name, source, **kwargs)
            self.records[name] = record
            return record
        first = self.records[name]
        key = f"{name}@{kwargs.get('dist') or source}"
        n = 2
        while key in self.records:
            key, n = f"{name}@{kwargs.get('dist') or source}-{n}", n + 1
        record = PluginRecord(key, source, **kwargs)
        self.records[key] = record
        where = f"{first.source}" + (f" distribution {first.dist}" if first.dist else "")
        self.record_failure(record, PluginError(
            f"the plugin name {name!r} is already taken by a {where} plugin. "
            f"Uninstall or rename one of them."), "load")
        return record

    @contextlib.contextmanager
    def guard(self, name: str, stage: str) -> Iterator[None]:
        """Run plugin ``name``'s code (an import, a hook): what it prints to stdout is
        kept off the host's stdout (which may be ``--json`` output) and reported on stderr
        in one line; ``sys.exit()`` becomes :class:`PluginExit`, a failure of the plugin,
        never the end of the process."""
        with _capture_stdout() as buffer:
            try:
                yield
            except SystemExit as exc:
                raise PluginExit(f"called sys.exit({exc.code!r}) while {stage}; a plugin must "
                                 f"raise an exception instead") from None
            finally:
                printed = buffer.getvalue()
                if printed.strip():
                    print(f"hermes: plugin {name} printed to stdout while {stage} (kept off "
                          f"Hermes' output): {_short_text(one_line(printed))}", file=sys.stderr)

    def load_rank(self, plugin_name: str) -> tuple[int, int]:
        """Where ``plugin_name`` stands in call order: ``(source rank, load position)``.
        Unknown names sort last."""
        record = self.records.get(plugin_name)
        source = SOURCE_RANK.get(record.source, len(SOURCE_RANK)) if record else len(SOURCE_RANK)
        return source, self.load_position(plugin_name)

    def load_position(self, plugin_name: str) -> int:
        """When ``plugin_name`` was loaded, as a position (defaults first; a plugin
        registered after boot comes after everything loaded at boot). Decides who is the
        newcomer in a name conflict. Unknown names sort last."""
        for position, name in enumerate(self.records):
            if name == plugin_name:
                return position
        return len(self.records)

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
        module: str | None = None,
    ) -> PluginRecord:
        """Register an object or module as a plugin; failures are recorded, not raised
        (except in strict mode). Blocking is checked first."""
        module = module or getattr(plugin, "__name__", None) or type(plugin).__name__
        record = self._new_record(name, source, dist=dist, version=version, path=path, module=module)
        if record.status == "failed":
            return record
        reason = self.switches.block_reason(name, source)
        if reason:
            record.status, record.blocked_by = "blocked", reason
            return record
        try:
            self.register(plugin, name=name)
            self._check_impls(name)
        except Exception as exc:
            self.record_failure(record, exc, "load")
            return record
        record.hooks = sorted(c.name for c in self.get_hookcallers(plugin) or [])
        return record

    def spec_names(self) -> list[str]:
        """Every hook name a plugin may implement."""
        return sorted(
            name for name, caller in vars(self.hook).items()
            if isinstance(caller, pluggy.HookCaller) and caller.spec is not None
        )

    def _check_impls(self, name: str) -> None:
        """``check_pending`` for one plugin: an implementation of a hook that does not
        exist (a misspelling, or a hook of a newer Hermes not marked ``optionalhook``) is
        a load failure; so is a hook wrapper, which Hermes' hook calls never run."""
        unknown, wrappers = [], []
        for caller in self.get_hookcallers(self.get_plugin(name)) or []:
            for impl in caller.get_hookimpls():
                if impl.plugin_name != name:
                    continue
                if caller.spec is None and not impl.optionalhook:
                    unknown.append(caller.name)
                if impl.hookwrapper or impl.wrapper:
                    wrappers.append(caller.name)
        if unknown:
            import difflib

            hints = []
            for bad in sorted(unknown):
                close = difflib.get_close_matches(bad, self.spec_names(), n=1)
                hints.append(f"{bad} (did you mean {close[0]}?)" if close else bad)
            raise PluginError(
                f"implements unknown hook(s): {', '.join(hints)}. "
                f"Fix the name, or mark it @hookimpl(optionalhook=True)."
            )
        if wrappers:
            raise PluginError(
                f"hook wrappers are not supported ({', '.join(sorted(wrappers))}); "
                f"write a plain @hermes.hookimpl."
            )

    def load_guarded(self, name: str, source: str, load: Callable[[], Any],
                     meta: dict[str, Any]) -> PluginRecord:
        """The one loader behind every source (defaults, entry points, local files and
        Hermes-style directories): a blocked plugin, or one whose name is taken, is
        recorded without running ``load``; otherwise ``load()`` (the import) runs guarded
        and what it returns is registered. ``load`` may add facts it learns (a version
        from a manifest) to ``meta``; a failure is recorded with them."""
        if name in self.records or self.switches.block_reason(name, source):
            return self.add_plugin(None, name, source=source, **meta)
        try:
            with self.guard(name, "loading"):
                plugin = load()
        except Exception as exc:
            record = self._new_record(name, source, **meta)
            self.record_failure(record, exc, "load")
            return record
        return self.add_plugin(plugin, name, source=source, **meta)

    def load_defaults(self, modules: Iterable[tuple[str, str]]) -> None:
        """Register the default plugins, given as ``(name, module path)`` pairs. A
        blocked default is not even imported."""
        for name, module_path in modules:
            self.load_guarded(name, SOURCE_DEFAULT, partial(importlib.import_module, module_path),
                              {"module": module_path})

    def load_entrypoints(self, group: str = ENTRY_POINT_GROUP, *, cache: Path | None = None) -> None:
        """Load every entry point of ``group``, guarded, blocking before import. The entry
        point's name is the plugin's name; ``cache`` is :func:`find_entry_points`' cache."""
        for ep in find_entry_points(group, cache=cache):
            self.load_guarded(ep.name, SOURCE_ENTRYPOINT, ep.load,
                              {"dist": ep.dist, "version": ep.version, "module": ep.value})

    def load_local(self, directory: Path) -> None:
        """Load ``*.py`` files in ``directory`` (``$HERMES_HOME/plugins``) as plugins
        named after the file, and Hermes-style ``<name>/`` packages
        (:mod:`hermes.hermes_compat`), with source ``local``. Names starting with ``_``
        are skipped."""
        if not directory.is_dir():
            return
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            self.load_guarded(path.stem, SOURCE_LOCAL,
                              partial(_import_file, path, f"hermes_local_plugins.{path.stem}"),
                              {"path": str(path), "module": str(path)})
        from .hermes_compat import load_hermes_style_plugins  # Hermes-style <name>/ dirs
        load_hermes_style_plugins(self, directory)

    # -- calling --------------------------------------------------------------------

    def ordered_impls(self, hook_name: str) -> list[Any]:
        """The implementations of ``hook_name`` in the one call order of every hook the
        kernel calls (registration, command and event hooks): default plugins first, then
        plugins registered by code, entry-point and local plugins; within each source
        ``tryfirst`` ones first, ``trylast`` ones last, else in load order. So a default
        always registers its names before any third-party plugin, and a newcomer that
        claims one of them is the one in conflict, whatever ``tryfirst`` says."""
        caller = getattr(self.hook, hook_name)

        def key(impl: Any) -> tuple[int, int, int]:
            source, position = self.load_rank(impl.plugin_name)
            return source, 0 if impl.tryfirst else 2 if impl.trylast else 1, position

        return sorted(caller.get_hookimpls(), key=key)

    def add_monitor(self, monitor: Monitor) -> Callable[[], None]:
        """Call ``monitor(hook_name, plugin_names, kwargs)`` before every hook call the
        kernel makes (registration and event hooks). Returns a function that removes it."""
        self._monitors.append(monitor)
        return lambda: self._monitors.remove(monitor) if monitor in self._monitors else None

    def notify(self, hook_name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
        """Tell the monitors (tracing, :class:`hermes.testing.HookRecorder`) about a call."""
        for monitor in list(self._monitors):
            monitor(hook_name, [impl.plugin_name for impl in impls], kwargs)

    def emit(self, hook_name: str, **kwargs: Any) -> list[Any]:
        """Fan an event out to every implementation, in :meth:`ordered_impls` order,
        isolating each one: a failure (``sys.exit()`` included) is reported in one line
        the first time per (plugin, hook), with the traceback only under tracing
        (``--trace``), and kept in :attr:`hook_errors`; the other implementations run.
        Returns the implementations' results that are not ``None``, in call order (only
        ``hermes_tool_result`` uses them)."""
        impls = self.ordered_impls(hook_name)
        self.notify(hook_name, impls, kwargs)
        results = []
        for impl in impls:
            try:
                with self.guard(impl.plugin_name, f"handling {hook_name}"):
                    result = impl.function(**{k: kwargs.get(k) for k in impl.argnames})
            except Exception as exc:
                self._hook_failed(impl.plugin_name, hook_name, exc)
                continue
            if result is not None:
                results.append(result)
        return results

    def _hook_failed(self, plugin_name: str, hook_name: str, exc: BaseException) -> None:
        key = (plugin_name, hook_name)
        error = one_line(f"{type(exc).__name__}: {exc}")
        if key not in self.hook_errors:
            log.warning("plugin %s raised in %s: %s (reported once; run with --trace for "
                        "the traceback)", plugin_name, hook_name, error)
            log.debug("traceback of plugin %s in %s", plugin_name, hook_name, exc_info=exc)
        self.hook_errors[key] = error
        if self.switches.trace:
            import traceback

            print(f"hermes trace: {hook_name} in {plugin_name} raised {error}\n"
                  + "".join(traceback.format_exception(exc)).rstrip(), file=sys.stderr)

    def enable_tracing(self) -> Callable[[], None]:
        """Print every hook call to stderr: the hook, its arguments and the plugins that
        implement it (``HERMES_TRACE_PLUGINS=1`` / ``--trace``). Returns the function that
        turns it off again, as :meth:`pluggy.PluginManager.enable_tracing` does."""

        def trace(hook_name: str, plugins: list[str], kwargs: dict[str, Any]) -> None:
            args = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items())
            print(f"hermes trace: {hook_name}({args}) -> [{', '.join(plugins)}]", file=sys.stderr)

        remove_monitor = self.add_monitor(trace)

        # Direct `pm.hook.<name>(...)` calls (by embedding code) are traced by pluggy.
        def before(hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
            trace(hook_name, [i.plugin_name for i in impls], dict(kwargs))

        undo_pluggy = self.add_hookcall_monitoring(before, lambda *_: None)

        def undo() -> None:
            remove_monitor()
            undo_pluggy()

        return undo


@dataclass(frozen=True)
class EntryPoint:
    """One entry point of an installed distribution: ``name = value`` in its
    ``entry_points.txt``, with the distribution's name and version."""

    name: str
    value: str
    dist: str | None = None
    version: str | None = None

    def load(self) -> Any:
        """Import ``module`` and return ``module`` or ``module:attr.path``."""
        match = _EP_VALUE.match(self.value)
        if not match:
            raise ValueError(f"malformed entry point {self.name} = {self.value!r}")
        obj: Any = importlib.import_module(match["module"])
        for part in (match["attr"] or "").split(".") if match["attr"] else []:
            obj = getattr(obj, part)
        return obj


_EP_VALUE = re.compile(r"^\s*(?P<module>[\w.]+)\s*(?::\s*(?P<attr>[\w.]+)\s*)?(?:\[.*\])?\s*$")

#: Bump when the cache file's layout changes.
_CACHE_VERSION = 1

#: ``sys.meta_path`` finders whose distributions live in files on ``sys.path`` (so the
#: mtimes in the cache key see every change); any other finder that can find
#: distributions makes discovery skip the cache.
_PATH_FINDERS = {("_frozen_importlib_external", "PathFinder"),
                 ("importlib_metadata", "MetadataPathFinder"),
                 ("importlib.metadata", "MetadataPathFinder")}

_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg")

#: Changes younger than this are not cached (see :func:`_discovery_key`).
_RACY_NS = 2_000_000_000


def find_entry_points(group: str, *, cache: Path | None = None) -> list[EntryPoint]:
    """The entry points of ``group``: exactly what ``importlib_metadata.entry_points(
    group=group)`` returns (``*.dist-info`` and ``*.egg-info`` in any case, ``.egg``
    directories, zip files and zipapps on ``sys.path``, distributions offered by
    ``sys.meta_path`` finders; the first distribution of a normalized name wins).

    Importing and running ``importlib_metadata`` costs about as much as loading all the
    default plugins, so with ``cache`` (a JSON file) the answer is kept under a key made
    of every ``sys.path`` entry's and every distribution folder's mtime (and its
    ``entry_points.txt``'s): installing, removing or editing a distribution changes the
    key. When a ``sys.meta_path`` finder that is not path-based can find distributions,
    the key cannot see its changes and the cache is not used.
    """
    key = _discovery_key(group) if cache is not None else None
    if key is not None and cache is not None:
        cached = _read_cache(cache, key)
        if cached is not None:
            return cached
    found = _query_importlib_metadata(group)
    if key is not None and cache is not None:
        _write_cache(cache, key, found)
    return found


def _query_importlib_metadata(group: str) -> list[EntryPoint]:
    import importlib_metadata  # the slow part: only on a cache miss

    found = []
    for ep in importlib_metadata.entry_points(group=group):
        dist = ep.dist
        found.append(EntryPoint(ep.name, ep.value, dist.name if dist else None,
                                dist.version if dist else None))
    return found


def _discovery_key(group: str) -> str | None:
    """A string that changes whenever what :func:`find_entry_points` would find may
    change; ``None`` when no such key can be made (a custom distribution finder)."""
    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is None:
            continue
        cls = finder if isinstance(finder, type) else type(finder)
        if (cls.__module__, cls.__qualname__) not in _PATH_FINDERS:
            return None
    parts = [str(_CACHE_VERSION), sys.version, group]
    stamps: list[int | None] = []
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:  # a zip file or zipapp (its mtime covers its content), or missing
            stamps.append(_mtime(entry or "."))
            parts.append(f"{entry}\0{stamps[-1]}")
            continue
        # A directory's own mtime is left out on purpose: the names of its distributions
        # and their mtimes are in the key, and a busy directory on the path (the working
        # directory, /tmp) would otherwise never be cacheable.
        parts.append(entry)
        for name in names:
            low = name.lower()
            if not (low.endswith(_DIST_SUFFIXES) or low == "egg-info"):  # EGG-INFO of an .egg
                continue
            base = os.path.join(entry or ".", name)
            found = (_mtime(base), _mtime(os.path.join(base, "entry_points.txt")),
                     _mtime(os.path.join(base, "EGG-INFO", "entry_points.txt")))
            stamps.extend(found)
            parts.append(f"{name}\0{found}")
    # Like git's "racy" index entries: a file changed within the timestamp granularity of
    # the last look could change again unseen, so a fresh change is never cached.
    if max((s for s in stamps if s is not None), default=0) > time.time_ns() - _RACY_NS:
        return None
    return "\n".join(parts)


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _read_cache(cache: Path, key: str) -> list[EntryPoint] | None:
    import json

    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        return [EntryPoint(*row) for row in data["entry_points"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing, stale or damaged: ask importlib_metadata again


def _write_cache(cache: Path, key: str, found: list[EntryPoint]) -> None:
    import json

    from .config import atomic_write_text

    rows = [[ep.name, ep.value, ep.dist, ep.version] for ep in found]
    try:
        atomic_write_text(cache, json.dumps({"key": key, "entry_points": rows}))
    except OSError as exc:  # a read-only home: discovery still works, only slower
        log.debug("cannot write the entry-point cache %s: %s", cache, exc)


def _short_text(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
