"""Session search in PostgreSQL: rendering hermes' search plan as SQL.

:func:`hermes.plan_search` decides *what* to search (terms, stop words, stems, stages,
CJK bigrams); this module only renders each :class:`hermes.SearchStage` for PostgreSQL:

* words stages become a ``tsquery`` over the ``tsv`` column — weight A (the message's own
  text) for the strict stage and for relaxed stages without context, A and D (also the
  previous message and the date) otherwise;
* CJK stages become substring conditions over the message's own text; the index holds
  CJK runs as character bigrams (:func:`words`), so a term's bigrams
  (:func:`cjk_term_query`) find the candidates and the bigram stage's candidates are
  the messages holding one of its bigrams (:func:`grams_query`).

The ``tsquery`` text is built here from tokens split exactly like the indexed text
(:func:`words`), every lexeme quoted, so user text never reaches ``to_tsquery`` as
syntax; ``to_tsquery`` then only applies the ``hermes_words`` dictionaries (unaccent,
lower case) to each quoted lexeme.
"""

from __future__ import annotations

import re
import sys
import time
import unicodedata
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import hermes

_CJK_CLASS = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in hermes.CJK_RANGES)
_CJK_RUN_RE = re.compile(f"[{_CJK_CLASS}]+")
#: Indexed text is cut here (a tsvector holds at most 1 MB; nobody searches page 400 of
#: a pasted log by word).
MAX_INDEXED_CHARS = 200_000
PREV_CHARS = 1000
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


def cjk_grams(run: str) -> list[str]:
    """A CJK run as the index holds it: its overlapping character bigrams in order
    (``数据库`` → ``数据 据库``); a one-character run as itself."""
    return [run] if len(run) < 2 else [run[i:i + 2] for i in range(len(run) - 1)]


@cache
def _word_re() -> re.Pattern[str]:
    """Runs of letters, digits and combining marks. The server's ``[[:alnum:]]`` (a UTF-8
    database) counts a vowel sign or a combining accent as part of its word — ``हिंदी`` is
    one word there — while Python's ``\\w`` splits at it (``ह द``): the words the store
    indexes and the ones ``hermes_words`` computes on a rebuild would differ. Built on
    first use (a pass over the code points, about 0.2 s) rather than at import."""
    marks, start = [], None
    for code in range(sys.maxunicode + 2):
        is_mark = code <= sys.maxunicode and unicodedata.category(chr(code)).startswith("M")
        if is_mark and start is None:
            start = code
        elif not is_mark and start is not None:
            marks.append(f"{re.escape(chr(start))}-{re.escape(chr(code - 1))}")
            start = None
    return re.compile(f"(?:[^\\W_]|[{''.join(marks)}])+")


def words(text: str | None) -> str:
    """``text`` as space-separated word tokens, the way both the index and the queries
    see it: runs of letters and digits (``_`` and punctuation split); a CJK run split off
    (so ``迁移到Postgres`` holds the word ``postgres``) and written as its character
    bigrams (:func:`cjk_grams`), so CJK words of any length from two characters on are
    found through the same words index. The SQL function ``hermes_words`` of the schema
    does the same for the context and for a reindex."""
    if not text:
        return ""
    text = _CJK_RUN_RE.sub(lambda m: " " + " ".join(cjk_grams(m.group(0))) + " ", text[:MAX_INDEXED_CHARS])
    return " ".join(_word_re().findall(text))


def gram_test(gram: str, weight: str, own: str) -> tuple[str, str]:
    """SQL (and its parameter) that is true when the message's own text (``weight`` A)
    or the previous message's (D) holds ``gram``: a lookup in ``tsv`` for a bigram, a
    substring search for a single character (the index holds those only as whole runs)."""
    if len(gram) >= 2:
        return "(m.tsv @@ %s::tsquery)", _lexeme(gram, weights=weight)
    text = own if weight == "A" else "coalesce(m.prev_cjk, '')"
    return f"(strpos({text}, %s) > 0)", gram


def grams_query(grams: list[str], context: bool) -> str | None:
    """The bigram stage's candidates as tsquery text: messages holding one of the bigrams
    (in their own text, or also in the previous message's with ``context``); a
    one-character gram only counts in the score (the index holds it only as a whole run)."""
    weights = "" if context else "A"
    return " | ".join(_lexeme(g, weights=weights) for g in grams if len(g) >= 2) or None


def cjk_runs(text: str) -> list[str]:
    """The CJK runs of ``text``."""
    return _CJK_RUN_RE.findall(text)


def cjk_term_query(text: str, weights: str = "A") -> str | None:
    """The words-index condition that every message holding the substring ``text`` meets:
    the bigrams of its CJK runs of two or more characters, AND-ed (``None`` when the text
    has no such run: one-character runs and the Latin letters around them may be parts of
    longer tokens, so only a substring scan finds them). A candidate condition: the
    substring test itself is still applied (so AND, not the phrase operator, which would
    also miss words past the 16,383rd position a tsvector keeps)."""
    grams = [g for run in _CJK_RUN_RE.findall(text) if len(run) >= 2 for g in cjk_grams(run)]
    if not grams:
        return None
    parts = [_lexeme(g, weights=weights) for g in dict.fromkeys(grams)]
    return parts[0] if len(parts) == 1 else "(" + " & ".join(parts) + ")"


def day_words(ts: float) -> str:
    """'Tuesday 5 March 2024' (UTC, like the SQLite store) for date questions."""
    t = time.gmtime(ts)
    return f"{_WEEKDAYS[t.tm_wday]} {t.tm_mday} {_MONTHS[t.tm_mon - 1]} {t.tm_year}"


def like_pattern(text: str) -> str:
    """``%text%`` with LIKE wildcards escaped (escape character ``\\``)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _lexeme(token: str, *, prefix: bool = False, weights: str = "") -> str:
    quoted = "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"
    marks = ("*" if prefix else "") + weights
    return quoted + (":" + marks if marks else "")


def term_query(term: hermes.SearchTerm, weights: str, *, prefix: bool = True) -> str | None:
    """One term as tsquery text: its tokens in sequence (``<->``) when several, the last
    a prefix for ``deploy*``; ``None`` when nothing searchable is left."""
    tokens = words(term.text).split()
    if not tokens:
        return None
    parts = [_lexeme(t, weights=weights) for t in tokens[:-1]]
    parts.append(_lexeme(tokens[-1], prefix=term.prefix and prefix, weights=weights))
    return parts[0] if len(parts) == 1 else "(" + " <-> ".join(parts) + ")"


def loosen(term: hermes.SearchTerm, weights: str) -> str | None:
    """A relaxed term: a plain word OR its Snowball stem as a prefix (``dances`` →
    ``'danc':*``; a stem shorter than four characters matched whole); phrases, prefixes,
    numbers and other scripts as typed (the SQLite store loosens the same way)."""
    if term.phrase or term.prefix or not (term.text.isascii() and term.text.isalpha()):
        return term_query(hermes.SearchTerm(term.text, term.phrase, term.prefix), weights)
    word = term.text.lower()
    root = hermes.search_stem(word)
    if len(root) >= 4:
        if word.startswith(root):
            return _lexeme(root, prefix=True, weights=weights)
        return f"({_lexeme(word, weights=weights)} | {_lexeme(root, prefix=True, weights=weights)})"
    if root != word:
        return f"({_lexeme(word, weights=weights)} | {_lexeme(root, weights=weights)})"
    return _lexeme(word, weights=weights)


def groups_query(groups: list[list[hermes.SearchTerm]], weights: str = "A") -> str | None:
    """OR-ed groups of AND-ed terms (``NOT`` terms as ``!``) as tsquery text."""
    ors = []
    for group in groups:
        pos = [q for t in group if not t.negated and (q := term_query(t, weights))]
        neg = [q for t in group if t.negated and (q := term_query(t, weights))]
        if not pos:
            continue
        ors.append("(" + " & ".join(pos + [f"!{n}" for n in neg]) + ")")
    return " | ".join(ors) or None


def relaxed_query(stage: hermes.SearchStage, terms: list[hermes.SearchTerm] | None = None) -> str | None:
    """``(a | b | …) & !x`` over loosened terms; weight A only without ``context``."""
    weights = "" if stage.context else "A"
    pos = [q for t in (terms if terms is not None else stage.terms) if (q := loosen(t, weights))]
    if not pos:
        return None
    neg = [q for t in stage.negatives if (q := term_query(hermes.SearchTerm(t.text, t.phrase, t.prefix), ""))]
    return "(" + " | ".join(pos) + ")" + "".join(f" & !{n}" for n in neg)


@dataclass
class Rendered:
    """One stage as the store runs it. ``tsquery`` (words stages) or ``where``/``params``
    (substring conditions over :data:`~.schema.OWN_TEXT`); ``cjk`` restricts to CJK
    messages; ``rank`` is ``"ts"`` (ts_rank), ``"count"`` (substring occurrences),
    ``"grams"`` (weighted distinct bigrams) or ``""`` (newest first)."""

    mode: str
    tsquery: str | None = None
    where: str = ""
    params: list[Any] = field(default_factory=list)
    cjk: bool = False
    rank: str = "ts"
    highlight: list[str] = field(default_factory=list)
    grams: list[str] = field(default_factory=list)
    negatives: list[str] = field(default_factory=list)
    stage: Any = None
    #: Relaxed stages: (tsquery of one term, its inverse document frequency) — the
    #: score sums each term's ts_rank times its rarity, as BM25 weighs terms.
    weighted: list[tuple[str, float]] = field(default_factory=list)
    #: Relaxed stages: each weighted term and its matches (counted up to a cap, or the
    #: planner's estimate when many), in the order of ``weighted``.
    counts: list[tuple[hermes.SearchTerm, int]] = field(default_factory=list)


def _substring(term: hermes.SearchTerm, own: str) -> tuple[str, list[str]]:
    sql = f"{own} ILIKE %s ESCAPE '\\'"
    return (f"NOT ({sql})" if term.negated else sql), [like_pattern(term.text)]


def render(stage: hermes.SearchStage, own: str) -> Rendered | None:
    """The SQL pieces of one planned stage (``None``: nothing searchable in it)."""
    positives = [t.text for g in stage.groups for t in g if not t.negated]
    if stage.kind == "all" and stage.script == "cjk":
        ors, params = [], []
        for group in stage.groups:
            ands = []
            for term in group:
                sql, p = _substring(term, own)
                ands.append(sql)
                params += p
            ors.append("(" + " AND ".join(ands) + ")")
        short = any(len(t.text) < 3 for g in stage.groups for t in g)
        long_positive = any(len(t.text) >= 3 and not t.negated for g in stage.groups for t in g)
        like = short and (len(stage.groups) > 1 or not long_positive)
        # The words index narrows the substring test to the messages holding each term's
        # bigrams, when every group has a term with a CJK run of two or more characters;
        # otherwise the CJK messages are scanned newest first. The mode names follow the
        # SQLite store (trigram index for terms of three or more characters, else LIKE).
        candidates = []
        for group in stage.groups:
            found = [q for t in group if not t.negated and (q := cjk_term_query(t.text))]
            candidates.append("(" + " & ".join(found) + ")" if found else None)
        tsquery = " | ".join(c for c in candidates if c) if candidates and all(candidates) else None
        return Rendered("like" if like else "trigram", tsquery=tsquery, where="(" + " OR ".join(ors) + ")",
                        params=params, cjk=True, rank="" if like else "count", highlight=positives, stage=stage)
    if stage.kind == "all":
        query = groups_query(stage.groups)
        if query is None:
            return None
        return Rendered(stage.mode, tsquery=query, rank="ts" if stage.ranked else "", stage=stage)
    if stage.kind == "grams":
        if not stage.grams:
            return None
        return Rendered(stage.mode, tsquery=grams_query(stage.grams, stage.context), cjk=True, rank="grams",
                        highlight=list(stage.grams), grams=list(stage.grams),
                        negatives=[t.text for t in stage.negatives], stage=stage)
    query = relaxed_query(stage)
    if query is None:
        return None
    return Rendered(stage.mode, tsquery=query, stage=stage)


def _fold(text: str) -> str:
    """Lower case without diacritics (what unaccent + simple do), for highlighting."""
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c))


def word_snippet(content: str, query_terms: list[str], stems: list[str], width: int = 24) -> str:
    """A snippet for word hits: a window of ``width`` words holding the most matches,
    each matched word between ``>>>`` and ``<<<``. A word matches when it equals a query
    token or starts with a stem or prefix in ``stems``."""
    exact = {_fold(t) for t in query_terms}
    starts = [_fold(s) for s in stems if s]
    spans = [(m.start(), m.end()) for m in _word_re().finditer(content)]
    if not spans:
        return content[:120]
    hit = [(_fold(content[a:b]) in exact) or any(_fold(content[a:b]).startswith(s) for s in starts)
           for a, b in spans]
    best, best_count, count = 0, -1, 0
    for i in range(len(spans)):  # sliding window of `width` words
        count += hit[i]
        if i >= width:
            count -= hit[i - width]
        if count > best_count:
            best_count, best = count, max(0, i - width + 1)
    if best_count > 0:  # start a few words before the first match in the window
        first = next(i for i in range(best, min(best + width, len(spans))) if hit[i])
        best = max(0, min(best, first - 3))
    window = range(best, min(best + width, len(spans)))
    out, pos = [], spans[window[0]][0]
    for i in window:
        a, b = spans[i]
        out.append(content[pos:a])
        out.append(f">>>{content[a:b]}<<<" if hit[i] else content[a:b])
        pos = b
    head = "..." if spans[window[0]][0] > 0 else ""
    tail = "..." if window[-1] < len(spans) - 1 else ""
    return head + "".join(out) + tail


def highlight_terms(stage: hermes.SearchStage) -> tuple[list[str], list[str]]:
    """(exact tokens, prefixes) to mark in a words stage's snippets."""
    exact: list[str] = []
    prefixes: list[str] = []
    terms = [t for g in stage.groups for t in g] if stage.kind == "all" else list(stage.terms)
    for t in terms:
        if t.negated:
            continue
        tokens = words(t.text).split()
        exact += tokens
        if t.prefix and tokens:
            prefixes.append(tokens[-1])
        elif stage.kind == "any" and len(tokens) == 1 and t.text.isascii() and t.text.isalpha():
            root = hermes.search_stem(tokens[0])
            if len(root) >= 4:
                prefixes.append(root)
    return exact, prefixes
