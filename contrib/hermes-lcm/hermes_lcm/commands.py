"""``hermes lcm …``: look into the lossless store from the shell.

The same three tools the model has (``grep``, ``describe``, ``expand``) plus ``status``;
``--json`` prints exactly what the tool would return.
"""

from __future__ import annotations

from typing import Any

import click

from hermes import HermesError
from hermes.cli import echo_json, pass_state


def _engine(state: Any) -> Any:
    from .engine import LCMEngine

    return LCMEngine(state.kernel())


def _run(engine: Any, fn: Any, conversation: int | None, args: dict[str, Any]) -> dict[str, Any]:
    from . import tools

    try:
        return fn(engine.store, conversation, args, *([engine.settings] if fn is not tools.describe else []))
    except tools.ToolError as exc:
        raise HermesError(f"{exc}.") from None
    finally:
        engine.close()


@click.group()
def lcm() -> None:
    """Lossless context store: search, inspect and expand summarised history."""


@lcm.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def status(state: Any, as_json: bool) -> None:
    """Where the store is, and what it holds per conversation."""
    engine = _engine(state)
    try:
        data = {"db_path": str(engine.db_path), "settings": engine.settings.as_dict(),
                "totals": engine.store.stats(), "conversations": engine.store.conversations()}
    finally:
        engine.close()
    if as_json:
        echo_json(data)
        return
    totals = data["totals"]
    click.echo(f"store: {data['db_path']} ({(totals.get('db_bytes') or 0) / 1024:,.0f} KiB)")
    click.echo(f"messages: {totals['messages']:,} ({totals['message_tokens']:,} tokens)  "
               f"summary nodes: {totals['nodes']:,} (depth ≤ {max(totals['max_depth'], 0)})")
    for conv in data["conversations"]:
        click.echo(f"  conversation {conv['conversation']}: {conv['messages']:,} messages, "
                   f"{conv['nodes']:,} nodes  (session {conv['session_id']})")


@lcm.command("grep")
@click.argument("pattern")
@click.option("--regex", is_flag=True, help="PATTERN is a regular expression.")
@click.option("--case-sensitive", is_flag=True)
@click.option("--conversation", type=int, help="Only this conversation (see `hermes lcm status`).")
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def grep(state: Any, pattern: str, regex: bool, case_sensitive: bool, conversation: int | None,
         limit: int, as_json: bool) -> None:
    """Search original messages and summaries."""
    from . import tools

    result = _run(_engine(state), tools.grep, conversation,
                  {"pattern": pattern, "regex": regex, "case_sensitive": case_sensitive, "limit": limit,
                   "all_conversations": conversation is None})
    if as_json:
        echo_json(result)
        return
    for hit in result["messages"]:
        where = f"{hit['node_id']} cursor {hit['expand']['cursor']}" if hit.get("expand") else "live"
        click.echo(f"message {hit['message_id']} ({hit['role']}, #{hit['position']}, {where}): {hit['snippet']}")
    for hit in result["summaries"]:
        click.echo(f"summary {hit['node_id']} (depth {hit['depth']}): {hit['snippet']}")
    if not result["messages"] and not result["summaries"]:
        click.echo("no match")


@lcm.command("describe")
@click.argument("node_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def describe(state: Any, node_id: str | None, as_json: bool) -> None:
    """What a summary node covers (without NODE_ID: every conversation)."""
    from . import tools

    result = _run(_engine(state), tools.describe, None, {"node_id": node_id})
    if as_json or node_id is None:
        echo_json(result)
        return
    m = result["messages"]
    click.echo(f"{result['node_id']}: {result['kind']} node, depth {result['depth']}, "
               f"messages #{m['positions'][0]}-#{m['positions'][1]} ({m['count']}), "
               f"{result['time_range']['earliest']} → {result['time_range']['latest']}")
    click.echo(f"parent: {result['parent'] or '-'}  children: {', '.join(result['children']) or '-'}  "
               f"tokens: {result['tokens']['summary']} summarising {result['tokens']['source_messages']}  "
               f"summarizer: {result['summarizer']}")
    click.echo("")
    click.echo(result["summary"])


@lcm.command("expand")
@click.argument("node_id")
@click.option("--cursor", default="0", show_default=True, help="Where to start (next_cursor of a page).")
@click.option("--max-chars", type=int, help="Page size in characters.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def expand(state: Any, node_id: str, cursor: str, max_chars: int | None, as_json: bool) -> None:
    """Print the original messages a node covers, one page at a time."""
    from . import tools

    result = _run(_engine(state), tools.expand, None, {"node_id": node_id, "cursor": cursor, "max_chars": max_chars})
    if as_json:
        echo_json(result)
        return
    for msg in result["messages"]:
        click.echo(f"--- #{msg['position']} {msg['role']} (message {msg['message_id']}, {msg['time']})")
        if msg.get("content"):
            click.echo(msg["content"] if isinstance(msg["content"], str) else str(msg["content"]))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {})
            click.echo(f"[tool call {fn.get('name')}] {fn.get('arguments')}")
    if result["next_cursor"] is not None:
        click.echo(f"--- more: hermes lcm expand {node_id} --cursor {result['next_cursor']}")
