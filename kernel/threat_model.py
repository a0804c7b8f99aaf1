"""The scanner's learned component: two small linear models, one over word features and
one over character n-grams, mixed in log-odds, read from ``threat_model.json`` next to
this module on the first scan that needs it (never at ``import hermes``).

The rules in ``threat_rules.yaml`` catch the forms they describe; phrasings nobody wrote
a rule for slip through. This model was trained (``benchmarks/train_scanner_model.py``,
deterministic, on ``tune.jsonl``, the train sides of the corpus writers' files and
ordinary chat and doc paragraphs) to recognise the *vocabulary* of an attack — "rules …
no longer … only obey", "sans … restrictions", "忽略 … 设定" — and it is consulted on
every text the rules did not block: its probability above the file's ``threshold``
blocks as the finding ``learned_injection``, naming the sentence and the words that
weighed most.

Features, computed on the scanner's normalised, lower-cased text: every word, its first
five letters (so inflections share a feature), each pair of neighbouring words (and of
their prefixes), for scripts written without spaces (Chinese, Japanese, Thai …) the
character pairs and triples of each run, and the concepts of :class:`Lexicon` (alone, in
pairs, and each concept word with its neighbours). Long texts are cut into pieces of at
most :data:`CHUNK` characters at sentence ends and at every blank line, each scored on
its own, the highest wins: an attack paragraph in the middle of a long README is not
diluted by the README (a sentence run into its neighbours' lines still can be).

The character model (:func:`char_grams`: every 2 and 4 characters inside each token,
weighted by how rare they were in training) reads what words miss: a misspelt or
inflected order, markup (``<|im``, ``[/in``), a language the lexicon barely covers. A
piece's log-odds are ``mix`` times the word model's and ``1 - mix`` times the character
model's; where the word model's are below ``char_floor`` the character model is not
asked, which spares most of its cost on ordinary text.

A third, :class:`Referee`, is asked only when the rules blocked on one match in plain
text (``hermes.safety``'s notes, step 8): trained on such texts alone, attacks against
look-alikes, it reads the words around the match and the word model's probabilities, and
a match it reads as a look-alike's is overruled.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

MODEL_PATH = Path(__file__).with_name("threat_model.json")

#: Longest piece of text scored as one (characters); pieces end at sentence ends.
CHUNK = 320
#: The feature sum is divided by sqrt(max(count, MIN_FEATURES)): a piece of two or three
#: words ("👩‍💻 and 🏳️‍🌈") says too little to be judged on a single weight.
MIN_FEATURES = 12
#: The model judges only pieces of at least this many words: in "keep this entry" or
#: "Henceforth, be brief." a single heavy word ("this", common in attacks addressing
#: "this file") would decide.
MIN_WORDS = 5

_WORD_RE = re.compile(r"\w+")
# The word a lexicon phrase starts with ("don't mention" → don), if it starts with one.
_LEAD_RE = re.compile(r"\w+(?=\W)")
_SENTENCE_RE = re.compile(r"[^.!?。！？\n]*(?:[.!?。！？\n]+|$)")
# Scripts that do not separate words by spaces: a "word" there is a whole clause.
_UNSPACED_RE = re.compile(r"[\u0e00-\u0eff\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")


# Every run of 2 and of 4 characters inside one whitespace-separated token, the token
# padded with a space each side (" i", "gn", " ign", "ore ", "<|im", "-->"): found by the
# regex engine in one pass per size over the tokens joined by two spaces, where a window
# holding a space anywhere but at its ends spans two tokens and is skipped. Sizes 2 and 4
# did as well on the validation sets as every size from 2 to 5 (62.8% against 62.0% of
# attacks at 2% false positives, mixed with the word model) at half the cost and size;
# 3 to 5 lost 3 points, 4 alone 4.
_GRAM_RES = (re.compile(r"(?=(\S\S| \S|\S ))"), re.compile(r"(?=(.\S\S.))"))


def char_grams(lower: str) -> list[str]:
    """The character n-grams (2 and 4 long) of a piece of normalised, lower-cased text, with
    repeats: the second model's features. Spelling variants, inflections, scripts
    without spaces and markup ("[inst", "<|im_") share them where whole words do not."""
    padded = " " + "  ".join(lower.split()) + " "
    out: list[str] = []
    for regex in _GRAM_RES:
        out += regex.findall(padded)
    return out


def features(lower: str, lexicon: Lexicon | None = None, words: list[str] | None = None) -> list[str]:
    """The feature names of one piece of normalised, lower-cased text (with repeats);
    with a ``lexicon``, its concept features too (:meth:`Lexicon.features`). ``words``
    are its ``\\w+`` words when the caller has them."""
    if words is None:
        words = _WORD_RE.findall(lower)
    heads = [w[:5] for w in words]
    # List comprehensions rather than one loop of appends: this runs on every piece of
    # every text the rules let through, and is most of the model's cost.
    out = words + [p + "~" for w, p in zip(words, heads, strict=True) if len(w) > 5]
    out += [f"{a} {b}" for a, b in pairwise(words)]
    out += [f"{a}~ {b}~" for a, b in pairwise(heads)]
    if not lower.isascii():
        for w in words:
            if not w.isascii() and _UNSPACED_RE.search(w):
                out.extend(w[i:i + 2] for i in range(len(w) - 1))
                out.extend(w[i:i + 3] for i in range(len(w) - 2))
    if lexicon is not None:
        out.extend(lexicon.features(lower, words, heads))
    return out


# A lexicon entry of Latin, Greek or Cyrillic letters only (stems and two-word phrases);
# anything else is looked for as a substring.
_ALPHABETIC_RE = re.compile(r"[^\W\d_]+")
#: Stems shorter than this match whole words only ("ai", "log"); longer ones are cut to
#: :data:`_STEM_MAX` letters, so a lookup tries at most a handful of prefix lengths.
_STEM_MIN, _STEM_MAX = 4, 10
#: Words whose concepts a lexicon remembers (then it starts again): a bound on memory.
_MEMO = 1 << 16
#: Tokens whose character n-grams a model remembers (then it starts again), and the
#: longest token remembered: a bound on memory (about 12 MB when full of ordinary words).
_GRAM_MEMO, _GRAM_MEMO_TOKEN = 1 << 13, 16
_NONE: frozenset[str] = frozenset()


class Lexicon:
    """Concept words (``threat_concepts.yaml``, embedded in the model file): which
    concepts a piece of text mentions, in any language the lexicon lists."""

    def __init__(self, concepts: dict[str, list[str]]) -> None:
        self.concepts = concepts
        stems: dict[str, set[str]] = {}
        words: dict[str, set[str]] = {}
        phrases: dict[str, set[str]] = {}
        subs: dict[str, list[tuple[str, str]]] = {}
        for name, entries in concepts.items():
            for entry in entries:
                parts = entry.split()
                if parts and all(_ALPHABETIC_RE.fullmatch(x) and max(x) < "\u0590" for x in parts) and len(parts) <= 2:
                    if len(parts) == 2:
                        phrases.setdefault(parts[0][:5] + " " + parts[1][:5], set()).add(name)
                    elif len(entry) < _STEM_MIN:
                        words.setdefault(entry, set()).add(name)
                    else:
                        stems.setdefault(entry[:_STEM_MAX], set()).add(name)
                elif entry.strip():
                    needle = " ".join(parts) if parts else entry
                    subs.setdefault(needle[0], []).append((needle, name))
        # Stems by their first _STEM_MIN letters: a word costs one lookup, and a
        # startswith per stem sharing its head.
        heads: dict[str, list[tuple[str, frozenset[str]]]] = {}
        for stem, names in sorted(stems.items()):
            heads.setdefault(stem[:_STEM_MIN], []).append((stem, frozenset(names)))
        self._heads = {k: tuple(v) for k, v in heads.items()}
        self._words = {k: frozenset(v) for k, v in words.items()}
        self._phrases = {k: frozenset(v) for k, v in phrases.items()}
        self._phrase_firsts = frozenset(k.split(" ")[0] for k in phrases)
        # The other entries: one that is a single run of word characters can only occur
        # inside a word (of_word looks for it, once per word); one that starts with a word
        # ("더 이상", "don't mention", "system:") is looked for in a piece where that word
        # stands whole (a check per piece for each would be most of the model's cost);
        # the rest ("<|im_start|>", ".env") in any piece holding its first character.
        inner: dict[str, list[tuple[str, str]]] = {}
        spans: dict[str, list[tuple[str, str]]] = {}
        led: dict[str, list[tuple[str, str]]] = {}
        for first, needles in subs.items():
            for needle, name in needles:
                if _WORD_RE.fullmatch(needle):
                    inner.setdefault(first, []).append((needle, name))
                elif lead := _LEAD_RE.match(needle):
                    led.setdefault(lead.group(0), []).append((needle, name))
                else:
                    spans.setdefault(first, []).append((needle, name))
        self._inner = {k: tuple(v) for k, v in inner.items()}
        self._inner_firsts = frozenset(inner)
        self._led = {k: tuple(v) for k, v in led.items()}
        self._spans = {k: tuple(v) for k, v in spans.items()}
        self._span_firsts = frozenset(spans)
        self._memo: dict[str, frozenset[str]] = {}

    def of_word(self, w: str) -> frozenset[str]:
        """The concepts one word carries: a whole-word entry, a stem it starts with, an
        entry of another script inside it. Remembered per word (words repeat), up to
        :data:`_MEMO` of them."""
        hit = self._memo.get(w)
        if hit is not None:
            return hit
        names: set[str] = set()
        if w in self._words:
            names |= self._words[w]
        for stem, found in self._heads.get(w[:_STEM_MIN], ()):
            if w.startswith(stem):
                names |= found
        for ch in self._inner_firsts.intersection(w):
            names.update(name for needle, name in self._inner[ch] if needle in w)
        hit = frozenset(names) if names else _NONE
        if len(self._memo) >= _MEMO:
            self._memo.clear()
        self._memo[w] = hit
        return hit

    def found(self, lower: str, words: list[str] | None = None) -> set[str]:
        """The concepts ``lower`` (one piece; ``words`` are its ``\\w+`` words) mentions."""
        if words is None:
            words = _WORD_RE.findall(lower)
        return self._found(lower, words, [w[:5] for w in words], [self.of_word(w) for w in words])

    def _found(self, lower: str, words: list[str], heads: list[str], each: list[frozenset[str]]) -> set[str]:
        hit: set[str] = set().union(*each)
        phrases, firsts = self._phrases, self._phrase_firsts
        hit.update(*[phrases[k] for k in [a + " " + b for a, b in pairwise(heads) if a in firsts]
                     if k in phrases])
        led = self._led
        for w in led.keys() & set(words):
            for needle, name in led[w]:
                if name not in hit and needle in lower:
                    hit.add(name)
        # Few characters begin such entries ("<", "."): each is looked for, rather than
        # every character of the piece looked up.
        for ch in [ch for ch in self._span_firsts if ch in lower]:
            for needle, name in self._spans[ch]:
                if name not in hit and needle in lower:
                    hit.add(name)
        return hit

    def features(self, lower: str, words: list[str] | None = None, heads: list[str] | None = None) -> list[str]:
        """One feature per concept found (``@void``), per pair found together
        (``@instr+@void``) and per concept word with the word before or after it (their
        first five letters: ``@void your~``, ``pleas~ @void``). What the model learns
        about a pair holds in every language the lexicon lists; what it learns about
        "forget your" holds for "discard your" and every other word of the concept."""
        if words is None:
            words = _WORD_RE.findall(lower)
        if heads is None:
            heads = [w[:5] for w in words]
        # The remembered words looked up directly (most are), the rest through of_word.
        remembered = self._memo.get
        each = [hit if (hit := remembered(w)) is not None else self.of_word(w) for w in words]
        names = sorted(self._found(lower, words, heads, each))
        out = ["@" + n for n in names]
        out += [f"@{a}+@{b}" for i, a in enumerate(names) for b in names[i + 1:]]
        last = len(words) - 1
        for i, found in enumerate(each):
            for n in found:
                if i < last:
                    out.append(f"@{n} {heads[i + 1]}~")
                if i:
                    out.append(f"{heads[i - 1]}~ @{n}")
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


def corpus_side(text: str) -> str:
    """``"train"`` or ``"dev"``: the half of the scanner corpus (tests/data/scanner/gen/)
    a text belongs to. Fixed by a hash of the text alone, so a line appended to a file
    later never moves an earlier one, and each label and language is split about evenly.
    The training script reads only the train side; benchmarks and tests report dev."""
    digest = hashlib.sha256(b"hermes-scanner-split-1\0" + text.encode("utf-8")).digest()
    return "train" if digest[0] % 2 == 0 else "dev"


#: A long text is many pieces, so many chances for one of them to look like an attack
#: by accident: the best piece's log-odds are lowered by ``per`` * ln(pieces), ``per``
#: chosen by cross-validation when the model is trained (``piece_discount`` in the
#: model file; this is the value for a file without one).
PIECE_DISCOUNT = 0.5


def sigmoid(z: float) -> float:
    """The probability of log-odds ``z``."""
    if z < -700:  # math.exp overflows past ~709
        return 0.0
    return 1 / (1 + math.exp(-z))


def discount(p: float, pieces: int, per: float = PIECE_DISCOUNT) -> float:
    """``p``, the best of ``pieces`` probabilities, discounted for the number of tries."""
    if pieces <= 1 or p <= 0.0 or p >= 1.0:
        return p
    return sigmoid(math.log(p / (1 - p)) - per * math.log(pieces))


def substantial(piece: str, least_words: int) -> bool:
    words = len(piece.split())
    return words >= least_words or (not piece.isascii() and len(piece) >= 3 * least_words)


class Referee:
    """The second opinion on one rule's match (``hermes.safety``'s notes, step 8), trained
    on the texts the rules block with one match: the attacks among them against the
    look-alikes (security courses quoting an injection, ops notes with a key path, style
    rules). The word model was trained to find what the rules miss, so its probability
    alone tells a quoted example from a real order only when the text reads plainly
    ordinary; the referee reads the words around the match (the pieces holding it) and
    that probability twice over — of those pieces (``hold``) and of the whole text's best
    piece (``best``). Its log-odds below ``threshold`` overrule the match. Weights are
    whole numbers of the model's ``scale``, summed over the distinct features of the
    holding pieces and divided by sqrt(max(count, :data:`MIN_FEATURES`)) like the word
    model's."""

    #: Log-odds fed to the referee are clipped to this magnitude: a probability of
    #: exactly 0 or 1 (a model reading nothing) must not weigh without bound.
    CLIP = 12.0

    def __init__(self, weights: dict[str, int], bias: float, hold: float, best: float, threshold: float,
                 scale: float = 0.01) -> None:
        self.weights, self.bias, self.hold, self.best = weights, bias, hold, best
        self.threshold, self.scale = threshold, scale

    def log_odds(self, distinct: set[str], p_hold: float, p_best: float) -> float:
        """The referee's log-odds that the match is an attack: ``distinct`` are the
        features of the pieces holding it, ``p_hold`` and ``p_best`` the word model's
        probabilities of those pieces and of the text's best piece."""
        units = sum(filter(None, map(self.weights.get, distinct)))
        return (self.bias + self.hold * _clipped_logit(p_hold, self.CLIP) + self.best * _clipped_logit(p_best, self.CLIP)
                + units * self.scale / math.sqrt(max(len(distinct), MIN_FEATURES)))

    def overrules(self, distinct: set[str], p_hold: float, p_best: float) -> bool:
        """Whether the match reads as a look-alike's (log-odds below ``threshold``)."""
        return self.log_odds(distinct, p_hold, p_best) < self.threshold


def _clipped_logit(p: float, clip: float) -> float:
    if p <= 0.0:
        return -clip
    if p >= 1.0:
        return clip
    return max(-clip, min(clip, math.log(p / (1 - p))))


class ThreatModel:
    """Weights by feature name, a bias, the probability at which a text blocks
    (``threshold``) and the one below which the model overrules a single rule's match
    (``veto``; 0 never overrules; see ``hermes.safety``'s notes, step 8).

    With ``chars`` (weights of :func:`char_grams`) and ``char_bias``, a piece is judged
    by both models: its log-odds are ``mix`` times the word model's plus ``1 - mix``
    times the character model's — unless the word model's log-odds are below
    ``char_floor``, chosen by the trainer so that out of fold almost no attack is
    decided there (at most 0.1% of those it blocks): the character model, most of the
    cost, is then not asked and the word model's own probability stands. The veto asks
    the word model alone (:meth:`score`), and so does the :class:`Referee` (``referee``)
    when the file has one."""

    def __init__(self, weights: dict[str, int], bias: float, threshold: float,
                 lexicon: Lexicon | None = None, scale: float = 0.01,
                 piece_discount: float = PIECE_DISCOUNT, veto: float = 0.0,
                 chars: dict[str, int] | None = None, char_bias: float = 0.0, mix: float = 1.0,
                 char_floor: float = -math.inf, referee: Referee | None = None) -> None:
        #: Weights are whole numbers of ``scale``: their sum is exact whatever the order of
        #: the feature set, which changes with the process's hash seed (a float sum
        #: differed in the last bits from one process to the next).
        self.weights, self.scale = weights, scale
        self.bias, self.threshold, self.lexicon = bias, threshold, lexicon
        self.piece_discount, self.veto = piece_discount, veto
        self.chars, self.char_bias = chars or {}, char_bias
        self.mix = mix if self.chars else 1.0
        self.char_floor = char_floor
        self.referee = referee
        self._gram_memo: dict[str, dict[str, int]] = {}

    def score(self, lower: str) -> float:
        """The word model's probability that ``lower`` (one piece) is an attack."""
        return self.score_features(set(features(lower, self.lexicon)))

    def score_features(self, distinct: set[str]) -> float:
        """:meth:`score` of a piece whose distinct features are already known."""
        return sigmoid(self.log_odds(distinct))

    def log_odds(self, distinct: set[str]) -> float:
        """The word model's log-odds for a piece's distinct features."""
        return self._linear(self.weights, self.bias, distinct)

    def char_log_odds(self, lower: str) -> float:
        """The character model's log-odds for one piece."""
        # The piece's distinct n-grams (those of char_grams) are its tokens' taken
        # together, and a token's, with their weights, are remembered: tokens repeat from
        # piece to piece, and building the n-grams and looking up each one's weight was
        # most of the character model's cost.
        weighed: dict[str, int] = {}
        for token in lower.split():
            weighed.update(self._token_grams(token))
        return self._scaled(self.char_bias, sum(weighed.values()), len(weighed))

    def _token_grams(self, token: str) -> dict[str, int]:
        """The 2- and 4-character n-grams of one token, padded with a space each side
        (see :func:`char_grams`), each with its weight in the character model (0 for
        none)."""
        weighed = self._gram_memo.get(token)
        if weighed is None:
            padded = " " + token + " "
            get = self.chars.get
            weighed = {gram: get(gram, 0) for size in (2, 4)
                       for gram in (padded[i:i + size] for i in range(len(padded) - size + 1))}
            if len(token) <= _GRAM_MEMO_TOKEN:
                if len(self._gram_memo) >= _GRAM_MEMO:
                    self._gram_memo.clear()
                self._gram_memo[token] = weighed
        return weighed

    def _linear(self, weights: dict[str, int], bias: float, distinct: set[str]) -> float:
        # Both models: the weights present, summed exactly as whole numbers, divided by
        # the square root of the feature count (at least MIN_FEATURES).
        return self._scaled(bias, sum(filter(None, map(weights.get, distinct))), len(distinct))

    def _scaled(self, bias: float, units: int, count: int) -> float:
        return bias + units * self.scale / math.sqrt(max(count, MIN_FEATURES))

    def judge(self, lower: str, words: list[str] | None = None) -> float:
        """The probability that ``lower`` (one piece) is an attack, by both models
        (``words``: its words, when the caller has them)."""
        z = self.log_odds(set(features(lower, self.lexicon, words)))
        if self.mix < 1.0 and z >= self.char_floor:
            z = self.mix * z + (1 - self.mix) * self.char_log_odds(lower)
        return sigmoid(z)

    def best(self, lower: str, *, least_words: int = 0,
             words: list[str] | None = None) -> tuple[float, tuple[int, int]]:
        """The highest-scoring piece of ``lower``: its probability (discounted for the
        number of pieces) and span. With ``least_words``, only pieces of at least that
        many words count (a piece of unspaced script, three characters a word).
        ``words`` are the words of ``lower`` when the caller has them."""
        p, where, pieces = self.best_piece(lower, least_words=least_words, words=words)
        return discount(p, pieces, self.piece_discount), where

    def best_piece(self, lower: str, *, least_words: int = 0,
                   words: list[str] | None = None) -> tuple[float, tuple[int, int], int]:
        """What :meth:`best` discounts: the best piece's own probability, its span and
        how many pieces were scored (the trainer tries discounts on these)."""
        best, where, pieces = 0.0, (0, 0), 0
        score = self.judge
        for start, end in self.pieces(lower, least_words=least_words):
            pieces += 1
            # A piece that is the whole text (a short one) has the text's words.
            p = score(lower[start:end], words if start == 0 and end == len(lower) else None)
            if p > best:
                best, where = p, (start, end)
        return best, where, pieces

    @staticmethod
    def pieces(lower: str, *, least_words: int = 0) -> list[tuple[int, int]]:
        """The ``(start, end)`` of the pieces of ``lower`` the model judges, in order."""
        return [(start, end) for start, end in chunks(lower)
                if not least_words or substantial(lower[start:end], least_words)]

    def evidence(self, piece: str, top: int = 4) -> list[str]:
        """The features of ``piece`` that pushed hardest towards "attack"."""
        get = self.weights.get
        # Ties broken by name: a set's order changes with the process's hash seed, and
        # the evidence named in a finding must not.
        ranked = sorted(set(features(piece, self.lexicon)), key=lambda f: (-get(f, 0), f))
        return [f for f in ranked[:top] if get(f, 0) > 0]


class ReadsAllAsOrdinary(ThreatModel):
    """A model that reads every piece as plainly ordinary (probability 0) and never
    blocks. Passed as ``hermes.safety.scan(…, model=…)``, its ``overruled`` says which
    texts a second opinion could overrule (the trainer chooses ``veto`` on those)."""

    def __init__(self, lexicon: Lexicon | None = None) -> None:
        super().__init__({}, 0.0, 2.0, lexicon, veto=1.0)

    def score_features(self, distinct: set[str]) -> float:
        return 0.0

    def judge(self, lower: str, words: list[str] | None = None) -> float:
        return 0.0


@lru_cache(maxsize=2)
def load_model(path: str | Path | None = None) -> ThreatModel:
    """The model in ``path`` (default: the packaged ``threat_model.json``), read once per
    process."""
    source = Path(path) if path is not None else MODEL_PATH
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
        weights = {f: int(q) for f, q in data["weights"].items()}
        concepts = data.get("concepts")
        chars = {g: int(q) for g, q in (data.get("chars") or {}).items()}
        scale = float(data["scale"])
        ref = data.get("referee")
        referee = (Referee({f: int(q) for f, q in ref["weights"].items()}, float(ref["bias"]), float(ref["hold"]),
                           float(ref["best"]), float(ref["threshold"]), scale) if ref else None)
        return ThreatModel(weights, float(data["bias"]), float(data["threshold"]),
                           Lexicon(concepts) if concepts else None, scale,
                           float(data.get("piece_discount", PIECE_DISCOUNT)), float(data.get("veto", 0.0)),
                           chars, float(data.get("char_bias", 0.0)), float(data.get("mix", 1.0)),
                           -math.inf if data.get("char_floor") is None else float(data["char_floor"]), referee)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{source}: cannot read the scanner model ({exc}); reinstall hermes or "
                         "rebuild it with benchmarks/train_scanner_model.py") from None
