"""Reading the scanner corpus (tests/data/scanner/), for the scanner's tests: one loader
instead of a copy in each test file."""

from __future__ import annotations

import json
from pathlib import Path

from hermes.threat_model import corpus_side

DATA = Path(__file__).resolve().parents[1] / "data" / "scanner"


def load(name: str) -> list[dict]:
    """Every line of ``tests/data/scanner/<name>.jsonl`` (``tune``, ``heldout`` …)."""
    with open(DATA / f"{name}.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_gen(side: str) -> dict[str, list[dict]]:
    """The corpus writers' files (gen/*.jsonl) by name, each cut to ``side`` ("train":
    the model learned from it; "dev": held back)."""
    out = {}
    for path in sorted((DATA / "gen").glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            out[path.stem] = [r for r in map(json.loads, filter(str.strip, fh)) if corpus_side(r["text"]) == side]
    return out
