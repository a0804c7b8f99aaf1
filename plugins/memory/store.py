"""The curated file memory: ``MEMORY.md`` (the agent's notes) and ``USER.md`` (the user
profile) under ``$HERMES_HOME/memories``.

A file holds entries separated by ``\\n§\\n``; no header, no metadata, no trailing
newline. Budgets are characters of the joined text (delimiters included), not tokens,
because characters do not depend on the model.

Every change goes through :meth:`MemoryStore.apply`: scan the new text → take the
per-file lock (cross-process) → re-read the file → drift guard → apply the operations to
a working copy (all or nothing) → check the budget on the final state → atomic write →
release the lock. The system-prompt view is a *frozen snapshot* taken by
:meth:`MemoryStore.load_snapshot` and never touched by writes.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hermes

from .journal import DEFAULT_MAX_BYTES, Journal, invert, parse_when, record_time

ENTRY_DELIMITER = "\n§\n"

#: target name → file name
FILES = {"memory": "MEMORY.md", "user": "USER.md"}

#: target name → block header (usage is appended)
HEADERS = {"memory": "MEMORY (your personal notes)", "user": "USER PROFILE (who the user is)"}

#: target name → the config switch that enables it
SWITCHES = {"memory": "memory.memory_enabled", "user": "memory.user_profile_enabled"}

#: Bytes read from a memory file at most (or 8 bytes per budget character, when more).
#: The budgets are a few thousand characters; a
#: file far bigger than this is not a memory store (a log pasted over it, a wrong
#: symlink) and is refused rather than read into every prompt.
MAX_FILE_BYTES = 1 << 20

_BOM = "\ufeff"
_RULE = "═" * 46
_BLOCKED_REF = re.compile(r"^blocked:([0-9a-f]{8})$")
_PREVIEW = 80

_log = logging.getLogger("hermes.memory")

#: The fence of the live-updates block (see :meth:`MemoryStore.render_changes`).
LIVE_OPEN, LIVE_CLOSE = "<memory-updates>", "</memory-updates>"


# -- format -------------------------------------------------------------------------------


def split_entries(raw: str) -> list[str]:
    """The entries of a file's text, stripped, empty ones dropped (duplicates kept)."""
    return [piece.strip() for piece in raw.split(ENTRY_DELIMITER) if piece.strip()]


def dedupe(entries: Iterable[str]) -> list[str]:
    """``entries`` without exact repeats, first occurrence kept."""
    seen: set[str] = set()
    out = []
    for entry in entries:
        if entry not in seen:
            seen.add(entry)
            out.append(entry)
    return out


def parse_entries(raw: str) -> list[str]:
    """The live entries of a file's text: split, stripped, de-duplicated."""
    return dedupe(split_entries(raw))


def join_entries(entries: list[str]) -> str:
    """The file text for ``entries`` (``""`` for none)."""
    return ENTRY_DELIMITER.join(entries)


def usage_chars(entries: list[str]) -> int:
    """Characters ``entries`` use against the budget (delimiters count)."""
    return len(join_entries(entries))


def format_usage(chars: int, limit: int) -> str:
    """``"P% — C/L chars"`` with thousands separators; P is capped at 100."""
    pct = min(100, int(chars / limit * 100)) if limit > 0 else 0
    return f"{pct}% — {chars:,}/{limit:,} chars"


def entry_ref(entry: str) -> str:
    """A short, content-free handle for an entry (``blocked:1a2b3c4d``) that ``old_text``
    accepts, so a blocked entry can be removed without quoting its payload."""
    return "blocked:" + hashlib.sha256(entry.encode("utf-8")).hexdigest()[:8]


def preview(entry: str) -> str:
    """One line of at most 80 characters."""
    line = " ".join(entry.split())
    return line if len(line) <= _PREVIEW else line[:_PREVIEW] + "..."


def threat_message(ids: list[str]) -> str:
    """The refusal for content the scanner flagged."""
    quoted = ", ".join(f"'{i}'" for i in ids)
    return (f"Blocked: content matches threat pattern(s) {quoted}. Memory entries are injected "
            "into the system prompt and must not contain injection or exfiltration payloads.")


class MemoryFileError(Exception):
    """A memory file exists but cannot be used: undecodable bytes, no permission, not a
    regular file, a symlink loop, too large. It is never treated as empty and never
    rewritten; ``str(exc)`` is one line naming the file and what to do."""

    def __init__(self, path: Path, why: str):
        self.path = path
        self.why = why
        super().__init__(f"{path} cannot be read ({why}). Nothing was changed; fix the file "
                         "or move it aside, then try again.")


def read_memory_file(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of the memory file ``path``: ``""`` when it does not exist, a leading
    UTF-8 BOM dropped. Raises :class:`MemoryFileError` for anything else that keeps it
    from being read as UTF-8 text. Never blocks: a FIFO or device is refused without
    waiting for a writer, and at most ``max_bytes`` + 1 bytes are read."""
    try:
        data = hermes.read_bounded(path, max_bytes)
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling symlink is a broken file, not "no memory yet"
            raise MemoryFileError(path, f"a symlink to the missing {os.readlink(path)}") from None
        return ""
    except (hermes.NotRegularFileError, hermes.FileTooLargeError) as exc:
        raise MemoryFileError(path, str(exc.strerror)) from exc
    except OSError as exc:
        why = "a symlink loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc)).lower()
        raise MemoryFileError(path, why) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoryFileError(path, f"not UTF-8 text: invalid byte at offset {exc.start}") from exc
    # Universal newlines, as text-mode reading gives: a file saved on Windows still splits.
    return text.removeprefix(_BOM).replace("\r\n", "\n").replace("\r", "\n")


# -- results ------------------------------------------------------------------------------


@dataclass
class Committed:
    """One action that changed a file: what the mirror to an external provider and the
    ``hermes_memory_write`` event report."""

    action: str
    target: str
    content: str = ""
    old_text: str | None = None
    previous_content: str | None = None
    #: the entry's position (after an add or replace, before a remove)
    index: int | None = None
    #: the history record of this change (``memories/history.jsonl``), once journalled
    record: dict[str, Any] | None = None


@dataclass
class Outcome:
    """What :meth:`MemoryStore.apply` did: ``data`` is the JSON-able response for the
    model or the CLI, ``committed`` the actions that reached the disk."""

    data: dict[str, Any]
    committed: list[Committed] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.data.get("success"))


class _OpError(Exception):
    """A failed operation inside a batch; ``extra`` joins the response."""

    def __init__(self, message: str, **extra: Any):
        super().__init__(message)
        self.extra = extra


# -- the store ----------------------------------------------------------------------------


class MemoryStore:
    """Both memory files of one Hermes home, their budgets and the frozen snapshot.

    ``MemoryStore(directory, memory_limit=2200, user_limit=1375, memory_enabled=True,
    user_enabled=True)``. Safe to share between threads and processes: every mutation
    holds the file's lock and re-reads the file first.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        memory_limit: int = 2200,
        user_limit: int = 1375,
        memory_enabled: bool = True,
        user_enabled: bool = True,
        lock_timeout: float = 30.0,
        history_max_bytes: int = DEFAULT_MAX_BYTES,
    ):
        self.directory = Path(directory)
        self.journal = Journal(self.directory, max_bytes=history_max_bytes, lock_timeout=lock_timeout)
        self.limits = {"memory": int(memory_limit), "user": int(user_limit)}
        self.enabled = {"memory": bool(memory_enabled), "user": bool(user_enabled)}
        self.lock_timeout = lock_timeout
        self._live: dict[str, list[str]] = {"memory": [], "user": []}
        self._snapshot: dict[str, str] = {"memory": "", "user": ""}
        #: target → the entries the frozen snapshot shows (the base of live updates)
        self.snapshot_entries: dict[str, list[str]] = {"memory": [], "user": []}
        #: target → why its file could not be read when the snapshot was taken
        self.snapshot_errors: dict[str, str] = {}
        self.snapshot_loaded = False

    @classmethod
    def from_config(cls, config: Any, home: str | os.PathLike[str]) -> MemoryStore:
        """A store for ``home`` with the ``memory.*`` settings of ``config``."""
        return cls(
            Path(home) / "memories",
            memory_limit=int(config.get("memory.memory_char_limit") or 2200),
            user_limit=int(config.get("memory.user_char_limit") or 1375),
            memory_enabled=bool(config.get("memory.memory_enabled")),
            user_enabled=bool(config.get("memory.user_profile_enabled")),
            history_max_bytes=int(config.get("memory.history_max_bytes") or DEFAULT_MAX_BYTES),
        )

    # -- reading --------------------------------------------------------------------------

    @property
    def targets(self) -> list[str]:
        """The enabled targets, ``memory`` first."""
        return [t for t in FILES if self.enabled[t]]

    def path(self, target: str) -> Path:
        """The file of ``target``."""
        return self.directory / FILES[target]

    def read_raw(self, target: str) -> str:
        """The file's text; ``""`` when missing. A file that exists but cannot be read
        raises :class:`MemoryFileError` (readers never lock: the writer replaces the file
        atomically, so a reader sees the old or the new one)."""
        # The bound grows with a configured budget (up to 4 bytes a character, twice over).
        return read_memory_file(self.path(target), max_bytes=max(MAX_FILE_BYTES, 8 * self.limits[target]))

    def entries(self, target: str, *, reload: bool = True) -> list[str]:
        """The live entries of ``target`` (re-read from disk unless ``reload=False``)."""
        if reload:
            self._live[target] = parse_entries(self.read_raw(target))
        return list(self._live[target])

    def usage(self, target: str, entries: list[str] | None = None) -> str:
        """``"P% — C/L chars"`` for ``target`` (its live entries unless given)."""
        if entries is None:
            entries = self.entries(target)
        return format_usage(usage_chars(entries), self.limits[target])

    # -- the frozen snapshot --------------------------------------------------------------

    def load_snapshot(self) -> None:
        """Read both files and freeze their system-prompt blocks for this session.
        Writes after this never change :meth:`snapshot_block`. A hand edit since the
        last change is journalled first."""
        self.snapshot_errors = {}
        self.sync_history(self.targets)
        for target in FILES:
            self.snapshot_entries[target] = []
            if not self.enabled[target]:
                self._snapshot[target] = ""
                continue
            try:
                entries = self.entries(target)
            except MemoryFileError as exc:
                # Say so in the prompt: silently omitting the block would let the model
                # believe the store is empty and "re-learn" over it.
                self.snapshot_errors[target] = str(exc)
                self._live[target] = []
                self._snapshot[target] = (
                    f"{_RULE}\n{HEADERS[target]} [UNREADABLE]\n{_RULE}\n{FILES[target]} could not "
                    f"be read ({exc.why}); its entries are not shown and the memory tool cannot "
                    "change it until the user fixes the file. Do not assume it is empty.")
                continue
            self._snapshot[target] = self.render_block(target, entries)
            self.snapshot_entries[target] = list(entries)
        self.snapshot_loaded = True

    def snapshot_block(self, target: str) -> str:
        """The frozen block of ``target`` (``""`` when disabled, empty or not loaded)."""
        return self._snapshot.get(target, "")

    def sanitize(self, target: str, entry: str) -> str:
        """``entry`` itself, or a ``[BLOCKED: …]`` placeholder when the scanner flags it
        (entries written around the tool — by hand, by a shell — are caught here)."""
        threats = hermes.scan_for_threats(entry, scope="strict")
        if not threats:
            return entry
        ids = ", ".join(t.id for t in threats)
        ref = entry_ref(entry)
        return (f"[BLOCKED: {FILES[target]} entry {ref} contained threat pattern(s): {ids}. "
                f'Removed from the system prompt; delete it with memory(action="remove", '
                f'target="{target}", old_text="{ref}").]')

    def render_block(self, target: str, entries: list[str]) -> str:
        """The system-prompt block: a rule, the header with usage, a rule, the entries
        (each sanitised). ``""`` for no entries. A store grown past its budget by
        writers outside the tool is flagged and, far past it, shown head and tail only."""
        if not entries:
            return ""
        limit = self.limits[target]
        chars = usage_chars(entries)
        header = f"{HEADERS[target]} [{format_usage(chars, limit)}]"
        if chars > limit:
            header += " ⚠ OVER BUDGET"
        body = join_entries([self.sanitize(target, e) for e in entries])
        cap = max(2 * limit, 4000)
        if len(body) > cap:
            head, tail = body[: int(cap * 0.7)], body[-int(cap * 0.2):]
            omitted = len(body) - len(head) - len(tail)
            body = (f"{head}\n[… {omitted:,} characters omitted: this store is far over its "
                    f"budget; consolidate it with the memory tool …]\n{tail}")
        return f"{_RULE}\n{header}\n{_RULE}\n{body}"

    def inventory(self) -> str:
        """The live entries of every enabled target, sanitised, for review prompts and
        ``/memory``; ``""`` when all are empty."""
        parts = []
        for target in self.targets:
            try:
                entries = self.entries(target)
            except MemoryFileError as exc:
                parts.append(f"{HEADERS[target]} [UNREADABLE: {exc}]")
                continue
            if entries:
                lines = "\n".join(f"§ {self.sanitize(target, e)}" for e in entries)
                parts.append(f"{HEADERS[target]} [{self.usage(target, entries)}]\n{lines}")
        return "\n\n".join(parts)

    def render_changes(self, before: dict[str, list[str]], after: dict[str, list[str]]) -> str:
        """The live-updates block: entries added (``+``) and removed (``-``) between two
        states, each sanitised like the snapshot; ``""`` when nothing changed. It goes
        into a user message, never into the frozen system prompt."""
        lines = []
        for target in FILES:
            old, new = before.get(target, []), after.get(target, [])
            lines += [f"- [{FILES[target]}] {' '.join(self.sanitize(target, e).split())}" for e in old if e not in new]
            lines += [f"+ [{FILES[target]}] {' '.join(self.sanitize(target, e).split())}" for e in new if e not in old]
        if not lines:
            return ""
        head = (f"{LIVE_OPEN}\nMemory changed since this conversation started (the system prompt "
                "shows the older state; these changes are current):")
        return "\n".join([head, *lines, LIVE_CLOSE])

    # -- writing --------------------------------------------------------------------------

    def apply(self, target: str, operations: list[dict[str, Any]], *, batch: bool = False,
              who: str = "", origin: str = "", undo_of: int | None = None) -> Outcome:
        """Apply ``operations`` (``{"action", "content"?, "old_text"?}``) to ``target``,
        all or nothing, and return the outcome. Never raises for bad input. Each committed
        change is journalled with ``who`` (a session id, ``"cli"``, a client name) and
        ``origin`` (``tool``, ``cli``, ``review``, ``undo`` …)."""
        if target not in FILES:
            return self._fail(f"Invalid target {target!r}. Use 'memory' or 'user'.")
        if not self.enabled[target]:
            return self._fail(f"The {target!r} store is disabled ({SWITCHES[target]} is false).")
        if not operations:
            return self._fail("No operations given.")
        ops = []
        for i, op in enumerate(operations, 1):
            try:
                ops.append(self._normalise(op))
            except _OpError as exc:
                msg = self._where(i, op, batch) + str(exc) + self._none_applied(batch)
                return self._fail(msg, target, **exc.extra)
        for i, op in enumerate(ops, 1):
            if op["action"] in ("add", "replace"):
                threats = hermes.scan_for_threats(op["content"], scope="strict")
                if threats:
                    msg = threat_message([t.id for t in threats])
                    return self._fail(self._where(i, op, batch) + msg + self._none_applied(batch))
        path = self.path(target)
        try:
            with hermes.file_lock(path, timeout=self.lock_timeout):
                return self._apply_locked(target, ops, batch, who=who, origin=origin, undo_of=undo_of)
        except MemoryFileError as exc:
            return self._fail(f"{FILES[target]} is unreadable, so nothing was changed: {exc}",
                              unreadable=str(path))
        except (OSError, TimeoutError) as exc:
            return self._fail(f"Could not update {FILES[target]}: {exc}")

    def _apply_locked(self, target: str, ops: list[dict[str, Any]], batch: bool, *, who: str = "",
                      origin: str = "", undo_of: int | None = None) -> Outcome:
        raw = self.read_raw(target)
        self._note_hand_edit(target, raw)
        pieces = split_entries(raw)
        limit = self.limits[target]
        if any(op["action"] != "add" for op in ops):
            drift = self._drift(raw, pieces, limit)
            if drift:
                return self._refuse_drift(target, raw, drift)
        current = dedupe(pieces)
        self._live[target] = list(current)
        work = list(current)
        committed: list[Committed] = []
        replaced: dict[int, str] = {}
        removed: dict[int, str] = {}
        for i, op in enumerate(ops, 1):
            try:
                self._apply_one(target, work, op, i, committed, replaced, removed)
            except _OpError as exc:
                msg = self._where(i, op, batch) + str(exc) + self._none_applied(batch)
                return self._fail(msg, target, work=current, **exc.extra)
        final = dedupe(work)
        before, after = usage_chars(current), usage_chars(final)
        if after > limit and after > before:
            if batch:
                msg = (f"The batch would put {FILES[target]} at {after:,}/{limit:,} chars. "
                       "No operations were applied. Remove or shorten entries in the same batch.")
            elif len(ops) == 1 and ops[0]["action"] == "add":
                msg = (f"Memory at {before:,}/{limit:,} chars. Adding this entry "
                       f"({len(ops[0]['content']):,} chars) would exceed the limit. Replace or "
                       "remove existing entries first — ideally in one call with 'operations'.")
            else:
                msg = (f"Replacement would put memory at {after:,}/{limit:,} chars. Shorten the new "
                       "content or remove other entries first.")
            return self._fail(msg, target, work=current)
        if final == current:
            data = self._success(target, final, "Entry already exists (no duplicate added)."
                                 if all(op["action"] == "add" for op in ops) else "Nothing changed.")
            return Outcome(data, [])
        text = join_entries(final)
        hermes.atomic_write_text(self.path(target), text)
        self._live[target] = list(final)
        self._journal(target, committed, text, who=who, origin=origin, undo_of=undo_of)
        data = self._success(target, final, self._message(ops, committed, batch))
        if batch:
            if replaced:
                data["replaced_entries"] = {str(k): v for k, v in replaced.items()}
            if removed:
                data["removed_entries"] = {str(k): v for k, v in removed.items()}
        elif replaced:
            data["replaced_entry"] = next(iter(replaced.values()))
        return Outcome(data, committed)

    def _apply_one(self, target: str, work: list[str], op: dict[str, Any], index: int,
                   committed: list[Committed], replaced: dict[int, str], removed: dict[int, str]) -> None:
        action = op["action"]
        if action == "add":
            if op["content"] in work:
                return  # an exact duplicate is a no-op, and nothing is mirrored
            work.append(op["content"])
            committed.append(Committed("add", target, op["content"], index=len(work) - 1))
            return
        at = self._locate(target, work, op["old_text"])
        old = work[at]
        if action == "replace":
            if op["content"] == old:
                return
            if op["content"] in work:
                # The new text is already another entry: the result is that entry alone,
                # i.e. a removal, and it is reported (and journalled) as one.
                del work[at]
                removed[index] = old
                committed.append(Committed("remove", target, "", op["old_text"], old, index=at))
                return
            work[at] = op["content"]
            replaced[index] = old
            committed.append(Committed("replace", target, op["content"], op["old_text"], old, index=at))
        else:
            del work[at]
            removed[index] = old
            committed.append(Committed("remove", target, "", op["old_text"], old, index=at))

    def _locate(self, target: str, entries: list[str], old_text: str) -> int:
        """The index of the entry ``old_text`` names: an exact whole entry wins, then a
        blocked-entry handle, then a unique substring (identical duplicates count once)."""
        if old_text in entries:
            return entries.index(old_text)
        ref = _BLOCKED_REF.match(old_text)
        if ref:
            for i, entry in enumerate(entries):
                if entry_ref(entry) == old_text:
                    return i
        matches = [i for i, entry in enumerate(entries) if old_text in entry]
        if not matches:
            raise _OpError(f"No entry matched {preview(old_text)!r}. Use exact text from one of "
                           "the current entries and retry once.", _show_entries=True)
        if len({entries[i] for i in matches}) > 1:
            raise _OpError(f"Multiple entries matched {preview(old_text)!r}. Be more specific.",
                           matches=[preview(self.sanitize(target, entries[i])) for i in matches])
        return matches[0]

    # -- history ----------------------------------------------------------------------------

    def _note_hand_edit(self, target: str, raw: str) -> None:
        """Record a change nobody journalled (someone edited the file by hand, or a
        journal append failed): the file differs from the text the journal last saw.
        Called with the file's lock held."""
        name = FILES[target]
        try:
            if not self.journal.path.exists():
                self._baseline()
            shadow = self.journal.shadow(name)
            if shadow == raw:
                return
            # No shadow once the history has started: the file was absent, so empty.
            if (shadow or "") != raw:
                self.journal.append([{"target": target, "action": "edit", "old": shadow or "", "new": raw,
                                      "index": None, "who": "outside-hermes", "origin": "hand-edit"}])
            self.journal.set_shadow(name, raw)
        except (OSError, TimeoutError) as exc:
            _log.warning("memory history: could not record a hand edit of %s in %s: %s",
                         name, self.journal.path, exc)

    def _baseline(self) -> None:
        """Before the first record: adopt the files as they are (memory that predates the
        history is where replay stops, not an edit). Under the journal's lock, so two
        first writers (one per file) agree: whichever baselines a file it does not hold
        reads either the text before the other's write or after it, and either is
        consistent with the record that write appends."""
        with self.journal.locked():
            if self.journal.path.exists():
                return
            for target, name in FILES.items():
                if self.journal.shadow(name) is None:
                    try:
                        text = self.read_raw(target)
                    except MemoryFileError:
                        continue
                    self.journal.set_shadow(name, text)

    def _journal(self, target: str, committed: list[Committed], text: str, *, who: str, origin: str,
                 undo_of: int | None) -> None:
        """Append the records of ``committed`` (just written as ``text``). A failure is
        logged, never raised: the memory write itself succeeded, and the next write
        records the difference as an edit."""
        records = []
        for change in committed:
            rec: dict[str, Any] = {
                "target": target, "action": change.action,
                "old": change.previous_content if change.action != "add" else None,
                "new": change.content if change.action != "remove" else None,
                "index": change.index, "who": who or "unknown", "origin": origin or "api",
            }
            if undo_of is not None:
                rec["undo_of"] = undo_of
            records.append(rec)
        try:
            if not self.journal.path.exists():
                self._baseline()
            done = self.journal.append(records)
            self.journal.set_shadow(FILES[target], text)
        except (OSError, TimeoutError) as exc:
            _log.warning("memory history: could not append to %s: %s", self.journal.path, exc)
            return
        for change, rec in zip(committed, done, strict=True):
            change.record = rec

    def sync_history(self, targets: Iterable[str] | None = None) -> None:
        """Record hand edits of ``targets`` (default: both) made since the last change.
        An unreadable file is skipped (it is refused elsewhere, loudly)."""
        for target in targets or FILES:
            try:
                with hermes.file_lock(self.path(target), timeout=self.lock_timeout):
                    self._note_hand_edit(target, self.read_raw(target))
            except (MemoryFileError, OSError, TimeoutError):
                continue

    def history(self, target: str | None = None) -> list[dict[str, Any]]:
        """The journalled changes (of ``target``, or all), oldest first, hand edits
        found up to now included."""
        self.sync_history([target] if target else None)
        return self.journal.records(target)

    def state_at(self, target: str, when: str | Any) -> list[str]:
        """The entries of ``target`` as they were at ``when`` (a datetime or an ISO
        date), replayed backwards from the file through the journal. Raises
        :class:`ValueError` (one line) for a bad date or one older than the history kept."""
        at = parse_when(when) if isinstance(when, str) else when
        with hermes.file_lock(self.path(target), timeout=self.lock_timeout):
            raw = self.read_raw(target)
            self._note_hand_edit(target, raw)
            entries = parse_entries(raw)
            everything = self.journal.records()
        if everything and everything[0]["id"] > 1 and at < record_time(everything[0]):
            raise ValueError(f"the history in {self.journal.path} starts at {everything[0]['time']} "
                             "(older changes were dropped by memory.history_max_bytes); pick a "
                             "later date")
        for rec in reversed(everything):
            if rec.get("target") != target:
                continue
            if record_time(rec) <= at:
                break
            entries = invert(entries, rec, parse_entries)
        return entries

    def undo(self, record_id: int | None = None, *, who: str = "cli", origin: str = "undo") -> Outcome:
        """Revert one journalled change (the newest when ``record_id`` is ``None``) by
        applying its inverse through :meth:`apply`, so the scanner, the budget and the
        drift guard decide as for any write; the undo is journalled with ``undo_of``."""
        self.sync_history()
        records = self.journal.records()
        if not records:
            return self._fail(f"Nothing to undo: {self.journal.path} has no changes yet.")
        rec = records[-1] if record_id is None else next((r for r in records if r["id"] == record_id), None)
        if rec is None:
            return self._fail(f"No change #{record_id} in {self.journal.path} (it may be older than "
                              "the history kept). See `hermes memory log`.")
        target, action = rec.get("target"), rec.get("action")
        old, new = rec.get("old") or "", rec.get("new") or ""
        if target not in FILES:
            return self._fail(f"Change #{rec['id']} names an unknown target {target!r}.")
        if action == "add":
            ops = [{"action": "remove", "old_text": new}]
        elif action == "remove":
            ops = [{"action": "add", "content": old}]
        elif action == "replace":
            ops = [{"action": "replace", "old_text": new, "content": old}]
        elif action == "edit":
            before, after = parse_entries(old), parse_entries(new)
            ops = ([{"action": "remove", "old_text": e} for e in after if e not in before]
                   + [{"action": "add", "content": e} for e in before if e not in after])
        else:
            return self._fail(f"Change #{rec['id']} has an unknown action {action!r}.")
        if not ops:
            return self._fail(f"Change #{rec['id']} changed no entries; nothing to undo.")
        outcome = self.apply(target, ops, batch=len(ops) > 1, who=who, origin=origin, undo_of=rec["id"])
        if not outcome.ok:
            outcome.data["error"] = f"Cannot undo change #{rec['id']}: {outcome.data['error']}"
        else:
            outcome.data["undone"] = rec["id"]
            outcome.data["message"] = f"Undid change #{rec['id']} ({action} in {FILES[target]})."
        return outcome

    def forget(self, query: str, *, dry_run: bool = True, who: str = "cli") -> tuple[list[str], int, str]:
        """``hermes forget`` on the curated memory: the entries holding ``query``
        (case-insensitive) are removed through :meth:`apply`, and every copy of the text
        is replaced with ``[forgotten]`` in the history, its shadow copies and the drift
        backups. Returns (one line per item found, items removed, a note)."""
        pattern = re.compile(re.escape(query), re.IGNORECASE)
        found: list[str] = []
        notes: list[str] = []
        matches: dict[str, list[str]] = {}
        for target in FILES:
            try:
                matches[target] = [e for e in self.entries(target) if pattern.search(e)]
            except MemoryFileError as exc:
                notes.append(str(exc))
                continue
            found += [f"{FILES[target]} entry: {preview(e)}" for e in matches[target]]
        in_history = self.journal.matches(pattern)
        if in_history:
            found.append(f"{in_history} record(s) in {self.journal.path}")
        backups = [p for t in FILES for p in sorted(self.directory.glob(f"{FILES[t]}.bak.*"))
                   if _holds(p, pattern)]
        found += [f"drift backup {p}" for p in backups]
        if dry_run or not found:
            return found, 0, " ".join(notes)
        removed = 0
        for target, entries in matches.items():
            if not entries:
                continue
            outcome = self.apply(target, [{"action": "remove", "old_text": e} for e in entries],
                                 batch=True, who=who, origin="forget")
            if outcome.ok:
                removed += len(entries)
            else:
                notes.append(f"{FILES[target]}: {outcome.data.get('error')}")
        removed += self.journal.scrub(pattern, "[forgotten]")
        for path in backups:
            text = path.read_text(encoding="utf-8", errors="replace")
            hermes.atomic_write_text(path, pattern.sub("[forgotten]", text))
            removed += 1
        return found, removed, " ".join(notes)

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def _normalise(op: Any) -> dict[str, Any]:
        if not isinstance(op, dict):
            raise _OpError("Each operation must be an object with 'action'.")
        action = str(op.get("action") or "").strip().lower()
        content = str(op.get("content") or "").strip()
        old_text = str(op.get("old_text") or "").strip()
        if action not in ("add", "replace", "remove"):
            raise _OpError(f"Unknown action {op.get('action')!r}. Use: add, replace, remove.")
        if action in ("add", "replace") and any(line.strip() == "§" for line in content.splitlines()):
            raise _OpError("The text contains a line holding only '§', which separates entries "
                           "in the memory files. Save each entry separately, or change that line.")
        if action in ("add", "replace") and not content:
            raise _OpError("Content cannot be empty." if action == "add" else
                           "New content cannot be empty; use action 'remove' to delete an entry.")
        if action in ("replace", "remove") and not old_text:
            raise _OpError(f"{action} needs old_text: a short unique part of the entry to change. "
                           "Reissue the call with old_text taken from the current entries.",
                           _show_entries=True)
        return {"action": action, "content": content, "old_text": old_text}

    @staticmethod
    def _where(index: int, op: Any, batch: bool) -> str:
        if not batch:
            return ""
        action = op.get("action") if isinstance(op, dict) else "?"
        return f"Operation {index} ({action}): "

    @staticmethod
    def _none_applied(batch: bool) -> str:
        return " No operations were applied." if batch else ""

    @staticmethod
    def _drift(raw: str, pieces: list[str], limit: int) -> str:
        """Why the file cannot be rewritten safely, or ``""``: text that does not
        round-trip through the entry format, or an entry bigger than the whole budget,
        means someone edited the file by other means."""
        if join_entries(pieces) != raw.strip():
            return "its text does not follow the entry format"
        if any(line.strip() == "§" for piece in pieces for line in piece.splitlines()):
            return "a § separator line is not written as the tool writes it"
        big = max((len(p) for p in pieces), default=0)
        if big > limit:
            return f"one entry is {big:,} characters, more than the whole {limit:,}-character budget"
        return ""

    def _refuse_drift(self, target: str, raw: str, why: str) -> Outcome:
        backup = self._backup(target, raw)
        name = FILES[target]
        return self._fail(
            f"{name} was changed outside the memory tool ({why}). Nothing was rewritten, so "
            f"that content is safe; a copy is at {backup}.",
            target,
            drift_backup=str(backup),
            remediation=(f"Ask the user to tidy {self.path(target)} (entries separated by a line "
                         "holding only §, each within the budget), or use action 'add' only."),
        )

    def _backup(self, target: str, raw: str) -> Path:
        """``<file>.bak.<unix time>``; an existing backup with the same text is reused so
        repeated refusals do not pile up copies."""
        path = self.path(target)
        for old in sorted(path.parent.glob(f"{path.name}.bak.*")):
            try:
                if old.read_text(encoding="utf-8") == raw:
                    return old
            except (OSError, UnicodeDecodeError):
                continue
        stamp = int(time.time())
        backup = path.with_name(f"{path.name}.bak.{stamp}")
        n = 1
        while backup.exists():
            backup = path.with_name(f"{path.name}.bak.{stamp}.{n}")
            n += 1
        shutil.copy2(path, backup)
        return backup

    def _success(self, target: str, entries: list[str], message: str) -> dict[str, Any]:
        return {
            "success": True,
            "done": True,
            "target": target,
            "message": message,
            "usage": self.usage(target, entries),
            "entry_count": len(entries),
            "note": "Saved. This update is complete; do not repeat it.",
        }

    @staticmethod
    def _message(ops: list[dict[str, Any]], committed: list[Committed], batch: bool) -> str:
        if batch:
            counts: dict[str, int] = {}
            for c in committed:
                counts[c.action] = counts.get(c.action, 0) + 1
            done = ", ".join(f"{n} {a}" for a, n in counts.items())
            skipped = len(ops) - len(committed)
            return f"Batch applied ({done})." + (f" {skipped} no-op(s) skipped." if skipped else "")
        return {"add": "Entry added.", "replace": "Entry replaced.", "remove": "Entry removed."}[ops[0]["action"]]

    def _fail(self, message: str, target: str | None = None, *, work: list[str] | None = None,
              **extra: Any) -> Outcome:
        data: dict[str, Any] = {"success": False, "error": message}
        show = extra.pop("_show_entries", False) or work is not None
        if target is not None and show:
            try:
                entries = work if work is not None else self.entries(target)
            except MemoryFileError as exc:
                data["error"] += f" ({exc})"
                entries = None
            if entries is not None:
                data["current_entries"] = [self.sanitize(target, e) for e in entries]
                data["usage"] = self.usage(target, entries)
        data.update(extra)
        return Outcome(data)


def _holds(path: Path, pattern: re.Pattern[str]) -> bool:
    try:
        return bool(pattern.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False
