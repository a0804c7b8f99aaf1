"""The one-pass substring trigger search (an Aho–Corasick automaton over every needle,
``RuleSet.substring_places``) finds exactly the needles and places that a ``str.find``
per needle finds: overlapping places too, and ``None`` past ``_MAX_PLACES`` places.
Checked on the packaged rules and on a small rule set of needles that overlap and nest,
with generated text mixing ASCII and other scripts."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from hermes.safety import (
    _MAX_PLACES,
    _WORD_RE,
    load_rules,
    normalize_for_scan,
    parse_rules,
)


def _per_needle(lower: str, rules) -> dict[str, list[int] | None]:
    """The old way: every substring needle looked for on its own, every place."""
    out: dict[str, list[int] | None] = {}
    for key, needle in rules._index[2]:
        places = []
        i = lower.find(needle)
        while i >= 0:
            places.append(i)
            i = lower.find(needle, i + 1)
        if places:
            out[key] = places if len(places) <= _MAX_PLACES else None
    return out


def _check(lower: str, rules) -> None:
    places = rules.substring_places(lower)
    assert places == _per_needle(lower, rules)
    words = _WORD_RE.findall(lower)
    hits = rules.triggered(lower, words)
    assert set(places) <= hits


_PACKAGED_NEEDLES = sorted({t.rstrip("\x00") for r in load_rules().rules for t in r.any | r.also})
_PIECES = [" ", "\n", "é", "ß", "İ", "Σ", "忽略", "之前", "指示", "무시", "игнор", "تجاهل", "अनदेखा", "\u200b", "😀", ":", "|"]
_PACKAGED_TEXT = st.lists(st.one_of(st.sampled_from(_PACKAGED_NEEDLES), st.sampled_from(_PIECES),
                                    st.text(max_size=6)), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(_PACKAGED_TEXT)
def test_packaged_rules_substring_places_match_the_per_needle_search(text: str) -> None:
    _check(normalize_for_scan(text).lower(), load_rules())


# Needles that overlap and nest (stems, written with a trailing *: "ab" in "aba", "b" in
# both), symbols, non-ASCII, mixed, and word triggers (whole words: not in the automaton;
# "ab" is both a word and a stem).
_SMALL = parse_rules({"rules": [
    {"id": "a", "pattern": "ab", "any": ["ab*", "aba*", "b*", "a|b", "忽略", "略之", "é x", "x é", "ss*"]},
    {"id": "b", "pattern": "ab", "any": ["ignore", "ab"], "also": ["b*", "bab*", "指示"]},
]})
_SMALL_TEXT = st.lists(st.sampled_from(["a", "b", "ab", "aba", "|", "忽", "略", "之", "指示", "é", " ", "x", "s",
                                        "ignore", "Σ", "\u200b"]), max_size=200).map("".join)


@settings(max_examples=300, deadline=None)
@given(_SMALL_TEXT)
def test_overlapping_needles_every_place_and_the_limit(text: str) -> None:
    _check(text.lower(), _SMALL)


def test_too_many_places_is_none_and_just_enough_is_kept() -> None:
    just = "ab " * _MAX_PLACES
    assert _SMALL.substring_places(just)["ab\x00"] == list(range(0, 3 * _MAX_PLACES, 3))
    assert _SMALL.substring_places(just + "ab")["ab\x00"] is None
    assert _SMALL.substring_places("ababa")["aba\x00"] == [0, 2]  # overlapping places count
    assert _SMALL.substring_places("忽略之 x é")["略之"] == [1]
    # Word triggers are left to the word pass.
    assert set(_SMALL.substring_places("ignore ab")) == {"ab\x00", "b\x00"}


def test_importing_hermes_does_not_import_the_automaton_library() -> None:
    code = "import sys, hermes, hermes.safety; hermes.safety.load_rules(); print('ahocorasick' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
