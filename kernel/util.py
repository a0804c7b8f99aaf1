"""Small helpers every plugin needs: token estimates, atomic writes, file locks.

Token counts come from the API's reported usage; before the first response the kernel
uses :func:`estimate_tokens`, which is offline and CJK-aware (no tokenizer downloads).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .config import atomic_write_text

__all__ = ["atomic_write_text", "estimate_tokens", "estimate_messages_tokens", "file_lock", "is_cjk"]


def is_cjk(char: str) -> bool:
    """Whether ``char`` is a CJK ideograph, kana, Hangul syllable or CJK punctuation."""
    cp = ord(char)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x3000 <= cp <= 0x30FF
        or 0xAC00 <= cp <= 0xD7AF
        or 0xF900 <= cp <= 0xFAFF
        or 0xFF00 <= cp <= 0xFFEF
    )


def estimate_tokens(text: str | None) -> int:
    """A rough, conservative token count: about four characters per token for Latin
    text and about one token per CJK character (which BPE tokenizers split finely)."""
    if not text:
        return 0
    if text.isascii():  # the common case, without a Python-level loop over characters
        return (len(text) + 3) // 4
    cjk = sum(1 for ch in text if ord(ch) >= 0x3000 and is_cjk(ch))
    other = len(text) - cjk
    return cjk + (other + 3) // 4


def estimate_messages_tokens(messages: Iterable[dict[str, Any]]) -> int:
    """:func:`estimate_tokens` over a transcript, tool calls and a per-message overhead
    included."""
    total = 0
    for msg in messages:
        total += 4
        content = msg.get("content")
        if isinstance(content, str):
            total += estimate_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict):
                    total += estimate_tokens(str(part.get("text") or part.get("content") or ""))
        if msg.get("tool_calls"):
            total += estimate_tokens(json.dumps(msg["tool_calls"], ensure_ascii=False))
    return total


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, timeout: float = 30.0) -> Iterator[None]:
    """An exclusive cross-process lock on ``<path>.lock`` (``flock``), held for the
    ``with`` block. Raises :class:`TimeoutError` naming the file after ``timeout``."""
    lock_path = Path(f"{os.fspath(path)}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"could not lock {path} within {timeout:.0f}s; another Hermes process "
                        f"holds {lock_path}"
                    ) from None
                time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
