"""Train the threat scanner's learned component (kernel/threat_model.json).

Deterministic: the same inputs give the same file byte for byte. What it reads:

* ``tests/data/scanner/tune.jsonl`` (every line);
* the TRAIN half of each ``tests/data/scanner/gen/*.jsonl`` (the corpus writers' files):
  each line's side is fixed by a hash of its text (``hermes.threat_model.corpus_side``),
  so lines appended later keep theirs and the halves stay stratified by label and
  language in expectation; the DEV halves are never read here;
* the TRAIN half of the outside sets already measured (``OUTSIDE``: fresh2-12, written by
  authors who read nothing in the repository, each measured as an unseen set before it
  joined), split the same way; their dev halves are validation sets. A new unseen set is
  measured first and added to ``OUTSIDE`` only after that;
* hard negatives: the 2,000 ordinary chat messages of ``benchmarks/recall_corpus`` and
  ``tests/data/scanner/benign_extra.jsonl``, paragraphs of this repository's docs
  (a snapshot, so that editing a doc does not change the model; ``--refresh-extras``
  rebuilds it, leaving out every paragraph the rules block — those quote attacks).

``heldout.jsonl``, the gen and outside dev halves and the fresh sets not in ``OUTSIDE`` are
never read. A text's side is its hash's, whatever file holds it, so a text copied into
two files is learned through its train-side copy (one benign line of fresh10 is also on
fresh5's train side): the unseen floors of tests/safety/test_scanner_model.py leave such
copies out, and a test there fails if heldout.jsonl or a gen dev side holds one.

L2-regularised logistic regression by full-batch gradient descent over the features of
hermes.threat_model.features (binary, scaled by 1/sqrt(max(count, MIN_FEATURES)) like at
scan time), on features seen in at least two training texts. Attacks and benign texts
weigh the same in total; within the benign side, the labelled look-alikes, the long
labelled documents (gen/docs*.jsonl), the chat messages and the doc paragraphs have
fixed shares. Long benign texts are trained on in the pieces the scanner scores
(hermes.threat_model.chunks); a long attack is fitted whole first, then, in a second
fit, by the one of its pieces the first fit finds most like an attack (the scanner
judges pieces, and the attack in a long document is one paragraph of it).

Beside it, a second linear model over character n-grams (hermes.threat_model.char_grams,
binary, weighted by idf and divided by sqrt(max(count, MIN_FEATURES)); the CHAR_KEEP
largest weights kept), fitted by L-BFGS on the same rows and weights, with each long
attack represented by the piece the word model chose. At scan time a piece's log-odds
are ``mix`` times the word model's plus the rest times the character model's; the
character model is skipped where the word model's log-odds are below ``char_floor``.

``threshold`` is chosen on out-of-fold probabilities (5-fold cross-validation over the
training texts, each text scored as at scan time: its best piece): the lowest
probability whose out-of-fold false-positive rate is at most --max-fp on every benign
source (the labelled texts and long documents together, chat, docs). The discount of a long text's best piece
(``piece_discount``, per ln(pieces)) is chosen the same way: of DISCOUNTS, the one whose
threshold blocks the most out-of-fold attacks, and with it the mix (of MIXES; 1.0 is the
word model alone); then ``char_floor``, the highest of FLOORS that loses at most
FLOOR_MISS of the attacks blocked out of fold. (A second, lower threshold for texts
where a rule raised a weak hint came out equal to this one and was dropped.)
``veto`` (below it the model overrules a single rule's plain-text match, hermes.safety
step 8) is chosen on the same out-of-fold probabilities: the highest of VETOES that lets
at most VETO_MISS of the training attacks the rules block through.

The ``referee`` (hermes.threat_model.Referee, the same step) is a third linear model,
fitted by L-BFGS on the texts a second opinion may overrule (one rule's plain match,
enough words around it): the attacks among them against the benign look-alikes, weighing
half each. (At scan time it is asked only when the pieces holding the match have enough
words besides it, hermes.safety._REFEREE_CONTEXT; it is trained on all of them, so its
threshold is chosen on more attacks than it will judge.) It reads the features of the pieces holding the match and the word model's
out-of-fold probabilities of those pieces and of the best piece (stacked, so that it
learns how far to trust the word model on a text it has not seen). Its threshold is
chosen out of fold within those texts (5 folds): the lowest log-odds that overrules at
most REFEREE_MISS of their attacks.

The five folds' fits and the final one are independent and run two at a time in forked
processes, each with one BLAS thread (set here, whatever the caller's environment: a sum
split over another number of threads can differ in its last bits, and the packaged file is
checked byte for byte). About 3 minutes on two cores.

    python benchmarks/train_scanner_model.py [--check] [--refresh-extras]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import sys
from collections import Counter
from pathlib import Path

# One BLAS thread per process, whatever the caller's environment: the folds run in two
# processes at once, and a sum split over a varying number of threads can differ in its
# last bits, which the packaged file (checked byte for byte) must not.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402 — after the thread settings above
from scipy.optimize import minimize  # noqa: E402
from scipy.sparse import csr_matrix  # noqa: E402

from hermes.safety import load_rules, normalize_for_scan, scan  # noqa: E402
from hermes.threat_model import (  # noqa: E402
    CHUNK,
    MIN_FEATURES,
    MIN_WORDS,
    MODEL_PATH,
    Lexicon,
    ReadsAllAsOrdinary,
    Referee,
    ThreatModel,
    char_grams,
    chunks,
    corpus_side,
    discount,
    features,
    substantial,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "scanner"
TUNE = DATA / "tune.jsonl"
GEN = DATA / "gen"
#: The measured unseen sets whose train halves are trained on (see the module notes). Their
#: texts are the nearest thing to attacks nobody has shown the scanner: the first stop that
#: trained on them gained 1.8 points of attacks blocked on their dev halves (80.1% ->
#: 81.9%) at the same false positives.
OUTSIDE = ("fresh2", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7", "fresh8", "fresh9", "fresh10",
           "fresh11", "fresh12")
EXTRA = DATA / "benign_extra.jsonl"
CONCEPTS = ROOT / "kernel" / "threat_concepts.yaml"
CHAT = ROOT / "benchmarks" / "recall_corpus" / "sessions.jsonl"
L2 = 1e-6
STEPS = 2000
RATE = 8.0
MOMENTUM = 0.9
QUANT = 100  # weights are stored as integers of 1/QUANT …
#: … and weights smaller than this are dropped (in the cross-validation too). 0.08 since the
#: fifth batch (0.05 before): at 0.05 the file grew to 1.52 MB, over its 1.5 MB budget;
#: at 0.08 it is 1.36 MB and no worse on the validation sets (at least 4 texts per
#: feature instead, 1.12 MB, lost 0.4-0.8 points of attacks on the validation sets).
PRUNE = 0.08
FOLDS = 5
#: Processes sharing the six fits (this is a two-core machine; CI's budget is tight).
WORKERS = 2
#: Piece discounts tried (hermes.threat_model.discount); cross-validation picks one. Not
#: beyond 1.0: the short texts dominate the out-of-fold block rate, and at 1.5 (which it
#: picked) an attack paragraph in a 6 KB context file needed odds no paragraph reaches
#: (test_attacks_stay_blocked_inside_long_documents lost one; gen dev docs 55% -> 49%).
DISCOUNTS = (0.5, 0.75, 1.0)
MISSED = 3.0  # attacks the rules miss weigh this many times more (see design)
#: A feature is learned if seen in this many texts (2 until the fourth training batch: with
#: 22,000 texts it gave 106,000 features, 1.8 MB, over the file's budget, and was no
#: better on the validation sets).
MIN_TEXTS = 3
#: Shares of the benign side's total weight (attacks weigh 0.5 in all).
SHARES = {"labelled": 0.3, "long": 0.1, "chat": 0.05, "docs": 0.05}
#: The character model (hermes.threat_model.char_grams): L2 penalty, L-BFGS iterations,
#: and how many of its weights are kept (the largest, after idf). Measured on the
#: validation sets with scikit-learn first: binary n-grams weighted by idf and divided by
#: sqrt(count) did as well as sublinear TF-IDF (58.7% against 57.5% of attacks at 2% FP,
#: with the rules), and cost one set and one lookup per n-gram at scan time.
CHAR_L2 = 5e-6
CHAR_STEPS = 300
CHAR_KEEP = 60000
#: Weights of the word model's log-odds in the mix (the rest is the character model's);
#: cross-validation picks one. 1.0 is the word model alone.
MIXES = (0.3, 0.5, 1.0)
#: The referee (see the module notes): its L2 penalty, and the share of the overrulable
#: attacks its threshold may let through out of fold. Chosen on the validation sets (gen
#: and fresh2-12 dev halves, fresh13-23 in aggregate), the same model without and with a
#: referee: benign texts blocked 281 -> 215, 18 -> 15, 7 -> 4 and 59 -> 44 for 12, 0, 2
#: and 2 attacks (penalties 3e-5 to 1e-2 and shares of 0.5% to 1% tried; 1e-3 and 0.5%
#: freed about half as many).
REFEREE_L2 = 1e-4
REFEREE_MISS = 0.01
#: Floors tried for the word model's log-odds below which the character model is not
#: asked (hermes.threat_model.ThreatModel): the highest that loses at most FLOOR_MISS of
#: the attacks the mix blocks out of fold. With the first mix trained (n-grams of 2 to 5),
#: a floor of -1 skipped 59% of the validation pieces and changed no verdict there.
FLOORS = (-4.0, -3.0, -2.0, -1.5, -1.0, -0.5)
FLOOR_MISS = 0.001


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as exc:
            print(f"{path}:{n}: skipped, not JSON ({exc}); tell the file's writer", file=sys.stderr)
    return rows


def corpus_rows(side: str) -> list[dict]:
    """The lines of every gen/*.jsonl and ``OUTSIDE`` set on ``side`` ("train" or "dev"),
    with ``set`` naming the file; lines missing a field are skipped with one line naming
    them."""
    out = []
    paths = sorted(GEN.glob("*.jsonl")) if GEN.is_dir() else []
    for path in [*paths, *(DATA / f"{name}.jsonl" for name in OUTSIDE)]:
        for row in read_jsonl(path):
            if not isinstance(row.get("text"), str) or row.get("label") not in ("attack", "benign"):
                print(f"{path}: skipped a line without text/label: {str(row)[:80]}", file=sys.stderr)
                continue
            if corpus_side(row["text"]) == side:
                out.append({**row, "set": f"gen/{path.stem}" if path.parent == GEN else path.stem})
    return out


def chat_texts() -> list[str]:
    return [m["content"] for line in CHAT.read_text(encoding="utf-8").splitlines() if line.strip()
            for m in json.loads(line).get("messages", []) if isinstance(m.get("content"), str)]


def doc_paragraphs() -> list[dict]:
    """Paragraphs of README.md, docs/*.md and contrib/*/README.md that the rules let
    through (a blocked one quotes an attack and is not a hard negative)."""
    rules = load_rules()
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("contrib/*/README.md"))]
    out, seen = [], set()
    for path in paths:
        for para in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            para = para.strip()
            if len(para) < 40 or para in seen:
                continue
            seen.add(para)
            report = scan(para, scope="context_file", rules=rules)
            if report.score > 0:  # quotes an attack (or a hint of one): not a clean negative
                continue
            out.append({"text": para, "source": str(path.relative_to(ROOT))})
    return out


def refresh_extras() -> None:
    rows = doc_paragraphs()
    EXTRA.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(json.dumps({"wrote": str(EXTRA.relative_to(ROOT)), "paragraphs": len(rows)}))


def concepts() -> dict[str, list[str]]:
    """The concept lexicon, normalised like scanned text (NFKC, look-alikes folded,
    lower case), every language's words of a concept in one list."""
    import yaml

    data = yaml.safe_load(CONCEPTS.read_text(encoding="utf-8"))
    out: dict[str, list[str]] = {}
    for name, languages in data.items():
        words = {normalize_for_scan(str(w)).lower().strip() for ws in languages.values() for w in ws or ()}
        out[name] = sorted(w for w in words if w)
    return out


LEXICON = Lexicon(concepts())


class Sample:
    """One training text: its pieces' features, label, source group and weight."""

    __slots__ = ("feats", "gpieces", "grams", "group", "held", "label", "lower", "pieces", "ruled", "scope",
                 "text", "vetoable")

    def __init__(self, text: str, label: int, group: str, scope: str = "memory",
                 index: dict[str, int] | None = None) -> None:
        self.text, self.label, self.group, self.scope = text, label, group, scope
        self.lower = lower = normalize_for_scan(text).lower()
        # Attacks are trained on whole; a long benign text on each piece (what is scored).
        units = [lower] if label or len(lower) <= CHUNK else [lower[a:b] for a, b in chunks(lower)] or [lower]
        self.feats = [sorted(set(features(u, LEXICON))) for u in units]
        # A long attack's pieces as the scanner judges them: after a first fit, the one
        # the model finds most like an attack stands for the text (see fit).
        self.pieces = ([sorted(set(features(lower[a:b], LEXICON))) for a, b in chunks(lower)
                        if substantial(lower[a:b], MIN_WORDS)] if label and len(lower) > CHUNK else [])
        # The same units' character n-grams, as ids of ``index`` (every distinct n-gram,
        # learned or not: the count divides the sum, as at scan time).
        index = {} if index is None else index
        self.grams = [gram_ids(u, index) for u in units]
        self.gpieces = ([gram_ids(lower[a:b], index) for a, b in chunks(lower)
                         if substantial(lower[a:b], MIN_WORDS)] if label and len(lower) > CHUNK else [])
        self.ruled = self.vetoable = False
        self.held: list[set[str]] = []  # features of the pieces holding an overrulable match


class HoldingRecorder(ReadsAllAsOrdinary):
    """The trainer's probe (see load_samples): it overrules everything it may and keeps the
    features of the pieces holding the match, which the second opinion asks it about
    through ``score_features`` (the other pieces go through ``score``)."""

    def __init__(self, lexicon: Lexicon) -> None:
        super().__init__(lexicon)
        self.held: list[set[str]] = []

    def score(self, lower: str) -> float:
        return 0.0

    def score_features(self, distinct: set[str]) -> float:
        self.held.append(distinct)
        return 0.0


def gram_ids(lower: str, index: dict[str, int]) -> np.ndarray:
    """The distinct character n-grams of ``lower`` as ids in ``index`` (new ones added)."""
    return np.array(sorted({index.setdefault(g, len(index)) for g in char_grams(lower)}), dtype=np.int32)


def load_samples() -> tuple[list[Sample], list[str]]:
    """The training texts, and the names of the character n-grams by id."""
    samples = []
    index: dict[str, int] = {}
    labelled = read_jsonl(TUNE) + corpus_rows("train")
    for row in labelled:
        # Long labelled documents (gen/docs.jsonl) are their own benign group: a long text
        # has many pieces, so many chances of a false positive.
        group = ("attack" if row["label"] == "attack" else "long" if row.get("set", "").startswith("gen/docs")
                 else "labelled")
        samples.append(Sample(row["text"], 1 if row["label"] == "attack" else 0, group, row.get("scope", "memory"),
                              index))
    samples += [Sample(t, 0, "chat", index=index) for t in chat_texts()]
    samples += [Sample(r["text"], 0, "docs", "context_file", index) for r in read_jsonl(EXTRA)]
    # The n-grams by id (ids are given in order of first sight: the same on every run).
    grams = list(index)
    rules = load_rules()
    # A model that reads every piece as plainly ordinary and never blocks asks the
    # scanner itself which texts a second opinion could overrule (hermes.safety, step 8):
    # the veto is chosen on those, under the very conditions of scan time.
    probe = HoldingRecorder(LEXICON)
    for s in samples:
        probe.held = []
        report = scan(s.text, scope=s.scope, rules=rules, model=probe)
        s.ruled = report.score >= report.threshold  # attacks the rules miss weigh more (see design)
        s.vetoable = report.overruled is not None
        s.held = probe.held if s.vetoable else []
    return samples, grams


def units(samples: list[Sample], chosen: dict[int, int] | None = None) -> list[tuple[Sample, int, float]]:
    """The rows of a fit: (sample, unit, weight). A unit is an index into ``feats`` and
    ``grams``, or for a long attack in ``chosen``, ``-1 - i`` for its piece ``i``."""
    out = []
    totals = Counter(s.group for s in samples)
    shares = {"attack": 0.5, **SHARES}
    # The model complements the rules: attacks they miss weigh MISSED times more.
    attack_mass = sum(MISSED if not s.ruled else 1.0 for s in samples if s.group == "attack")
    for s in samples:
        if s.group == "attack":
            w = shares["attack"] * (MISSED if not s.ruled else 1.0) / attack_mass
        else:
            w = shares[s.group] / totals[s.group] / len(s.feats)
        if chosen and id(s) in chosen:
            out.append((s, -1 - chosen[id(s)], w))
        else:
            out.extend((s, k, w) for k in range(len(s.feats)))
    return out


def design(samples: list[Sample], vocab: dict[str, int],
           chosen: dict[int, int] | None = None) -> tuple[np.ndarray, ...]:
    """Sparse rows (one per unit), their sample's label and weight."""
    rows, cols, vals, y, wt = [], [], [], [], []
    for r, (s, k, w) in enumerate(units(samples, chosen)):
        fs = s.feats[k] if k >= 0 else s.pieces[-1 - k]
        scale = 1 / np.sqrt(max(len(fs), MIN_FEATURES))
        for f in fs:
            j = vocab.get(f)
            if j is not None:
                rows.append(r)
                cols.append(j)
                vals.append(scale)
        y.append(s.label)
        wt.append(w)
    return (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals),
            np.array(y, dtype=float), np.array(wt))


def _rows(major: np.ndarray, minor: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> csr_matrix:
    """A sparse matrix holding ``values`` at (``major``, ``minor``), row by row in the
    order given (a stable sort by row), duplicates kept as separate entries: its product
    with a vector adds each row's products from zero in exactly that order, which is
    what ``np.bincount(major, weights=values * x[minor])`` does — the same sums to the
    last bit (scipy's loop multiplies, then adds: no fused multiply-add on x86-64), three
    to four times faster (the fits went from 9 to 3 minutes)."""
    order = np.argsort(major, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=shape[0]))])
    return csr_matrix((values[order], minor[order], indptr), shape=shape)


def _descend(samples: list[Sample], vocab: dict[str, int], chosen: dict[int, int] | None) -> tuple[np.ndarray, float]:
    R, C, V, y, cw = design(samples, vocab, chosen)
    n, d = len(y), len(vocab)
    cw = cw / cw.sum()
    X, Xt = _rows(R, C, V, (n, d)), _rows(C, R, V, (d, n))
    w, b = np.zeros(d), 0.0
    vw, vb = np.zeros(d), 0.0
    for _ in range(STEPS):  # gradient descent with momentum (Nesterov)
        lw, lb = w + MOMENTUM * vw, b + MOMENTUM * vb
        z = X @ lw + lb
        g = (1 / (1 + np.exp(-z)) - y) * cw
        gw = Xt @ g + L2 * lw
        vw = MOMENTUM * vw - RATE * gw
        vb = MOMENTUM * vb - RATE * g.sum()
        w, b = w + vw, b + vb
    return w, b


def fit(samples: list[Sample]) -> tuple[dict[str, int], float, dict[int, int]]:
    """Weights (whole numbers of 1/QUANT, small ones dropped), bias, and the piece each
    long attack is represented by (for :func:`fit_chars`)."""
    df = Counter(f for s in samples for f in {f for fs in s.feats + s.pieces for f in fs})
    vocab = {f: i for i, f in enumerate(sorted(f for f, n in df.items() if n >= MIN_TEXTS))}
    w, b = _descend(samples, vocab, None)
    # A long attack was fitted whole, diluted by the document around it; the scanner
    # judges its pieces. Refit with each long attack's most attack-like piece instead.
    def z(fs: list[str]) -> float:
        return sum(w[vocab[f]] for f in fs if f in vocab) / np.sqrt(max(len(fs), MIN_FEATURES))
    chosen = {id(s): max(range(len(s.pieces)), key=lambda i, s=s: z(s.pieces[i])) for s in samples if s.pieces}
    w, b = _descend(samples, vocab, chosen)
    inv = sorted(vocab, key=vocab.get)
    quantised = {f: round(float(w[i]) * QUANT) for i, f in enumerate(inv) if abs(w[i]) >= PRUNE}
    return {f: u for f, u in quantised.items() if u}, float(b), chosen


def logistic(X: csr_matrix, y: np.ndarray, weights: np.ndarray, l2: float, steps: int) -> np.ndarray:
    """Weighted, L2-regularised logistic regression by L-BFGS: the weights of X's columns,
    then the bias (rows weigh ``weights`` normalised to sum to 1)."""
    Xt = X.T.tocsr()
    cw = weights / weights.sum()

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:-1], theta[-1]
        z = X @ w + b
        # log(1 + e^-m) for the margin m, and its derivative, without overflow
        m = np.where(y > 0, z, -z)
        value = float(cw @ np.logaddexp(0, -m)) + l2 / 2 * float(w @ w)
        g = cw * (1 / (1 + np.exp(-z)) - y)
        return value, np.concatenate([Xt @ g + l2 * w, [g.sum()]])

    return minimize(loss, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B", options={"maxiter": steps}).x


def fit_chars(samples: list[Sample], grams: list[str], chosen: dict[int, int]) -> tuple[dict[str, int], float]:
    """The character model: weights by n-gram (idf folded in, whole numbers of 1/QUANT,
    the CHAR_KEEP largest) and bias. The same rows and weights as the word model's second
    fit; each row's n-grams weigh their idf over sqrt(max(count, MIN_FEATURES)).
    L-BFGS (scipy) rather than the word model's gradient descent: there are ten times
    as many non-zeros, and it converges in a few hundred steps instead of thousands."""
    df = np.zeros(len(grams))
    for s in samples:
        df[np.unique(np.concatenate(s.grams + s.gpieces))] += 1
    known = np.flatnonzero(df >= MIN_TEXTS)
    column = np.full(len(grams), -1, dtype=np.int64)
    column[known] = np.arange(len(known))
    idf = np.log((1 + len(samples)) / (1 + df[known])) + 1
    indptr, cols, vals, y, wt = [0], [], [], [], []
    for s, k, w in units(samples, chosen):
        ids = s.grams[k] if k >= 0 else s.gpieces[-1 - k]
        j = column[ids]
        j = j[j >= 0]
        cols.append(j)
        vals.append(idf[j] / np.sqrt(max(len(ids), MIN_FEATURES)))
        indptr.append(indptr[-1] + len(j))
        y.append(s.label)
        wt.append(w)
    X = csr_matrix((np.concatenate(vals), np.concatenate(cols), np.array(indptr)), shape=(len(y), len(known)))
    theta = logistic(X, np.array(y, dtype=float), np.array(wt), CHAR_L2, CHAR_STEPS)
    folded = theta[:-1] * idf
    keep = np.argsort(-np.abs(folded), kind="stable")[:CHAR_KEEP]
    quantised = {grams[known[i]]: round(float(folded[i]) * QUANT) for i in sorted(keep)}
    return {g: u for g, u in quantised.items() if u}, float(theta[-1])


def lowest_threshold(benign: np.ndarray, max_fp: float) -> float:
    """The lowest probability (from 0.5) blocking at most ``max_fp`` of ``benign``."""
    if not len(benign):
        return 0.5
    ranked = np.sort(benign)[::-1]
    allowed = int(np.floor(max_fp * len(ranked)))
    t = float(ranked[allowed]) + 1e-6 if allowed < len(ranked) else 0.5
    return max(t, 0.5)


def piece_log_odds(model: ThreatModel, lower: str) -> np.ndarray:
    """Each judged piece's log-odds by the word model and by the character model
    (an array of shape (pieces, 2))."""
    out = [(model.log_odds(set(features(lower[a:b], model.lexicon))), model.char_log_odds(lower[a:b]))
           for a, b in model.pieces(lower, least_words=MIN_WORDS)]
    return np.array(out).reshape(-1, 2)


def best_of(z: np.ndarray, mix: float, floor: float = -np.inf) -> float:
    """The best piece's probability under ``mix`` and ``floor`` (0 when no piece is judged):
    ThreatModel.judge and best_piece, for many mixes and floors over the same log-odds."""
    if not len(z):
        return 0.0
    mixed = np.where(z[:, 0] >= floor, mix * z[:, 0] + (1 - mix) * z[:, 1], z[:, 0])
    return float(1 / (1 + np.exp(-mixed.max())))


def _fold_log_odds(samples: list[Sample], grams: list[str], fold: dict[int, int],
                   k: int) -> tuple[list[np.ndarray], list[float]]:
    """Fit both models on the samples outside fold ``k``; for each sample in it (in
    order), its pieces' log-odds as at scan time (before the mix and discount tried in
    :func:`thresholds`) and the word model's log-odds of its pieces holding a match (0
    for none)."""
    train = [s for i, s in enumerate(samples) if fold[i] != k]
    test = [s for i, s in enumerate(samples) if fold[i] == k]
    weights, bias, chosen = fit(train)
    chars, char_bias = fit_chars(train, grams, chosen)
    model = ThreatModel(weights, bias, 1.0, LEXICON, 1 / QUANT, chars=chars, char_bias=char_bias)
    return ([piece_log_odds(model, s.lower) for s in test],
            [max(map(model.log_odds, s.held)) if s.held else 0.0 for s in test])


def _final_fit(samples: list[Sample], grams: list[str]) -> tuple[dict[str, int], float, dict[str, int], float]:
    """Both models fitted on every sample: the word weights and bias, the character
    weights and bias."""
    weights, bias, chosen = fit(samples)
    chars, char_bias = fit_chars(samples, grams, chosen)
    return weights, bias, chars, char_bias


def stratified_folds(samples: list[Sample]) -> dict[int, int]:
    """Each sample's fold: every FOLDS-th sample of each group (stratified, deterministic)."""
    fold: dict[int, int] = {}
    seen: Counter[str] = Counter()
    for i, s in enumerate(samples):
        fold[i] = seen[s.group] % FOLDS
        seen[s.group] += 1
    return fold


def all_fits(samples: list[Sample], grams: list[str]) -> tuple[dict[int, int], list[tuple], tuple]:
    """The folds, each fold's :func:`_fold_log_odds` and the :func:`_final_fit`: six
    independent fits, shared out among WORKERS forked processes (one after another where
    fork is unavailable). A forked worker has the samples already (they are most of the
    trainer's memory; only the results are pickled back), and each fit's arithmetic is
    the same wherever it runs, so the model file is the same byte for byte."""
    import multiprocessing

    fold = stratified_folds(samples)
    ks: list[int | None] = [None, *range(FOLDS)]  # the final fit, the longest, first

    def one(k: int | None) -> tuple:
        return _final_fit(samples, grams) if k is None else _fold_log_odds(samples, grams, fold, k)

    if "fork" not in multiprocessing.get_all_start_methods():
        done = [one(k) for k in ks]
        return fold, done[1:], done[0]
    context = multiprocessing.get_context("fork")
    results = context.Queue()

    def work(mine: list[int | None]) -> None:
        for k in mine:
            try:
                results.put((k, one(k), None))
            except Exception as exc:  # reported to the trainer, which raises it
                results.put((k, None, f"{type(exc).__name__}: {exc}"))
                return

    # Every WORKERS-th fit to each worker: the final fit's (longest) worker gets the
    # fewest folds (1.0 + 0.8 + 0.8 of a full fit against 3 x 0.8).
    workers = [context.Process(target=work, args=(ks[i::WORKERS],)) for i in range(WORKERS)]
    for worker in workers:
        worker.start()
    by_k: dict[int | None, tuple] = {}
    while len(by_k) < len(ks):
        try:
            k, result, error = results.get(timeout=5)
        except queue.Empty:  # a worker killed outright (out of memory) reports nothing
            if any(worker.exitcode not in (None, 0) for worker in workers):
                raise RuntimeError("a fitting process died; see above, or run with WORKERS = 1") from None
            continue
        if error is not None:
            for worker in workers:
                worker.kill()
            raise RuntimeError(f"fit {'final' if k is None else f'of fold {k}'} failed: {error}")
        by_k[k] = result
    for worker in workers:
        worker.join()
    return fold, [by_k[k] for k in range(FOLDS)], by_k[None]


def thresholds(samples: list[Sample], fold: dict[int, int], by_fold: list[tuple],
               max_fp: float) -> tuple[float, float, float, float, dict]:
    """The threshold, the piece discount, the mix, the character model's floor and the
    out-of-fold figures, from :func:`all_fits`' folds and their results."""
    z: list[np.ndarray] = [np.zeros((0, 2))] * len(samples)
    held = np.zeros(len(samples))  # the word model's log-odds of the pieces holding a match
    for k, (zs, helds) in enumerate(by_fold):
        test = [i for i in range(len(samples)) if fold[i] == k]
        for i, zi, hi in zip(test, zs, helds, strict=True):
            z[i], held[i] = zi, hi
    pieces = [len(x) for x in z]
    by_mix = {mix: np.array([best_of(x, mix) for x in z]) for mix in MIXES}
    raw = np.array([best_of(x, 1.0) for x in z])  # the word model alone: what the veto asks
    groups = np.array([s.group for s in samples])
    attack = groups == "attack"

    # The long labelled documents share the labelled texts' budget: alone, 509 of them
    # allowed two false positives, so the threshold hung on the third-highest one.
    pooled = np.where(groups == "long", "labelled", groups)

    def threshold_at(oof: np.ndarray, budget: float) -> float:
        return max(lowest_threshold(oof[pooled == g], budget) for g in SHARES if g != "long")

    def trial(mix: float, per: float) -> tuple[float, float, np.ndarray]:
        oof = np.array([discount(p, n, per) for p, n in zip(by_mix[mix], pieces, strict=True)])
        t = threshold_at(oof, max_fp)
        print(f"mix {mix}, piece discount {per}: threshold {t:.3f}, cv block rate {(oof[attack] >= t).mean():.4f}",
              file=sys.stderr)
        return float((oof[attack] >= t).mean()), t, oof

    # The mix and discount whose threshold blocks the most out-of-fold attacks (on a tie,
    # more of the word model, then the smallest discount): the long documents' false
    # positives and the short texts' compete for them.
    tried = {(mix, per): trial(mix, per) for mix in MIXES for per in DISCOUNTS}
    mix, per = max(tried, key=lambda c: (tried[c][0], c[0], -c[1]))
    _, alone, oof = tried[(mix, per)]
    report = {"cv_block_rate_alone": round(float((oof[attack] >= alone).mean()), 4)}
    for g in SHARES:
        report[f"cv_false_positive_rate_{g}"] = round(float((oof[groups == g] >= alone).mean()), 4)
    print({g: round(lowest_threshold(oof[groups == g], max_fp), 3) for g in SHARES}, file=sys.stderr)
    missed = attack & ~np.array([s.ruled for s in samples])
    report["cv_block_rate_of_attacks_the_rules_miss"] = round(float((oof[missed] >= alone).mean()), 4)
    for budget in (0.005, 0.01, 0.02):  # the trade-off, for the record (stderr)
        t = threshold_at(oof, budget)  # the same rule the threshold is chosen by
        print(f"budget {budget}: threshold {t:.3f}, cv block rate {(oof[attack] >= t).mean():.3f}, "
              f"of attacks the rules miss {(oof[missed] >= t).mean():.3f}", file=sys.stderr)
    report["veto"] = choose_veto(samples, raw)
    best = np.array([float(x[:, 0].max()) if len(x) else -np.inf for x in z])
    report["referee"] = fit_referee(samples, held, best)
    floor = -np.inf
    blocked = (oof[attack] >= alone).sum()
    for f in FLOORS if mix < 1.0 else ():
        floored = np.array([discount(best_of(x, mix, f), n, per) for x, n in zip(z, pieces, strict=True)])
        lost = blocked - (floored[attack] >= alone).sum()
        skipped = np.mean([float(v) < f for x in z for v in x[:, 0]])
        print(f"char floor {f}: attacks lost {lost} of {blocked}, pieces skipped {skipped:.3f}", file=sys.stderr)
        if lost <= FLOOR_MISS * blocked:
            floor = f
    return round(alone, 3), per, mix, floor, report


#: Vetoes tried (hermes.safety, step 8), and the share of the attacks the rules block
#: that a veto may let through out of fold.
VETOES = (0.0, 0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3)
VETO_MISS = 0.01


def choose_veto(samples: list[Sample], raw: np.ndarray) -> float:
    """The highest of VETOES under which at most VETO_MISS of the training attacks the
    rules block would be overruled, judged on out-of-fold probabilities (undiscounted,
    as the scanner asks)."""
    label = np.array([s.label for s in samples])
    ruled = np.array([s.ruled for s in samples])
    open_ = np.array([s.vetoable for s in samples])
    chosen = 0.0
    for v in VETOES:
        passed = open_ & (raw < v)
        lost = (passed & ruled & (label == 1)).sum() / max(1, (ruled & (label == 1)).sum())
        freed = (passed & ruled & (label == 0)).sum()
        print(f"veto {v}: attacks the rules block let through {lost:.4f}, benign texts freed "
              f"{freed} of {(ruled & (label == 0)).sum()}", file=sys.stderr)
        if lost <= VETO_MISS:
            chosen = v
    return chosen


def fit_referee(samples: list[Sample], held: np.ndarray, best: np.ndarray) -> dict:
    """The referee (see the module notes) for the model file, fitted on the overrulable
    texts with the word model's out-of-fold log-odds of their holding pieces (``held``)
    and best piece (``best``)."""
    rows = [i for i, s in enumerate(samples) if s.vetoable]
    df = Counter(f for i in rows for f in set().union(*samples[i].held))
    vocab = {f: j for j, f in enumerate(sorted(f for f, n in df.items() if n >= MIN_TEXTS))}
    clip = Referee.CLIP
    indptr, cols, vals = [0], [], []
    for i in rows:
        distinct = set().union(*samples[i].held)
        js = sorted(vocab[f] for f in distinct if f in vocab)
        cols += [*js, len(vocab), len(vocab) + 1]
        vals += [1 / np.sqrt(max(len(distinct), MIN_FEATURES))] * len(js)
        vals += [float(np.clip(held[i], -clip, clip)), float(np.clip(best[i], -clip, clip))]
        indptr.append(len(cols))
    X = csr_matrix((np.array(vals), np.array(cols), np.array(indptr)), shape=(len(rows), len(vocab) + 2))
    y = np.array([samples[i].label for i in rows], dtype=float)
    weights = np.where(y > 0, 0.5 / max(1, y.sum()), 0.5 / max(1, (1 - y).sum()))
    # Out of fold: every FOLDS-th text of each label.
    fold = np.zeros(len(rows), dtype=int)
    for label in (0, 1):
        at = np.flatnonzero(y == label)
        fold[at] = np.arange(len(at)) % FOLDS
    oof = np.zeros(len(rows))
    for k in range(FOLDS):
        theta = logistic(X[fold != k], y[fold != k], weights[fold != k], REFEREE_L2, CHAR_STEPS)
        oof[fold == k] = X[fold == k] @ theta[:-1] + theta[-1]
    ranked = np.sort(oof[y > 0])
    threshold = float(ranked[int(REFEREE_MISS * len(ranked))]) if len(ranked) else -np.inf
    print(f"referee: {len(rows)} overrulable texts ({int(y.sum())} attacks), out of fold it frees "
          f"{int((oof[y == 0] < threshold).sum())} benign texts and lets {int((oof[y > 0] < threshold).sum())} "
          "attacks through", file=sys.stderr)
    theta = logistic(X, y, weights, REFEREE_L2, CHAR_STEPS)
    inv = sorted(vocab, key=vocab.get)
    quantised = {f: round(float(theta[j]) * QUANT) for j, f in enumerate(inv) if abs(theta[j]) >= PRUNE}
    return {"threshold": round(threshold, 4), "bias": round(float(theta[-1]), 4),
            "hold": round(float(theta[len(vocab)]), 4), "best": round(float(theta[len(vocab) + 1]), 4),
            "weights": {f: u for f, u in sorted(quantised.items()) if u}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 1.5% since the referee (1% until then, 0.5% until the second opinion): the referee
    # frees about half the rules' false positives on the validation sets, and the budget
    # buys attacks. 1.5% improved every validation set on both sides against 1% without a
    # referee; 2% blocked 2-4 points more attacks, but 0.7 points more of the corpus
    # writers' short benign look-alikes (gen dev).
    parser.add_argument("--max-fp", type=float, default=0.015, help="out-of-fold FP budget per benign source")
    parser.add_argument("--check", action="store_true", help="only check the packaged file is up to date")
    parser.add_argument("--out", type=Path, default=MODEL_PATH, help="where to write the model (experiments)")
    parser.add_argument("--refresh-extras", action="store_true", help=f"rebuild {EXTRA.name} from the docs first")
    args = parser.parse_args()
    if args.refresh_extras:
        refresh_extras()
    samples, grams = load_samples()
    fold, by_fold, final = all_fits(samples, grams)
    alone, per, mix, floor, report = thresholds(samples, fold, by_fold, args.max_fp)
    referee = report.pop("referee")
    weights, bias, chars, char_bias = final
    kept = dict(sorted(weights.items()))
    if mix == 1.0:  # the word model alone was chosen: no character model in the file
        chars, char_bias = {}, 0.0
    counts = Counter(s.group for s in samples)
    sources = ["tests/data/scanner/tune.jsonl", "tests/data/scanner/gen/*.jsonl (train side)",
               *(f"tests/data/scanner/{name}.jsonl (train side)" for name in OUTSIDE),
               "benchmarks/recall_corpus/sessions.jsonl", "tests/data/scanner/benign_extra.jsonl"]
    data = {"format": 2, "trained_on": sources, "texts": dict(sorted(counts.items())),
            "threshold": alone, "piece_discount": per, **report,
            "bias": round(bias, 4), "scale": 1 / QUANT, "concepts": LEXICON.concepts, "weights": kept}
    if chars:
        data.update(mix=mix, char_floor=floor if np.isfinite(floor) else None, char_bias=round(char_bias, 4), chars=dict(sorted(chars.items())))
    data["referee"] = referee
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=False) + "\n"
    if args.check:
        same = MODEL_PATH.exists() and MODEL_PATH.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{MODEL_PATH} is stale: run benchmarks/train_scanner_model.py")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(json.dumps({"features": len(kept), "char_features": len(chars), "mix": mix,
                      "bytes": len(text.encode()), "threshold": alone, "piece_discount": per,
                      "texts": dict(counts), **report,
                      "referee_features": len(referee["weights"]), "referee_threshold": referee["threshold"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
