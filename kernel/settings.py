"""Plugin settings, declared once: the schema of a plugin's ``plugins.<name>`` section.

A plugin (module or object) sets ``hermes_settings`` to a mapping of setting name to
:class:`Setting`. The same declaration is checked when a kernel starts, by ``hermes config
validate`` and by ``hermes doctor`` (:meth:`hermes.Kernel.settings_errors`), and it gives
the plugin its values with defaults filled (:meth:`hermes.Kernel.plugin_settings`), so a
setting that ``config validate`` accepts is never refused later by the plugin itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import _is_ref
from .errors import ConfigError

#: The attribute of a plugin module or object that holds its settings schema.
SETTINGS_ATTRIBUTE = "hermes_settings"


@dataclass(frozen=True)
class Setting:
    """One setting: the accepted types, the default, a description for docs and doctor,
    and optional ``choices`` (strings match ignoring case and are handed on as declared)
    and bounds (``minimum`` / ``maximum``, inclusive; ``positive`` excludes 0). ``None`` is
    accepted when the default is ``None``."""

    type: type | tuple[type, ...] = object
    default: Any = None
    description: str = ""
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False
    secret: bool = False

    def problem(self, value: Any) -> str:
        """What is wrong with ``value`` (``""`` when it is fine)."""
        if value is None and self.default is None:
            return ""
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if float in types and int not in types:
            types = (*types, int)
        numeric = any(t in (int, float) for t in types)
        if not isinstance(value, types) or (numeric and isinstance(value, bool) and bool not in types):
            names = " or ".join(t.__name__ for t in types)
            return f"expected {names}, got {value!r} ({type(value).__name__})"
        if self.choices and self.normalise(value) not in self.choices:
            return f"{value!r} is not one of {', '.join(map(str, self.choices))}"
        if numeric and isinstance(value, (int, float)):
            if self.positive and value <= 0:
                return f"expected a positive number, got {value!r}"
            if self.minimum is not None and value < self.minimum:
                return f"expected at least {self.minimum}, got {value!r}"
            if self.maximum is not None and value > self.maximum:
                return f"expected at most {self.maximum}, got {value!r}"
        return ""

    def normalise(self, value: Any) -> Any:
        """``value`` in the spelling the schema declares: a string matching one of the
        string ``choices`` ignoring case becomes that choice (``FULL`` -> ``full``), since
        the values behind choices (SQLite pragmas, log levels) rarely care about case and
        a user should not have to. An exact match wins; anything else is returned as is."""
        if not isinstance(value, str) or value in self.choices:
            return value
        folded = value.casefold()
        for choice in self.choices:
            if isinstance(choice, str) and choice.casefold() == folded:
                return choice
        return value


#: The attribute of a plugin module or object naming the top-level config.yaml sections
#: it reads (``hermes_config_sections = ("mcp_servers",)``): ``hermes config validate``
#: does not call those unknown while the plugin is loaded.
SECTIONS_ATTRIBUTE = "hermes_config_sections"


def declared_sections(plugin: Any) -> tuple[str, ...]:
    """The top-level config sections a plugin declares (a name, or an iterable of names)."""
    names = getattr(plugin, SECTIONS_ATTRIBUTE, None)
    if isinstance(names, str):
        return (names,)
    try:
        return tuple(n for n in names or () if isinstance(n, str))
    except TypeError:  # not iterable: declares nothing
        return ()


def settings_schema(plugin: Any) -> Mapping[str, Setting] | None:
    """The schema a plugin declares, or ``None``."""
    schema = getattr(plugin, SETTINGS_ATTRIBUTE, None)
    return schema if isinstance(schema, Mapping) else None


def check_settings(name: str, raw: Any, schema: Mapping[str, Setting],
                   file: str | None = None) -> list[ConfigError]:
    """Every problem of the raw ``plugins.<name>`` section against ``schema``: unknown
    keys (with the valid ones) and bad values, each a :class:`ConfigError` naming the key
    path. ``{$env}`` / ``{$file}`` references are checked once resolved, not here."""
    prefix = f"plugins.{name}"
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        return [ConfigError(f"{prefix}: expected a mapping of settings, got {raw!r}.",
                            path=prefix, file=file)]
    errors = []
    for key, value in raw.items():
        path = f"{prefix}.{key}"
        setting = schema.get(key)
        if setting is None:
            valid = ", ".join(schema) or "(none)"
            errors.append(ConfigError(f"{path}: unknown setting of plugin {name}. Valid settings: "
                                      f"{valid}.", path=path, file=file))
            continue
        if _is_ref(value):
            continue
        problem = setting.problem(value)
        if problem:
            errors.append(ConfigError(f"{path}: {problem}.", path=path, file=file))
    return errors


def with_defaults(values: Mapping[str, Any], schema: Mapping[str, Setting]) -> dict[str, Any]:
    """``values`` (resolved) over the schema's defaults, each in its declared spelling
    (:meth:`Setting.normalise`)."""
    out = {key: setting.default for key, setting in schema.items()}
    out.update({k: schema[k].normalise(v) if k in schema else v
                for k, v in values.items() if v is not None or k not in out})
    return out


__all__ = ["SETTINGS_ATTRIBUTE", "Setting", "check_settings", "settings_schema", "with_defaults"]
