"""``hermes forget [QUERY] [--session ID] [--before DATE] [--yes] [--json]``.

Asks every component that keeps conversation text — the session store, the selected
context engine (a lossless engine's own store included) and every memory provider (the
built-in files and the external provider) — through their ``forget`` method
(:class:`hermes.ForgetRequest`), first as a dry run to show what would be removed, then,
once confirmed, for real. A component that cannot forget says so and the command
reports it (exit status 1: a copy may remain there).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

import hermes
from hermes.cli import echo_json, pass_state


def _components(kernel: Any) -> tuple[list[tuple[str, Any]], Any]:
    """(label, component) of everything that may hold the text, and the memory manager
    (to shut down afterwards)."""
    out: list[tuple[str, Any]] = [("session store", kernel.session_store)]
    try:
        out.append(("context engine", kernel.create("context-engine")))
    except Exception as exc:  # an engine that cannot start cannot be asked
        logging.getLogger("hermes.forget").warning("the context engine could not start: %s", exc)
    quiet = logging.getLogger("hermes.memory")
    was, quiet.disabled = quiet.disabled, True
    try:
        manager = hermes.MemoryManager(kernel, platform="cli")
    finally:
        quiet.disabled = was
    manager.initialize("cli")
    out += [("memory provider", p) for p in manager.providers]
    return out, manager


def _ask(label: str, component: Any, request: hermes.ForgetRequest) -> hermes.ForgetReport:
    name = getattr(component, "name", "") or type(component).__name__
    fn = getattr(component, "forget", None)
    try:
        report = fn(request) if fn is not None else None
    except Exception as exc:
        return hermes.ForgetReport(component=f"{label} {name}", supported=False,
                                   note=f"forget failed: {type(exc).__name__}: {exc}")
    if not isinstance(report, hermes.ForgetReport):
        return hermes.ForgetReport(component=f"{label} {name}", supported=False,
                                   note=f"{name} cannot forget (no forget method)")
    if not report.component:
        report.component = f"{label} {name}"
    return report


def _show(reports: list[hermes.ForgetReport], *, done: bool) -> None:
    for report in reports:
        if not report.supported:
            click.echo(f"{report.component}: CANNOT FORGET — {report.note}")
            continue
        if not report.found:
            click.echo(f"{report.component}: nothing found" + (f" ({report.note})" if report.note else ""))
            continue
        verb = f"removed {report.removed}" if done else f"{len(report.found)} to remove"
        click.echo(f"{report.component}: {verb}" + (f" — {report.note}" if report.note else ""))
        for line in report.found[:50]:
            click.echo(f"  {line}")
        if len(report.found) > 50:
            click.echo(f"  … and {len(report.found) - 50} more")


@click.command("forget")
@click.argument("query", required=False, default="")
@click.option("--session", "sessions", multiple=True, metavar="ID",
              help="Only in this session (repeatable); without QUERY, forget the whole session.")
@click.option("--before", metavar="DATE", help="Only what is older than DATE (ISO 8601, UTC by default).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@pass_state
def forget(state: Any, query: str, sessions: tuple[str, ...], before: str | None, yes: bool,
           as_json: bool) -> None:
    """Forget QUERY everywhere: memory entries and their history, session messages, and
    every copy a store, context engine or memory provider keeps. Shows what would be
    removed and asks first. The text is removed from search indexes and database files."""
    from datetime import UTC, datetime

    if not query.strip() and not sessions:
        raise click.UsageError("give a QUERY, or --session ID to forget a whole session")
    when = None
    if before is not None:
        try:
            parsed = datetime.fromisoformat(before.strip().replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(f"{before!r} is not a date; use ISO 8601 such as 2026-11-23",
                                     param_hint="--before") from None
        when = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    kernel = state.kernel()
    store = kernel.session_store
    ids = []
    for ref in sessions:
        sid = store.resolve_session(ref)
        if sid is None:
            raise hermes.HermesError(f"no session {ref!r}; see `hermes sessions list`")
        ids.append(sid)
    request = hermes.ForgetRequest(query=query.strip(), session_ids=ids, before=when, dry_run=True)
    components, manager = _components(kernel)
    try:
        reports = [_ask(label, c, request) for label, c in components]
        anything = any(r.found for r in reports)
        if not as_json:
            _show(reports, done=False)
        if anything:
            if not yes:
                if as_json or not sys.stdin.isatty():
                    raise hermes.HermesError("nothing was removed: confirm with --yes when not at a terminal")
                if not click.confirm("Remove all of this?", default=False):
                    click.echo("Nothing was removed.")
                    return
            request.dry_run = False
            reports = [_ask(label, c, request) for label, c in components]
            if not as_json:
                click.echo()
                _show(reports, done=True)
        elif not as_json:
            click.echo("Nothing matches.")
    finally:
        manager.shutdown(timeout=5.0)
    unsupported = [r for r in reports if not r.supported]
    if as_json:
        echo_json([r.__dict__ for r in reports])
    if unsupported:
        if not as_json:
            click.echo(f"warning: {len(unsupported)} component(s) cannot forget; copies may remain there",
                       err=True)
        raise SystemExit(1)
