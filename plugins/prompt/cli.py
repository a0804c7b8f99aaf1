"""``hermes prompt show``: the assembled prompt, layer by layer."""

from __future__ import annotations

from typing import Any

import click

import hermes
from hermes.cli import echo_json, pass_state


@click.group()
def prompt() -> None:
    """Inspect the system prompt."""


@prompt.command("show")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--cwd", type=click.Path(file_okay=False, exists=True), default=None,
              help="Working directory for context files (default: the current one).")
@click.option("--platform", default=None, help="Platform for the platform hint (default agent.platform).")
@click.option("--brief", is_flag=True, help="Only the per-layer summary, not the texts.")
@click.option("--session", "session_ref", default=None, metavar="ID",
              help="Also compare with the frozen prompt stored for this session.")
@pass_state
def prompt_show(state: Any, as_json: bool, cwd: str | None, platform: str | None, brief: bool,
                session_ref: str | None) -> None:
    """Show the prompt a new session would get: every layer with its source plugin,
    size, token estimate and whether it is cached or ephemeral, plus the stability hash
    of the cached part."""
    kernel = state.kernel()
    built = hermes.preview_prompt(kernel, cwd=cwd, platform=platform)
    stored = _stored(kernel, session_ref) if session_ref else None
    if as_json:
        data = built.as_dict()
        if stored is not None:
            data["session"] = stored
        echo_json(data)
        return
    for layer in built.layers:
        kind = "cached" if layer.cached else f"ephemeral → {layer.placement}"
        status = f"  FAILED: {layer.error}" if layer.error else ("  (empty)" if layer.empty else "")
        click.echo(f"── {layer.name} · order {layer.order} · {kind} · plugin {layer.plugin} · "
                   f"{layer.chars:,} chars · ~{layer.tokens:,} tokens{status}")
        if not brief and not layer.empty:
            click.echo(layer.text if layer.text else "\n".join(
                f"[{m.get('role')}] {m.get('content')}" for m in layer.messages))
            click.echo()
    if built.disabled:
        click.echo(f"disabled layers: {', '.join(built.disabled)}")
    click.echo(f"cached prompt: {len(built.text):,} chars · ~{built.tokens:,} tokens · sha256 {built.hash}")
    if stored is not None:
        same = "matches" if stored["hash"] == built.hash else "differs from"
        click.echo(f"session {stored['id']}: sha256 {stored['hash']} ({same} a fresh build)")


def _stored(kernel: Any, ref: str) -> dict[str, Any]:
    store = kernel.session_store
    session_id = store.resolve_session(ref)
    row = store.get_session(session_id) if session_id else None
    if row is None:
        raise hermes.HermesError(f"no session matches {ref!r}. List them with `hermes sessions list`.")
    text = row.get("system_prompt") or ""
    return {"id": row["id"], "hash": hermes.prompt_hash(text), "chars": len(text), "stored": bool(text)}
