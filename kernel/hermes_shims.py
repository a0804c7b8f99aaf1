"""The import surface Hermes Agent's plugins expect, rebuilt on this kernel.

Memory providers and context engines written for Hermes Agent (``hermes-agent`` on
PyPI) import helpers from the agent itself: ``tools.registry.tool_error``,
``hermes_constants.get_hermes_home``, ``hermes_cli.config.cfg_get``,
``utils.atomic_json_write``, ``agent.memory_provider.MemoryProvider`` … This module
writes each of those names from what it does upstream (nothing is copied) and builds,
per plugin directory home, one set of modules holding them (:func:`build_shims`).

The modules are never put in ``sys.modules`` under those names: the import hook in
:mod:`hermes.hermes_compat` hands them only to code of Hermes-style plugin packages, so
a real ``agent``, ``tools`` or ``utils`` package of the user's is never shadowed.

Names that belong to Hermes Agent's interactive setup wizards (``hermes_cli.memory_setup``,
``hermes_cli.curses_ui`` …) exist so the modules import, and raise
:class:`CompatUnsupported` with a one-line hint when called: this kernel configures
providers through ``config.yaml`` and ``.env``.
"""

from __future__ import annotations

import asyncio
import getpass
import importlib.util
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, MutableMapping
from concurrent.futures import Future
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar

import yaml

from .compaction import content_text, sanitize_memory_context
from .contracts import ContextEngine, MemoryProvider
from .runtime.fencing import sanitize_context as _sanitize_fenced
from .util import atomic_write_text

log = logging.getLogger("hermes.compat")

__all__ = ["SHIMMED", "CompatUnsupported", "build_shims"]

T = TypeVar("T")

_TRUTHY = frozenset({"1", "true", "yes", "on", "y", "t"})


class CompatUnsupported(RuntimeError):
    """A Hermes Agent helper this kernel does not provide (interactive setup wizards)."""


def _unsupported(qualname: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise CompatUnsupported(
            f"{qualname} is part of Hermes Agent's interactive setup, which this kernel does not "
            "provide; set the provider's options in config.yaml (plugins.<name>) and its keys in "
            "$HERMES_HOME/.env")

    call.__name__ = qualname.rsplit(".", 1)[-1]
    call.__qualname__ = qualname
    return call


# -- tools ---------------------------------------------------------------------------------

def tool_error(message: Any, **extra: Any) -> str:
    """A tool result reporting an error: ``{"error": message, **extra}`` as JSON."""
    return json.dumps({"error": str(message), **extra}, ensure_ascii=False)


class FeatureUnavailable(RuntimeError):
    """A feature's packages are not installed (this kernel never installs at run time)."""

    def __init__(self, feature: str, missing: tuple[str, ...], reason: str):
        self.feature, self.missing, self.reason = feature, missing, reason
        specs = " ".join(missing)
        super().__init__(f"feature {feature!r} unavailable: {reason}"
                         + (f"; install it with: pip install {specs}" if specs else ""))


#: feature -> (pip requirement, module it provides), for the features the bundled
#: providers ask ``tools.lazy_deps.ensure`` for.
_FEATURES: dict[str, tuple[str, str]] = {
    "memory.honcho": ("honcho-ai", "honcho"),
    "memory.hindsight": ("hindsight-client", "hindsight_client"),
    "memory.supermemory": ("supermemory", "supermemory"),
    "memory.mem0": ("mem0ai", "mem0"),
}


def ensure(feature: str, *, prompt: bool = True) -> None:
    """Check that ``feature``'s package is importable, else raise
    :class:`FeatureUnavailable` naming what to install. Upstream installs it into the
    venv on demand; Hermes never downloads at run time, so this only checks."""
    if feature not in _FEATURES:
        raise FeatureUnavailable(feature, (), "not a known optional feature")
    requirement, module = _FEATURES[feature]
    if importlib.util.find_spec(module) is None:
        raise FeatureUnavailable(feature, (requirement,), f"the {module!r} package is not installed")


# -- utils ---------------------------------------------------------------------------------

def atomic_json_write(path: str | os.PathLike[str], data: Any, *, indent: int = 2,
                      mode: int | None = None, **dump_kwargs: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file, fsync, rename): a crash
    leaves the old file or the new one, never half of one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=indent, **{"ensure_ascii": False, **dump_kwargs})
    atomic_write_text(target, text, mode=mode)


def is_truthy_value(value: Any, default: bool = False) -> bool:
    """``True`` for ``1/true/yes/on`` (any case) and truthy non-strings."""
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in _TRUTHY
    return bool(value)


# -- hermes_cli.config ---------------------------------------------------------------------

def cfg_get(cfg: Any, *keys: str, default: Any = None) -> Any:
    """``cfg[k1][k2]…``, or ``default`` when ``cfg`` is not a mapping, a key is missing
    or an intermediate value is not a mapping. A present ``None`` is returned as is."""
    node = cfg
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


class _Config:
    """``load_config``/``save_config`` on one home's ``config.yaml``."""

    def __init__(self, home: Path):
        self.path = home / "config.yaml"

    def load(self) -> dict[str, Any]:
        """The parsed ``config.yaml`` (``{}`` when missing or not a mapping); a fresh copy
        each call, so callers may mutate it."""
        try:
            data = yaml.safe_load(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, yaml.YAMLError) as exc:
            log.warning("compat load_config: %s unreadable: %s", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def save(self, config: dict[str, Any], **_: Any) -> None:
        """Write ``config`` to ``config.yaml`` atomically (sections it omits are kept)."""
        current = self.load()
        current.update(config)
        atomic_write_text(self.path, yaml.safe_dump(current, sort_keys=False, allow_unicode=True))


# -- agent ---------------------------------------------------------------------------------

def sanitize_context(text: str) -> str:
    """Provider output without memory fences, injected context blocks or system notes."""
    return _sanitize_fenced(text or "")


def flatten_message_text(content: Any, *, sep: str = "\n") -> str:
    """The visible text of a message's content (a string or a list of parts)."""
    if isinstance(content, list):
        return sep.join(t for t in (content_text([p]) for p in content) if t)
    return content_text(content)


def extract_user_instruction_from_skill_message(content: Any) -> str | None:
    """The user's own words in a turn. Hermes Agent expands ``/skill`` invocations into
    scaffolding around them; this kernel never does, so a string passes unchanged and
    anything else is ``None``."""
    return content if isinstance(content, str) else None


_SECRET_NAMES = frozenset({".env", "auth.json", "auth.lock", ".anthropic_oauth.json",
                           "webhook_subscriptions.json"})
_ENV_FILES = frozenset({".env", ".env.local", ".env.development", ".env.production",
                        ".env.test", ".env.staging", ".envrc"})


def _read_blocker(home: Path) -> Callable[[str], None]:
    def raise_if_read_blocked(path: str) -> None:
        """Refuse (``ValueError``) to read credential files: the home's secret stores
        and any project ``.env`` file. Defence in depth, not a security boundary."""
        try:
            resolved = Path(path).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            return
        name = resolved.name
        in_home = home.resolve() in resolved.parents
        if name in _ENV_FILES or (in_home and (name in _SECRET_NAMES or "mcp-tokens" in resolved.parts)):
            raise ValueError(f"reading {path} is blocked: it holds credentials")

    return raise_if_read_blocked


def safe_schedule_threadsafe(coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop | None, *,
                             logger: logging.Logger | None = None,
                             log_message: str = "Failed to schedule coroutine on loop",
                             log_level: int = logging.DEBUG) -> Future | None:
    """Schedule ``coro`` on ``loop`` from another thread; ``None`` (the coroutine
    closed, so it never warns) when the loop is missing or closed."""
    try:
        if loop is None:
            raise RuntimeError("loop is None")
        return asyncio.run_coroutine_threadsafe(coro, loop)
    except Exception as exc:
        if asyncio.iscoroutine(coro):
            coro.close()
        (logger or log).log(log_level, "%s: %s", log_message, exc)
        return None


def call_llm(*args: Any, **kwargs: Any) -> Any:
    """Hermes Agent's auxiliary-model call. Plugins loaded here get no auxiliary route
    through the compat layer; callers (query rewriting) treat the error as "skip"."""
    raise CompatUnsupported("agent.auxiliary_client.call_llm: no auxiliary model is routed to "
                            "Hermes Agent plugins by this kernel")


def rewrite_memory_query(user_message: str) -> str:
    """Hermes Agent's optional retrieval-query rewrite; ``""`` keeps the message as the
    query (its behaviour whenever no auxiliary model answers)."""
    return ""


# -- hermes_state --------------------------------------------------------------------------

def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """Put ``conn`` in WAL mode, or DELETE mode where the file system cannot do WAL
    (network mounts); returns the mode set."""
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    except sqlite3.OperationalError as exc:
        log.warning("%s: WAL unavailable (%s); using journal_mode=DELETE", db_label, exc)
        mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
    return str(mode).lower()


# -- plugins.plugin_utils / plugins.memory.config_schema ------------------------------------

class SingletonSlot(Generic[T]):
    """A lazily built shared instance: ``get(factory)`` builds it once (the first
    factory that succeeds wins, even under concurrent first calls), ``reset()`` forgets it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: T | None = None
        self._set = False

    def get(self, factory: Callable[[], T]) -> T:
        if self._set:
            return self._value  # type: ignore[return-value]
        with self._lock:
            if not self._set:
                value = factory()
                self._value, self._set = value, True
                return value
            return self._value

    def peek(self) -> T | None:
        return self._value if self._set else None

    def reset(self) -> None:
        with self._lock:
            self._value, self._set = None, False


@dataclass(frozen=True)
class ProviderFieldOption:
    """One choice of a ``select`` field."""

    value: str
    label: str
    description: str = ""


@dataclass(frozen=True)
class ProviderField:
    """One configurable field a memory provider declares (kind, default, env key …)."""

    key: str
    label: str
    kind: str = "text"
    default: str = ""
    description: str = ""
    placeholder: str = ""
    options: tuple[ProviderFieldOption, ...] = ()
    env_key: str | None = None
    aliases: tuple[str, ...] = ()
    env_fallbacks: tuple[str, ...] = ()
    inline: bool = False
    group: str = ""
    info: str = ""
    scope: str = "host"

    @property
    def is_secret(self) -> bool:
        return self.kind == "secret"

    def allowed_values(self) -> set[str]:
        return {o.value for o in self.options}


@dataclass(frozen=True)
class ProviderConfigSchema:
    """A memory provider's declared configuration surface."""

    name: str
    label: str
    storage: str = "flat_json"
    docs_url: str = ""
    fields: tuple[ProviderField, ...] = dataclass_field(default_factory=tuple)

    def inline_fields(self) -> tuple[ProviderField, ...]:
        return tuple(f for f in self.fields if f.inline)


# -- the environment -----------------------------------------------------------------------

class HomeEnviron(MutableMapping[str, str]):
    """``os.environ`` as Hermes Agent's plugins of one home see it: the process
    environment over that home's ``.env``.

    Hermes Agent loads ``$HERMES_HOME/.env`` into its process environment at start, and
    its plugins read their keys from there (``os.environ.get("MEM0_API_KEY")``). This
    kernel never writes ``os.environ`` (each kernel has its own environment,
    :attr:`hermes.Kernel.env`), so plugin code gets this mapping as ``os.environ``
    instead: the ``.env`` values reach the plugin, but no other code in the process, and
    no child process started without an explicit ``env=``. The process environment
    wins over ``.env``, as for the kernel.

    Writes and deletes stay in this view (shared by the home's plugins): the plugin
    reads back what it set and hands it on with ``env=os.environ.copy()``, but the
    process environment is never written, so one home's plugin cannot change what
    another home, the kernel or an unrelated child process sees. A library that reads
    the process environment itself does not see such a write."""

    def __init__(self, dotenv_path: Path):
        self._path = dotenv_path
        self._stamp: tuple[int, int] | None = None
        self._values: dict[str, str] = {}
        self._set: dict[str, str] = {}
        self._hidden: set[str] = set()

    @property
    def _dotenv(self) -> Mapping[str, str]:
        """The ``.env`` values, read again when the file changed (a stat per access: the
        plugins of one process see an edit as a kernel started after it does)."""
        from .config import read_dotenv
        from .errors import ConfigError

        try:
            st = self._path.stat()
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            try:
                self._values = read_dotenv(self._path) if stamp else {}
            except ConfigError:  # the kernel reports an unreadable .env itself, naming it
                self._values = {}
            self._stamp = stamp
        return self._values

    def __getitem__(self, key: str) -> str:
        if key in self._hidden:
            raise KeyError(key)
        for layer in (self._set, os.environ, self._dotenv):
            if key in layer:
                return layer[key]
        raise KeyError(key)

    def __setitem__(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):  # as os.environ refuses
            raise TypeError(f"str expected, not {type(value if isinstance(key, str) else key).__name__}")
        self._set[key] = value
        self._hidden.discard(key)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._set.pop(key, None)
        self._hidden.add(key)

    def __iter__(self) -> Iterator[str]:
        seen = set(self._hidden)
        for key in [*self._set, *os.environ, *self._dotenv]:
            if key not in seen:
                seen.add(key)
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def copy(self) -> dict[str, str]:
        """A plain dict, like ``os.environ.copy()`` (for a child's ``env=``)."""
        return dict(self)


class _EnvironOs(ModuleType):
    """The ``os`` module for Hermes-style plugin code: ``environ`` and ``getenv`` read
    :class:`HomeEnviron`; every other name is the real module's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def _os_module(home: Path) -> ModuleType:
    environ = HomeEnviron(home / ".env")
    module = _EnvironOs("os", "The os module with $HERMES_HOME/.env under os.environ (hermes.hermes_shims).")

    def getenv(key: str, default: str | None = None) -> str | None:
        return environ.get(key, default)

    module.__dict__.update(environ=environ, getenv=getenv, path=os.path, sep=os.sep)
    return module


# -- assembling the modules ----------------------------------------------------------------

#: Every module and name the shims provide (what ``hermes plugins`` docs list).
SHIMMED: dict[str, tuple[str, ...]] = {
    "agent": (),
    "agent.memory_provider": ("MemoryProvider",),
    "agent.context_engine": ("ContextEngine", "sanitize_memory_context"),
    "agent.memory_manager": ("sanitize_context",),
    "agent.message_content": ("flatten_message_text",),
    "agent.skill_commands": ("extract_user_instruction_from_skill_message",),
    "agent.file_safety": ("raise_if_read_blocked",),
    "agent.async_utils": ("safe_schedule_threadsafe",),
    "agent.auxiliary_client": ("call_llm",),
    "tools": (),
    "tools.registry": ("tool_error",),
    "tools.lazy_deps": ("ensure", "FeatureUnavailable"),
    "utils": ("atomic_json_write", "env_var_enabled", "is_truthy_value"),
    "hermes_constants": ("get_hermes_home", "display_hermes_home", "get_default_hermes_root"),
    "hermes_state": ("apply_wal_with_fallback",),
    "hermes_cli": (),
    "hermes_cli.config": ("cfg_get", "load_config", "load_config_readonly", "save_config"),
    "hermes_cli.profiles": ("get_active_profile_name", "list_profiles", "_get_default_hermes_home"),
    "hermes_cli.memory_setup": ("_prompt", "_write_env_vars", "_curses_select", "_print_cancelled_setup",
                                "_CANCELLED", "cmd_setup_provider"),
    "hermes_cli.secret_prompt": ("masked_secret_prompt",),
    "hermes_cli.curses_ui": ("curses_radiolist",),
    "hermes_cli.tools_config": ("_pip_install",),
    "gateway": (),
    "gateway.config": ("load_gateway_config",),
    "plugins": (),
    "plugins.plugin_utils": ("SingletonSlot",),
    "plugins.memory": ("find_provider_dir",),
    "plugins.memory.config_schema": (
        "ProviderFieldOption", "ProviderField", "ProviderConfigSchema", "KIND_TEXT", "KIND_SELECT",
        "KIND_SECRET", "KIND_BOOL", "KIND_NUMBER", "KIND_JSON", "STORAGE_FLAT_JSON",
        "STORAGE_HONCHO_HOST_BLOCK"),
    "plugins.memory.query_rewrite": ("rewrite_memory_query",),
    "plugins.context_engine": (),
}

#: The top-level names the import hook answers for Hermes-style plugin code (``os``: its
#: ``environ`` includes the home's ``.env``, see :class:`HomeEnviron`).
ROOTS = frozenset(name.split(".")[0] for name in SHIMMED) | {"os"}


def build_shims(home: Path) -> dict[str, ModuleType]:
    """One set of shim modules for plugins living in ``home`` (``$HERMES_HOME``):
    ``get_hermes_home()`` and ``load_config()`` answer for that home.

    Long because it is one table: each shimmed module with the names it holds."""
    home = Path(home)
    config = _Config(home)
    os_module = _os_module(home)
    environ = os_module.environ

    def env_var_enabled(name: str, default: str = "") -> bool:
        """Whether environment variable ``name`` (process, then ``.env``) is truthy."""
        return is_truthy_value(environ.get(name, default))

    def get_hermes_home() -> Path:
        """The Hermes home the plugin was loaded from."""
        return home

    def display_hermes_home() -> str:
        """The home for messages, ``~/`` abbreviated."""
        try:
            return "~/" + str(home.resolve().relative_to(Path.home().resolve()))
        except ValueError:
            return str(home)

    def find_provider_dir(name: str) -> Path | None:
        """The directory of the Hermes-style provider ``name`` in this home."""
        path = home / "plugins" / name
        return path if (path / "__init__.py").is_file() else None

    attributes: dict[str, dict[str, Any]] = {
        "agent.memory_provider": {"MemoryProvider": MemoryProvider},
        "agent.context_engine": {"ContextEngine": ContextEngine,
                                 "sanitize_memory_context": sanitize_memory_context},
        "agent.memory_manager": {"sanitize_context": sanitize_context},
        "agent.message_content": {"flatten_message_text": flatten_message_text},
        "agent.skill_commands": {"extract_user_instruction_from_skill_message":
                                 extract_user_instruction_from_skill_message},
        "agent.file_safety": {"raise_if_read_blocked": _read_blocker(home)},
        "agent.async_utils": {"safe_schedule_threadsafe": safe_schedule_threadsafe},
        "agent.auxiliary_client": {"call_llm": call_llm},
        "tools.registry": {"tool_error": tool_error},
        "tools.lazy_deps": {"ensure": ensure, "FeatureUnavailable": FeatureUnavailable},
        "utils": {"atomic_json_write": atomic_json_write, "env_var_enabled": env_var_enabled,
                  "is_truthy_value": is_truthy_value},
        "hermes_constants": {"get_hermes_home": get_hermes_home, "display_hermes_home": display_hermes_home,
                             "get_default_hermes_root": get_hermes_home},
        "hermes_state": {"apply_wal_with_fallback": apply_wal_with_fallback},
        "hermes_cli.config": {"cfg_get": cfg_get, "load_config": config.load,
                              "load_config_readonly": config.load, "save_config": config.save},
        "hermes_cli.profiles": {"get_active_profile_name": lambda: "default", "list_profiles": lambda: [],
                                "_get_default_hermes_home": get_hermes_home},
        "hermes_cli.memory_setup": {
            **{n: _unsupported(f"hermes_cli.memory_setup.{n}")
               for n in ("_prompt", "_write_env_vars", "_curses_select", "_print_cancelled_setup",
                         "cmd_setup_provider")},
            "_CANCELLED": object()},
        "hermes_cli.secret_prompt": {"masked_secret_prompt": lambda prompt="": getpass.getpass(prompt)},
        "hermes_cli.curses_ui": {"curses_radiolist": _unsupported("hermes_cli.curses_ui.curses_radiolist")},
        "hermes_cli.tools_config": {"_pip_install": _unsupported("hermes_cli.tools_config._pip_install")},
        "gateway.config": {"load_gateway_config": _unsupported("gateway.config.load_gateway_config")},
        "plugins.plugin_utils": {"SingletonSlot": SingletonSlot},
        "plugins.memory": {"find_provider_dir": find_provider_dir},
        "plugins.memory.config_schema": {
            "ProviderFieldOption": ProviderFieldOption, "ProviderField": ProviderField,
            "ProviderConfigSchema": ProviderConfigSchema, "KIND_TEXT": "text", "KIND_SELECT": "select",
            "KIND_SECRET": "secret", "KIND_BOOL": "bool", "KIND_NUMBER": "number", "KIND_JSON": "json",
            "STORAGE_FLAT_JSON": "flat_json", "STORAGE_HONCHO_HOST_BLOCK": "honcho_host_block"},
        "plugins.memory.query_rewrite": {"rewrite_memory_query": rewrite_memory_query},
    }
    modules: dict[str, ModuleType] = {}
    for name in SHIMMED:
        module = ModuleType(name, f"Hermes Agent compatibility shim for {name} (hermes.hermes_shims).")
        module.__dict__.update(attributes.get(name, {}))
        if not attributes.get(name) or name in ("plugins.memory",):
            module.__path__ = []  # a package, so its submodules import
        modules[name] = module
    for name, module in modules.items():
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(modules[parent], leaf, module)
    modules["os"] = os_module
    return modules
