"""What every session store does to a row before it stores it and after it reads it.

The SQLite store and third-party stores (``contrib/hermes-postgres``) share these, so
that titles, session ids and stored message content look the same whatever the store.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from typing import Any

#: The longest session title, in characters, after :func:`sanitize_title`.
MAX_TITLE_LENGTH = 100

_INVISIBLE_RE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufffc\u00ad]")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def sanitize_title(title: str | None) -> str | None:
    """Clean a title: drop control and invisible formatting characters, collapse
    whitespace; ``None`` when nothing is left. ``ValueError`` when longer than
    :data:`MAX_TITLE_LENGTH` characters."""
    if title is None:
        return None
    text = " ".join(_INVISIBLE_RE.sub("", _CONTROL_RE.sub("", str(title))).split())
    if not text:
        return None
    if len(text) > MAX_TITLE_LENGTH:
        raise ValueError(f"Title too long ({len(text)} characters); the limit is {MAX_TITLE_LENGTH}.")
    return text


def new_session_id(now: float | None = None) -> str:
    """A fresh id like ``20260315_092437_c9a6ff`` (sortable by creation time)."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(now or time.time()))
    return f"{stamp}_{secrets.token_hex(3)}"


def encode_json(value: Any) -> str | None:
    """A JSON column's text: ``None`` and strings as they are, anything else dumped."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def decode_json(value: Any) -> Any:
    """The value a JSON column holds; text that is not JSON comes back as it is."""
    if not isinstance(value, str) or not value:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def stored_content(content: Any) -> str | None:
    """A message's ``content`` as a store keeps it: strings as they are; a list of
    content parts as the text of its text parts, any other part as its JSON, joined by
    newlines (unlike :func:`hermes.content_text`, nothing is summarised away)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text") if part.get("type", "text") == "text" else None
                parts.append(str(text) if text is not None else json.dumps(part, ensure_ascii=False))
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)
