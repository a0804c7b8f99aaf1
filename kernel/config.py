"""``HERMES_HOME``, ``config.yaml`` over built-in defaults, validation and safe writes.

Values may be written as ``{$env: VAR}`` or ``{$file: path}`` so that secrets never need
to sit in YAML; they are resolved when read. Validation errors name the key path, the bad
value and what was expected.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError, HomeError

CONFIG_FILE = "config.yaml"

DEFAULTS: dict[str, Any] = {
    "model": {
        "provider": "anthropic",
        "name": "claude-sonnet-4-6",
        "base_url": None,
        "api_key": None,
        "context_length": None,
        "max_tokens": None,
        "timeout": 600.0,
        "max_retries": 3,
        "retry_base_delay": 1.0,
    },
    "auxiliary": {
        "compression": {"provider": None, "model": None, "base_url": None, "api_key": None},
        "session_search": {"provider": None, "model": None, "base_url": None, "api_key": None},
        "title": {"provider": None, "model": None, "base_url": None, "api_key": None},
    },
    "agent": {"max_iterations": 90, "max_parallel_tools": 8, "platform": "cli"},
    "context": {"engine": "compressor"},
    "compression": {
        "enabled": True,
        "threshold": 0.50,
        "target_ratio": 0.20,
        "protect_last_n": 20,
        "hygiene_threshold": 0.85,
        "model_thresholds": {},
        "small_window_floor": 0.75,
        "threshold_tokens": None,
        "abort_on_summary_failure": False,
        "summary_timeout": 120.0,
    },
    "memory": {
        "memory_enabled": True,
        "user_profile_enabled": True,
        "memory_char_limit": 2200,
        "user_char_limit": 1375,
        "provider": "",
        "nudge_interval": 10,
        "prefetch_timeout": 8.0,
        "fence_note": None,
        "history_max_bytes": 1 << 20,
        "live_updates": True,
    },
    "sessions": {"store": "sqlite"},
    "prompt": {
        "disabled_layers": [],
        "context_file_max_chars": 20000,
        "system_message": None,
        "ephemeral_system_prompt": None,
        "prefill_messages": None,
        "prefill_messages_file": None,
    },
    "prompt_caching": {"enabled": True, "cache_ttl": "5m"},
    "plugins": {"disabled": []},
    "logging": {"level": "WARNING", "max_bytes": 5_000_000, "backup_count": 3},
}

# Keys whose default is None, with the types a user may set them to.
_NULLABLE: dict[str, tuple[type, ...]] = {
    "model.base_url": (str,),
    "model.api_key": (str,),
    "model.context_length": (int,),
    "model.max_tokens": (int,),
    "memory.fence_note": (str,),
    "prompt.system_message": (str,),
    "compression.threshold_tokens": (int,),
    "prompt.ephemeral_system_prompt": (str,),
    "prompt.prefill_messages_file": (str,),
    "prompt.prefill_messages": (list,),
}
for _task in ("compression", "session_search", "title"):
    for _key in ("provider", "model", "base_url", "api_key"):
        _NULLABLE[f"auxiliary.{_task}.{_key}"] = (str,)

# Sections whose keys are free-form (names chosen by the user or by plugins).
_FREE_SECTIONS = {"plugins", "compression.model_thresholds"}

_CHOICES: dict[str, tuple[Any, ...]] = {
    "prompt_caching.cache_ttl": ("5m", "1h"),
}


def _fraction(value: float) -> bool:
    return 0 < value <= 1


_RANGES: dict[str, tuple[Any, str]] = {
    "compression.threshold": (_fraction, "a fraction between 0 and 1, e.g. 0.5"),
    "compression.target_ratio": (_fraction, "a fraction between 0 and 1, e.g. 0.2"),
    "compression.hygiene_threshold": (_fraction, "a fraction between 0 and 1, e.g. 0.85"),
    "compression.protect_last_n": (lambda v: v >= 1, "a whole number of at least 1"),
    "compression.small_window_floor": (lambda v: 0 <= v <= 1, "0 (off) or a fraction up to 1, e.g. 0.75"),
    "compression.threshold_tokens": (lambda v: v >= 1024, "a token count of at least 1024, or null"),
    "compression.summary_timeout": (lambda v: v > 0, "a positive number of seconds"),
    "memory.memory_char_limit": (lambda v: v > 0, "a positive number of characters"),
    "memory.user_char_limit": (lambda v: v > 0, "a positive number of characters"),
    "memory.nudge_interval": (lambda v: v >= 0, "0 (off) or a positive number of turns"),
    "memory.prefetch_timeout": (lambda v: v > 0, "a positive number of seconds, e.g. 8"),
    "memory.history_max_bytes": (lambda v: v >= 4096, "a number of bytes of at least 4096, e.g. 1048576"),
    "agent.max_iterations": (lambda v: v >= 1, "a positive number of model calls"),
    "agent.max_parallel_tools": (lambda v: 1 <= v <= 64, "a number from 1 to 64"),
    "prompt.context_file_max_chars": (lambda v: v >= 100, "at least 100 characters"),
    "prompt.disabled_layers": (lambda v: all(isinstance(x, str) and x for x in v), "a list of layer names"),
    "prompt.prefill_messages": (
        lambda v: all(isinstance(m, dict) and m.get("role") in ("user", "assistant")
                      and isinstance(m.get("content"), str) for m in v),
        "a list of {role: user|assistant, content: text} messages",
    ),
    "model.context_length": (lambda v: v >= 1024, "a context window of at least 1024 tokens"),
    "model.max_retries": (lambda v: 0 <= v <= 20, "a number of retries from 0 to 20"),
    "model.retry_base_delay": (lambda v: v >= 0, "a delay in seconds, 0 or more (e.g. 1.0)"),
    "logging.level": (lambda v: v.upper() in ("DEBUG", "INFO", "WARNING", "ERROR", "OFF"),
                      "one of DEBUG, INFO, WARNING, ERROR or OFF (no log file)"),
    "logging.max_bytes": (lambda v: v >= 1024, "a file size in bytes, at least 1024"),
    "logging.backup_count": (lambda v: 0 <= v <= 100, "a number of old log files from 0 to 100"),
}


# --------------------------------------------------------------------------------------
# Home
# --------------------------------------------------------------------------------------


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The Hermes home: the argument, else ``$HERMES_HOME``, else ``~/.hermes``.

    The directory is created when missing, private (0700, with ``memories/`` 0700 in
    it); a home that cannot be created or written raises :class:`HomeError` with the
    path and what to do. An existing home's permissions are left alone (``hermes
    doctor`` warns when they let others read it).
    """
    raw = home if home is not None else os.environ.get("HERMES_HOME") or "~/.hermes"
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise HomeError(f"HERMES_HOME {str(path)!r} is a file, not a directory. "
                        "Set HERMES_HOME to a directory (it is created when missing).")
    try:
        if not path.exists():
            path.mkdir(parents=True, exist_ok=True)
            # chmod after creating rather than changing the umask, which is process-wide.
            os.chmod(path, 0o700)
            (path / "memories").mkdir(exist_ok=True)
            os.chmod(path / "memories", 0o700)
    except OSError as exc:
        raise HomeError(
            f"cannot create HERMES_HOME {str(path)!r}: {exc.strerror or exc}. "
            "Set HERMES_HOME to a writable directory."
        ) from exc
    if not path.is_dir():
        raise HomeError(f"HERMES_HOME {str(path)!r} is not a directory. Set HERMES_HOME to a directory.")
    if not os.access(path, os.W_OK | os.X_OK):
        raise HomeError(
            f"HERMES_HOME {str(path)!r} is not writable. "
            "Fix its permissions or set HERMES_HOME to a writable directory."
        )
    return path.resolve()


#: A ``.env`` holds a handful of ``KEY=value`` lines; anything bigger is a mistake.
DOTENV_MAX_BYTES = 1 << 20


def read_dotenv(path: Path) -> dict[str, str]:
    """The variables the ``.env`` file ``path`` sets, parsed by python-dotenv (quoting,
    ``export``, inline ``# comments``, multi-line values); ``{}`` when there is no file.

    Nothing is written to ``os.environ``: each kernel keeps its own mapping
    (:attr:`hermes.Kernel.env`), so a second kernel on another home never sees this
    home's secrets. A file that cannot be read or decoded (or is a FIFO, which is refused
    rather than waited on) raises :class:`ConfigError` naming it.
    """
    text = _read_text(path, DOTENV_MAX_BYTES, holds="a .env holds a few KEY=value lines",
                      kind="a KEY=value file")
    if text is None:
        return {}
    import io

    from dotenv import dotenv_values  # only when a .env exists: keeps `--help` light

    return {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}


# --------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------


def _yaml() -> Any:
    """The ``yaml`` module, imported on first use: it is the costliest import of a
    ``hermes`` start, and a home without config.yaml never needs it."""
    import yaml

    return yaml


def _close_matches(word: str, choices: list[str]) -> list[str]:
    import difflib  # only when there is an error to explain

    return difflib.get_close_matches(word, choices, n=1)


#: config.yaml is a few kilobytes; a bigger file is a mistake, and is not read whole.
CONFIG_MAX_BYTES = 1 << 20
#: Values a config may expand to through YAML aliases (``*name``): far more than any real
#: config, far less than an alias bomb ("billion laughs") expands to.
CONFIG_MAX_NODES = 100_000


def read_config_bytes(path: Path, *, max_bytes: int = CONFIG_MAX_BYTES) -> str | None:
    """The UTF-8 text of ``path`` (a BOM dropped), ``None`` when it does not exist. At
    most ``max_bytes`` are read; a FIFO or device is refused without blocking. Every
    other problem is a :class:`ConfigError` naming the file and what to do."""
    return _read_text(path, max_bytes, holds="a config.yaml holds a few settings", kind="a YAML file")


def _read_text(path: Path, max_bytes: int, *, holds: str, kind: str) -> str | None:
    """The UTF-8 text (a BOM dropped) of the config file ``path`` through
    :func:`hermes.read_bounded`, ``None`` when it does not exist; every other problem is
    one :class:`ConfigError` line naming the file. ``holds`` says what such a file
    normally holds (for the too-large line), ``kind`` what to replace a non-file with."""
    from .util import FileTooLargeError, NotRegularFileError, read_bounded

    try:
        data = read_bounded(path, max_bytes)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegularFileError as exc:
        raise ConfigError(f"{path} is {exc.strerror}, not a regular file. Replace it with {kind} "
                          "or move it aside.", file=str(path)) from None
    except FileTooLargeError:
        raise ConfigError(f"{path} is larger than {max_bytes >> 10:,} KiB; {holds}. Trim it or "
                          "move it aside.", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}. Fix its permissions or "
                          "move it aside.", file=str(path)) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: not valid UTF-8 (byte 0x{data[exc.start]:02x}). "
                          "Save the file as UTF-8.", file=str(path)) from None


def _check_expansion(data: Any, path: Path) -> None:
    """Refuse a document whose aliases refer to themselves or expand past
    :data:`CONFIG_MAX_NODES` values: every later step (merging, validation, ``config
    show``) walks the expanded tree."""
    budget = CONFIG_MAX_NODES
    stack: list[tuple[Any, tuple[int, ...]]] = [(data, ())]
    while stack:
        node, parents = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(f"{path}: YAML aliases (*name) expand to more than "
                              f"{CONFIG_MAX_NODES:,} values. Write the values out instead of "
                              "nesting aliases.", file=str(path))
        if isinstance(node, (dict, list)):
            if id(node) in parents:
                raise ConfigError(f"{path}: a YAML alias (*name) refers to the value that "
                                  "contains it. Remove the self-reference.", file=str(path))
            children = list(node.values()) if isinstance(node, dict) else node
            stack.extend((child, (*parents, id(node))) for child in children
                         if isinstance(child, (dict, list)) or budget > 0)


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse a YAML mapping; errors name the file and line."""
    text = read_config_bytes(path)
    if text is None:
        return {}
    try:
        data = _yaml().safe_load(text)
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read. Fix the file, or move it aside "
                          "to use the defaults.", file=str(path)) from None
    except _yaml().YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"{where}: malformed YAML ({problem}). Fix the file, or move it aside to use the defaults.",
            file=str(path),
        ) from exc
    if data is None:
        return {}
    _check_expansion(data, path)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of sections (model:, memory: …), "
            f"not a {type(data).__name__}.",
            file=str(path),
        )
    return data


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``override`` merged in, recursively for mappings."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if value is None and isinstance(out.get(key), Mapping):
            continue  # `memory:` with every key commented out: an empty section
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and not _is_ref(value):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _is_ref(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in ("$env", "$file")


def _type_name(types: tuple[type, ...]) -> str:
    if float in types:
        return "a number"  # ints are numbers too
    names = {bool: "true/false", int: "a whole number", str: "a string",
             list: "a list", dict: "a mapping"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def validate(data: Mapping[str, Any], *, file: str | None = None) -> None:
    """Check user config against the defaults' shapes. Raises :class:`ConfigError`."""
    _validate(data, DEFAULTS, "", file)


def _validate(data: Mapping[str, Any], defaults: Mapping[str, Any], prefix: str, file: str | None) -> None:
    where = f"{file}: " if file else ""
    for key, value in data.items():
        path = f"{prefix}{key}"
        if not isinstance(key, str):
            raise ConfigError(f"{where}key {key!r} under {prefix[:-1] or 'the top level'} must be "
                              f"a string. Quote it in the file.", path=path, file=file)
        if prefix == "plugins.":
            _check_plugins_key(path, key, value, where, file)
            continue
        if prefix[:-1] in _FREE_SECTIONS:
            continue
        if key not in defaults:
            if not prefix:
                # Unknown top-level sections are kept (other tools share config.yaml);
                # `hermes config validate` warns about them (unknown_sections).
                continue
            known = list(defaults)
            hint = _close_matches(key, known)
            extra = f" Did you mean {hint[0]!r}?" if hint else f" Known keys: {', '.join(known)}."
            raise ConfigError(f"{where}{path}: unknown key.{extra}", path=path, file=file)
        default = defaults[key]
        if _is_ref(value):
            _check_ref(path, value, default, where, file)
            continue
        if isinstance(default, dict):
            if value is None:
                continue  # an empty section (every key commented out)
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"{where}{path}: expected a mapping of settings, got {value!r}.", path=path, file=file
                )
            _validate(value, default, f"{path}.", file)
            continue
        _check_scalar(path, value, default, where, file)


def _check_plugins_key(path: str, key: str, value: Any, where: str, file: str | None) -> None:
    """``plugins.disabled`` is a list of plugin names; ``plugins.<name>`` a mapping."""
    if key == "disabled":
        if value is None:
            return
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}{path}: expected a list of plugin names, e.g. [lcm, mem0], "
                              f"got {value!r}.", path=path, file=file)
        return
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(f"{where}{path}: expected a mapping of the plugin's settings "
                          f"(plugins.{key}.<setting>: value), got {value!r}.", path=path, file=file)


def _check_ref(path: str, value: Mapping[str, Any], default: Any, where: str, file: str | None) -> None:
    """``{$env: VAR}`` / ``{$file: path}`` stand for one scalar value."""
    kind, target = next(iter(value.items()))
    if isinstance(default, (dict, list)):
        raise ConfigError(f"{where}{path}: a {kind} reference can stand only for a single value, "
                          f"not a {'section' if isinstance(default, dict) else 'list'}.",
                          path=path, file=file)
    if not isinstance(target, str) or not target:
        what = "an environment variable name" if kind == "$env" else "a file path"
        raise ConfigError(f"{where}{path}: {kind} expects {what}, got {target!r}.", path=path, file=file)


def unknown_sections(data: Mapping[str, Any], known: Iterable[str] = ()) -> list[str]:
    """Top-level sections of user config that neither Hermes nor a loaded plugin
    (``known``: the sections plugins declare) knows, each with a hint (they are kept, as
    other tools may share the file, but are usually typos)."""
    names = [*DEFAULTS, *known]
    out = []
    for key in data:
        if isinstance(key, str) and key not in names:
            hint = _close_matches(key, names)
            out.append(f"{key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    return out


def _check_scalar(path: str, value: Any, default: Any, where: str, file: str | None) -> None:
    if default is None:
        types = _NULLABLE.get(path, (str,))
        ok = value is None or (isinstance(value, types) and not isinstance(value, bool))
    else:
        types = (float, int) if isinstance(default, float) else (type(default),)
        ok = isinstance(value, types) and (isinstance(default, bool) or not isinstance(value, bool))
    if not ok:
        raise ConfigError(
            f"{where}{path}: expected {_type_name(types)}, got {value!r} ({type(value).__name__}).",
            path=path, file=file,
        )
    if isinstance(default, list) and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}{path}: expected a list of names (strings), got {value!r}.",
                          path=path, file=file)
    if path in _CHOICES and value not in _CHOICES[path]:
        choices = ", ".join(map(str, _CHOICES[path]))
        raise ConfigError(f"{where}{path}: {value!r} is not one of {choices}.", path=path, file=file)
    if path in _RANGES and value is not None:
        check, expected = _RANGES[path]
        if not check(value):
            raise ConfigError(f"{where}{path}: expected {expected}, got {value!r}.", path=path, file=file)


# --------------------------------------------------------------------------------------
# The Config object
# --------------------------------------------------------------------------------------


class Config:
    """Settings of one kernel: defaults, overlaid by ``config.yaml``, overlaid by
    programmatic overrides.

    ``config.get("compression.threshold")`` reads a dotted path and resolves ``$env`` /
    ``$file`` references; :meth:`plugin` gives a plugin its ``plugins.<name>`` section.
    """

    def __init__(self, data: Mapping[str, Any], *, home: Path, file: Path | None = None,
                 env: Mapping[str, str] | None = None):
        self._data = deep_merge(DEFAULTS, data)
        self.home = home
        self.file = file
        #: Where ``{$env: VAR}`` is looked up: the kernel's environment (the process
        #: environment over the home's ``.env``), ``os.environ`` when built alone.
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.user_data = copy.deepcopy(dict(data))

    @classmethod
    def load(cls, home: Path, overrides: Mapping[str, Any] | None = None, *,
             env: Mapping[str, str] | None = None) -> Config:
        """Read ``home/config.yaml``, validate it and the overrides; ``env`` resolves
        ``{$env: VAR}`` (default ``os.environ``)."""
        path = home / CONFIG_FILE
        data = read_yaml(path)
        validate(data, file=str(path))
        if overrides:
            validate(overrides, file="(overrides)")
            data = deep_merge(data, overrides)
        return cls(data, home=home, file=path, env=env)

    def raw(self, path: str, default: Any = None) -> Any:
        """The value at ``path`` without resolving references."""
        node: Any = self._data
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def get(self, path: str, default: Any = None) -> Any:
        """The value at dotted ``path`` with ``$env``/``$file`` references resolved."""
        return self._resolve(self.raw(path, default), path)

    def section(self, path: str) -> dict[str, Any]:
        """A resolved copy of the mapping at ``path`` (``{}`` when absent)."""
        value = self.get(path, {})
        return value if isinstance(value, dict) else {}

    def plugin(self, name: str) -> dict[str, Any]:
        """The settings a plugin keeps under ``plugins.<name>``."""
        return self.section(f"plugins.{name}")

    def plugin_lenient(self, name: str) -> tuple[dict[str, Any], str]:
        """``(settings, error)``: the keys of ``plugins.<name>`` whose references resolve,
        and the first :class:`ConfigError` (an unset ``{$env: VAR}``) as text, or ``""``.
        For plugins that report an unresolvable secret as "unavailable, because …"
        instead of failing to build."""
        try:
            return self.plugin(name), ""
        except ConfigError as exc:
            raw = self.raw(f"plugins.{name}") or {}
            settings: dict[str, Any] = {}
            for key in raw if isinstance(raw, dict) else ():
                try:
                    settings[key] = self.get(f"plugins.{name}.{key}")
                except ConfigError:
                    continue
            return settings, str(exc)

    def as_dict(self, *, resolve: bool = False) -> dict[str, Any]:
        """The whole effective configuration (references kept unless ``resolve``)."""
        return self._resolve(copy.deepcopy(self._data), "") if resolve else copy.deepcopy(self._data)

    def _resolve(self, value: Any, path: str) -> Any:
        if _is_ref(value):
            kind, target = next(iter(value.items()))
            if kind == "$env":
                if target not in self.env:
                    raise ConfigError(
                        f"{path}: environment variable {target!r} is not set. "
                        f"Export it or add it to {self.home / '.env'}.",
                        path=path,
                    )
                return self.env[target]
            file = Path(str(target)).expanduser()
            if not file.is_absolute():
                file = self.home / file
            try:
                text = read_config_bytes(file)
            except ConfigError as exc:  # bad bytes, too big, not a file: say which key
                raise ConfigError(f"{path}: {exc}", path=path) from None
            if text is None:
                raise ConfigError(f"{path}: cannot read {file}: No such file or directory", path=path)
            return text.strip()
        if isinstance(value, dict):
            return {k: self._resolve(v, f"{path}.{k}" if path else k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolve(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value


# --------------------------------------------------------------------------------------
# Writing config.yaml: keep comments and order, atomically
# --------------------------------------------------------------------------------------

_KEY_RE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_.\-]+|\"[^\"]*\"|'[^']*')\s*:(?P<rest>.*)$")


def atomic_write_text(path: Path, text: str) -> None:
    """Kept for callers of ``hermes.config.atomic_write_text``; the helper lives in
    :mod:`hermes.util` (which imports this module, hence the late import)."""
    from .util import atomic_write_text as write

    write(path, text)


def _scalar(value: Any) -> str:
    return _yaml().safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...").strip()


def _edit_text(text: str, keys: list[str], value: Any) -> str | None:
    """Set ``keys`` to ``value`` in block-style YAML ``text`` by editing lines, so that
    comments and order survive. Returns ``None`` when the layout is too unusual.

    Walks down the path one key at a time (:func:`_find_key`); a missing remainder is
    inserted at the end of the innermost block found (:func:`_insert_path`); the last key
    gets the new scalar in place (:func:`_replace_value`)."""
    lines = text.splitlines()
    start, end, indent = 0, len(lines), -1
    for depth, key in enumerate(keys):
        found, end, child_indent = _find_key(lines, start, end, indent, key)
        if found is None:
            return _insert_path(lines, start, end, indent, child_indent, keys[depth:], value)
        m = _KEY_RE.match(lines[found])
        assert m is not None
        indent = len(m.group("indent"))
        block_end = _block_end(lines, found, indent)
        if depth == len(keys) - 1:
            return _replace_value(lines, found, block_end, m, value)
        rest = m.group("rest")
        if rest.strip() and not rest.strip().startswith("#"):
            return None  # a flow mapping or scalar where a section was expected
        start, end = found + 1, block_end
    return None


def _find_key(lines: list[str], start: int, end: int, indent: int,
              key: str) -> tuple[int | None, int, int | None]:
    """``(line of key, end of the block, indent of its children)`` among the direct
    children (lines indented deeper than ``indent``) of ``lines[start:end]``; the line is
    ``None`` when the key is not there."""
    child_indent = None
    for i in range(start, end):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _KEY_RE.match(line)
        cur = len(line) - len(line.lstrip())
        if cur <= indent:
            return None, i, child_indent
        if child_indent is None:
            child_indent = cur
        if cur != child_indent or not m:
            continue
        if m.group("key").strip("'\"") == key:
            return i, end, child_indent
    return None, end, child_indent


def _insert_path(lines: list[str], start: int, end: int, indent: int, child_indent: int | None,
                 keys: list[str], value: Any) -> str:
    """Insert the missing ``keys`` (nested) with ``value`` at the end of the block
    ``lines[start:end]``, before its trailing blank lines."""
    pad = " " * (child_indent if child_indent is not None else (indent + 2 if indent >= 0 else 0))
    new: list[str] = []
    for j, k in enumerate(keys):
        step = pad + "  " * j
        new.append(f"{step}{k}: {_scalar(value)}" if j == len(keys) - 1 else f"{step}{k}:")
    insert_at = end
    while insert_at > start and not lines[insert_at - 1].strip():
        insert_at -= 1
    lines[insert_at:insert_at] = new
    return "\n".join(lines) + "\n"


def _block_end(lines: list[str], found: int, indent: int) -> int:
    """The line after the block of the key on line ``found`` (its nested mapping or block
    list, comments included)."""
    block_end = found + 1
    while block_end < len(lines):
        line = lines[block_end]
        if line.strip() and not line.lstrip().startswith("#") and (len(line) - len(line.lstrip())) <= indent:
            if not line.lstrip().startswith("- ") or (len(line) - len(line.lstrip())) < indent:
                break
            if (len(line) - len(line.lstrip())) == indent and not line.lstrip().startswith("- "):
                break
        block_end += 1
    return block_end


def _replace_value(lines: list[str], found: int, block_end: int, m: re.Match[str], value: Any) -> str:
    """Give the key on line ``found`` the scalar ``value``, keeping its trailing comment;
    an old block value under it loses its content lines, every comment line stays."""
    comment = _trailing_comment(m.group("rest"))
    lines[found] = f"{m.group('indent')}{m.group('key')}: {_scalar(value)}{comment}"
    lines[found + 1 : block_end] = [
        line for line in lines[found + 1 : block_end]
        if not line.strip() or line.lstrip().startswith("#")
    ]
    return "\n".join(lines) + "\n"


def _trailing_comment(rest: str) -> str:
    """The ``  # comment`` after a value on a ``key: value`` line, or ``""``. A ``#``
    counts only where the text before it is complete YAML, so ``"a # b"`` is a value."""
    for i, char in enumerate(rest):
        if char != "#" or (i and rest[i - 1] not in " \t"):
            continue
        try:
            _yaml().safe_load(rest[:i] or "null")
        except _yaml().YAMLError:
            continue
        start = len(rest[:i].rstrip(" \t"))  # keep the user's spacing before the `#`
        return (rest[start:] if start else "  " + rest[i:]).rstrip()
    return ""


def set_config_value(home: Path, path: str, value: Any) -> Path:
    """Set dotted ``path`` to ``value`` in ``home/config.yaml``; see :func:`update_config`."""
    update_config(home, path, lambda _old: value)
    return (home / CONFIG_FILE).resolve()


def update_config(home: Path, path: str, update: Any) -> Any:
    """Read-modify-write one value of ``home/config.yaml`` under a lock:
    ``update(old_value)`` (``None`` when the key is absent) returns the new value, which is
    written and returned. Concurrent writers (two ``hermes plugins disable`` at once)
    are serialized, so no update is lost.

    Comments and key order are kept by editing lines in place; the file is replaced
    atomically (a symlinked config.yaml stays a symlink: its target is replaced) and
    re-read to check the edit, falling back to a full rewrite only when the layout is too
    unusual to edit. The result is validated before anything is written, so a bad value,
    or a file that is already malformed, leaves the file byte-identical.
    """
    # util is imported late: reading config never needs it.
    from .util import atomic_write_text, file_lock

    file = (home / CONFIG_FILE).resolve()
    with file_lock(file):
        current = read_yaml(file)  # first: refuses an unreadable or malformed file
        text = read_config_bytes(file) or ""
        keys = path.split(".")
        expected = copy.deepcopy(current)
        node = expected
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        value = update(copy.deepcopy(node.get(keys[-1])))
        node[keys[-1]] = value
        validate(expected, file=str(file))
        new_text = _edit_text(text, keys, value) if text.strip() else None
        if new_text is not None:
            try:
                ok = (_yaml().safe_load(new_text) or {}) == expected
            except _yaml().YAMLError:
                ok = False
            if not ok:
                new_text = None
        if new_text is None:
            new_text = _yaml().safe_dump(expected, sort_keys=False, allow_unicode=True)
        atomic_write_text(file, new_text)
    return value
