"""``hermes sessions list|show|search|export|import|rename|delete|prune|reindex|check``.

Every command works on the selected session store (``sessions.store``), so they work the
same with any store plugin. ``--json`` on ``list``, ``show`` and ``search`` prints what a
script would parse.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any

import click

import hermes
from hermes.cli import echo_json, pass_state


class _Refused(hermes.HermesError):
    """A request the command will not carry out as given: a usage error (exit status 2)."""

    exit_code = 2


def _store(state: Any) -> hermes.SessionStore:
    return state.strict_kernel().session_store


def _resolve(store: hermes.SessionStore, ref: str) -> str:
    # One resolution everywhere (chat --resume too): an ambiguous prefix lists candidates.
    return hermes.resolve_session_ref(store, ref)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def _short(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


@click.group("sessions")
def sessions() -> None:
    """Browse, search, import and export past sessions."""


@sessions.command("list")
@click.option("--source", help="Only sessions from this source (cli, telegram, claude-code …).")
@click.option("--limit", "-n", default=20, show_default=True, help="How many to show.")
@click.option("--offset", default=0, help="Skip this many (paging).")
@click.option("--all", "show_all", is_flag=True,
              help="Every session, not one row per conversation (shows continuations and sub-agents).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def list_cmd(state: Any, source: str | None, limit: int, offset: int, show_all: bool, as_json: bool) -> None:
    """Recent conversations, most recently active first."""
    rows = _store(state).list_sessions(source=source, limit=limit, offset=offset,
                                       roots_only=not show_all)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("No sessions yet.")
        return
    for line in _session_table(rows, shutil.get_terminal_size((100, 24)).columns):
        click.echo(line)


def _session_table(rows: list[dict[str, Any]], width: int) -> list[str]:
    """``sessions list`` as a table with a header; the title column takes what is left
    of the terminal width (ids are never cut: they are what the other commands take)."""
    cells = []
    for row in rows:
        title = row.get("title") or row.get("preview") or "(empty)"
        if row.get("lineage_size", 1) > 1:
            title += f" ({row['lineage_size']} parts)"
        cells.append((row["id"], _when(row.get("last_active")), str(row["source"]),
                      str(row.get("lineage_messages", row["message_count"])), title))
    head = ("ID", "LAST ACTIVE", "SOURCE", "MSGS", "TITLE")
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(4)]
    fixed = sum(widths) + 2 * 4
    room = max(12, width - fixed - 1)
    out = []
    for c in [head, *cells]:
        out.append(f"{c[0]:<{widths[0]}}  {c[1]:<{widths[1]}}  {c[2]:<{widths[2]}}  "
                   f"{c[3]:>{widths[3]}}  {_short(c[4], room)}".rstrip())
    return out


@sessions.command("show")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (session and messages).")
@pass_state
def show_cmd(state: Any, ref: str, as_json: bool) -> None:
    """One session: its details and every message. REF is an id, id prefix or title."""
    store = _store(state)
    data = store.export_session(_resolve(store, ref))
    if data is None:
        raise hermes.HermesError(f"session {ref!r} disappeared while reading it")
    if as_json:
        echo_json(data)
        return
    s = data["session"]
    click.echo(f"{s.get('title') or s['id']}")
    click.echo(f"  id {s['id']}  source {s['source']}  model {s.get('model') or '-'}")
    click.echo(f"  started {_when(s['started_at'])}  ended {_when(s.get('ended_at'))}"
               f"{' (' + s['end_reason'] + ')' if s.get('end_reason') else ''}")
    if s.get("parent_session_id"):
        click.echo(f"  continues {s['parent_session_id']}")
    click.echo(f"  {s['message_count']} messages, {s['tool_call_count']} tool calls, "
               f"{s['input_tokens']} in / {s['output_tokens']} out tokens")
    for m in data["messages"]:
        label = m["role"] if m["role"] != "tool" else f"tool:{m.get('tool_name') or '?'}"
        click.echo(f"\n[{label}] {_when(m['timestamp'])}")
        if m.get("content"):
            click.echo(m["content"])
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            click.echo(f"  → {fn.get('name')}({_short(str(fn.get('arguments')), 200)})")


@sessions.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--source", "sources", multiple=True, help="Only these sources (repeatable).")
@click.option("--role", "roles", multiple=True, help="Only these roles: user, assistant, tool.")
@click.option("--session", "session_ref", help="Only this session (id, prefix or title).")
@click.option("--limit", "-n", default=20, show_default=True)
@click.option("--offset", default=0)
@click.option("--strict", is_flag=True, help="No relaxed fallback for questions.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON hits.")
@pass_state
def search_cmd(state: Any, query: tuple[str, ...], sources: tuple[str, ...], roles: tuple[str, ...],
               session_ref: str | None, limit: int, offset: int, strict: bool, as_json: bool) -> None:
    """Full-text search over every message. Words are AND-ed; "quoted phrases", OR, NOT
    and prefix* work; a question falls back to its key words when it finds too little.
    Each hit shows its session's title and date, the message's number in its session
    and the reply to it; a message copied into the continuations of a compressed
    conversation is shown once."""
    store = _store(state)
    session_id = _resolve(store, session_ref) if session_ref else None
    hits = store.search_messages(" ".join(query), source_filter=list(sources) or None,
                                 role_filter=list(roles) or None, session_id=session_id,
                                 limit=limit, offset=offset, fallback=not strict)
    hits = _group_lineages(store, hits)
    if as_json:
        echo_json(hits)
        return
    if not hits:
        click.echo("No matches.")
        return
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    for hit in hits:
        title = hit.get("session_title") or "(untitled)"
        role = hit["role"] if hit["role"] != "tool" else f"tool:{hit.get('tool_name') or '?'}"
        number = f"#{hit['position']}" if hit.get("position") else ""
        head = (f"{_when(hit.get('session_started') or hit['timestamp'])}  {_short(title, 50)}  "
                f"{hit['session_id']} {number}  {role}  [{hit['mode']}]")
        click.echo(click.style(head, dim=True) if color else head)
        click.echo(f"    {_highlight(_short(hit['snippet'], 200), color)}")
        reply = hit.get("reply")
        if reply:
            click.echo(f"    ↳ {reply['role']}: {_short(reply['content'], 160)}")


def _highlight(snippet: str, color: bool) -> str:
    """The store's ``>>>match<<<`` marks as bold (a terminal) or ``[match]`` (plain)."""
    start, end = ("\x1b[1m", "\x1b[22m") if color else ("[", "]")
    return snippet.replace(">>>", start).replace("<<<", end)


def _group_lineages(store: hermes.SessionStore, hits: list[hermes.SearchHit]) -> list[dict[str, Any]]:
    """Hits with ``lineage_root``, ``reply`` (the next message of the session, when the
    hit is not itself the last) and ``position`` when the store gave none; a message
    whose text already appeared in the same lineage (compaction copies messages into
    the continuation) is dropped, its session ids listed on the first under ``also_in``."""
    out: list[dict[str, Any]] = []
    first: dict[tuple[str, str, str], dict[str, Any]] = {}
    roots: dict[str, str] = {}
    for hit in hits:
        sid = hit["session_id"]
        if sid not in roots:
            roots[sid] = store.lineage_root(sid)
        row: dict[str, Any] = dict(hit)
        row["lineage_root"] = roots[sid]
        if not row.get("session_title") and roots[sid] != sid:  # a continuation: the root's title
            row["session_title"] = (store.get_session(roots[sid]) or {}).get("title")
        key = (roots[sid], hit["role"], hit.get("content") or hit["snippet"])
        if key in first:
            first[key].setdefault("also_in", []).append(sid)
            continue
        first[key] = row
        after = [c for c in hit.get("context") or [] if c["id"] > hit["id"]]
        row["reply"] = after[0] if after else None
        out.append(row)
    return out


@sessions.command("reindex")
@pass_state
def reindex_cmd(state: Any) -> None:
    """Build the search indexes again from the stored messages (after an upgrade that
    changed what is indexed, or if searches look wrong)."""
    store = _store(state)
    reindex = getattr(store, "reindex", None)
    if not callable(reindex):
        raise hermes.HermesError(f"the selected session store ({store.name}) has no search index to rebuild")
    with click.progressbar(length=store.count_messages() if hasattr(store, "count_messages") else 0,
                           label="reindexing", file=sys.stderr) as bar:
        total = reindex(progress=bar.update)
    click.echo(f"reindexed {total} message(s)")


@sessions.command("check")
@pass_state
def check_cmd(state: Any) -> None:
    """Check the session database: SQLite's and the search indexes' own checks, and every
    message compared with both search indexes (exit status 1 when something is wrong)."""
    store = _store(state)
    check = getattr(store, "check_integrity", None)
    if not callable(check):
        raise hermes.HermesError(f"the selected session store ({store.name}) has no integrity check")
    problems = check()
    where = getattr(store, "path", store.name)
    for problem in problems:
        click.echo(f"{where}: {problem}")
    if problems:
        click.echo("fix: run `hermes sessions reindex` to rebuild the search indexes from the "
                   "messages (a problem it leaves is damage to the file itself: restore a backup)")
        sys.exit(1)
    click.echo(f"{where}: OK")


@sessions.command("export")
@click.argument("refs", nargs=-1)
@click.option("--all", "export_all", is_flag=True, help="Every session.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "md"]), default="jsonl",
              show_default=True, help="jsonl re-imports losslessly; md is for reading.")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Write here (created 0600, replaced atomically) instead of standard output.")
@click.option("--lineage", is_flag=True, help="Export each session's whole conversation lineage.")
@pass_state
def export_cmd(state: Any, refs: tuple[str, ...], export_all: bool, fmt: str, output: str | None,
               lineage: bool) -> None:
    """Export sessions as JSONL (re-importable) or Markdown."""
    from .transfer import export_jsonl_lines, export_markdown

    store = _store(state)
    if export_all:
        ids = _all_ids(store)
    elif refs:
        ids = []
        for ref in refs:
            sid = _resolve(store, ref)
            ids += store.lineage(sid) if lineage else [sid]
    else:
        raise hermes.HermesError("name sessions to export, or pass --all")

    def write(out: Any) -> None:
        for i, sid in enumerate(dict.fromkeys(ids)):
            data = store.export_session(sid)
            if data is None:
                continue
            if fmt == "jsonl":
                for line in export_jsonl_lines(data):
                    out.write(line + "\n")
            else:
                out.write(("\n---\n\n" if i else "") + export_markdown(data))

    if not output:
        write(sys.stdout)
        return
    target = _export_target(state.strict_kernel(), store, output)
    try:
        if os.path.exists(output) and not os.path.isfile(output):
            # /dev/stdout, /dev/null, a FIFO: stream into it; a rename would replace it.
            # (Opened by the name given: /dev/stdout resolves to a pipe with no path.)
            with open(output, "w", encoding="utf-8") as out:
                write(out)
        else:
            # Written beside the target and renamed over it at the end: a failed export
            # leaves any old file whole, and nothing is truncated before it is read.
            with hermes.atomic_writer(target) as out:
                write(out)
    except OSError as exc:
        raise hermes.HermesError(f"cannot write {output}: {exc.strerror or exc}. Nothing was "
                                 "exported; choose another file or free some space.") from exc
    click.echo(f"exported {len(ids)} session(s) to {output}", err=True)


def _export_target(kernel: Any, store: Any, output: str) -> Any:
    """The file ``-o`` names, after refusing the files Hermes itself keeps (compared by
    real path, so a symlink or ``../`` cannot sneak past) and a missing directory."""
    from pathlib import Path

    target = Path(os.path.realpath(output))
    home = Path(kernel.home)
    own = [home / "config.yaml", home / ".env", home / "memories" / "MEMORY.md",
           home / "memories" / "USER.md"]
    db = getattr(store, "path", None)
    for base in [home / "state.db", *([Path(db)] if isinstance(db, (str, os.PathLike)) else [])]:
        own += [base, *(Path(f"{base}{suffix}") for suffix in ("-wal", "-shm", "-journal"))]
    if any(target == Path(os.path.realpath(p)) for p in own):
        raise _Refused(f"refusing to export over {output}: Hermes keeps its own data there. "
                       "Choose another file.")
    if not target.parent.is_dir():
        raise hermes.HermesError(f"cannot write {output}: the directory {target.parent} does not "
                                 "exist. Create it or choose another file.")
    return target


def _all_ids(store: hermes.SessionStore) -> list[str]:
    ids_of = getattr(store, "iter_session_ids", None)
    if callable(ids_of):
        return list(ids_of())
    ids: list[str] = []
    while True:  # any store: page through every session, oldest last
        page = store.list_sessions(limit=500, offset=len(ids), roots_only=False)
        if not page:
            return list(reversed(ids))
        ids += [row["id"] for row in page]


@sessions.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_state
def import_cmd(state: Any, paths: tuple[str, ...], as_json: bool) -> None:
    """Import sessions: a Hermes state.db, JSONL of OpenAI-format messages (or a
    `hermes sessions export`), or Claude Code transcripts (~/.claude/projects/*/*.jsonl;
    directories are searched). Importing the same source again adds nothing twice."""
    from .transfer import ImportReport, count_units, detect, expand, import_sessions, read

    store = _store(state)
    report = ImportReport()
    files = expand(paths)
    kinds = [(f, detect(f)) for f in files]
    total = sum(count_units(f, kind) for f, kind in kinds)
    show_bar = total >= 2000 and not as_json

    def run(progress: Any) -> None:
        for path, kind in kinds:
            import_sessions(store, read(path, kind, report.problems), report, progress=progress)

    if show_bar:
        with click.progressbar(length=total, label="importing", file=sys.stderr) as bar:
            run(bar.update)
    else:
        run(None)
    if as_json:
        echo_json(report.as_dict())
        return
    click.echo(f"imported {report.sessions_added} new session(s), {report.messages_added} "
               f"message(s); {report.sessions_updated} updated, {report.sessions_unchanged} "
               f"unchanged, {report.sessions_skipped} skipped")
    for problem in report.problems[:20]:
        click.echo(f"  {problem}", err=True)
    if len(report.problems) > 20:
        click.echo(f"  … and {len(report.problems) - 20} more problem(s)", err=True)


@sessions.command("rename")
@click.argument("ref")
@click.argument("title", nargs=-1)
@pass_state
def rename_cmd(state: Any, ref: str, title: tuple[str, ...]) -> None:
    """Set a session's title (no TITLE clears it)."""
    store = _store(state)
    sid = _resolve(store, ref)
    try:
        stored = store.set_title(sid, " ".join(title) or None)
    except ValueError as exc:
        raise hermes.HermesError(str(exc)) from exc
    click.echo(f"{sid}: {'titled ' + repr(stored) if stored else 'title cleared'}")


@sessions.command("delete")
@click.argument("ref")
@click.option("--only-this-part", "--only", "only", is_flag=True,
              help="Delete just this session, not the rest of its conversation (the parts "
                   "before and after a compaction, and sub-agent sessions).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def delete_cmd(state: Any, ref: str, only: bool, yes: bool) -> None:
    """Delete a whole conversation: every part of its compaction chain (earlier parts and
    continuations) and its sub-agent sessions. REF is an id, id prefix or title of any
    part. Prints the ids it deleted."""
    store = _store(state)
    sid = _resolve(store, ref)
    whole = store.lineage(sid)
    if sid not in whole:  # a store whose lineage misses the session itself
        whole.append(sid)
    ids = [sid] if only else whole
    if not yes:
        what = (f"session {sid} only" if only else
                f"{len(ids)} session(s), the whole conversation of {sid}")
        click.confirm(f"Delete {what}?", abort=True, err=True)
    # One transaction where the store has them: all parts go, or none do.
    with store.batch():
        deleted = [i for i in reversed(ids) if store.delete_session(i)]
    deleted.reverse()
    click.echo(f"deleted {len(deleted)} session(s): {', '.join(deleted) or '(none)'}")
    if only:
        rest = [i for i in whole if i != sid]
        if rest:
            click.echo(f"kept the other {len(rest)} part(s) of the conversation: {', '.join(rest)}")


@sessions.command("prune")
@click.option("--older-than", "days", default=90.0, show_default=True, help="Age in days.")
@click.option("--source", help="Only sessions from this source.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def prune_cmd(state: Any, days: float, source: str | None, yes: bool) -> None:
    """Delete ended sessions older than a number of days (live ones are kept)."""
    if not yes:
        click.confirm(f"Delete every ended session older than {days:g} days"
                      f"{' from ' + source if source else ''}?", abort=True, err=True)
    n = _store(state).prune_sessions(older_than_days=days, source=source)
    click.echo(f"pruned {n} session(s)")
