"""Estimated cost of model calls from their usage and a price table.

The table is data: ``pricing.yaml`` beside this module (each price with its source and
date), with ``$HERMES_HOME/pricing.yaml`` entries overriding it. :func:`estimate_cost`
prices one call's :class:`hermes.Usage`; the runtime adds each call's estimate to the
session's ``estimated_cost_usd``. A model without an entry has no estimate (``None``),
never a misleading zero.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .contracts import Usage

log = logging.getLogger("hermes.pricing")

__all__ = ["Price", "estimate_cost", "load_prices"]

BUILTIN_TABLE = Path(__file__).with_name("pricing.yaml")
PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class Price:
    """USD per million tokens for one model family, and where the figure comes from."""

    match: str
    input: float
    output: float
    cache_read: float
    cache_write: float
    source: str = ""
    as_of: str = ""


def _read(path: Path) -> list[Price]:
    """The ``models`` of one table; a table that cannot be read is logged (one line naming
    the file) and contributes nothing."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        rows = data.get("models") or []
        return [Price(match=str(r["match"]).lower(), input=float(r["input"]), output=float(r["output"]),
                      cache_read=float(r.get("cache_read", r["input"])),
                      cache_write=float(r.get("cache_write", r["input"])),
                      source=str(r.get("source", "")), as_of=str(r.get("as_of", "")))
                for r in rows]
    except FileNotFoundError:
        return []
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning("%s: price table not usable (%s); fix it or delete it", path, exc)
        return []


def load_prices(home: str | Path | None = None) -> list[Price]:
    """The built-in table with ``$HERMES_HOME/pricing.yaml`` entries in front (they win
    on the same or a longer match)."""
    own = _read(Path(home) / "pricing.yaml") if home is not None else []
    return [*own, *_read(BUILTIN_TABLE)]


def price_for(model: str, prices: list[Price]) -> Price | None:
    """The entry whose ``match`` is the longest prefix of ``model`` (provider prefix such
    as ``openai/`` ignored; the first such entry wins a tie)."""
    name = model.lower().rsplit("/", 1)[-1]
    best: Price | None = None
    for price in prices:
        if name.startswith(price.match) and (best is None or len(price.match) > len(best.match)):
            best = price
    return best


def estimate_cost(model: str, usage: Usage | Any, prices: list[Price]) -> float | None:
    """USD for one call's ``usage`` (uncached input, cache reads and writes, output),
    or ``None`` when the model has no price."""
    price = price_for(model or "", prices)
    if price is None:
        return None
    return (usage.input_tokens * price.input + usage.output_tokens * price.output
            + usage.cache_read_tokens * price.cache_read
            + usage.cache_write_tokens * price.cache_write) / PER_TOKENS
