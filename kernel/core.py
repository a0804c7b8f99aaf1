"""The :class:`Kernel`: home, config, plugins, registries and selection."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import weakref
from collections import ChainMap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import hookspecs
from .config import Config, read_dotenv, resolve_home
from .errors import ConfigError, ConflictError, HermesError, PluginError, UnknownPluginError
from .manager import (
    SOURCE_REGISTERED,
    HermesPluginManager,
    LoadSwitches,
    PluginFailure,
    PluginRecord,
)
from .redaction import attach_log_file
from .registry import KINDS, SELECTION_KEYS, Registries, kind_of, make_register
from .settings import check_settings, settings_schema, with_defaults

log = logging.getLogger("hermes")

#: The package whose ``DEFAULT_PLUGINS`` the kernel registers. Named, never imported at
#: module level: the kernel does not depend on its plugins.
DEFAULT_PLUGIN_PACKAGE = "hermes.plugins"

#: Kinds whose configured name, when nothing registered it, falls back to a built-in with
#: a one-line warning instead of refusing to start (Hermes Agent's rule for
#: ``context.engine``); strict mode keeps the error.
#: The built-in used when config selects a component nothing registers (its plugin was
#: uninstalled or disabled, or --no-plugins): one warning line instead of a refusal to
#: start; ``--strict`` keeps the error. ``model.provider`` has none: another provider's
#: client would be sent a model name it does not serve.
SELECTION_FALLBACKS = {"context-engine": "compressor", "memory-provider": "builtin",
                       "session-store": "sqlite"}

class Kernel:
    """One Hermes instance: its home, config, plugin manager and registries.

    ``Kernel(config=None, home=None, *, autoload=True)`` resolves ``HERMES_HOME``, loads
    ``config.yaml`` (``config`` overrides it), registers the default plugins, loads entry
    points and local plugins (when ``autoload``), fills the registries and checks the
    configured selections. Build as many as you like; nothing is global.

    Keyword switches mirror the environment variables: ``load_plugins`` (like
    ``HERMES_LOAD_PLUGINS``), ``disable_plugins`` (``HERMES_DISABLE_PLUGINS``),
    ``safe_mode`` (``HERMES_NO_PLUGINS``), ``strict`` (``HERMES_STRICT_PLUGINS``),
    ``trace`` (``HERMES_TRACE_PLUGINS``). ``defaults=False`` skips the default plugins
    (tests that want a bare kernel). ``check_selection=False`` lets commands that must
    always work (``plugins list``, ``doctor``) start even when config names a missing
    plugin; :attr:`selection_errors` then says what is wrong.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        home: str | os.PathLike[str] | None = None,
        *,
        autoload: bool = True,
        defaults: bool = True,
        plugins: Iterable[Any] = (),
        load_plugins: Iterable[str] | None = None,
        disable_plugins: Iterable[str] = (),
        safe_mode: bool | None = None,
        strict: bool | None = None,
        trace: bool | None = None,
        check_selection: bool = True,
        read_config: bool = True,
    ):
        # read_config=False: ignore config.yaml and .env (defaults only), for the CLI to
        # list plugins and their commands when those files are broken.
        self.home: Path = resolve_home(home)
        #: This kernel's environment: the process environment over ``$HERMES_HOME/.env``.
        #: ``{$env: VAR}`` and the LLM clients read it; ``os.environ`` is never written,
        #: so kernels on other homes never see this home's secrets.
        self.env: Mapping[str, str] = ChainMap(os.environ, read_dotenv(self.home / ".env") if read_config else {})
        self.config: Config = (Config.load(self.home, config, env=self.env) if read_config
                               else Config(dict(config or {}), home=self.home, env=self.env))
        # $HERMES_HOME/logs/hermes.log (redacted, 0600), detached by close(); the
        # finalizer also detaches it when __init__ fails below or close() is never called.
        detach = attach_log_file(self.home, self.config)
        self._detach_log = weakref.finalize(self, detach) if detach else None

        switches = LoadSwitches.from_env()
        if load_plugins is not None:
            switches.only = set(load_plugins)
        switches.disabled_by_config = set(self.config.get("plugins.disabled") or [])
        switches.disabled |= set(disable_plugins) | switches.disabled_by_config
        if safe_mode is not None:
            switches.safe_mode = safe_mode
        if strict is not None:
            switches.strict = strict
        if trace is not None:
            switches.trace = trace

        self.pm = HermesPluginManager(switches)
        self.registries = Registries()
        self.selection_errors: list[UnknownPluginError] = []
        self.settings_errors: list[ConfigError] = []
        self._instances: dict[str, Any] = {}

        if defaults:
            package = importlib.import_module(DEFAULT_PLUGIN_PACKAGE)
            self.pm.load_defaults(getattr(package, "DEFAULT_PLUGINS", ()))
        for plugin in plugins:
            self.pm.add_plugin(plugin, _plugin_name(plugin), source=SOURCE_REGISTERED)
        if autoload:
            self.pm.load_entrypoints(cache=self.home / "cache" / "entry-points.json")
            self.pm.load_local(self.home / "plugins")
        self._fill_registries()
        self._check_selection(raise_errors=check_selection)

    # -- plugins ----------------------------------------------------------------------

    def register_plugin(self, plugin: Any, name: str | None = None) -> PluginRecord:
        """Add a plugin after boot (tests, embedding applications) and register what it
        provides. Returns its record; a failure is recorded as for any plugin."""
        name = name or _plugin_name(plugin)
        if name in self.pm.records:
            raise PluginError(f"a plugin named {name!r} is already registered "
                              f"({self.pm.records[name].source}); pass another name")
        record = self.pm.add_plugin(plugin, name, source=SOURCE_REGISTERED)
        if record.status == "active":
            self._register_from(name)
        return record

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin and everything it registered."""
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin=plugin, name=name)
        self.registries.remove_plugin(name)
        self.pm.records.pop(name, None)
        self._instances.clear()

    @property
    def plugins(self) -> list[PluginRecord]:
        """Every plugin the kernel knows of (active, blocked or failed)."""
        for record in self.pm.records.values():
            if record.status == "active":
                record.registered = self.registries.registered_by(record.name)
        return list(self.pm.records.values())

    @property
    def failures(self) -> list[PluginFailure]:
        """Plugins that failed to load or register."""
        return self.pm.failures

    def _fill_registries(self) -> None:
        for hook_name in hookspecs.REGISTRATION_HOOKS:
            self._call_registration(hook_name)

    def _register_from(self, plugin_name: str) -> None:
        for hook_name in hookspecs.REGISTRATION_HOOKS:
            self._call_registration(hook_name, only=plugin_name)

    def _call_registration(self, hook_name: str, only: str | None = None) -> None:
        """Call one registration hook implementation by implementation, in registration
        order (defaults first, so an established name is kept and the newcomer is the one
        in conflict), handing each a ``register`` bound to its plugin's name."""
        kind = kind_of(hook_name)
        registry = self.registries.by_kind(kind.name)
        is_tools = kind.name == "tool"
        impls = [i for i in self.pm.ordered_impls(hook_name) if only is None or i.plugin_name == only]
        if not impls:
            return
        self.pm.notify(hook_name, impls, {})
        for impl in impls:
            name = impl.plugin_name
            if self.pm.get_plugin(name) is None:
                continue  # failed in an earlier registration hook and was unregistered
            kwargs = {"register": make_register(registry, name, tools=is_tools)}
            try:
                with self.pm.guard(name, f"running {hook_name}"):
                    impl.function(**{k: kwargs[k] for k in impl.argnames if k in kwargs})
            except Exception as exc:
                self._registration_failed(name, exc)
        if hook_name == "hermes_register_tools":
            self._check_tool_claims()

    def _registration_failed(self, name: str, exc: Exception) -> None:
        """Roll back everything plugin ``name`` registered, then record the failure."""
        self.registries.remove_plugin(name)
        record = self.pm.records.get(name)
        if record is None:
            raise exc
        conflict = isinstance(exc, ConflictError)
        self.pm.record_failure(record, exc, "register (name conflict)" if conflict else "register")

    def _check_tool_claims(self) -> None:
        """The tools a component offers itself (declared with ``register(..., tools=)``,
        e.g. the built-in ``memory`` tool) belong to its plugin: a registered tool of the
        same name from another plugin is a conflict naming both, and the plugin that
        loaded later (the newcomer, never a default) is the one that fails."""
        claims = [e for registry in self.registries.all() for e in registry if e.tools]
        for provider in claims:
            for tool_name in provider.tools:
                if self.pm.get_plugin(provider.plugin) is None:
                    break  # failed on an earlier claim and was rolled back
                tool = next((t for t in self.registries.tools if t.name == tool_name), None)
                if tool is None or tool.plugin == provider.plugin:
                    continue
                first, second = sorted((provider.plugin, tool.plugin), key=self.pm.load_position)
                self._registration_failed(second, ConflictError("tool", tool_name, first, second))

    # -- selection --------------------------------------------------------------------

    def selected(self, kind: str) -> str:
        """The configured name for a selectable kind (``context-engine``,
        ``memory-provider``, ``session-store``, ``llm``); ``""`` for the other kinds."""
        key = SELECTION_KEYS.get(kind)
        return str(self.config.get(key) or "") if key else ""

    def _check_selection(self, *, raise_errors: bool) -> None:
        self.selection_errors = []
        #: kind -> the built-in used because the configured name is not registered.
        self.selection_fallbacks: dict[str, str] = {}
        self._fallbacks_warned: set[str] = set()
        for kind, key in SELECTION_KEYS.items():
            name = self.config.get(key)
            if not name:
                continue  # e.g. memory.provider "" = built-in memory only
            registry = self.registries.by_kind(kind)
            if name not in registry:
                self.selection_errors.append(UnknownPluginError(kind, name, registry.names(), setting=key))
                fallback = SELECTION_FALLBACKS.get(kind)
                if fallback and fallback in registry and not self.pm.switches.strict:
                    self.selection_fallbacks[kind] = fallback
        self.settings_errors = self._check_settings()
        if raise_errors and self.start_problems:
            raise self.start_problems[0]

    @property
    def start_problems(self) -> list[HermesError]:
        """:attr:`config_problems` without the selections that fall back to a built-in
        (:data:`SELECTION_FALLBACKS`): what a non-strict start refuses."""
        return [p for p in self.config_problems
                if not (isinstance(p, UnknownPluginError) and p.kind in self.selection_fallbacks)]

    @property
    def config_problems(self) -> list[HermesError]:
        """Everything wrong with the configuration that a start would refuse: selections
        naming nothing registered, then plugin settings that break their declaration.
        ``hermes config validate`` and ``hermes doctor`` report exactly these."""
        return [*self.selection_errors, *self.settings_errors]

    def _check_settings(self) -> list[ConfigError]:
        """Check each active plugin's ``plugins.<name>`` section against the schema it
        declares (``hermes_settings``, see :mod:`hermes.settings`)."""
        errors: list[ConfigError] = []
        file = str(self.config.file) if self.config.file else None
        for record in self.pm.records.values():
            schema = settings_schema(self.pm.get_plugin(record.name)) if record.status == "active" else None
            if schema is not None:
                errors += check_settings(record.name, self.config.raw(f"plugins.{record.name}"), schema, file)
        return errors

    def plugin_settings(self, name: str) -> dict[str, Any]:
        """Plugin ``name``'s settings, checked against the schema it declares, references
        resolved and defaults filled in; the first problem raises :class:`ConfigError`
        naming the key (the same check as at start and in ``hermes config validate``)."""
        schema = settings_schema(self.pm.get_plugin(name)) or {}
        problems = check_settings(name, self.config.raw(f"plugins.{name}"), schema)
        values = self.config.plugin(name)
        if not problems:  # references are checked once resolved
            problems = check_settings(name, values, schema)
        if problems:
            raise problems[0]
        return with_defaults(values, schema)

    def create(self, kind: str, name: str | None = None) -> Any:
        """A new instance of the named (or configured) component of ``kind``."""
        registry = self.registries.by_kind(kind)
        setting = SELECTION_KEYS.get(kind, "")
        configured = self.selected(kind)
        if name is None:
            if not setting:
                raise ValueError(f"no config key selects a {kind}; pass its name")
            name = configured
            if kind in self.selection_fallbacks and name not in registry:
                name = configured = self.fall_back(kind, name)
        return registry.get(name, setting=setting if name == configured else "").build(self)

    def fall_back(self, kind: str, name: str) -> str:
        """The built-in used for ``kind`` instead of the missing ``name`` (see
        :data:`SELECTION_FALLBACKS` and :attr:`selection_fallbacks`); the first use per
        kernel prints one warning line. For components built by name elsewhere (the memory
        manager builds ``memory.provider`` itself)."""
        fallback = self.selection_fallbacks[kind]
        if kind not in self._fallbacks_warned:
            self._fallbacks_warned.add(kind)
            print(f"hermes: warning: {SELECTION_KEYS[kind]} {name!r} is not available (not installed, "
                  f"disabled or --no-plugins); using the built-in {fallback!r} (see `hermes plugins "
                  "list`; --strict makes this an error)", file=sys.stderr)
        return fallback

    def shared(self, kind: str, name: str | None = None) -> Any:
        """One instance per kernel of the named (or configured) component, built on first
        use (session stores, LLM clients)."""
        key = f"{kind}:{name or self.selected(kind)}"
        if key not in self._instances:
            self._instances[key] = self.create(kind, name)
        return self._instances[key]

    @property
    def session_store(self) -> Any:
        """The selected :class:`hermes.SessionStore`, shared by everything in this kernel."""
        return self.shared("session-store")

    def llm_client(
        self, name: str | None = None, *, base_url: str | None = None, api_key: str | None = None
    ) -> Any:
        """The LLM client registered as ``name`` (default ``model.provider``), shared per
        ``(name, base_url, api_key)``. Client factories are called as
        ``factory(kernel, base_url=..., api_key=...)``; ``None`` means "from the ``model``
        section of the config, else the SDK's usual environment variables"."""
        name = name or self.selected("llm")
        key = f"llm:{name}:{base_url}:{api_key}"
        if key not in self._instances:
            setting = "model.provider" if name == self.selected("llm") else ""
            entry = self.registries.llm_clients.get(name, setting=setting)
            self._instances[key] = entry.factory(self, base_url=base_url, api_key=api_key)
        return self._instances[key]

    def auxiliary(self, task: str) -> tuple[Any, str] | None:
        """``(client, model)`` for an auxiliary task (``compression``,
        ``session_search``): ``auxiliary.<task>.*`` when configured, else the main model.
        ``None`` when no client can be built (unknown provider, broken config)."""
        try:
            section = self.config.section(f"auxiliary.{task}")
            provider = section.get("provider") or self.selected("llm")
            model = section.get("model") or self.config.get("model.name")
            client = self.llm_client(provider, base_url=section.get("base_url") or None,
                                     api_key=section.get("api_key") or None)
            return client, str(model)
        except Exception as exc:  # the caller falls back (raw snippets, local summary)
            log.warning("no auxiliary model for %s: %s", task, exc)
            return None

    def tools(self, *, expand: bool = True) -> list[Any]:
        """Every registered :class:`hermes.Tool` whose availability check passes; a tool
        source (``Tool.expand`` set) is replaced by the tools it expands to (after the
        registered ones; a name already taken is dropped), or left out with
        ``expand=False`` (callers that must not start what a source starts)."""
        out = []
        sources = []
        for entry in self.registries.tools:
            tool = entry.factory
            check = getattr(tool, "available", None)
            try:
                if check is None or check():
                    if getattr(tool, "expand", None) is not None:
                        sources.append(tool)
                    else:
                        out.append(tool)
            except Exception as exc:  # a broken check hides the tool, it never breaks a turn
                log.warning("tool %s availability check failed: %s", tool.name, exc)
        if expand and sources:
            taken = {t.name for t in out}
            for source in sources:
                try:
                    found = list(source.expand(self) or [])
                except Exception as exc:  # a broken source hides its tools, it never breaks a turn
                    log.warning("tool source %s failed: %s", source.name, exc)
                    continue
                for tool in found:
                    if tool.name not in taken:
                        taken.add(tool.name)
                        out.append(tool)
        return out

    def plugin_config(self, name: str) -> dict[str, Any]:
        """The ``plugins.<name>`` section of the config, references resolved."""
        return self.config.plugin(name)

    # -- events -----------------------------------------------------------------------

    def emit(self, hook_name: str, **kwargs: Any) -> list[Any]:
        """Fan an event hook out to every plugin; one failing observer never breaks the
        caller (the error is logged once per plugin and hook). Returns the results that
        are not ``None``, in call order."""
        if hook_name not in hookspecs.EVENT_HOOKS:
            raise ValueError(f"{hook_name!r} is not an event hook; choose one of {hookspecs.EVENT_HOOKS}")
        return self.pm.emit(hook_name, **kwargs)

    def close(self) -> None:
        """Release shared instances (database connections, HTTP clients) and close tool
        sources (``Tool.expand``) that have a ``close()``."""
        for entry in self.registries.tools:
            source_close = getattr(entry.factory, "close", None)
            if getattr(entry.factory, "expand", None) is not None and callable(source_close):
                try:
                    source_close()
                except Exception as exc:  # closing must never fail the caller
                    log.debug("closing tool source %s failed: %s", entry.name, exc)
        for instance in self._instances.values():
            close = getattr(instance, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:  # closing must never fail the caller
                    log.debug("closing %r failed: %s", instance, exc)
        self._instances.clear()
        detach_log = getattr(self, "_detach_log", None)
        if detach_log is not None:
            detach_log()  # a finalizer runs once; closing twice is harmless

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Kernel home={str(self.home)!r} plugins={len(self.pm.records)}>"


def _plugin_name(plugin: Any) -> str:
    name = getattr(plugin, "__name__", None) or getattr(plugin, "name", None)
    return str(name or f"{type(plugin).__name__}-{id(plugin):x}")


__all__ = ["Kernel", "KINDS"]
