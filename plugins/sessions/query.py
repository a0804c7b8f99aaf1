"""From what a person or a model types to safe full-text queries.

Nothing here touches a database. :func:`parse` turns any string into a
:class:`ParsedQuery` (OR-ed groups of AND-ed terms); :func:`plan` turns that into the
ordered :class:`Stage` list the SQLite store runs: the strict query first, then the
relaxed fallbacks for natural-language questions. Every FTS5 expression produced here
quotes every term, so user text can never reach FTS5 as syntax; only the operators this
module writes (``AND``, ``OR``, ``NOT``, parentheses, a trailing ``*``) do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Prefix terms need this many characters (shorter ones are searched as whole words).
MIN_PREFIX = 3
#: Longer input is cut before parsing (nobody types more; it bounds the work).
MAX_QUERY_CHARS = 2048
#: At most this many terms are used (the rest are ignored); bounds OR fan-out.
MAX_TERMS = 32
#: At most this many character trigrams in a relaxed CJK query.
MAX_TRIGRAMS = 40
#: Fewer strict hits than this and the relaxed stages run (when fallback is on).
RELAX_BELOW = 5

# Scripts that the unicode61 tokenizer glues into one token per run (no spaces between
# words): CJK ideographs (+ Ext A/B, compatibility), Hiragana/Katakana and Hangul. The
# same set decides which messages enter the trigram index (``CJK_GLOB`` in the schema's
# triggers) and which query terms are routed to it, so the two always agree.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x2A6DF),  # CJK Extension B
)
#: The same set as a GLOB character class (SQLite compares code points in ranges).
CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]*"
_CJK_CLASS = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in CJK_RANGES)
_CJK_RE = re.compile(f"[{_CJK_CLASS}]")
_CJK_RUN_RE = re.compile(f"[{_CJK_CLASS}]+")
_WORD_RUN_RE = re.compile(r"[^\W_]+")

#: English words that carry no topic. Dropped only in the relaxed fallback: a strict
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
wasn we were weren what whatever when whenever where whether which while who whom whose
why will with won would wouldn yes yet you your yours yourself yourselves
""".split())

_OPERATORS = {"AND", "OR", "NOT"}
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def has_cjk(text: str | None) -> bool:
    """Whether ``text`` contains a character of :data:`CJK_RANGES`."""
    return bool(text) and _CJK_RE.search(text) is not None


def _has_word_char(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


@dataclass(frozen=True)
class Term:
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

    def fts5(self, *, prefix: bool = True) -> str:
        """The term as an FTS5 string: always double-quoted, inner quotes doubled."""
        star = "*" if (self.prefix and prefix) else ""
        return '"' + self.text.replace('"', '""') + '"' + star


@dataclass
class ParsedQuery:
    """A query as OR-ed ``groups`` of AND-ed terms (FTS5's own precedence: ``NOT`` binds
    tighter than ``AND``, ``AND`` tighter than ``OR``). ``explicit`` is true when the user
    wrote an operator or a quoted phrase (a deliberate query rather than a question)."""

    groups: list[list[Term]] = field(default_factory=list)
    explicit: bool = False

    @property
    def terms(self) -> list[Term]:
        return [t for g in self.groups for t in g]

    @property
    def empty(self) -> bool:
        return not self.groups

    @property
    def cjk(self) -> bool:
        return any(t.cjk for t in self.terms)


def _clean_word(word: str) -> Term | None:
    """A bare (unquoted) word to a term, or ``None`` when nothing searchable is left."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1  # leading specials, including a leading '*' (prefix needs a char)
    while end > start and not (word[end - 1].isalnum() or word[end - 1] == "*"):
        end -= 1
    core = word[start:end]
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
    return Term(core, phrase=compound, prefix=prefix)


def parse(query: str | None) -> ParsedQuery:
    """Parse any string into a :class:`ParsedQuery`; never raises.

    Rules: input is cut to :data:`MAX_QUERY_CHARS`; balanced ``"quoted phrases"`` are
    kept as phrases and an unbalanced quote is ignored; uppercase ``AND``/``OR``/``NOT``
    are operators and dangling ones are dropped (``NOT`` with nothing to exclude from
    makes its terms positive); other special characters are stripped from the edges of
    words; a trailing ``*`` makes a prefix term; words with inner punctuation become
    phrases; at most :data:`MAX_TERMS` terms are kept.
    """
    if not query or not isinstance(query, str):
        return ParsedQuery()
    text = _CONTROL_RE.sub(" ", query[:MAX_QUERY_CHARS])
    parts = text.split('"')
    if len(parts) % 2 == 0:  # an odd number of quotes: the last one is unbalanced
        parts[-2:] = [parts[-2] + " " + parts[-1]]
    tokens: list[str | Term] = []
    explicit = len(parts) > 1
    for i, part in enumerate(parts):
        if i % 2:  # inside quotes
            phrase = " ".join(part.split())
            if phrase and _has_word_char(phrase):
                tokens.append(Term(phrase, phrase=True))
            continue
        for word in part.split():
            if word in _OPERATORS:
                tokens.append(word)
                explicit = True
            else:
                term = _clean_word(word)
                if term is not None:
                    tokens.append(term)

    groups: list[list[Term]] = [[]]
    negate = False
    count = 0
    for token in tokens:
        if token == "OR":
            if groups[-1]:
                groups.append([])
            negate = False
        elif token == "NOT":
            negate = True
        elif token == "AND":
            continue
        elif isinstance(token, Term) and count < MAX_TERMS:
            groups[-1].append(Term(token.text, token.phrase, token.prefix, negate))
            negate = False
            count += 1
    out: list[list[Term]] = []
    for group in groups:
        if not group:
            continue
        if all(t.negated for t in group):
            group = [Term(t.text, t.phrase, t.prefix, False) for t in group]
        out.append(group)
    return ParsedQuery(out, explicit)


def to_fts5(groups: list[list[Term]], *, prefix: bool = True) -> str:
    """Render groups as an FTS5 expression (every term quoted)."""
    rendered = []
    for group in groups:
        pos = [t.fts5(prefix=prefix) for t in group if not t.negated]
        neg = [t.fts5(prefix=prefix) for t in group if t.negated]
        expr = " AND ".join(pos) + "".join(f" NOT {n}" for n in neg)
        rendered.append(f"({expr})" if len(groups) > 1 else expr)
    return " OR ".join(rendered)


#: Words so common that requiring them filters nothing while ranking them costs a scan
#: of a huge posting list: left out of a strict query when another word remains in its
#: group (inside quoted phrases they always count).
NOISE_WORDS = frozenset(
    "a an the of to in on at by for and or is are was were be been it its this that "
    "with as from i we you".split()
)


def strict_groups(parsed: ParsedQuery) -> list[list[Term]]:
    """The groups of the strict query: noise words dropped where other words remain."""
    out = []
    for group in parsed.groups:
        def noise(t: Term) -> bool:
            return not (t.phrase or t.prefix or t.negated) and t.text.lower() in NOISE_WORDS
        kept = [t for t in group if not noise(t)]
        out.append(kept if any(not t.negated for t in kept) else group)
    return out


def sanitize(query: str | None) -> str:
    """The strict FTS5 expression for ``query`` (``""`` when nothing is searchable).
    Handy for debugging and for stores that pass FTS5 syntax through."""
    return to_fts5(strict_groups(parse(query)))


def informative(term: Term) -> bool:
    """Whether a term carries topic: prefixes and CJK always do; words unless they are
    stop words or a single Latin character; phrases when any of their words does
    ("what's" does not)."""
    if term.prefix or term.cjk:
        return True
    if term.phrase:
        return any(informative(Term(w)) for w in _WORD_RUN_RE.findall(term.text))
    word = term.text.lower()
    return word not in STOP_WORDS and (len(word) > 1 or not word.isascii())


def costly_to_rank(groups: list[list[Term]]) -> bool:
    """Whether a query has a phrase made partly of noise words ("the config"). BM25 first
    counts every message containing each phrase, which for such a phrase means checking
    positions in two huge posting lists; its matches are exact already, so they are
    listed newest first instead."""
    return any(t.phrase and not t.negated and any(w.lower() in NOISE_WORDS for w in _WORD_RUN_RE.findall(t.text))
               for g in groups for t in g)


#: Endings stripped by :func:`stem` (longest first). Crude on purpose: the relaxed stage
#: searches the stem as a prefix, so "websockets" meets "websocket", "isolate" meets
#: "isolation", "failed" meets "failure"; BM25 and the other terms sort out the noise.
_SUFFIXES = ("ations", "ation", "ings", "ing", "ions", "ion", "ments", "ment", "ness",
             "ies", "ied", "ers", "er", "es", "ed", "ly", "s", "e")


def stem(word: str) -> str:
    """A crude English stem (lower case), never shorter than three characters."""
    lower = word.lower()
    for suffix in _SUFFIXES:
        if lower.endswith(suffix) and len(lower) - len(suffix) >= 3:
            return lower[: -len(suffix)]
    return lower


def like_pattern(text: str) -> str:
    """``%text%`` with LIKE wildcards escaped (escape character ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# --------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------

#: The columns a LIKE condition looks at, in the trigram table (its own copy of the text).
#: The unary ``+`` keeps FTS5 from taking the LIKE over (its trigram LIKE support finds
#: nothing for patterns shorter than three characters).
_LIKE_COLUMNS = ("+content", "+tool_name", "+tool_args")


@dataclass
class Stage:
    """One query the store runs: ``index`` is ``"words"`` (unicode61 table) or
    ``"trigram"`` (the CJK table); ``match`` an FTS5 expression or ``None`` (a scan);
    ``where``/``params`` extra SQL over the index table's columns (LIKE conditions);
    ``mode`` the label its hits carry. ``highlight`` lists strings for a snippet the store
    builds itself (FTS5's snippet marks overlapping trigrams badly)."""

    mode: str
    index: str
    match: str | None = None
    where: str = ""
    params: list[str] = field(default_factory=list)
    highlight: list[str] = field(default_factory=list)
    #: False: list matches newest first instead of by relevance (see ``costly_to_rank``).
    ranked: bool = True
    #: For relaxed word stages: the OR-ed terms and the excluded ones, so a store can
    #: drop terms too common to matter and rebuild ``match`` with :func:`relaxed_match`.
    terms: list[Term] = field(default_factory=list)
    negatives: list[Term] = field(default_factory=list)
    #: ``"pairs"`` (at least two of ``terms``), ``"any"`` (any one of them) or
    #: ``"all_pairs"`` (pairs again, for a store that dropped pairs of common words).
    combine: str = ""


def _like_sql(term: Term, table: str) -> tuple[str, list[str]]:
    pattern = like_pattern(term.text)
    cols = [f"{c[0]}{table}.{c[1:]}" for c in _LIKE_COLUMNS]
    sql = "(" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in cols) + ")"
    if term.negated:
        sql = f"NOT {sql}"
    return sql, [pattern] * len(cols)


def _cjk_strict(parsed: ParsedQuery, table: str) -> Stage:
    """The strict stage of a query with CJK terms: terms of three or more characters go
    through the trigram index (substring semantics), shorter ones through LIKE."""
    groups = [[Term(t.text, True, False, t.negated) for t in g] for g in parsed.groups]
    short = [t for t in parsed.terms if len(t.text) < 3]
    if not short:
        return Stage("trigram", "trigram", match=to_fts5(groups, prefix=False))
    if len(groups) > 1:
        # LIKE cannot be OR-ed with MATCH, so the whole boolean goes to LIKE.
        ors, params = [], []
        for group in groups:
            ands = []
            for term in group:
                sql, p = _like_sql(term, table)
                ands.append(sql)
                params += p
            ors.append("(" + " AND ".join(ands) + ")")
        return Stage("like", "trigram", where="(" + " OR ".join(ors) + ")", params=params)
    group = groups[0]
    long_pos = [t for t in group if len(t.text) >= 3 and not t.negated]
    conditions, params, match_terms = [], [], []
    for term in group:
        if long_pos and len(term.text) >= 3:
            match_terms.append(term)
        else:
            sql, p = _like_sql(term, table)
            conditions.append(sql)
            params += p
    match = to_fts5([match_terms], prefix=False) if match_terms else None
    return Stage("trigram" if match else "like", "trigram", match=match,
                 where=" AND ".join(conditions), params=params)


def _trigrams(text: str) -> list[str]:
    return [text[i:i + 3] for i in range(len(text) - 2)]


def plan(query: str | None, *, fallback: bool = True) -> list[Stage]:
    """The stages for ``query``, strict first. ``[]`` when nothing is searchable.

    Latin queries: the strict word query, then (when there is something to relax) the
    informative terms OR-ed. CJK queries: the strict trigram/LIKE query, then the
    trigrams of every CJK run plus informative Latin words OR-ed on the trigram index,
    then the informative Latin words OR-ed on the word index (Latin-only messages are
    not in the trigram index). The store runs a later stage only while the earlier ones
    found fewer than :data:`RELAX_BELOW` hits.
    """
    parsed = parse(query)
    if parsed.empty:
        return []
    trigram_table = "messages_fts_trigram"
    stages: list[Stage] = []
    positives = [t for t in parsed.terms if not t.negated]
    negatives = [t for t in parsed.terms if t.negated]
    if parsed.cjk:
        stages.append(_cjk_strict(parsed, trigram_table))
    else:
        groups = strict_groups(parsed)
        stages.append(Stage("strict", "words", match=to_fts5(groups), ranked=not costly_to_rank(groups)))
    if not fallback:
        return stages

    latin = [t for t in positives if not t.cjk and informative(t)]
    for term in positives:  # Latin words written inside CJK text ("迁移到Postgres")
        if term.cjk:
            latin += [Term(w) for w in _WORD_RUN_RE.findall(_CJK_RE.sub(" ", term.text))
                      if informative(Term(w))]
    latin = _dedupe(latin)
    single_term = len(parsed.groups) == 1 and len(positives) == 1
    if parsed.cjk:
        grams: list[str] = []
        for term in positives:
            for run in _CJK_RUN_RE.findall(term.text):
                grams += _trigrams(run)
            for word in _WORD_RUN_RE.findall(_CJK_RE.sub(" ", term.text)):
                if len(word) >= 3 and informative(Term(word)):
                    grams.append(word)
        grams = list(dict.fromkeys(grams))[:MAX_TRIGRAMS]
        if grams and not (single_term and len(grams) == 1):
            ors = " OR ".join(Term(g).fts5() for g in grams)
            not_cjk = [t for t in negatives if len(t.text) >= 3]
            match = f"({ors})" + "".join(f" NOT {Term(t.text).fts5()}" for t in not_cjk)
            stages.append(Stage("relaxed", "trigram", match=match, highlight=grams))
        if latin:
            stages += _relaxed_words(latin, [t for t in negatives if not t.cjk])
    elif latin and not (single_term and latin == positives):
        stages += _relaxed_words(latin, negatives)
    return stages


def _dedupe(terms: list[Term]) -> list[Term]:
    seen: dict[tuple[str, bool, bool], Term] = {}
    for t in terms:
        seen.setdefault((t.text.lower(), t.phrase, t.prefix), t)
    return list(seen.values())


#: Informative terms paired in the "two of them" relaxed stage (pairs grow as n²).
MAX_PAIR_TERMS = 8


def loosen(term: Term) -> str:
    """One informative term as a forgiving FTS5 expression: a plain English word by its
    stem, as a prefix when the stem is long enough to be specific ("websockets" →
    ``"websocket"*``), else as the word or its stem ("logs" → ``("logs" OR "log")``);
    phrases, prefixes, numbers and other scripts as typed."""
    if term.phrase or term.prefix or not (term.text.isascii() and term.text.isalpha()):
        return Term(term.text, term.phrase, term.prefix).fts5()
    root = stem(term.text)
    if len(root) >= 5:
        return Term(root, prefix=True).fts5()
    if root != term.text.lower():
        return f"({Term(term.text).fts5()} OR {Term(root).fts5()})"
    return Term(term.text).fts5()


def _excluding(expr: str, negatives: list[Term]) -> str:
    return expr + "".join(f" NOT {Term(t.text, t.phrase, t.prefix).fts5()}" for t in negatives)


def relaxed_match(terms: list[Term], negatives: list[Term]) -> str:
    """``(a OR b OR …) NOT x NOT y`` over loosened terms: any one of them."""
    return _excluding("(" + " OR ".join(loosen(t) for t in terms) + ")", negatives)


def pairs_match(terms: list[Term], negatives: list[Term], common: list[bool] | None = None) -> str:
    """At least two of the loosened terms: ``((a AND b) OR (a AND c) OR …)``. Pairs of
    two terms flagged ``common`` are left out (they match too much to mean anything)."""
    terms = terms[:MAX_PAIR_TERMS]
    flags = (common or [False] * len(terms))[: len(terms)]
    loose = [loosen(t) for t in terms]
    pairs = [f"({loose[i]} AND {loose[j]})" for i in range(len(loose)) for j in range(i + 1, len(loose))
             if not (flags[i] and flags[j])]
    return _excluding("(" + " OR ".join(pairs) + ")", negatives)


def _relaxed_words(terms: list[Term], negatives: list[Term]) -> list[Stage]:
    """Two relaxed stages: messages with at least two of the informative terms (so two
    common words that meet in one message still find it), then messages with any one
    of them (where a store may drop terms too common to matter)."""
    stages = []
    if len(terms) >= 2:
        stages.append(Stage("relaxed", "words", match=pairs_match(terms, negatives),
                            terms=list(terms[:MAX_PAIR_TERMS]), negatives=list(negatives),
                            combine="pairs"))
    stages.append(Stage("relaxed", "words", match=relaxed_match(terms, negatives),
                        terms=list(terms), negatives=list(negatives), combine="any"))
    if len(terms) >= 2:
        # Last resort, when a store dropped pairs of common words above and nothing was
        # found: they may still meet in one message ("maximum upload size" → upload AND size).
        stages.append(Stage("relaxed", "words", match=pairs_match(terms, negatives),
                            terms=list(terms[:MAX_PAIR_TERMS]), negatives=list(negatives),
                            combine="all_pairs"))
    return stages


__all__ = [
    "CJK_GLOB", "CJK_RANGES", "MAX_QUERY_CHARS", "MAX_TERMS", "NOISE_WORDS", "RELAX_BELOW",
    "STOP_WORDS", "costly_to_rank", "strict_groups",
    "ParsedQuery", "Stage", "Term", "has_cjk", "informative", "like_pattern", "parse",
    "loosen", "pairs_match", "plan", "relaxed_match", "sanitize", "stem", "to_fts5",
]
