"""Shortcuts of the threat scanner that leave every report as it was.

A rule expression is compiled with re's "a match starts with one of these characters"
note, which re cannot work out itself behind the opening look-ahead: the same program,
searched from one such character to the next. (Matches against the plain expression are
checked in test_scanner_speed_rewrite.py and test_scanner_speedups.py.)"""

from __future__ import annotations

import re
from re import _compiler as rc  # type: ignore[attr-defined]
from re import _constants as c  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]

from hermes.safety import _code_starting_at, _with_first_chars


def test_the_search_is_told_where_a_match_can_start() -> None:
    wrapped = r"(?=[ajo])(?:\bonly\s|\bjust\s|\bjunk)"
    program = _parser.parse(wrapped, 0)
    flags = program.state.flags
    first = program.data[0][1][1].data[0][1]  # the look-ahead's class
    told, plain = _code_starting_at(program, flags, first), rc._code(program, flags)
    assert told[0] == plain[0] == c.INFO
    assert told[2] & c.SRE_INFO_CHARSET and not plain[2] & c.SRE_INFO_CHARSET
    # Only the info block differs: the program that matches is the same.
    assert told[told[1] + 1:] == plain[plain[1] + 1:]
    assert told[3:5] == plain[3:5]  # shortest and longest match


def test_an_expression_that_can_match_empty_keeps_re_own_info() -> None:
    program = _parser.parse(r"(?=[a])(?:a*)", 0)
    flags = program.state.flags
    assert _code_starting_at(program, flags, program.data[0][1][1].data[0][1]) == rc._code(program, flags)


def test_matches_are_the_same_from_any_start() -> None:
    source = r"\bonly\s|\bjust\s|\bjunk|(?<!\w)(ab)+|x\w{0,3}y"
    fast = _with_first_chars(source, 0)
    assert fast.pattern.startswith("(?=[")
    text = "just only junk juno abab xab x1y xxy, only\tjust\njunk"
    plain = [m.span() for m in re.compile(source).finditer(text)]
    assert [m.span() for m in fast.finditer(text)] == plain != []
    for pos in range(len(text)):
        want = re.compile(source).search(text, pos, len(text) - 2)
        got = fast.search(text, pos, len(text) - 2)
        assert (got and got.span()) == (want and want.span()), pos

