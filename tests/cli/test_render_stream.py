"""A streamed answer with an italic span that has a space inside (``*1 1*``) renders as
the whole answer does: the streaming renderer used to emit prose up to a space inside
the open span, so the span was never styled and its stars were shown (found by the
property test in test_chat_cli.py)."""

from __future__ import annotations

import re

import pytest

from hermes.runtime.render import MarkdownStream, render_markdown

ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def streamed(pieces: list[str]) -> str:
    out: list[str] = []
    stream = MarkdownStream(out.append)
    for piece in pieces:
        stream.feed(piece)
    stream.flush()
    return "".join(out)


@pytest.mark.parametrize("pieces", [["1", "1>*1 1*", " "], ["we ", "*really do*", " mean it"],
                                    ["a __bold wo", "rds__ b"]])
def test_a_span_with_spaces_streams_like_the_whole(pieces):
    whole = render_markdown("".join(pieces))
    assert streamed(pieces) == whole
    assert not re.search(r"\*|__", ANSI_RE.sub("", whole))  # the span was styled, markers gone
