"""``hermes memory show|add|replace|remove|status|log|undo``.

The write commands follow exactly the rules of the ``memory`` tool (same store, same
threat scan, lock, budget and drift guard) and emit ``hermes_memory_write`` for each
committed action with ``metadata["write_origin"] == "cli"``. Every change is journalled
(``memories/history.jsonl``, see :mod:`.journal`): ``log`` lists it, ``undo`` reverts
one change (mirrored to the external provider like a tool write), ``show --at`` replays
the memory as it was.
"""

from __future__ import annotations

import logging
from typing import Any

import click

import hermes
from hermes.cli import echo_json, pass_state

from .journal import parse_when
from .provider import BuiltinMemoryProvider
from .store import FILES, HEADERS, MemoryFileError, MemoryStore, Outcome, preview

_TARGET = click.option("--target", "-t", type=click.Choice(["memory", "user"]), default="memory",
                       show_default=True, help="memory = the agent's notes, user = the user profile.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _store(state: Any) -> tuple[Any, MemoryStore]:
    kernel = state.kernel()
    try:
        provider = kernel.create("memory-provider", "builtin")
    except hermes.HermesError:
        raise
    except Exception as exc:
        raise hermes.HermesError(f"the built-in memory provider could not start: {exc}") from exc
    store = getattr(provider, "store", None)
    if not isinstance(provider, BuiltinMemoryProvider) or store is None:
        raise hermes.HermesError("the 'builtin' memory provider is not Hermes' file memory; "
                                 "these commands need it. Check `hermes plugins list`.")
    return kernel, store


@click.group()
def memory() -> None:
    """Show and edit the curated memory (MEMORY.md, USER.md) and check the provider."""


@memory.command("show")
@click.option("--target", "-t", type=click.Choice(["memory", "user", "all"]), default="all",
              show_default=True, help="Which store to show.")
@click.option("--at", "at", metavar="DATE", default=None,
              help="Show the memory as it was at DATE (ISO 8601, UTC unless a zone is given).")
@_JSON
@pass_state
def show(state: Any, target: str, at: str | None, as_json: bool) -> None:
    """Print the live entries and usage of each store (or, with --at, past ones)."""
    _, store = _store(state)
    targets = list(FILES) if target == "all" else [target]
    data: dict[str, Any] = {}
    unreadable: list[str] = []
    if at is not None:
        try:
            parse_when(at)
        except ValueError as exc:
            raise hermes.HermesError(f"--at: {exc}") from None
    for t in targets:
        try:
            if at is not None:
                try:
                    entries = store.state_at(t, at)
                except ValueError as exc:
                    raise hermes.HermesError(f"--at: {exc}") from None
            else:
                entries = store.entries(t)
        except MemoryFileError as exc:
            # Never shown as "(empty)": the file holds something we could not read.
            unreadable.append(str(exc))
            data[t] = {"enabled": store.enabled[t], "path": str(store.path(t)),
                       "limit": store.limits[t], "error": str(exc)}
            continue
        data[t] = {
            "enabled": store.enabled[t],
            "path": str(store.path(t)),
            "limit": store.limits[t],
            "chars": len("\n§\n".join(entries)),
            "usage": store.usage(t, entries),
            "entries": entries,
        }
    if as_json:
        echo_json(data)
        if unreadable:
            raise SystemExit(1)
        return
    for i, t in enumerate(targets):
        info = data[t]
        if i:
            click.echo()
        if "error" in info:
            click.echo(f"{HEADERS[t]} [UNREADABLE]")
            click.echo(f"  {info['path']}")
            continue
        state_note = "" if info["enabled"] else "  (disabled in config)"
        click.echo(f"{HEADERS[t]} [{info['usage']}]{state_note}")
        click.echo(f"  {info['path']}")
        if not info["entries"]:
            click.echo("  (empty)")
        for n, entry in enumerate(info["entries"], 1):
            lines = entry.splitlines() or [""]
            click.echo(f"  {n:>2}. {lines[0]}")
            for line in lines[1:]:
                click.echo(f"      {line}")
    if unreadable:
        raise hermes.HermesError(" ".join(unreadable))


def _write(state: Any, target: str, op: dict[str, Any], as_json: bool) -> None:
    kernel, store = _store(state)
    outcome: Outcome = store.apply(target, [op], who="cli", origin="cli")
    for change in outcome.committed:
        metadata: dict[str, Any] = {"write_origin": "cli", "tool_name": "memory", "old_text": change.old_text,
                    "previous_content": change.previous_content}
        if change.record is not None:
            metadata["history"] = dict(change.record)
        kernel.emit("hermes_memory_write", session=None, event=hermes.MemoryWriteEvent(
            action=change.action, target=change.target, content=change.content,
            old_text=change.old_text, metadata=metadata,
        ))
    _report(outcome, target, as_json)


def _report(outcome: Outcome, target: str, as_json: bool) -> None:
    """Print what a change did: its JSON (exit status 1 when it failed), else one line —
    the confirmation with the file's usage, or the error worded for a person."""
    if as_json:
        echo_json(outcome.data)
        if not outcome.ok:
            raise SystemExit(1)
        return
    if not outcome.ok:
        data = outcome.data
        extra = ""
        if data.get("matches"):
            extra = " Matches: " + " | ".join(data["matches"])
        raise hermes.HermesError(f"{_for_person(data['error'])}{extra}")
    click.echo(f"{outcome.data['message']} {FILES[target]}: {outcome.data['usage']}")


#: The store words its errors for the model (a retry budget, the tool's batch parameter);
#: at the command line the same facts get a person's next step.
_MODEL_HINTS = (
    (" and retry once.", ". `hermes memory show` lists them."),
    (" — ideally in one call with 'operations'.", " (`hermes memory remove --old TEXT`)."),
)


def _for_person(error: str) -> str:
    for model_hint, person_hint in _MODEL_HINTS:
        error = error.replace(model_hint, person_hint)
    return error


@memory.command("add")
@_TARGET
@_JSON
@click.argument("content")
@pass_state
def add(state: Any, target: str, as_json: bool, content: str) -> None:
    """Add an entry (scanned for injection; refused when the store is full)."""
    _write(state, target, {"action": "add", "content": content}, as_json)


@memory.command("replace")
@_TARGET
@_JSON
@click.option("--old", "old_text", required=True, help="A unique part of the entry to replace.")
@click.argument("content")
@pass_state
def replace(state: Any, target: str, as_json: bool, old_text: str, content: str) -> None:
    """Replace the entry containing --old with CONTENT."""
    _write(state, target, {"action": "replace", "old_text": old_text, "content": content}, as_json)


@memory.command("remove")
@_TARGET
@_JSON
@click.option("--old", "old_text", required=True, help="A unique part of the entry to remove.")
@pass_state
def remove(state: Any, target: str, as_json: bool, old_text: str) -> None:
    """Remove the entry containing --old."""
    _write(state, target, {"action": "remove", "old_text": old_text}, as_json)


@memory.command("log")
@click.option("--target", "-t", type=click.Choice(["memory", "user", "all"]), default="all",
              show_default=True, help="Which store's changes to list.")
@click.option("--limit", "-n", type=click.IntRange(min=0), default=50, show_default=True,
              help="Newest changes to list (0 = all kept).")
@_JSON
@pass_state
def log_(state: Any, target: str, limit: int, as_json: bool) -> None:
    """List the changes to the memory files, newest last: id, time, action, who."""
    _, store = _store(state)
    records = store.history(None if target == "all" else target)
    if limit:
        records = records[-limit:]
    if as_json:
        echo_json(records)
        return
    if not records:
        click.echo(f"No changes recorded yet ({store.journal.path}).")
        return
    for rec in records:
        undo = f" (undo of #{rec['undo_of']})" if rec.get("undo_of") is not None else ""
        who = rec.get("who") or "unknown"
        click.echo(f"#{rec['id']:<5} {rec.get('time', '?')}  {rec.get('target', '?'):<6} "
                   f"{rec.get('action', '?'):<7} by {who} [{rec.get('origin', '?')}]{undo}")
        if rec.get("action") == "edit":
            click.echo("       file edited outside Hermes")
            continue
        if rec.get("old") is not None:
            click.echo(f"       - {preview(rec['old'])}")
        if rec.get("new") is not None:
            click.echo(f"       + {preview(rec['new'])}")


@memory.command("undo")
@click.argument("change_id", metavar="[ID]", type=int, required=False)
@_JSON
@pass_state
def undo(state: Any, change_id: int | None, as_json: bool) -> None:
    """Revert one change from `hermes memory log` (the newest when no ID is given).

    The undo is itself a change (recorded, scanned, within the budget) and is mirrored
    to the external memory provider, if one is configured."""
    kernel, store = _store(state)
    outcome = store.undo(change_id, who="cli", origin="undo")
    if outcome.committed:
        _mirror(kernel, outcome)
    _report(outcome, outcome.committed[0].target if outcome.committed else "memory", as_json)


def _quiet_manager(kernel: Any) -> hermes.MemoryManager:
    """The memory manager for a command, built without its start-up warnings (an
    unavailable provider): the command reports those itself."""
    quiet = logging.getLogger("hermes.memory")
    was_disabled, quiet.disabled = quiet.disabled, True
    try:
        return hermes.MemoryManager(kernel, platform="cli")
    finally:
        quiet.disabled = was_disabled


def _mirror(kernel: Any, outcome: Outcome) -> None:
    """Emit ``hermes_memory_write`` and tell the external provider about each change of
    an undo, through the memory manager (the same path as the model's writes)."""
    manager = _quiet_manager(kernel)
    try:
        manager.initialize("cli")
        for change in outcome.committed:
            manager.record_write(change, origin="cli", session_id="cli")
        if not manager.flush(10.0):
            click.echo("warning: the memory provider did not confirm the undo in 10s", err=True)
    finally:
        manager.shutdown(timeout=5.0)


@memory.command("status")
@_JSON
@pass_state
def status(state: Any, as_json: bool) -> None:
    """The built-in memory, the selected external provider, and whether it can run."""
    kernel = state.kernel()
    manager = _quiet_manager(kernel)
    data = manager.status()
    manager.shutdown(timeout=1.0)
    if as_json:
        echo_json(data)
        _exit_if_broken(data)
        return
    builtin = data["builtin"]
    click.echo(f"built-in: {'active' if builtin['active'] else 'NOT ACTIVE'}")
    for t in FILES:
        info = builtin.get(t)
        if isinstance(info, dict) and "usage" in info:
            flag = "" if info["enabled"] else " (disabled)"
            click.echo(f"  {t}: {info['entries']} entries, {info['usage']}{flag} — {info['path']}")
        elif isinstance(info, dict) and "error" in info:
            click.echo(f"  {t}: UNREADABLE — {info['error']}")
    ext = data["external"]
    if not ext["name"]:
        click.echo("provider: (none — built-in only)")
    elif ext["active"]:
        tools = ", ".join(ext["tools"]) or "no tools"
        click.echo(f"provider: {ext['name']} — available ({tools})")
    else:
        click.echo(f"provider: {ext['name']} — UNAVAILABLE: {ext['reason'] or 'unknown reason'}")
    for problem in data["problems"]:
        if ext["name"] and ext["reason"] and ext["reason"] in problem:
            continue
        click.echo(f"warning: {problem}")
    _exit_if_broken(data)


def _exit_if_broken(data: dict[str, Any]) -> None:
    """Exit status 1 (docs/cli.md) when the selected provider cannot run or a memory file
    cannot be read: a script checking ``memory status`` must see the failure."""
    ext, builtin = data["external"], data["builtin"]
    unreadable = any(isinstance(builtin.get(t), dict) and "error" in builtin[t] for t in FILES)
    if (ext["name"] and not ext["active"]) or unreadable:
        click.get_current_context().exit(1)
