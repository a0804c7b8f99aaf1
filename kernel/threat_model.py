"""The scanner's learned component: a small linear model over word and character
features, read from ``threat_model.json`` next to this module on the first scan that
needs it (never at ``import hermes``).

The rules in ``threat_rules.yaml`` catch the forms they describe; phrasings nobody wrote
a rule for slip through. This model was trained (``benchmarks/train_scanner_model.py``,
deterministic, on ``tests/data/scanner/tune.jsonl`` only) to recognise the *vocabulary*
of an attack — "rules … no longer … only obey", "sans … restrictions", "忽略 … 设定" —
and it is consulted only when the rules did not block: its probability above the
file's ``threshold`` blocks as the finding ``learned_injection``, naming the sentence
and the words that weighed most.

Features, computed on the scanner's normalised, lower-cased text: every word, its first
five letters (so inflections share a feature), each pair of neighbouring words (and of
their prefixes), and for scripts written without spaces (Chinese, Japanese, Thai …) the
character pairs and triples of each run. Long texts are cut into pieces of at most
:data:`CHUNK` characters at sentence ends and at every blank line, each scored on its
own, the highest wins: an attack paragraph in the middle of a long README is not
diluted by the README (a sentence run into its neighbours' lines still can be).
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path

MODEL_PATH = Path(__file__).with_name("threat_model.json")

#: Longest piece of text scored as one (characters); pieces end at sentence ends.
CHUNK = 320
#: The feature sum is divided by sqrt(max(count, MIN_FEATURES)): a piece of two or three
#: words ("👩‍💻 and 🏳️‍🌈") says too little to be judged on a single weight.
MIN_FEATURES = 12

_WORD_RE = re.compile(r"\w+")
_SENTENCE_RE = re.compile(r"[^.!?。！？\n]*(?:[.!?。！？\n]+|$)")
# Scripts that do not separate words by spaces: a "word" there is a whole clause.
_UNSPACED_RE = re.compile(r"[\u0e00-\u0eff\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")


def features(lower: str) -> list[str]:
    """The feature names of one piece of normalised, lower-cased text (with repeats)."""
    words = _WORD_RE.findall(lower)
    out: list[str] = []
    append = out.append
    prev = prev_p = ""
    for w in words:
        p = w[:5]
        append(w)
        if len(w) > 5:
            append(p + "~")
        if prev:
            append(prev + " " + w)
            append(prev_p + "~ " + p + "~")
        if not w.isascii() and _UNSPACED_RE.search(w):  # isascii: a cheap no first
            out.extend(w[i:i + 2] for i in range(len(w) - 1))
            out.extend(w[i:i + 3] for i in range(len(w) - 2))
        prev, prev_p = w, p
    return out


def chunks(lower: str) -> list[tuple[int, int]]:
    """``(start, end)`` pieces of ``lower``, each at most about :data:`CHUNK` long, cut
    at sentence ends (a sentence longer than that is cut where it reaches the limit) and
    always at a blank line."""
    out: list[tuple[int, int]] = []
    start = end = 0
    for m in _SENTENCE_RE.finditer(lower):
        if m.end() == m.start():
            continue
        if m.end() - start > CHUNK and end > start:
            out.append((start, end))
            start = end
        while m.end() - start > CHUNK:
            out.append((start, start + CHUNK))
            start += CHUNK
        end = m.end()
        if m.group(0).count("\n") >= 2:  # a paragraph ends: its neighbours cannot dilute it
            out.append((start, end))
            start = end
    if end > start:
        out.append((start, end))
    return out


class ThreatModel:
    """Weights by feature name, a bias and the blocking threshold (a probability)."""

    def __init__(self, weights: dict[str, float], bias: float, threshold: float, source: str = "") -> None:
        self.weights, self.bias, self.threshold, self.source = weights, bias, threshold, source

    def score(self, lower: str) -> float:
        """The probability that ``lower`` (one piece) is an attack."""
        distinct = set(features(lower))
        get = self.weights.get
        z = self.bias + sum(get(f, 0.0) for f in distinct) / math.sqrt(max(len(distinct), MIN_FEATURES))
        return 1 / (1 + math.exp(-z))

    def best(self, lower: str) -> tuple[float, tuple[int, int]]:
        """The highest-scoring piece of ``lower``: its probability and span."""
        best, where = 0.0, (0, 0)
        score = self.score
        for start, end in chunks(lower):
            p = score(lower[start:end])
            if p > best:
                best, where = p, (start, end)
        return best, where

    def evidence(self, piece: str, top: int = 4) -> list[str]:
        """The features of ``piece`` that pushed hardest towards "attack"."""
        get = self.weights.get
        ranked = sorted(set(features(piece)), key=lambda f: -get(f, 0.0))
        return [f for f in ranked[:top] if get(f, 0.0) > 0]


@lru_cache(maxsize=2)
def load_model(path: str | Path | None = None) -> ThreatModel:
    """The model in ``path`` (default: the packaged ``threat_model.json``), read once per
    process."""
    source = Path(path) if path is not None else MODEL_PATH
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
        scale = float(data["scale"])
        weights = {f: q * scale for f, q in data["weights"].items()}
        return ThreatModel(weights, float(data["bias"]), float(data["threshold"]), str(source))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{source}: cannot read the scanner model ({exc}); reinstall hermes or "
                         "rebuild it with benchmarks/train_scanner_model.py") from None
