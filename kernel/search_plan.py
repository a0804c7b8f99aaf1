"""Query planning for session search, shared by every session store.

What a person or a model types becomes a list of :class:`SearchStage` — the strict
query first, then the relaxed fallbacks for natural-language questions — without any
database syntax: a store renders each stage in its own query language (the SQLite store
as FTS5 expressions, a PostgreSQL store could use ``tsquery`` and ``pg_trgm``). The
rules of *what* to search (terms, stop words, stems, possessives, CJK bigrams, which
stages and in which order) live here once, so two stores answer a question alike.

Stages (see :func:`plan_search`):

* ``all`` — the strict query: OR-ed groups of AND-ed terms as typed (noise words left
  out of groups where other words remain); matched against the message's own text only.
* ``any`` — relaxed: any of the informative terms, each loosened to its Snowball stem
  (``dances`` → ``danc*``), ranked by relevance; matched against the message's text, its
  tool calls, the previous message's text and its date.
* ``grams`` — relaxed for CJK questions: the question's character bigrams minus those of
  question words (什么, 怎么, どこ …), ranked by how many distinct bigrams a message has.

A store runs a later stage only while the earlier ones found fewer than
:data:`RELAX_BELOW` hits.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

#: Prefix terms need this many characters (shorter ones are searched as whole words).
MIN_PREFIX = 3
#: Longer input is cut before parsing (nobody types more; it bounds the work).
MAX_QUERY_CHARS = 2048
#: At most this many terms are used (the rest are ignored); bounds OR fan-out.
MAX_TERMS = 32
#: At most this many CJK bigrams in a relaxed CJK stage.
MAX_GRAMS = 40
#: A single run of at most this many CJK characters is a keyword, not a question.
CJK_KEYWORD = 5
#: Fewer hits than this and the next (relaxed) stage runs.
RELAX_BELOW = 5

# Scripts written without spaces between words: CJK ideographs (+ Ext A/B,
# compatibility), Hiragana/Katakana and Hangul.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x2A6DF),  # CJK Extension B
)
_CJK_CLASS = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in CJK_RANGES)
_CJK_RE = re.compile(f"[{_CJK_CLASS}]")
_CJK_RUN_RE = re.compile(f"[{_CJK_CLASS}]+")
_WORD_RUN_RE = re.compile(r"[^\W_]+")
# Where a CJK run touches another letter or digit ("迁移到Postgres", "API키를").
_GLUE_RE = re.compile(f"(?<=[{_CJK_CLASS}])(?=[^\\W_])(?![{_CJK_CLASS}])|(?<=[^\\W_])(?<![{_CJK_CLASS}])(?=[{_CJK_CLASS}])")

#: English words that carry no topic. Dropped only in the relaxed stages: a strict
#: query keeps every word the user typed.
STOP_WORDS = frozenset("""
a about above after again against ago all also am an and any are aren as at be because
been before being below between both but by can cannot could couldn did didn do does
doesn doing don down during each else ever few for from further get got had hadn has
hasn have haven having he her here hers herself him himself his how i if in into is isn
it its itself just last let like ll made make me might more most much must my myself
need no nor not now of off on once one only or other ought our ours ourselves out over
own please re remember same say said shall she should shouldn since so some something
still such tell than that the their theirs them themselves then there these they thing
things this those through time to too under until up upon us use used using ve very was
wasn we were what whatever when whenever where whether which while who whom whose
why will with won would wouldn yes yet you your yours yourself yourselves
""".split())

#: Words so common that requiring them filters nothing while ranking them costs a scan
#: of a huge posting list: left out of a strict query when another word remains in its
#: group (inside quoted phrases they always count).
NOISE_WORDS = frozenset(
    "a an the of to in on at by for and or is are was were be been it its this that "
    "with as from i we you".split()
)

#: Question words of Chinese and Japanese: a CJK bigram overlapping one of them says how
#: the question is asked, not what it is about.
CJK_QUESTION_WORDS = tuple(sorted("""
什么 怎么 怎样 怎么样 为什么 时候 哪里 哪儿 哪个 哪些 哪家 哪本 哪位 多少 多久 几个 几点 是谁 谁 吗 呢 吧 星期几
什麼 為什麼 甚麼 嗎
なに なん 何 どこ いつ どう どれ どの だれ 誰 ですか ますか でしたか いくら だっけ よね かな ください 教えて
""".split(), key=len, reverse=True))
#: Characters that make a bigram of two of them mere grammar (particles, pronouns).
CJK_FUNCTION_CHARS = frozenset("的了是在我你他她们个和也就还吗呢吧啊把被给对与这那有"
                               "のはがをにでともへやかねよなだすまし")

_OPERATORS = {"AND", "OR", "NOT"}
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_POSSESSIVE_RE = re.compile(r"(?<=\w)['’]s?$")


def has_cjk(text: str | None) -> bool:
    """Whether ``text`` contains a character of :data:`CJK_RANGES`."""
    return text is not None and _CJK_RE.search(text) is not None


def _has_word_char(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


@dataclass(frozen=True)
class SearchTerm:
    """One search term: ``text`` as typed (cleaned); ``phrase`` when it must match as a
    sequence (a quoted phrase, or a compound such as ``my-app.config.ts``); ``prefix``
    for ``deploy*``; ``negated`` after ``NOT``."""

    text: str
    phrase: bool = False
    prefix: bool = False
    negated: bool = False

    @property
    def cjk(self) -> bool:
        return has_cjk(self.text)


@dataclass
class ParsedSearch:
    """A query as OR-ed ``groups`` of AND-ed terms (``NOT`` binds tighter than ``AND``,
    ``AND`` tighter than ``OR``). ``explicit`` is true when the user wrote an operator
    or a quoted phrase (a deliberate query rather than a question)."""

    groups: list[list[SearchTerm]] = field(default_factory=list)
    explicit: bool = False
    #: Positive terms as typed: a word glued to a CJK run ("迁移到Postgres") is one here
    #: and several terms in ``groups`` (0: not counted, see ``len(positives)``).
    typed: int = 0

    @property
    def terms(self) -> list[SearchTerm]:
        return [t for g in self.groups for t in g]

    @property
    def empty(self) -> bool:
        return not self.groups

    @property
    def cjk(self) -> bool:
        return any(t.cjk for t in self.terms)


def _clean_word(word: str) -> SearchTerm | None:
    """A bare (unquoted) word to a term, or ``None`` when nothing searchable is left."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1  # leading specials, including a leading '*' (prefix needs a char)
    while end > start and not (word[end - 1].isalnum() or word[end - 1] in "*'’"):
        end -= 1
    core = word[start:end]
    # Possessives: "Jon's" and "James'" mean Jon and James (as a phrase "jon s" would
    # only match the possessive form).
    core = _POSSESSIVE_RE.sub("", core)
    prefix = core.endswith("*")
    core = core.rstrip("*")
    while core and not core[-1].isalnum():
        core = core[:-1]
    core = core.replace("*", " ").strip()
    if not core or not _has_word_char(core):
        return None
    if prefix and len(core) < MIN_PREFIX:
        prefix = False  # "do*" would expand to every word starting with "do": search "do"
    # Interior punctuation (chat-send, P2.2, my-app.config.ts, snake_case, foo@bar.com):
    # the tokenizer would split it into AND-ed words; match the pieces in order instead.
    compound = any(not (ch.isalnum() or ch == " ") for ch in core) or " " in core
    return SearchTerm(core, phrase=compound, prefix=prefix)


def _tokens(query: str) -> tuple[list[str | SearchTerm | list[SearchTerm]], bool]:
    """The query's operators and terms in order (a word glued to CJK as [whole, *parts]),
    and whether it used quotes or operators."""
    text = _CONTROL_RE.sub(" ", query[:MAX_QUERY_CHARS])
    parts = text.split('"')
    if len(parts) % 2 == 0:  # an odd number of quotes: the last one is unbalanced
        parts[-2:] = [parts[-2] + " " + parts[-1]]
    tokens: list[str | SearchTerm | list[SearchTerm]] = []
    explicit = len(parts) > 1
    for i, part in enumerate(parts):
        if i % 2:  # inside quotes
            phrase = " ".join(part.split())
            if phrase and _has_word_char(phrase):
                tokens.append(SearchTerm(phrase, phrase=True))
            continue
        for word in part.split():
            if word in _OPERATORS:
                tokens.append(word)
                explicit = True
            else:
                term = _clean_word(word)
                if term is not None:
                    # A word glued to a CJK run is its parts, AND-ed (written apart or
                    # together, the message says the same); after NOT it stays whole.
                    pieces = [p for p in map(_clean_word, _GLUE_RE.sub(" ", word).split()) if p is not None]
                    tokens.append([term, *pieces] if len(pieces) > 1 else term)

    return tokens, explicit


def parse_search(query: str | None) -> ParsedSearch:
    """Parse any string into a :class:`ParsedSearch`; never raises.

    Rules: input is cut to :data:`MAX_QUERY_CHARS`; balanced ``"quoted phrases"`` are
    kept as phrases and an unbalanced quote is ignored; uppercase ``AND``/``OR``/``NOT``
    are operators and dangling ones are dropped (``NOT`` with nothing to exclude from
    makes its terms positive); other special characters are stripped from the edges of
    words, possessive ``'s`` too; a trailing ``*`` makes a prefix term; words with inner
    punctuation become phrases; at most :data:`MAX_TERMS` terms are kept.
    """
    if not query or not isinstance(query, str):
        return ParsedSearch()
    tokens, explicit = _tokens(query)

    groups: list[list[SearchTerm]] = [[]]
    negate = False
    count = typed = 0
    for token in tokens:
        if token == "OR":
            if groups[-1]:
                groups.append([])
            negate = False
        elif token == "NOT":
            negate = True
        elif token == "AND":
            continue
        elif isinstance(token, list) and count < MAX_TERMS:
            whole, *pieces = token
            for piece in ([whole] if negate else pieces)[:MAX_TERMS - count]:
                groups[-1].append(SearchTerm(piece.text, piece.phrase, piece.prefix, negate))
                count += 1
            typed += not negate
            negate = False
        elif isinstance(token, SearchTerm) and count < MAX_TERMS:
            groups[-1].append(SearchTerm(token.text, token.phrase, token.prefix, negate))
            typed += not negate
            negate = False
            count += 1
    out: list[list[SearchTerm]] = []
    for group in groups:
        if not group:
            continue
        if all(t.negated for t in group):
            group = [SearchTerm(t.text, t.phrase, t.prefix, False) for t in group]
        out.append(group)
    return ParsedSearch(out, explicit, typed)


def strict_groups(parsed: ParsedSearch) -> list[list[SearchTerm]]:
    """The groups of the strict query: noise words dropped where other words remain."""
    out = []
    for group in parsed.groups:
        def noise(t: SearchTerm) -> bool:
            return not (t.phrase or t.prefix or t.negated) and t.text.lower() in NOISE_WORDS
        kept = [t for t in group if not noise(t)]
        out.append(kept if any(not t.negated for t in kept) else group)
    return out


def informative(term: SearchTerm) -> bool:
    """Whether a term carries topic: prefixes and CJK always do; words unless they are
    stop words or a single Latin character; phrases when any of their words does."""
    if term.prefix or term.cjk:
        return True
    if term.phrase:
        return any(informative(SearchTerm(w)) for w in _WORD_RUN_RE.findall(term.text))
    word = term.text.lower()
    return word not in STOP_WORDS and (len(word) > 1 or not word.isascii())


def costly_to_rank(groups: list[list[SearchTerm]]) -> bool:
    """Whether a query has a phrase made partly of noise words ("the config"): its
    matches are exact already and ranking them means checking positions in two huge
    posting lists, so they are listed newest first instead."""
    return any(t.phrase and not t.negated and any(w.lower() in NOISE_WORDS for w in _WORD_RUN_RE.findall(t.text))
               for g in groups for t in g)


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    import snowballstemmer  # imported on first search, not with hermes

    return snowballstemmer.stemmer("english")


def search_stem(word: str) -> str:
    """The Snowball (Porter 2) English stem of ``word``, lower case: ``dances`` and
    ``dancing`` → ``danc``, ``opening`` → ``open``."""
    return str(_stemmer().stemWord(word.lower()))


def cjk_bigrams(text: str) -> list[str]:
    """The distinct character bigrams of the CJK runs of ``text`` that say what it is
    about: bigrams overlapping a question word (什么, 怎么, どこ …) and bigrams of two
    grammar characters (的, 了, の, は …) are left out; a one-character run is kept as is."""
    out: list[str] = []
    for run in _CJK_RUN_RE.findall(text or ""):
        masked = [False] * len(run)
        for word in CJK_QUESTION_WORDS:
            start = run.find(word)
            while start >= 0:
                for i in range(start, start + len(word)):
                    masked[i] = True
                start = run.find(word, start + 1)
        if len(run) == 1:
            if not masked[0] and run not in CJK_FUNCTION_CHARS:
                out.append(run)
            continue
        for i in range(len(run) - 1):
            gram = run[i:i + 2]
            if masked[i] or masked[i + 1]:
                continue
            if gram[0] in CJK_FUNCTION_CHARS and gram[1] in CJK_FUNCTION_CHARS:
                continue
            out.append(gram)
    # Japanese: two hiragana are nearly always inflection or particles (すれ, れば, ます);
    # keep them only when nothing else is left (a question written in kana alone).
    content = [g for g in out if not all(0x3040 <= ord(c) <= 0x309F for c in g)]
    return list(dict.fromkeys(content or out))


@dataclass
class SearchStage:
    """One query a store runs, in no database's syntax.

    ``kind``: ``"all"`` (``groups``: OR-ed groups of AND-ed terms, matched in the
    message's own text), ``"any"`` (any of ``terms``, each loosened to its stem, none of
    ``negatives``; matched in the message, its tool calls, the previous message and its
    date; ranked) or ``"grams"`` (CJK ``grams``: rank messages by how many of them they
    contain). ``script`` is ``"words"`` or ``"cjk"`` (which index serves it). ``mode`` is
    the label its hits carry. ``ranked`` false: list the matches newest first (see
    :func:`costly_to_rank`)."""

    mode: str
    kind: str
    script: str = "words"
    groups: list[list[SearchTerm]] = field(default_factory=list)
    terms: list[SearchTerm] = field(default_factory=list)
    negatives: list[SearchTerm] = field(default_factory=list)
    grams: list[str] = field(default_factory=list)
    ranked: bool = True
    #: Whether the stage may match a message by its context (the previous message's
    #: text, its date) and not only by its own text: for questions of two or more
    #: informative terms; a single keyword finds the messages that contain it.
    context: bool = False


def _dedupe(terms: list[SearchTerm]) -> list[SearchTerm]:
    seen: dict[tuple[str, bool, bool], SearchTerm] = {}
    for t in terms:
        seen.setdefault((t.text.lower(), t.phrase, t.prefix), t)
    return list(seen.values())


def plan_search(query: str | None, *, fallback: bool = True) -> list[SearchStage]:
    """The stages for ``query``, strict first; ``[]`` when nothing is searchable.

    Latin queries: the strict ``all`` stage, then (when there is something to relax) an
    ``any`` stage over the informative terms. CJK queries: the strict ``all`` stage on the
    CJK index, then a ``grams`` stage over the question's bigrams, then an ``any`` stage
    over the Latin words written among them ("迁移到Postgres").
    """
    parsed = parse_search(query)
    if parsed.empty:
        return []
    positives = [t for t in parsed.terms if not t.negated]
    negatives = [t for t in parsed.terms if t.negated]
    if parsed.cjk:
        stages = [SearchStage("strict", "all", "cjk", groups=parsed.groups)]
    else:
        groups = strict_groups(parsed)
        stages = [SearchStage("strict", "all", "words", groups=groups, ranked=not costly_to_rank(groups))]
    if not fallback:
        return stages

    latin = [t for t in positives if not t.cjk and informative(t)]
    for term in positives:  # Latin words written inside CJK text ("迁移到Postgres")
        if term.cjk:
            latin += [SearchTerm(w) for w in _WORD_RUN_RE.findall(_CJK_RE.sub(" ", term.text))
                      if informative(SearchTerm(w))]
    latin = _dedupe(latin)
    latin_negatives = [t for t in negatives if not t.cjk]
    single_term = len(parsed.groups) == 1 and (parsed.typed if len(positives) > 1 else len(positives)) == 1
    if parsed.cjk:
        grams = cjk_bigrams(" ".join(t.text for t in positives))[:MAX_GRAMS]
        # One CJK word (up to CJK_KEYWORD characters: most words and idioms) is a
        # keyword, found by the strict stage; a longer run or several terms read as a
        # question.
        keyword = single_term and sum(len(r) for t in positives for r in _CJK_RUN_RE.findall(t.text)) <= CJK_KEYWORD
        if grams and not keyword:
            stages.append(SearchStage("relaxed", "grams", "cjk", grams=grams,
                                      negatives=[t for t in negatives if t.cjk], context=len(grams) > 1))
        if latin:
            stages.append(SearchStage("relaxed", "any", "words", terms=latin, negatives=latin_negatives,
                                      context=len(latin) > 1))
    elif latin and not (single_term and latin == positives and not positives[0].phrase
                        and search_stem(positives[0].text) == positives[0].text.lower()):
        stages.append(SearchStage("relaxed", "any", "words", terms=latin, negatives=latin_negatives,
                                  context=len(latin) > 1))
    return stages


__all__ = [
    "CJK_QUESTION_WORDS", "CJK_RANGES", "MAX_GRAMS", "MAX_QUERY_CHARS", "MAX_TERMS", "MIN_PREFIX",
    "NOISE_WORDS", "RELAX_BELOW", "STOP_WORDS", "ParsedSearch", "SearchStage", "SearchTerm",
    "cjk_bigrams", "costly_to_rank", "has_cjk", "informative", "parse_search", "plan_search",
    "search_stem", "strict_groups",
]
