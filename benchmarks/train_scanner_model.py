"""Train the threat scanner's learned component (kernel/threat_model.json).

Deterministic: the same tune.jsonl gives the same file byte for byte. Trained ONLY on
tests/data/scanner/tune.jsonl; heldout.jsonl and fresh2.jsonl are never read here.

L2-regularised logistic regression by full-batch gradient descent over the features of
hermes.threat_model.features (binary, scaled by 1/sqrt(max(count, MIN_FEATURES)) like at scan time), on
features seen in at least two tune texts. The blocking threshold is chosen by 5-fold
cross-validation inside tune: the lowest probability whose out-of-fold false-positive
rate on tune's benign texts stays at or below --max-fp.

    python benchmarks/train_scanner_model.py [--check]   # --check: fail if the file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from hermes.safety import normalize_for_scan
from hermes.threat_model import MIN_FEATURES, MODEL_PATH, features

TUNE = Path(__file__).resolve().parents[1] / "tests" / "data" / "scanner" / "tune.jsonl"
L2 = 1e-5
STEPS = 3000
RATE = 10.0
QUANT = 1000  # weights are stored as integers of 1/QUANT


def load() -> tuple[list[list[str]], np.ndarray]:
    rows = [json.loads(line) for line in TUNE.read_text(encoding="utf-8").splitlines() if line.strip()]
    feats = [sorted(set(features(normalize_for_scan(r["text"]).lower()))) for r in rows]
    labels = np.array([1.0 if r["label"] == "attack" else 0.0 for r in rows])
    return feats, labels


def fit(feats: list[list[str]], y: np.ndarray) -> tuple[dict[str, float], float]:
    df = Counter(f for fs in feats for f in fs)
    vocab = {f: i for i, f in enumerate(sorted(f for f, n in df.items() if n >= 2))}
    rows, cols, vals = [], [], []
    for r, fs in enumerate(feats):
        scale = 1 / np.sqrt(max(len(fs), MIN_FEATURES))
        for f in fs:
            if f in vocab:
                rows.append(r)
                cols.append(vocab[f])
                vals.append(scale)
    R, C, V = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals)
    n, d = len(feats), len(vocab)
    w, b = np.zeros(d), 0.0
    # Classes weighted equally whatever their counts.
    cw = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    for _ in range(STEPS):
        z = np.bincount(R, weights=V * w[C], minlength=n) + b
        p = 1 / (1 + np.exp(-z))
        g = (p - y) * cw
        w -= RATE * (np.bincount(C, weights=V * g[R], minlength=d) + L2 * w)
        b -= RATE * g.sum()
    inv = sorted(vocab, key=vocab.get)
    return {f: float(w[i]) for i, f in enumerate(inv)}, float(b)


def prob(weights: dict[str, float], bias: float, fs: list[str]) -> float:
    z = bias + sum(weights.get(f, 0.0) for f in fs) / np.sqrt(max(len(fs), MIN_FEATURES))
    return float(1 / (1 + np.exp(-z)))


def threshold(feats: list[list[str]], y: np.ndarray, max_fp: float) -> tuple[float, dict]:
    folds = 5
    order = np.arange(len(y))  # stratified, deterministic: every 5th text of each label
    fold = np.zeros(len(y), dtype=int)
    for label in (0.0, 1.0):
        idx = order[y == label]
        fold[idx] = np.arange(len(idx)) % folds
    oof = np.zeros(len(y))
    for k in range(folds):
        train = [i for i in range(len(y)) if fold[i] != k]
        w, b = fit([feats[i] for i in train], y[train])
        for i in range(len(y)):
            if fold[i] == k:
                oof[i] = prob(w, b, feats[i])
    benign = np.sort(oof[y == 0])[::-1]
    allowed = int(np.floor(max_fp * len(benign)))
    t = float(benign[allowed]) + 1e-6 if allowed < len(benign) else 0.5
    t = max(t, 0.5)
    report = {"cv_block_rate": round(float((oof[y == 1] >= t).mean()), 4),
              "cv_false_positive_rate": round(float((oof[y == 0] >= t).mean()), 4)}
    return round(t, 3), report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-fp", type=float, default=0.0, help="out-of-fold FP budget on tune benign texts")
    parser.add_argument("--check", action="store_true", help="only check the packaged file is up to date")
    args = parser.parse_args()
    feats, y = load()
    t, report = threshold(feats, y, args.max_fp)
    weights, bias = fit(feats, y)
    kept = {f: round(w * QUANT) for f, w in sorted(weights.items()) if round(w * QUANT)}
    data = {"format": 1, "trained_on": "tests/data/scanner/tune.jsonl", "texts": len(y),
            "threshold": t, **report, "bias": round(bias, 4), "scale": 1 / QUANT, "weights": kept}
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=False) + "\n"
    if args.check:
        same = MODEL_PATH.exists() and MODEL_PATH.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{MODEL_PATH} is stale: run benchmarks/train_scanner_model.py")
        return 0 if same else 1
    MODEL_PATH.write_text(text, encoding="utf-8")
    print(json.dumps({"features": len(kept), "bytes": len(text.encode()), "threshold": t, **report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
