"""Small helpers over OpenAI-style messages: text, token sizes, tool-call ids and the
shapes a compaction summary takes inside a transcript.

A summary appears in one of three shapes, all recognised again on the next compaction
so that exactly one summary survives:

* **standalone** — its own message: ``SUMMARY_PREFIX, body, SUMMARY_END_MARKER``;
* **prepended** — merged into the live user request: the standalone block, a blank
  line, then the user's own text (list content: the block is an extra first text part);
* **wrapped** — merged into another message: ``WRAP_OPEN + genuine + WRAP_CLOSE +`` block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import hermes

Message = dict[str, Any]

WRAP_OPEN = "[PRIOR CONTEXT — for reference only; not a new message]\n"
WRAP_CLOSE = "\n\n[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]\n\n"


#: The text of a message's content (``[image]`` / ``[<type>]`` for other parts).
text_of = hermes.content_text


def tokens_of_text(text: str) -> int:
    """:func:`hermes.estimate_tokens`, with a fast path for ASCII text."""
    if not text:
        return 0
    if text.isascii():
        return (len(text) + 3) // 4
    return hermes.estimate_tokens(text)


def message_tokens(msg: Message) -> int:
    """The rough token size of one message, exactly as :func:`hermes.estimate_messages_tokens`
    counts it (text, the whole tool-call envelope, a small overhead) but with a fast path
    for ASCII text: compaction sizes every message of long transcripts."""
    total = 4
    content = msg.get("content")
    if isinstance(content, str):
        total += tokens_of_text(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                total += tokens_of_text(str(part.get("text") or part.get("content") or ""))
    calls = msg.get("tool_calls")
    if calls:
        total += tokens_of_text(json.dumps(calls, ensure_ascii=False))
    return total


def messages_tokens(messages: list[Message]) -> int:
    """:func:`message_tokens` summed over a transcript."""
    return sum(message_tokens(m) for m in messages)


def call_ids(msg: Message) -> list[str]:
    """The ids of an assistant message's tool calls (``id`` or ``call_id``)."""
    out = []
    for call in msg.get("tool_calls") or ():
        if isinstance(call, dict):
            cid = call.get("id") or call.get("call_id")
            if cid:
                out.append(str(cid))
    return out


def call_name_args(call: dict[str, Any]) -> tuple[str, Any]:
    """``(name, arguments)`` of one tool call; arguments decoded from JSON when they can be."""
    function = call.get("function")
    fn = function if isinstance(function, dict) else call
    name = str(fn.get("name") or "")
    args: Any = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return name, args


def is_blank(msg: Message) -> bool:
    return not text_of(msg.get("content")).strip()


# -- summary shapes ----------------------------------------------------------------------


@dataclass
class SummaryShape:
    """What :func:`classify` found: ``kind`` is ``standalone``, ``prepended`` or
    ``wrapped``; ``body`` the summary text; ``genuine`` the message's own content
    (``None`` for standalone)."""

    kind: str
    body: str
    genuine: Any = None


def summary_block(body: str) -> str:
    """The standalone text of a summary."""
    return f"{hermes.SUMMARY_PREFIX}\n\n{body.strip()}\n\n{hermes.SUMMARY_END_MARKER}"


def _body_of_block(text: str) -> tuple[str, str | None]:
    """``(body, rest)`` of text that starts with the summary prefix; ``rest`` is what
    follows the end marker (``None`` when nothing does)."""
    after = text[len(hermes.SUMMARY_PREFIX):]
    marker = "\n\n" + hermes.SUMMARY_END_MARKER
    idx = after.find(marker)
    if idx < 0:
        idx = after.find(hermes.SUMMARY_END_MARKER)
        if idx < 0:
            return after.strip(), None
        marker = hermes.SUMMARY_END_MARKER
    body = after[:idx].strip()
    rest = after[idx + len(marker):]
    if not rest.strip():
        return body, None
    return body, rest[2:] if rest.startswith("\n\n") else rest.lstrip("\n")


def classify(msg: Message) -> SummaryShape | None:
    """The summary carried by ``msg``, or ``None`` for an ordinary message."""
    content = msg.get("content")
    if isinstance(content, list):
        if not content or not isinstance(content[0], dict) or content[0].get("type", "text") != "text":
            return None
        first = str(content[0].get("text") or "")
        if not first.startswith(hermes.SUMMARY_PREFIX):
            return None
        body, _ = _body_of_block(first)
        parts = content[1:]
        return SummaryShape("prepended", body, parts) if parts else SummaryShape("standalone", body)
    if not isinstance(content, str):
        return None
    if content.startswith(WRAP_OPEN):
        idx = content.rfind(WRAP_CLOSE + hermes.SUMMARY_PREFIX)
        if idx >= 0:
            body, _ = _body_of_block(content[idx + len(WRAP_CLOSE):])
            return SummaryShape("wrapped", body, content[len(WRAP_OPEN):idx])
        return None
    if content.startswith(hermes.SUMMARY_PREFIX):
        body, rest = _body_of_block(content)
        if rest is None:
            return SummaryShape("standalone", body)
        return SummaryShape("prepended", body, rest)
    legacy = "[CONTEXT SUMMARY]:"
    if content.startswith(legacy):
        return SummaryShape("standalone", content[len(legacy):].strip())
    return None


def unwrap(msg: Message, shape: SummaryShape) -> Message:
    """A copy of a merged message with the old summary taken out (its genuine content)."""
    out = dict(msg)
    out["content"] = shape.genuine
    return out


def prepend_summary(msg: Message, body: str) -> Message:
    """A copy of ``msg`` (the live user request) with the summary block in front."""
    out = dict(msg)
    content = msg.get("content")
    block = summary_block(body)
    if not text_of(content).strip() and not isinstance(content, list):
        return wrap_summary(msg, body)  # a blank row would read as a standalone summary
    if isinstance(content, list):
        out["content"] = [{"type": "text", "text": block}, *content]
    else:
        out["content"] = f"{block}\n\n{content or ''}"
    return out


def wrap_summary(msg: Message, body: str) -> Message:
    """A copy of ``msg`` whose own content is marked as prior context, followed by the
    summary block."""
    content = msg.get("content")
    if isinstance(content, list):
        return prepend_summary(msg, body)
    out = dict(msg)
    out["content"] = f"{WRAP_OPEN}{content or ''}{WRAP_CLOSE}{summary_block(body)}"
    return out
