"""The history of the curated memory: ``memories/history.jsonl``, one JSON record a line.

Every change to ``MEMORY.md`` / ``USER.md`` is appended here by the writer that made it,
while it still holds the file's lock: the memory tool (``who`` = the session id), the CLI
(``who`` = ``"cli"``), the background review, an undo, and a hand edit. The memory files
themselves keep exactly Hermes Agent's format (entries separated by ``\\n§\\n``, no
metadata), so a file written here still loads in Hermes Agent.

A record::

    {"id": 17, "time": "2026-11-23T22:40:01.123+00:00", "target": "memory",
     "action": "replace", "old": "uses pip", "new": "uses uv", "index": 2,
     "who": "20261123_224001_ab12cd", "origin": "tool"}

``action`` is ``add`` / ``replace`` / ``remove`` (one entry; ``index`` is its position
after an add or replace, before a remove) or ``edit`` (the whole file changed by other
means: ``old`` and ``new`` are the two file texts). An undo is recorded as the action it
performed, with ``undo_of`` naming the record it reverted.

Hand edits are found by comparing the file with a shadow copy of the text the journal
last saw (``memories/.history/<file>``): a difference is an edit nobody recorded, and it
is recorded (``origin`` = ``"hand-edit"``) before the next change, so the history never
has a gap and ``show --at`` can replay backwards through it.

Bounded: when the file grows past ``max_bytes`` (``memory.history_max_bytes``, default
1 MiB) the oldest records are dropped until it is under three quarters of that, so a
rewrite happens once per quarter of the bound. Appends are single ``write`` calls on an
``O_APPEND`` descriptor followed by ``fsync`` — rewriting the whole journal atomically for
every change would cost a megabyte of I/O per memory write; a torn last line (a crash in
the middle of an append) is skipped by the reader and never breaks the next append.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hermes

JOURNAL_NAME = "history.jsonl"
SHADOW_DIR = ".history"
DEFAULT_MAX_BYTES = 1 << 20

_TAIL = 64 * 1024


def now_iso() -> str:
    """The current UTC time, milliseconds, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def parse_when(text: str) -> datetime:
    """A user's date: ISO 8601 (``2026-11-23``, ``2026-11-23T22:40``, with or without a
    zone; no zone means UTC). Raises :class:`ValueError` with a one-line message."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a date; use ISO 8601 such as 2026-11-23 or "
                         "2026-11-23T22:40") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def record_time(record: dict[str, Any]) -> datetime:
    return parse_when(str(record.get("time") or "1970-01-01"))


class Journal:
    """The history file of one memory directory. ``Journal(directory, max_bytes=…)``.

    Callers append while holding the memory file's lock; the journal takes its own lock
    too (``history.jsonl.lock``), always *inside* a file lock, because both targets
    share one journal."""

    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES,
                 lock_timeout: float = 30.0):
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL_NAME
        self.max_bytes = max(4096, int(max_bytes))
        self.lock_timeout = lock_timeout

    # -- reading --------------------------------------------------------------------------

    def records(self, target: str | None = None) -> list[dict[str, Any]]:
        """Every retained record, oldest first (a torn or foreign line is skipped)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out = []
        for line in data.split(b"\n"):
            rec = _decode(line)
            if rec is not None and (target is None or rec.get("target") == target):
                out.append(rec)
        return out

    def get(self, record_id: int) -> dict[str, Any] | None:
        for rec in self.records():
            if rec.get("id") == record_id:
                return rec
        return None

    def _last_id(self) -> int:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - _TAIL))
                tail = fh.read()
        except FileNotFoundError:
            return 0
        for line in reversed(tail.split(b"\n")):
            rec = _decode(line)
            if rec is not None:
                return int(rec["id"])
        return max((int(r["id"]) for r in self.records()), default=0)

    # -- shadow copies (what the journal last saw) ----------------------------------------

    def shadow_path(self, file_name: str) -> Path:
        return self.directory / SHADOW_DIR / file_name

    def shadow(self, file_name: str) -> str | None:
        """The file text the journal last saw; ``None`` before the first record."""
        try:
            return self.shadow_path(file_name).read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            return None

    def set_shadow(self, file_name: str, text: str) -> None:
        path = self.shadow_path(file_name)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # copies of private text
        hermes.atomic_write_text(path, text)

    # -- writing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The journal's own lock (taken inside a memory file's lock, never around one)."""
        with hermes.file_lock(self.path, timeout=self.lock_timeout):
            yield

    def append(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Number, time-stamp and append ``records`` (dicts without ``id``); returns them
        completed. Compacts the journal when it outgrows its bound."""
        if not records:
            return []
        with self.locked():
            next_id = self._last_id() + 1
            stamp = now_iso()
            done = []
            for rec in records:
                full = {"id": next_id, "time": stamp, **rec}
                next_id += 1
                done.append(full)
            payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in done).encode("utf-8")
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and not _ends_with_newline(self.path, size):
                    payload = b"\n" + payload  # a torn line from a crash stays on its own line
                os.write(fd, payload)
                os.fsync(fd)
                size += len(payload)
            finally:
                os.close(fd)
            if size > self.max_bytes:
                self._compact()
        return done

    def _compact(self) -> None:
        """Keep the newest records that fit in three quarters of the bound."""
        keep: list[bytes] = []
        total = 0
        budget = self.max_bytes * 3 // 4
        for line in reversed(self.path.read_bytes().split(b"\n")):
            if _decode(line) is None:
                continue
            if total + len(line) + 1 > budget:
                break
            keep.append(line)
            total += len(line) + 1
        with hermes.atomic_writer(self.path, mode=0o600) as fh:
            for line in reversed(keep):
                fh.write(line.decode("utf-8") + "\n")

    def scrub(self, pattern: Any, replacement: str) -> int:
        """Replace every match of ``pattern`` (a compiled regex) in the records' texts and
        in the shadow copies (``hermes forget``); returns how many records changed. The
        journal is rewritten atomically, so the old text leaves the file."""
        changed = 0
        with self.locked():
            lines = []
            for rec in self.records():
                hit = False
                for key in ("old", "new"):
                    value = rec.get(key)
                    if isinstance(value, str) and pattern.search(value):
                        rec[key] = pattern.sub(replacement, value)
                        hit = True
                if hit:
                    rec["forgotten"] = True
                    changed += 1
                lines.append(json.dumps(rec, ensure_ascii=False) + "\n")
            if changed:
                with hermes.atomic_writer(self.path, mode=0o600) as fh:
                    fh.writelines(lines)
            shadows = self.directory / SHADOW_DIR
            for shadow in sorted(shadows.iterdir()) if shadows.is_dir() else []:
                text = self.shadow(shadow.name)
                if text is not None and pattern.search(text):
                    self.set_shadow(shadow.name, pattern.sub(replacement, text))
        return changed

    def matches(self, pattern: Any) -> int:
        """How many records hold text matching ``pattern``."""
        return sum(1 for rec in self.records()
                   if any(isinstance(rec.get(k), str) and pattern.search(rec[k]) for k in ("old", "new")))

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0


def _ends_with_newline(path: Path, size: int) -> bool:
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) == b"\n"


def _decode(line: bytes) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("id"), int):
        return None
    return rec


# -- replay -------------------------------------------------------------------------------


def invert(entries: list[str], rec: dict[str, Any], split: Any) -> list[str]:
    """The entries before ``rec`` was applied, given those after it. ``split`` parses a
    file's text (for ``edit`` records)."""
    action = rec.get("action")
    out = list(entries)
    old: Any = rec.get("old")
    new: Any = rec.get("new")
    if action == "edit":
        return split(old or "")
    if action == "add":
        if new in out:
            out.remove(new)
    elif action == "remove":
        index = rec.get("index")
        at = index if isinstance(index, int) and 0 <= index <= len(out) else len(out)
        if old not in out:
            out.insert(at, old)
    elif action == "replace":
        index = rec.get("index")
        if isinstance(index, int) and 0 <= index < len(out) and out[index] == new:
            out[index] = old
        elif new in out:
            out[out.index(new)] = old
        elif old not in out:
            out.append(old)
    return out
