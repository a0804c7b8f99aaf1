"""The ``plugins.lcm`` section of ``config.yaml``, with defaults and validation.

A bad value fails when the engine is built (the start of a session), with the key path,
the value and what was expected — the same promise the kernel makes for its own keys.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from hermes import ConfigError

#: Every key, its default and what a valid value looks like.
_RULES: dict[str, tuple[Any, type, Any, str]] = {
    # key: (default, type, check, expectation)
    "threshold": (0.75, float, lambda v: 0 < v <= 1, "a fraction between 0 and 1, e.g. 0.75"),
    "fresh_tail_count": (32, int, lambda v: v >= 2, "a whole number of messages, at least 2"),
    "leaf_chunk_tokens": (20_000, int, lambda v: v >= 200, "a number of tokens, at least 200"),
    "leaf_fanout": (8, int, lambda v: v >= 2, "a whole number of nodes, at least 2"),
    "summary_max_tokens": (1_200, int, lambda v: v >= 32, "a number of tokens, at least 32"),
    "fallback_max_tokens": (512, int, lambda v: v >= 32, "a number of tokens, at least 32"),
    "summary_timeout": (120.0, float, lambda v: v > 0, "a positive number of seconds"),
    "summarizer": ("auxiliary", str, lambda v: v in ("auxiliary", "deterministic"),
                   "'auxiliary' (the auxiliary.compression model) or 'deterministic'"),
    "expand_max_chars": (12_000, int, lambda v: 200 <= v <= 200_000,
                         "a number of characters from 200 to 200000"),
    "grep_limit": (20, int, lambda v: 1 <= v <= 200, "a number of hits from 1 to 200"),
    "db_path": (None, str, lambda v: bool(v.strip()),
                "a file path (relative paths are inside HERMES_HOME)"),
}


@dataclass(frozen=True)
class LCMSettings:
    """Validated ``plugins.lcm.*`` values.

    * ``threshold`` — fraction of the model's window at which compaction starts.
    * ``fresh_tail_count`` — newest messages always kept verbatim in the live context.
    * ``leaf_chunk_tokens`` — most raw tokens one leaf summary covers.
    * ``leaf_fanout`` — this many summary nodes of one depth are condensed into a parent.
    * ``summary_max_tokens`` / ``fallback_max_tokens`` — size of model-written and of
      deterministic summaries.
    * ``summary_timeout`` — seconds one summarizer call may take.
    * ``summarizer`` — ``auxiliary`` (the ``auxiliary.compression`` model, falling back to
      deterministic summaries when it is missing or fails) or ``deterministic`` (never call
      a model).
    * ``expand_max_chars`` — page size of ``lcm_expand``; ``grep_limit`` — default hits of
      ``lcm_grep``.
    * ``db_path`` — the SQLite file, default ``$HERMES_HOME/lcm.db``.
    """

    threshold: float = 0.75
    fresh_tail_count: int = 32
    leaf_chunk_tokens: int = 20_000
    leaf_fanout: int = 8
    summary_max_tokens: int = 1_200
    fallback_max_tokens: int = 512
    summary_timeout: float = 120.0
    summarizer: str = "auxiliary"
    expand_max_chars: int = 12_000
    grep_limit: int = 20
    db_path: str | None = None

    @classmethod
    def from_config(cls, section: dict[str, Any] | None, prefix: str = "plugins.lcm") -> LCMSettings:
        """Validate a ``plugins.lcm`` mapping; unknown keys and bad values raise
        :class:`hermes.ConfigError` naming the key path."""
        section = dict(section or {})
        unknown = sorted(set(section) - set(_RULES))
        if unknown:
            raise ConfigError(
                f"{prefix}.{unknown[0]}: unknown setting. Valid settings: {', '.join(_RULES)}.",
                path=f"{prefix}.{unknown[0]}",
            )
        values: dict[str, Any] = {}
        for key, (default, kind, check, expected) in _RULES.items():
            value = section.get(key, default)
            if value is None:
                values[key] = default
                continue
            path = f"{prefix}.{key}"
            ok_type = isinstance(value, kind) and not isinstance(value, bool)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value, ok_type = float(value), True
            if not ok_type or not check(value):
                raise ConfigError(f"{path}: got {value!r}; expected {expected}.", path=path)
            values[key] = value
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain values (for ``lcm_describe`` and ``hermes lcm status``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
