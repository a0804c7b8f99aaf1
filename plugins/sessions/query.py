"""Session search in SQLite's FTS5: rendering the kernel's search plan as SQL.

:func:`hermes.plan_search` decides *what* to search (terms, stop words, stems, stages);
this module turns each :class:`hermes.SearchStage` into what the SQLite store runs: an
FTS5 ``MATCH`` expression on the words index (``messages_fts``) or the CJK index
(``messages_fts_trigram``), and LIKE conditions where FTS5 cannot help. Every FTS5
expression produced here quotes every term, so user text can never reach FTS5 as
syntax; only the operators this module writes (``AND``, ``OR``, ``NOT``, parentheses,
column filters, a trailing ``*``) do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypeAlias

from hermes import (
    CJK_RANGES,
    MAX_QUERY_CHARS,
    MAX_TERMS,
    NOISE_WORDS,
    RELAX_BELOW,
    STOP_WORDS,
    ParsedSearch,
    SearchStage,
    SearchTerm,
    has_cjk,
    informative,
    parse_search,
    plan_search,
    search_stem,
    strict_groups,
)

Term: TypeAlias = SearchTerm
ParsedQuery: TypeAlias = ParsedSearch
parse = parse_search
stem = search_stem

#: The CJK set as a GLOB character class (SQLite compares code points in ranges): the
#: schema's triggers put a message in the trigram index when its text matches it.
CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]*"

#: Letters and digits that unicode61 glues to an adjacent CJK character into one token
#: ("迁移到Postgres完成" is a single word to it): ASCII, Latin-1/Extended, Greek, Cyrillic.
GLUE_RANGES: tuple[tuple[int, int], ...] = (
    (0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF))
_CJK_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES)
_GLUE_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in GLUE_RANGES)
#: GLOB patterns of a text where a CJK character touches a glued letter or digit (the
#: schema puts such messages in the split-words index): either order.
GLUED_GLOBS = (f"*[{_CJK_CLASS}][{_GLUE_CLASS}]*", f"*[{_GLUE_CLASS}][{_CJK_CLASS}]*")
_CJK_RE_CLASS = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in CJK_RANGES)
_GLUE_BOUNDARY_RE = re.compile(f"(?<=[{_CJK_RE_CLASS}])(?=[{_GLUE_CLASS}])|(?<=[{_GLUE_CLASS}])(?=[{_CJK_RE_CLASS}])")
#: Put between a CJK run and a glued word for the split-words index: a zero-width space
#: is a separator to unicode61 and invisible in a snippet (the store strips it anyway).
GLUE_BREAK = "\u200b"


def split_glued(text: str | None) -> str | None:
    """``text`` with :data:`GLUE_BREAK` wherever a CJK character touches a glued letter
    or digit, so unicode61 reads "迁移到\u200bPostgres\u200b完成" as three words."""
    if not text:
        return text
    return _GLUE_BOUNDARY_RE.sub(GLUE_BREAK, text)


#: The columns that hold a message's own text (``prev`` and ``day`` are index-only
#: context): the strict stage matches these only.
OWN_COLUMNS = "{content tool_name tool_args}"


def fts5_term(term: Term, *, prefix: bool = True) -> str:
    """A term as an FTS5 string: always double-quoted, inner quotes doubled."""
    star = "*" if (term.prefix and prefix) else ""
    return '"' + term.text.replace('"', '""') + '"' + star


def to_fts5(groups: list[list[Term]], *, prefix: bool = True) -> str:
    """Render groups as an FTS5 expression (every term quoted)."""
    rendered = []
    for group in groups:
        pos = [fts5_term(t, prefix=prefix) for t in group if not t.negated]
        neg = [fts5_term(t, prefix=prefix) for t in group if t.negated]
        expr = " AND ".join(pos) + "".join(f" NOT {n}" for n in neg)
        rendered.append(f"({expr})" if len(groups) > 1 else expr)
    return " OR ".join(rendered)


def sanitize(query: str | None) -> str:
    """The strict FTS5 expression for ``query`` (``""`` when nothing is searchable),
    without the column filter. Handy for debugging and for stores that pass FTS5 syntax
    through."""
    return to_fts5(strict_groups(parse(query)))


def like_pattern(text: str) -> str:
    """``%text%`` with LIKE wildcards escaped (escape character ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def loosen(term: Term) -> str:
    """One informative term as a forgiving FTS5 expression: a plain word OR its Snowball
    stem as a prefix ("dances" → ``("dances" OR "danc"*)``; a stem shorter than four
    characters is matched whole); phrases, prefixes, numbers and other scripts as typed."""
    if term.phrase or term.prefix or not (term.text.isascii() and term.text.isalpha()):
        return fts5_term(Term(term.text, term.phrase, term.prefix))
    word = term.text.lower()
    root = stem(word)
    if len(root) >= 4:
        if word.startswith(root):
            return fts5_term(Term(root, prefix=True))
        return f"({fts5_term(Term(word))} OR {fts5_term(Term(root, prefix=True))})"
    if root != word:
        return f"({fts5_term(Term(word))} OR {fts5_term(Term(root))})"
    return fts5_term(Term(word))


def _excluding(expr: str, negatives: list[Term]) -> str:
    return expr + "".join(f" NOT {fts5_term(Term(t.text, t.phrase, t.prefix))}" for t in negatives)


def relaxed_match(terms: list[Term], negatives: list[Term], *, context: bool = True) -> str:
    """``(a OR b OR …) NOT x NOT y`` over loosened terms: any one of them; without
    ``context``, in the message's own columns only."""
    expr = _excluding("(" + " OR ".join(loosen(t) for t in terms) + ")", negatives)
    return expr if context else f"{OWN_COLUMNS} : ({expr})"


#: The columns a LIKE condition looks at, in the trigram table (its own copy of the text).
#: The unary ``+`` keeps FTS5 from taking the LIKE over (its trigram LIKE support finds
#: nothing for patterns shorter than three characters).
_LIKE_COLUMNS = ("+content", "+tool_name", "+tool_args")


@dataclass
class Stage:
    """One stage as the SQLite store runs it: ``index`` is ``"words"`` (unicode61 table)
    or ``"trigram"`` (the CJK table); ``match`` an FTS5 expression or ``None`` (a scan);
    ``where``/``params`` extra SQL over the index table's columns (LIKE conditions);
    ``mode`` the label its hits carry; ``highlight`` strings for a snippet the store
    builds itself (FTS5's snippet marks overlapping trigrams badly). ``combine`` is
    ``"any"`` for a relaxed words stage (``terms``/``negatives`` let the store drop terms
    too common to matter and rebuild ``match``) and ``"grams"`` for the CJK bigram stage
    (the store ranks the CJK messages by how many of ``grams`` they contain)."""

    mode: str
    index: str
    match: str | None = None
    where: str = ""
    params: list[str] = field(default_factory=list)
    highlight: list[str] = field(default_factory=list)
    ranked: bool = True
    terms: list[Term] = field(default_factory=list)
    negatives: list[Term] = field(default_factory=list)
    combine: str = ""
    grams: list[str] = field(default_factory=list)
    context: bool = True
    #: Two-character CJK terms every match must contain (a "like" stage): a store with
    #: a trigram vocabulary can narrow the scan to the rows holding a trigram that
    #: starts with one of them (see the schema's end-of-text sentinel).
    pairs: list[str] = field(default_factory=list)


def _like_sql(term: Term, table: str) -> tuple[str, list[str]]:
    pattern = like_pattern(term.text)
    cols = [f"{c[0]}{table}.{c[1:]}" for c in _LIKE_COLUMNS]
    sql = "(" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in cols) + ")"
    if term.negated:  # a NULL column (no tool name) makes the OR NULL: count it as no match
        sql = f"NOT ({sql} IS TRUE)"
    return sql, [pattern] * len(cols)


def _cjk_strict(groups: list[list[Term]], table: str) -> Stage:
    """The strict stage of a query with CJK terms: terms of three or more characters go
    through the trigram index (substring semantics), shorter ones through LIKE."""
    groups = [[Term(t.text, True, False, t.negated) for t in g] for g in groups]
    short = [t for g in groups for t in g if len(t.text) < 3]
    if not short:
        return Stage("trigram", "trigram", match=f"{OWN_COLUMNS} : ({to_fts5(groups, prefix=False)})")
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
    match = f"{OWN_COLUMNS} : ({to_fts5([match_terms], prefix=False)})" if match_terms else None
    pairs = [t.text for t in group if len(t.text) == 2 and not t.negated and all(has_cjk(c) for c in t.text)]
    return Stage("trigram" if match else "like", "trigram", match=match,
                 where=" AND ".join(conditions), params=params, pairs=pairs)




def render(stage: SearchStage) -> Stage:
    """The SQL pieces of one planned stage."""
    if stage.kind == "all" and stage.script == "cjk":
        return _cjk_strict(stage.groups, "messages_fts_trigram")
    if stage.kind == "all":
        return Stage(stage.mode, "words", match=f"{OWN_COLUMNS} : ({to_fts5(stage.groups)})",
                     ranked=stage.ranked)
    if stage.kind == "grams":
        return Stage(stage.mode, "trigram", highlight=list(stage.grams), grams=list(stage.grams),
                     negatives=list(stage.negatives), combine="grams", context=stage.context)
    return Stage(stage.mode, "words", match=relaxed_match(stage.terms, stage.negatives, context=stage.context),
                 terms=list(stage.terms), negatives=list(stage.negatives), combine="any",
                 context=stage.context)


def plan(query: str | None, *, fallback: bool = True) -> list[Stage]:
    """The rendered stages for ``query`` (see :func:`hermes.plan_search`)."""
    return [render(s) for s in plan_search(query, fallback=fallback)]


__all__ = [
    "CJK_GLOB", "MAX_QUERY_CHARS", "MAX_TERMS", "NOISE_WORDS", "OWN_COLUMNS", "RELAX_BELOW",
    "STOP_WORDS", "ParsedQuery", "Stage", "Term", "fts5_term", "has_cjk", "informative",
    "like_pattern", "loosen", "parse", "plan", "relaxed_match", "render", "sanitize", "stem",
    "strict_groups", "to_fts5",
]
