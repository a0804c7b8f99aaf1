"""The built-in memory provider (registry name ``builtin``) and its ``memory`` tool.

The kernel's memory manager always runs this provider first; an external provider
(mem0, Honcho …) can join it but never replace it. The provider owns the frozen
snapshot rendered into the system prompt and the ``memory`` tool the model curates it
with. Committed writes are reported through the ``on_commit`` callback the manager
passes to :meth:`BuiltinMemoryProvider.handle_tool_call`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import hermes

from .store import FILES, Committed, MemoryFileError, MemoryStore, Outcome

#: Failed memory calls in one turn after which the tool answers "stop retrying".
MAX_FAILURES_PER_TURN = 3

NOT_AVAILABLE = "Memory is not available. It may be disabled in config or this environment."

_DESCRIPTION = (
    "Save durable facts to persistent memory that survives across sessions. Memory is "
    "shown in the system prompt of every future session, so keep it compact and worth "
    "keeping.\n"
    "Save proactively when the user corrects you or says 'remember this', shares a "
    "preference, habit or personal detail, or when you learn a stable fact about the "
    "environment, a project convention or a tool quirk. Most valuable is whatever saves "
    "the user from repeating themselves: preferences and corrections first, then "
    "environment facts, then procedures.\n"
    "Do NOT save task progress, session outcomes, completed-work logs or TODO state; "
    "session_search finds those in past conversations. A reusable procedure belongs in a "
    "skill, not in memory.\n"
    "Targets: 'user' = who the user is (name, role, preferences, communication style); "
    "'memory' = your own notes (environment, conventions, lessons).\n"
    "Actions: add (content), replace (old_text = a short unique part of the entry, "
    "content = the whole new entry), remove (old_text). Make ALL changes of one update in "
    "ONE call with 'operations': they apply together or not at all, and the size budget is "
    "checked on the final result, so one call can free room and add. A full store rejects "
    "an add and shows the current entries: reissue one batch that removes or merges "
    "entries and adds. A successful call completes the update; do not repeat it. Writes "
    "take effect in the next session's prompt."
)


def tool_schema(targets: list[str]) -> dict[str, Any]:
    """The ``memory`` tool's OpenAI function schema for the enabled ``targets``."""
    op = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "replace", "remove"]},
            "content": {"type": "string", "description": "The entry text (add, replace)."},
            "old_text": {"type": "string",
                         "description": "A short unique part of the entry to change (replace, remove)."},
        },
        "required": ["action"],
    }
    return {
        "name": "memory",
        "description": _DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "target": {"type": "string", "enum": list(targets),
                           "description": "Which store: 'memory' (your notes) or 'user' (the user profile)."},
                "action": {"type": "string", "enum": ["add", "replace", "remove"],
                           "description": "One action (or use 'operations' for several)."},
                "content": {"type": "string", "description": "The entry text (add, replace)."},
                "old_text": {"type": "string",
                             "description": "A short unique part of the entry to change (replace, remove)."},
                "operations": {"type": "array", "items": op,
                               "description": "Several actions on one target, applied all or nothing."},
            },
            "required": ["target"],
        },
    }


class BuiltinMemoryProvider(hermes.MemoryProvider):
    """``MEMORY.md`` and ``USER.md`` with their frozen snapshot and the ``memory`` tool.

    Build it with :meth:`from_kernel` (what the registered factory does) or directly
    from a :class:`~hermes.plugins.memory.store.MemoryStore`.
    """

    memory_tool = "memory"

    def __init__(self, store: MemoryStore):
        self.store = store
        self._failures = 0
        self._lock = threading.Lock()
        #: target → the entries the model has been shown (the snapshot, then each live
        #: update); the base of the next :meth:`live_changes`
        self._shown: dict[str, list[str]] = {}

    @classmethod
    def from_kernel(cls, kernel: Any) -> BuiltinMemoryProvider:
        """The provider for ``kernel.home`` with the ``memory.*`` settings."""
        return cls(MemoryStore.from_config(kernel.config, kernel.home))

    @property
    def name(self) -> str:
        return "builtin"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        """Freeze the snapshot of both files for this session."""
        self.store.load_snapshot()
        self._failures = 0
        self.reset_live_changes()

    # -- live updates -------------------------------------------------------------------

    def live_changes(self) -> str:
        """The memory changes the model has not been shown yet this session (written by
        another session, the CLI, the background review, an undo …), as a
        ``<memory-updates>`` block for the next user message; ``""`` when none. The
        frozen system prompt is never touched."""
        current = {}
        for target in self.store.targets:
            try:
                current[target] = self.store.entries(target)
            except MemoryFileError:
                current[target] = self._shown.get(target, [])
        block = self.store.render_changes(self._shown, current)
        self._shown = current
        return block

    def _mark_shown(self, committed: list[Committed]) -> None:
        for change in committed:
            shown = self._shown.setdefault(change.target, [])
            if change.action in ("remove", "replace") and change.previous_content in shown:
                shown.remove(change.previous_content)
            if change.action in ("add", "replace") and change.content not in shown:
                shown.append(change.content)

    def reset_live_changes(self) -> None:
        """Back to the snapshot (after a compaction dropped the messages that carried
        the earlier updates, they are announced again)."""
        self._shown = {t: list(e) for t, e in self.store.snapshot_entries.items()}

    # -- prompt -------------------------------------------------------------------------

    def snapshot_block(self, target: str) -> str:
        """The frozen block of one target (``memory`` or ``user``)."""
        return self.store.snapshot_block(target)

    def system_prompt_block(self) -> str:
        """Both frozen blocks, memory first, joined by a blank line."""
        return "\n\n".join(b for b in (self.snapshot_block(t) for t in FILES) if b)

    def inventory(self) -> str:
        """Live entries of both targets (sanitised)."""
        return self.store.inventory()

    # -- the tool -----------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        targets = self.store.targets
        return [tool_schema(targets)] if targets else []

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        """A new turn: the failure cap starts again."""
        self._failures = 0

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run the ``memory`` tool. ``on_commit`` (a keyword argument), when given, is
        called with each committed action after the file is written. ``session_id`` and
        ``origin`` (``tool``, ``review`` …) name the writer in the history."""
        on_commit: Callable[[Committed], None] | None = kwargs.get("on_commit")
        if tool_name != "memory":
            return json.dumps({"success": False, "error": f"builtin memory has no tool {tool_name!r}"})
        origin = str(kwargs.get("origin") or "tool")
        outcome = self.run(args if isinstance(args, dict) else {},
                           who=str(kwargs.get("session_id") or ""), origin=origin)
        if origin == "tool":
            # The model saw this write in the tool's answer: no live update repeats it
            # (a background review's writes are not in the transcript, so they are).
            self._mark_shown(outcome.committed)
        if on_commit is not None:
            for action in outcome.committed:
                on_commit(action)
        return json.dumps(outcome.data, ensure_ascii=False)

    def forget(self, request: hermes.ForgetRequest) -> hermes.ForgetReport:
        """Remove entries holding ``request.query`` and scrub the text from the history
        and drift backups (``hermes forget``)."""
        return _forget(self, request)

    def run(self, args: dict[str, Any], *, who: str = "", origin: str = "tool") -> Outcome:
        """Apply one ``memory`` tool call and count failures for the per-turn cap."""
        if not self.store.targets:
            return Outcome({"success": False, "error": NOT_AVAILABLE})
        target = str(args.get("target") or "memory").strip().lower()
        operations = args.get("operations")
        if operations is not None:
            if not isinstance(operations, list):
                outcome = Outcome({"success": False, "error": "'operations' must be a list of actions."})
            else:
                outcome = self.store.apply(target, operations, batch=True, who=who, origin=origin)
        elif not args.get("action"):
            outcome = Outcome({"success": False,
                               "error": "Give 'action' (add, replace, remove) or 'operations'."})
        else:
            op = {k: args.get(k) for k in ("action", "content", "old_text")}
            outcome = self.store.apply(target, [op], who=who, origin=origin)
        with self._lock:
            if outcome.ok:
                self._failures = 0
                return outcome
            self._failures += 1
            terminal = self._failures >= MAX_FAILURES_PER_TURN
        if terminal:
            return Outcome({
                "success": False,
                "done": True,
                "error": (f"{outcome.data.get('error', 'The memory call failed.')} Memory calls "
                          f"have failed {self._failures} times this turn. Stop retrying memory "
                          "calls — leave memory unchanged for now and continue with your reply."),
            })
        return outcome


def _forget(provider: BuiltinMemoryProvider, request: hermes.ForgetRequest) -> hermes.ForgetReport:
    report = hermes.ForgetReport(component="builtin memory (MEMORY.md, USER.md)")
    if not request.query.strip():
        report.note = "curated entries are matched by text; give a QUERY to forget them"
        return report
    report.found, report.removed, report.note = provider.store.forget(
        request.query.strip(), dry_run=request.dry_run)
    return report


def describe_files(store: MemoryStore) -> dict[str, str]:
    """target → file path, for status output."""
    return {t: str(store.path(t)) for t in FILES}
