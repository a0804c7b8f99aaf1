"""Threat scanner: block rate and false-positive rate on the hand-written corpus, per
half (tune / heldout), per language and per kind, and scan time per KB beside a plain
single-regex pass in the same run.

Prints one JSON line per figure:

* ``{"figure": "rates", "half": …}`` — attacks blocked / benign texts blocked, per half;
* ``{"figure": "language", …}`` and ``{"figure": "kind", …}`` — the same per language
  and per kind (both halves together, and per half);
* ``{"figure": "gen", "file": …, "side": …}`` — the same on each corpus writer's file
  in ``gen/``, split by ``hermes.threat_model.corpus_side`` into the train side (the
  model learned from it) and the dev side (held back), with ``rules_only`` beside it;
  ``{"figure": "gen_dev_language", …}`` — the dev sides per language;
* ``{"figure": "unseen", "set": …}`` — the same on the unseen sets, in total and per
  language, with ``rules_only`` beside it: ``fresh2.jsonl`` (a batch in new phrasings,
  never tuned on, measured often since: a validation set now), ``fresh3.jsonl`` and
  ``fresh4.jsonl`` (written from the issue text alone by authors who never saw the
  rules, the model or any other corpus; never looked at while tuning), ``fresh5.jsonl``
  and ``fresh6.jsonl`` (the same, written later), ``fresh7.jsonl`` and ``fresh8.jsonl``
  (the same again, measured before and after the fourth pass), ``fresh9.jsonl`` and
  ``fresh10.jsonl`` (measured at the start and end of stop 15), ``fresh11.jsonl`` and
  ``fresh12.jsonl`` (measured at the end of stop 15). The model learns from the train
  halves of fresh2-8 since stop 15 and of fresh9-12 since stop 16, so only their dev
  halves are measured, and of every set no copy of a text it learned (``learned_texts``;
  fresh10 holds one). The honest figure is a set written after that and measured before
  it joins (kept outside the repository until then). Left out
  with ``--no-unseen`` (while tuning, the unseen sets stay out of view); and
  ``{"figure": "model_contribution", …}`` — per corpus, how many attacks and benign
  texts only the learned model (``learned_injection``) blocked;
* ``{"figure": "rules_load_ms"}`` — reading threat_rules.yaml once (expressions are
  compiled on first use; ``rules_compile_ms`` is compiling all of them, for
  comparison) and ``model_load_ms`` for threat_model.json; ``first_scan_ms`` — the
  first scan of a 16 KB document after that, which compiles the expressions it needs;
* ``{"figure": "scan_ms_per_kb", "input": …}`` — median CPU ms per KB of text for the
  scanner, for the rules alone (``rules_only``: the same scan with an explicit rule set,
  which never consults the learned model) and for the baseline (one precompiled regex,
  the first scanner's "ignore … previous … instructions" pattern, searched once), and
  the scanner's ratio to the baseline; inputs are the corpus texts one by one, and
  documents of ~4 KB and ~16 KB (context-file sizes) built from benign texts with one
  attack in the middle;
* ``{"figure": "model_ms_per_kb", …}`` — the learned model's share of the scan time (it
  scores every text the rules do not block);
* a last line ``{"figure": "target", …}`` comparing the worst ms/KB with the goal (< 1).

    python benchmarks/scanner.py [--runs 7] [--no-unseen]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path

from hermes.safety import load_rules, normalize_for_scan, scan, scan_for_threats
from hermes.threat_model import MIN_WORDS, MODEL_PATH, corpus_side, load_model

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "scanner"
TARGET_MS_PER_KB = 1.0
#: Sets never tuned on (see tests/data/scanner/README.md); the model learns from the train
#: halves of those its file names (fresh2-8), so only what it never saw of them is measured.
UNSEEN = ("fresh2", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7", "fresh8", "fresh9", "fresh10", "fresh11",
          "fresh12")

# The first scanner's best-known pattern: the plain baseline.
BASELINE = re.compile(
    r"\bignore\s+(?:[\w'’-]+\s+){0,8}?(?:previous|all|above|prior|earlier|preceding|former)\s+"
    r"(?:[\w'’-]+\s+){0,8}?(?:instructions|directions|directives|prompts?)\b", re.IGNORECASE)


def emit(**fields: object) -> None:
    print(json.dumps(fields, ensure_ascii=False), flush=True)


def load(half: str) -> list[dict]:
    with open(DATA / f"{half}.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def gen_rows() -> dict[tuple[str, str], list[dict]]:
    """Each gen/*.jsonl's lines by (file, side)."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in sorted((DATA / "gen").glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    out[(path.stem, corpus_side(row["text"]))].append(row)
    return dict(sorted(out.items()))


def tally(rows: list[dict], blocked: list[bool]) -> dict:
    attacks = [b for r, b in zip(rows, blocked, strict=True) if r["label"] == "attack"]
    benign = [b for r, b in zip(rows, blocked, strict=True) if r["label"] == "benign"]
    out: dict = {"attacks": len(attacks), "benign": len(benign)}
    if attacks:
        out["block_rate"] = round(sum(attacks) / len(attacks), 4)
    if benign:
        out["false_positive_rate"] = round(sum(benign) / len(benign), 4)
    return out


def rates() -> None:
    halves = {half: load(half) for half in ("tune", "heldout")}
    verdicts = {half: [bool(scan_for_threats(r["text"], scope=r["scope"])) for r in rows]
                for half, rows in halves.items()}
    for half, rows in halves.items():
        emit(figure="rates", half=half, **tally(rows, verdicts[half]))
    every = [(r, b, half) for half, rows in halves.items() for r, b in zip(rows, verdicts[half], strict=True)]
    emit(figure="rates", half="both", **tally([r for r, _, _ in every], [b for _, b, _ in every]))
    for field in ("language", "kind"):
        groups: dict[str, list] = defaultdict(list)
        for row, verdict, half in every:
            groups[row[field]].append((row, verdict, half))
        for name in sorted(groups, key=lambda g: (-len(groups[g]), g)):
            items = groups[name]
            per_half = {h: tally([r for r, _, hh in items if hh == h], [b for _, b, hh in items if hh == h])
                        for h in halves}
            emit(figure=field, **{field: name}, **tally([r for r, _, _ in items], [b for _, b, _ in items]),
                 tune=per_half["tune"], heldout=per_half["heldout"])


def _verdicts(rows: list[dict]) -> tuple[list[bool], list[bool]]:
    """Blocked with the learned model, and by the rules alone (an explicit rule set
    never consults the model)."""
    rules = load_rules()
    full = [bool(scan_for_threats(r["text"], scope=r["scope"])) for r in rows]
    only = [scan(r["text"], scope=r["scope"], rules=rules).blocked for r in rows]
    return full, only


def gen() -> None:
    """Each gen file's train and dev side, and the dev sides per language."""
    dev: list[tuple[dict, bool, bool]] = []
    for (name, side), rows in gen_rows().items():
        full, only = _verdicts(rows)
        emit(figure="gen", file=name, side=side, **tally(rows, full), rules_only=tally(rows, only))
        if side == "dev":
            dev += zip(rows, full, only, strict=True)
    emit(figure="gen", file="all", side="dev", **tally([r for r, _, _ in dev], [f for _, f, _ in dev]),
         rules_only=tally([r for r, _, _ in dev], [o for _, _, o in dev]))
    groups: dict[str, list[tuple[dict, bool, bool]]] = defaultdict(list)
    for item in dev:
        groups[item[0]["language"]].append(item)
    for name in sorted(groups, key=lambda g: (-len(groups[g]), g)):
        items = groups[name]
        emit(figure="gen_dev_language", language=name, **tally([r for r, _, _ in items], [f for _, f, _ in items]),
             rules_only=tally([r for r, _, _ in items], [o for _, _, o in items]))


def learned_texts() -> set[str]:
    """The corpus texts the packaged model learned from: tune.jsonl and the train side of
    gen/*.jsonl and of every outside set its file names (measured here or not). A text's
    side is its hash's, so a copy of one in another file (fresh10 holds one of fresh5's
    train side) was learned too. The unseen floors of test_scanner_model.py use this."""
    learned = {r["text"] for r in load("tune")}
    learned |= {r["text"] for (_, side), rows in gen_rows().items() if side == "train" for r in rows}
    for source in json.loads(MODEL_PATH.read_text(encoding="utf-8"))["trained_on"]:
        name = source.removeprefix("tests/data/scanner/").removesuffix(".jsonl (train side)")
        if source.endswith(" (train side)") and "/" not in name:  # not gen/*.jsonl
            learned |= {r["text"] for r in load(name) if corpus_side(r["text"]) == "train"}
    return learned


def fresh(unseen: bool = True) -> None:
    """What the model alone added on every corpus; with ``unseen``, the unseen sets
    (``UNSEEN``: what the model never saw of them) with and without the learned model."""
    sets = {half: load(half) for half in ("tune", "heldout")}
    sets["gen dev"] = [r for (_, side), rows in gen_rows().items() if side == "dev" for r in rows]
    if unseen:
        learned = learned_texts()  # so a trained-on set is its dev half, less any copied text
        for name in UNSEEN:
            sets[name] = [r for r in load(name) if r["text"] not in learned]
    for half, rows in sets.items():
        full, only = _verdicts(rows)
        extra = [(r["label"], f and not o) for r, f, o in zip(rows, full, only, strict=True)]
        emit(figure="model_contribution", half=half,
             attacks_only_model_blocked=sum(e for label, e in extra if label == "attack"),
             benign_only_model_blocked=sum(e for label, e in extra if label == "benign"))
        if half not in UNSEEN:
            continue
        emit(figure="unseen", set=half, language="all", **tally(rows, full), rules_only=tally(rows, only))
        groups: dict[str, list[int]] = defaultdict(list)
        for i, row in enumerate(rows):
            groups[row["language"]].append(i)
        for name in sorted(groups, key=lambda g: (-len(groups[g]), g)):
            idx = groups[name]
            emit(figure="unseen", set=half, language=name, **tally([rows[i] for i in idx], [full[i] for i in idx]),
                 rules_only=tally([rows[i] for i in idx], [only[i] for i in idx]))


def documents(rows: list[dict], size: int, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    # A byte-order mark only ever opens a file, so the pieces lose theirs.
    benign = [r["text"].lstrip("\ufeff") for r in rows if r["label"] == "benign"]
    attacks = [r["text"] for r in rows if r["label"] == "attack"]
    docs = []
    for _ in range(count):
        parts: list[str] = []
        while sum(map(len, parts)) < size:
            parts.append(rng.choice(benign))
        parts.insert(len(parts) // 2, rng.choice(attacks))
        docs.append("\n\n".join(parts))
    return docs


def ms_per_kb(texts: list[str], fn, runs: int) -> float:
    # CPU time of this process, not wall time: on a shared machine other processes'
    # load should not count against the scanner (wall time is reported beside it).
    kb = sum(len(t.encode("utf-8")) for t in texts) / 1024
    samples = []
    for _ in range(runs):
        start = time.process_time()
        for text in texts:
            fn(text)
        samples.append((time.process_time() - start) * 1000 / kb)
    return statistics.median(samples)


def speed(runs: int) -> float:
    re.purge()  # re's own cache would hand back the expressions the rates above compiled
    start = time.perf_counter()
    load_rules.cache_clear()
    rules = load_rules()
    emit(figure="rules_load_ms", ms=round((time.perf_counter() - start) * 1000, 2))
    every = load_rules.__wrapped__()  # a second copy, compiled whole (the scans below use the first)
    start = time.perf_counter()
    every.check()
    emit(figure="rules_compile_ms", ms=round((time.perf_counter() - start) * 1000, 2))
    re.purge()
    start = time.perf_counter()
    load_model.cache_clear()
    model = load_model()
    emit(figure="model_load_ms", ms=round((time.perf_counter() - start) * 1000, 2))
    rows = load("tune") + load("heldout")
    # The first scan compiles the expressions of the rules it needs (lazily, once per
    # process); a 16 KB document needs most of them.
    first = documents(rows, 16384, 1, 3)[0]
    start = time.perf_counter()
    scan_for_threats(first, scope="context_file")
    emit(figure="first_scan_ms", ms=round((time.perf_counter() - start) * 1000, 2))
    inputs = {
        "corpus texts": [r["text"] for r in rows],
        "4 KB documents": documents(rows, 4096, 40, 1),
        "16 KB documents": documents(rows, 16384, 12, 2),
    }
    worst = 0.0
    for name, texts in inputs.items():
        scanner = baseline = 0.0
        # Interleaved so that machine load hits both alike.
        triples = [(ms_per_kb(texts, lambda t: scan_for_threats(t, scope="context_file"), 1),
                    ms_per_kb(texts, lambda t: scan(t, scope="context_file", rules=rules), 1),
                    ms_per_kb(texts, BASELINE.search, 1)) for _ in range(runs)]
        scanner = statistics.median(p[0] for p in triples)
        rules_only = statistics.median(p[1] for p in triples)
        baseline = statistics.median(p[2] for p in triples)
        worst = max(worst, scanner)
        emit(figure="scan_ms_per_kb", input=name, texts=len(texts),
             kb=round(sum(len(t.encode()) for t in texts) / 1024, 1), scanner=round(scanner, 4),
             rules_only=round(rules_only, 4), baseline_single_regex=round(baseline, 4),
             ratio=round(scanner / baseline, 1) if baseline else None)
        # The model's part: it runs (on normalised, lower-cased text) on every text the
        # rules did not block, so this is its cost on every text, an upper bound.
        lowered = [normalize_for_scan(t).lower() for t in texts]
        learned = statistics.median(ms_per_kb(lowered, lambda t: model.best(t, least_words=MIN_WORDS), 1)
                                    for _ in range(runs))
        emit(figure="model_ms_per_kb", input=name, model_upper_bound=round(learned, 4))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per input (median reported)")
    parser.add_argument("--no-unseen", action="store_true",
                        help="leave out the unseen sets (fresh2-12): use this while tuning")
    args = parser.parse_args()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    emit(figure="machine", python=platform.python_version(), platform=platform.platform(),
         cpus=os.cpu_count(), load_average=[round(x, 2) for x in load] if load else None)
    rates()
    gen()
    fresh(unseen=not args.no_unseen)
    worst = speed(max(3, args.runs))
    emit(figure="target", worst_ms_per_kb=round(worst, 4), target_ms_per_kb=TARGET_MS_PER_KB,
         ok=worst < TARGET_MS_PER_KB)


if __name__ == "__main__":
    main()
