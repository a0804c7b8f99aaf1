"""``hermes chat``: an interactive terminal chat, or a one-shot answer with ``-q``."""

from __future__ import annotations

import sys
import threading
from typing import Any

import click

from ..errors import HermesError, LLMAuthError

HELP = """Commands:
  /compress [focus]  compact the conversation now (optionally focused on a topic)
  /new               end this session and start a new one
  /title NAME        name this session
  /memory            show what memory holds
  /exit              leave (Ctrl-D works too); Ctrl-C stops the current answer"""


def build_kernel(state: Any, model: str | None, provider: str | None, base_url: str | None) -> Any:
    """A kernel for this chat: the CLI's switches plus the model flags as overrides."""
    from ..core import Kernel

    overrides: dict[str, Any] = {}
    if model:
        overrides["name"] = model
    if provider:
        overrides["provider"] = provider
    if base_url:
        overrides["base_url"] = base_url
    return Kernel(
        config={"model": overrides} if overrides else None, home=state.home,
        safe_mode=True if state.no_plugins else None, disable_plugins=state.disable,
        load_plugins=state.load, strict=state.strict or None, trace=state.trace or None,
    )


def latest_session(kernel: Any, source: str = "cli") -> str | None:
    """The live tip of the most recent conversation from ``source``."""
    rows = kernel.session_store.list_sessions(source=source, limit=1)
    if not rows:
        return None
    return kernel.session_store.compression_tip(rows[0]["id"])


def run_chat(state: Any, *, resume: bool, query: str | None, model: str | None,
             provider: str | None, base_url: str | None) -> None:
    from .agent import Agent

    kernel = build_kernel(state, model, provider, base_url)
    problem = kernel.llm_client().credentials_problem()
    if problem:
        kernel.close()
        raise LLMAuthError(problem)
    session_id = latest_session(kernel) if resume else None
    if resume and session_id is None:
        click.echo("No earlier session to continue; starting a new one.", err=True)
    agent = Agent(kernel, session_id, on_notice=lambda text: click.echo(f"[{text}]", err=True))
    status = "on" if agent.caching_enabled else "off"
    interactive = query is None
    if interactive:
        click.echo(f"hermes chat — {agent.model} via {agent.provider} (prompt caching {status}); "
                   f"session {agent.session_id}. /help for commands.", err=True)
    try:
        if not interactive:
            result = _answer(agent, query or "", stream=sys.stdout.isatty())
            if result.status == "failed":
                raise _failure(result)
            if not sys.stdout.isatty():
                click.echo(result.answer)
            return
        _loop(agent)
    finally:
        agent.close("user_exit")
        kernel.close()


def _failure(result: Any) -> HermesError:
    return HermesError(f"the model call failed: {result.error}")


def _answer(agent: Any, text: str, *, stream: bool) -> Any:
    """Run one turn on a worker thread so Ctrl-C interrupts the answer, not the program."""
    interrupt = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = agent.run_turn(
                text, on_text=(lambda chunk: click.echo(chunk, nl=False)) if stream else None,
                interrupt=interrupt)
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="hermes-turn", daemon=True)
    thread.start()
    while thread.is_alive():
        try:
            thread.join(0.1)
        except KeyboardInterrupt:
            interrupt.set()
            click.echo("\n[interrupted]", err=True)
    if "error" in box:
        raise box["error"]
    result = box["result"]
    if stream and result.answer:
        click.echo()
    return result


def _loop(agent: Any) -> None:
    while True:
        try:
            line = input("you> ")
        except EOFError:
            click.echo()
            return
        except KeyboardInterrupt:
            click.echo()
            continue
        text = line.strip()
        if not text:
            continue
        if text.startswith("/"):
            if _command(agent, text):
                return
            continue
        result = _answer(agent, text, stream=True)
        if result.status == "failed":
            click.echo(f"[error: {result.error}]", err=True)
        for notice in result.notices:
            click.echo(f"[{notice}]", err=True)


def _command(agent: Any, text: str) -> bool:
    """Handle a slash command; ``True`` means leave."""
    name, _, arg = text.partition(" ")
    arg = arg.strip()
    if name in ("/exit", "/quit"):
        return True
    if name == "/help":
        click.echo(HELP)
    elif name == "/compress":
        done = agent.compact(arg or None, force=True, reason="manual")
        click.echo("[compacted]" if done else "[nothing to compact]", err=True)
    elif name == "/new":
        agent.new_session()
        click.echo(f"[new session {agent.session_id}]", err=True)
    elif name == "/title":
        if not arg:
            click.echo("usage: /title NAME", err=True)
        else:
            try:
                agent.store.set_title(agent.session_id, arg)
                click.echo(f"[titled {arg!r}]", err=True)
            except (ValueError, HermesError) as exc:
                click.echo(f"[{exc}]", err=True)
    elif name == "/memory":
        click.echo(agent.memory.memory_inventory() or "(memory is empty)")
    else:
        click.echo(f"unknown command {name}; /help lists them", err=True)
    return False


def main_error(exc: LLMAuthError) -> None:
    """Print the credentials help (two lines, no traceback) and exit with status 2."""
    click.echo(f"hermes: {exc}", err=True)
    sys.exit(2)
