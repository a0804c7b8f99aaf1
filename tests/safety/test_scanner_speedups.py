"""The scanner's shortcuts find exactly what the plain way finds.

Three shortcuts keep a scan under a millisecond per KB (benchmarks/scanner.py):
each rule expression runs behind a look-ahead of the characters its match can begin
with; every substring trigger is found in one Aho–Corasick pass
(``RuleSet.substring_places``); word triggers are placed in one pass over the words.
Each is checked here against the plain computation (``re``, ``in``), on the corpus and
on generated text mixing the rules' own trigger words with scripts and punctuation."""

from __future__ import annotations

import re
from re import _parser  # type: ignore[attr-defined]

from hypothesis import given, settings
from hypothesis import strategies as st
from scanner_corpus import load

from hermes.safety import (
    _WORD_RE,
    _first_chars,
    _trigger_positions,
    _with_first_chars,
    load_rules,
    normalize_for_scan,
)


def _corpus() -> list[str]:
    """The normalised texts of tune and heldout."""
    return [normalize_for_scan(r["text"]) for name in ("tune", "heldout") for r in load(name)]


def _plain(rule) -> re.Pattern[str]:
    from hermes.safety import _lower_pattern

    return re.compile(_lower_pattern(rule.pattern), rule.flags & ~re.IGNORECASE)


def _needles() -> list[str]:
    rules = load_rules()
    return sorted({t.rstrip("\x00") for r in rules.rules for t in r.any | r.also})


# Text made of the rules' own trigger words and pieces of other scripts, so that the
# generated strings actually reach into the expressions.
_TEXT = st.lists(st.one_of(st.sampled_from(_needles()), st.sampled_from([
    " ", "\n", ". ", "the ", "ignore ", "previous ", "instructions", "“", "»", "é", "忽略", "之前", "指示", "ß",
    "İ", "Σ", "ignorer ", "curl ", "~/.ssh/id_rsa", "| sh", "<!-- ", "-->", "system", ":", "\u200b"])),
    max_size=40).map("".join)


def test_lookahead_covers_the_first_characters() -> None:
    assert _first_chars(_parser.parse(r"\bfoo|bar")) == ({"f", "b"}, False)
    assert _first_chars(_parser.parse(r"(?:a?|x)b")) == ({"a", "x", "b"}, False)
    assert _first_chars(_parser.parse(r"(?<![\w.])\.env")) == ({r"\."}, False)
    assert _first_chars(_parser.parse(r"[^a]b")) is None  # a negated class: any character
    assert _first_chars(_parser.parse(r"a*"))[1] is True  # can match empty: left alone
    assert _with_first_chars(r"a*", 0).pattern == "a*"
    assert _with_first_chars(r"(?i)ab", 0).pattern == "(?i)ab"  # case-insensitive: left alone
    wrapped = _with_first_chars(r"(?m)^abc|^x", 0)
    assert wrapped.pattern.startswith("(?m)(?=[")
    assert [m.span() for m in wrapped.finditer("abc\nx\nzabc")] == [(0, 3), (4, 5)]


def test_every_rule_matches_the_same_on_the_corpus() -> None:
    texts = [t.lower() for t in _corpus()]
    wrapped = [r for r in load_rules().rules if r._lowered is not None and r._lowered[0].pattern != _plain(r).pattern]
    assert len(wrapped) > 50  # the shortcut is in use
    for rule in wrapped:
        fast, plain = rule._lowered[0], _plain(rule)
        for text in texts:
            assert [m.span() for m in fast.finditer(text)] == [m.span() for m in plain.finditer(text)], rule.id


@settings(max_examples=150, deadline=None)
@given(_TEXT)
def test_every_rule_matches_the_same_on_generated_text(text: str) -> None:
    lower = normalize_for_scan(text).lower()
    for rule in load_rules().rules:
        if rule._lowered is None:
            continue
        fast, plain = rule._lowered[0], _plain(rule)
        assert [m.span() for m in fast.finditer(lower)] == [m.span() for m in plain.finditer(lower)], rule.id


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_triggers_are_the_plain_substring_and_word_lookups(text: str) -> None:
    rules = load_rules()
    lower = normalize_for_scan(text).lower()
    words = _WORD_RE.findall(lower)
    _, word_triggers, subs = rules._index
    expected = set(word_triggers.intersection(words)) | {
        key for key, needle in subs if needle in lower}
    hits = rules.triggered(lower, words)
    assert hits == expected
    positions = _trigger_positions(lower, hits, rules.substring_places(lower))
    for key in hits:
        needle = key.rstrip("\x00")
        if key in word_triggers:
            places = [m.start() for m in re.finditer(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", lower)]
        else:
            places = [m.start() for m in re.finditer("(?=" + re.escape(needle) + ")", lower)]
        assert positions[key] == (places if len(places) <= 40 else None), key


def test_case_sensitive_rules_match_the_same_on_the_corpus() -> None:
    texts = _corpus()
    texts.append("AKIAABCDEFGHIJKLMNOP sk-ant-" + "x" * 30 + " ![a](https://e.example/p?d=1) me@x.org  $OPENAI_API_KEY")
    rules = [r for r in load_rules().rules if not r.flags & re.IGNORECASE]
    assert any(r.regex.pattern != r.pattern for r in rules)  # the shortcut is in use
    for rule in rules:
        plain = re.compile(rule.pattern, rule.flags)
        for text in texts:
            assert [m.span() for m in rule.regex.finditer(text)] == [m.span() for m in plain.finditer(text)], rule.id
