"""Markdown for a terminal, rendered while it streams.

A small line-oriented renderer instead of a dependency: headings bold, list bullets as
``•``, quotes with a bar, ``**bold**``/``*italic*``/`` `code` `` styled, links as
``text (url)``. Code blocks are printed verbatim (no indentation, no wrapping, fences
dimmed) so that what is inside them can be copied as is. Tables and anything unknown
pass through unchanged.

Streaming: text arrives in arbitrary pieces. A line's kind (heading, bullet, fence …) is
decided from its first characters; after that, prose is emitted up to the last space
whose inline markers are balanced, so a long paragraph appears as it is written instead
of line by line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

BOLD, DIM, ITALIC, UNDERLINE, CYAN, RESET = "\x1b[1m", "\x1b[2m", "\x1b[3m", "\x1b[4m", "\x1b[36m", "\x1b[0m"

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+")
_BULLET = re.compile(r"^(\s*)[-*+]\s+")
_NUMBERED = re.compile(r"^(\s*)(\d{1,3}[.)])\s+")
_QUOTE = re.compile(r"^\s*>\s?")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_INLINE = re.compile(
    r"(`+)(.+?)\1"                       # code span
    r"|\*\*(.+?)\*\*|__(.+?)__"          # bold
    r"|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"  # italic with *
    r"|\[([^\]]+)\]\(([^)\s]+)\)"       # link
)
#: How many characters of a line are needed to tell its kind.
_DECIDE_AT = 8


def render_inline(text: str) -> str:
    """Inline markdown of one piece of prose, as ANSI styles."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return f"{CYAN}{m.group(2)}{RESET}"
        if m.group(3) or m.group(4):
            return f"{BOLD}{m.group(3) or m.group(4)}{RESET}"
        if m.group(5):
            return f"{ITALIC}{m.group(5)}{RESET}"
        return f"{m.group(6)} ({UNDERLINE}{m.group(7)}{RESET})"

    return _INLINE.sub(sub, text)


def _balanced(text: str) -> bool:
    """Whether cutting prose after ``text`` leaves no inline marker open (a single ``*``
    too: an italic span may have spaces inside, ``*two words*``)."""
    return (text.count("`") % 2 == 0 and text.count("**") % 2 == 0
            and text.replace("**", "").count("*") % 2 == 0 and text.count("__") % 2 == 0
            and text.count("[") == text.count(")"))


class MarkdownStream:
    """Feed streamed markdown; ``write`` receives terminal text. :meth:`flush` at the end
    (or on an interrupt) prints whatever is still held back."""

    def __init__(self, write: Callable[[str], None]):
        self.write = write
        self.pending = ""       # the current line's text not yet written
        self.started = False    # part of the current line is written (its kind is decided)
        self.style = ""         # the style the current line's rest is written in
        self.in_code = False

    def feed(self, text: str) -> None:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self._finish_line(line)
        self._partial()

    def flush(self) -> None:
        if self.pending:
            self._finish_line(self.pending, newline=False)
            self.pending = ""

    def _finish_line(self, line: str, *, newline: bool = True) -> None:
        end = "\n" if newline else ""
        if self.started:
            self.write(self._rest(line) + (RESET if self.style else "") + end)
        elif _FENCE.match(line):
            self.in_code = not self.in_code
            self.write(f"{DIM}{line}{RESET}{end}")
        elif self.in_code:
            self.write(line + end)
        else:
            head, rest = self._decide(line)
            self.write(head + self._rest(rest) + (RESET if self.style else "") + end)
        self.started, self.style = False, ""

    def _rest(self, text: str) -> str:
        return text if self.in_code else render_inline(text)

    def _partial(self) -> None:
        text = self.pending
        if not text:
            return
        if not self.started:
            if len(text.lstrip()) < _DECIDE_AT or _FENCE.match(text):
                return  # a fence or a short start: wait for more
            if self.in_code:
                self.write(text)
                self.pending, self.started = "", True
                return
            head, rest = self._decide(text)
            self.write(head)
            self.started, self.pending = True, rest
            text = rest
        if self.in_code:
            self.write(text)
            self.pending = ""
            return
        cut = text.rfind(" ")
        while cut > 0 and not _balanced(text[:cut]):
            cut = text.rfind(" ", 0, cut)
        if cut > 0:
            self.write(render_inline(text[:cut + 1]))
            self.pending = text[cut + 1:]

    def _decide(self, line: str) -> tuple[str, str]:
        """The rendered start of a line and the prose that follows it; sets the style the
        rest of the line keeps."""
        if m := _HEADING.match(line):
            self.style = BOLD + (UNDERLINE if len(m.group(1)) == 1 else "")
            return self.style, line[m.end():]
        if _RULE.match(line):
            return f"{DIM}{'─' * 40}{RESET}", ""
        if m := _BULLET.match(line):
            return f"{m.group(1)}• ", line[m.end():]
        if m := _NUMBERED.match(line):
            return f"{m.group(1)}{m.group(2)} ", line[m.end():]
        if m := _QUOTE.match(line):
            self.style = DIM
            return f"{DIM}│ ", line[m.end():]
        return "", line


def render_markdown(text: str) -> str:
    """A whole markdown text rendered for a terminal."""
    out: list[str] = []
    stream = MarkdownStream(out.append)
    stream.feed(text)
    stream.flush()
    return "".join(out)


__all__ = ["MarkdownStream", "render_inline", "render_markdown"]
