"""``hermes chat``: an interactive terminal chat, or a one-shot answer with ``-q``.

The interactive chat reads lines with prompt_toolkit (imported here only, so that
``hermes --help`` stays cheap): history in ``$HERMES_HOME/chat_history`` (0600), Enter
sends, Esc-Enter or Ctrl-J inserts a newline, Tab completes slash commands, a bottom
toolbar shows the model, the session title, how full the context is and the prompt
cache. Everything printed goes through one :class:`Screen`, so a notice never lands in
the middle of an answer and each is shown once.

Each turn runs on a worker thread. While it runs, SIGINT only sets the turn's interrupt
event (a handler, not ``KeyboardInterrupt``): interrupting ``Thread.join`` on Python
3.11 marks a running thread as stopped, which is how the old loop lost the result.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import HermesError, LLMAuthError
from ..session_refs import CONTINUED_REASONS, live_tip, resolve_session_ref
from .render import DIM, RESET, MarkdownStream

#: Exit status of ``chat -q`` whose answer broke off before it was complete (docs/cli.md).
EXIT_INCOMPLETE = 3

#: Slash commands: name → (argument hint, what it does). /help and completion use it.
COMMANDS: dict[str, tuple[str, str]] = {
    "/help": ("", "list the commands and keys"),
    "/new": ("", "end this session and start a new one"),
    "/compress": ("[focus]", "compact the conversation now (optionally focused on a topic)"),
    "/resume": ("[ID|TITLE]", "switch to an earlier session (without an argument: list them)"),
    "/sessions": ("", "list recent sessions"),
    "/title": ("NAME", "name this session"),
    "/usage": ("", "tokens, cache reads/writes and estimated cost of this conversation"),
    "/model": ("NAME", "use another model from the next message on"),
    "/retry": ("", "ask the last message again (the old answer is kept as a branch)"),
    "/undo": ("", "drop the last exchange (kept in the store as a branch session)"),
    "/memory": ("", "show what memory holds"),
    "/verbose": ("", "show tool arguments and results (again: hide them)"),
    "/quit": ("", "leave (also /exit, Ctrl-D, or Ctrl-C at an empty prompt)"),
}
KEYS = ("Keys:\n"
        "  Enter sends · Esc-Enter or Ctrl-J adds a new line · Up/Down walk the history\n"
        "  Tab completes /commands · Ctrl-C stops an answer, clears the line, or at an empty\n"
        "  prompt leaves · start a message with // to send a leading /")
TITLE_PROMPT = ("Write a title of 2 to 6 words for the conversation below. Answer with the "
                "title only: no quotes, no trailing period.")


def help_text() -> str:
    width = max(len(f"{n} {a}".strip()) for n, (a, _) in COMMANDS.items())
    lines = [f"  {f'{n} {a}'.strip():<{width}}  {d}" for n, (a, d) in COMMANDS.items()]
    return "Commands:\n" + "\n".join(lines) + "\n" + KEYS


def clean_text(text: str) -> tuple[str, bool]:
    """``text`` made encodable: undecodable bytes (surrogate escapes) and lone surrogates
    become U+FFFD. Returns the text and whether anything was replaced."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "replace")
    return raw.decode("utf-8", "replace").encode("utf-8", "replace").decode("utf-8"), True


# -- sessions ---------------------------------------------------------------------------------


def latest_session(kernel: Any, source: str = "cli") -> str | None:
    """The live tip of the most recent conversation from ``source``."""
    rows = kernel.session_store.list_sessions(source=source, limit=1)
    if not rows:
        return None
    return live_tip(kernel.session_store, rows[0]["id"])


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


# -- output -----------------------------------------------------------------------------------


class Screen:
    """The chat's one way to print. It knows whether the cursor is at the start of a line
    (so a notice never glues onto an answer), shows each notice once per turn, and holds
    back notices from background threads while the prompt is being edited."""

    def __init__(self, out: Any, *, styled: bool, notices: Any = None):
        self.out = out
        self.notices_out = notices or out
        self.styled = styled
        self.lock = threading.RLock()
        self.at_line_start = True
        self.prompting = False
        self.held: list[str] = []
        self.shown: set[str] = set()

    def write(self, text: str) -> None:
        if not text:
            return
        with self.lock:
            self.out.write(text)
            self.out.flush()
            self.at_line_start = text.endswith("\n")

    def end_line(self) -> None:
        with self.lock:
            if not self.at_line_start:
                self.write("\n")

    def line(self, text: str, *, dim: bool = False, to: Any = None) -> None:
        with self.lock:
            self.end_line()
            if dim and self.styled:
                text = f"{DIM}{text}{RESET}"
            target = to or self.out
            target.write(text + "\n")
            target.flush()
            self.at_line_start = True

    def notice(self, text: str) -> None:
        """A notice on its own dimmed line, once per turn."""
        text = " ".join(str(text).split())
        with self.lock:
            if text in self.shown:
                return
            self.shown.add(text)
            if self.prompting:
                self.held.append(text)
                return
            self.line(text, dim=True, to=self.notices_out)

    def new_turn(self) -> None:
        with self.lock:
            self.shown.clear()
            held, self.held = self.held, []
        for text in held:
            self.line(text, dim=True, to=self.notices_out)


#: Argument names that usually say what a call is about, tried before the others.
_GIST_KEYS = ("query", "content", "text", "task", "path", "command", "url", "old_text", "name")


def describe_args(args: dict[str, Any], limit: int = 48) -> str:
    """The gist of a tool call's arguments: its telling text argument, quoted."""
    ordered = [args[k] for k in _GIST_KEYS if k in args] + list(args.values())
    for value in ordered:
        if isinstance(value, str) and value.strip():
            text = " ".join(value.split())
            return json.dumps(text[:limit] + ("…" if len(text) > limit else ""), ensure_ascii=False)
    return ""


def describe_result(name: str, result: str) -> str:
    """A few words about a tool result: an error, a count, or its size."""
    try:
        data = json.loads(result.split("\n\n", 1)[0])
    except (ValueError, AttributeError):
        data = None
    if isinstance(data, dict):
        if data.get("error"):
            return "error: " + " ".join(str(data["error"]).split())[:80]
        for key in ("results", "sessions", "entries", "matches", "items"):
            if isinstance(data.get(key), list):
                n = len(data[key])
                noun = "session" if "session" in name and key in ("results", "sessions") else key.rstrip("s")
                return f"{n} {noun}{'' if n == 1 else 's'}"
        if data.get("success") is True:
            return "done"
    return f"{len(result):,} characters"


class ToolLines:
    """Shows each tool call on one line while it runs: ``⚙ name "arg" …`` then, when it
    returns, `` 3 sessions, 0.2 s`` on the same line (or a full line when other output
    came in between, as with parallel calls)."""

    def __init__(self, screen: Screen):
        self.screen = screen
        self.verbose = False
        self.last_open: tuple[str, int] | None = None
        #: Called before a tool line: shows answer text the renderer still holds back.
        self.before: Callable[[], None] | None = None

    def __call__(self, phase: str, name: str, args: dict[str, Any], result: str = "",
                 seconds: float = 0.0) -> None:
        head = f"⚙ {name} {describe_args(args)}".rstrip()
        key = (name, id(args))
        with self.screen.lock:
            if phase == "start":
                if self.before is not None:
                    self.before()
                self.screen.end_line()
                self.screen.write(self._dim(head + " …"))
                self.last_open = key
                if self.verbose:
                    self.screen.line(self._dim("  arguments: " + json.dumps(args, ensure_ascii=False)))
                    self.last_open = None
                return
            tail = f"{describe_result(name, result)}, {seconds:.1f} s"
            if self.last_open == key and not self.screen.at_line_start:
                self.screen.write(self._dim(" " + tail) + "\n")
            else:
                self.screen.line(self._dim(f"{head} … {tail}"))
            self.last_open = None
            if self.verbose:
                shown = result if len(result) <= 2000 else result[:2000] + f"… ({len(result):,} characters)"
                self.screen.line(self._dim("  result: " + shown))

    def _dim(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.screen.styled else text


# -- one turn ---------------------------------------------------------------------------------


class Interrupted(Exception):
    """A second Ctrl-C while an interrupted turn was still winding down."""


def run_turn(agent: Any, text: str, on_text: Callable[[str], None] | None, screen: Screen) -> Any:
    """One turn on a worker thread (see :func:`run_interruptibly`); the first Ctrl-C
    stops the answer at the next streamed piece, keeping what was shown."""
    return run_interruptibly(
        lambda interrupt: agent.run_turn(text, on_text=on_text, interrupt=interrupt), screen,
        waiting="stopping the answer… (Ctrl-C again to leave)")


def run_interruptibly(work: Callable[[threading.Event], Any], screen: Screen, *,
                      waiting: str = "stopping… (Ctrl-C again to leave)") -> Any:
    """Run ``work(interrupt)`` on a worker thread while the main thread waits. During
    the wait SIGINT only sets ``interrupt``; when the work does not end within a second
    of it, ``waiting`` is shown, and a second Ctrl-C raises :class:`Interrupted` (the
    worker is a daemon thread and is left behind)."""
    interrupt = threading.Event()
    done = threading.Event()
    box: dict[str, Any] = {}
    presses: list[float] = []

    def run() -> None:
        try:
            box["result"] = work(interrupt)
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc
        finally:
            done.set()

    def on_sigint(signum: int, frame: Any) -> None:
        presses.append(time.monotonic())  # only recorded here; reported by the waiting loop
        interrupt.set()

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    thread = threading.Thread(target=run, name="hermes-turn", daemon=True)
    thread.start()
    told = False
    try:
        while not done.wait(0.05):
            if len(presses) > 1:
                raise Interrupted()
            # The answer normally stops at the next streamed piece; say so only when that
            # takes a while (an immediate notice would split the shown answer in two).
            if presses and not told and time.monotonic() - presses[0] > 1.0:
                screen.notice(waiting)
                told = True
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    if "error" in box:
        raise box["error"]
    return box["result"]


def usage_lines(agent: Any) -> list[str]:
    """``/usage``: the conversation's token counters summed over its compaction lineage."""
    store = agent.store
    totals = {k: 0 for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                             "cache_write_tokens", "reasoning_tokens")}
    cost: float | None = None
    sid: str | None = agent.session_id
    seen: set[str] = set()
    while sid and sid not in seen:
        seen.add(sid)
        row = store.get_session(sid) or {}
        for key in totals:
            totals[key] += int(row.get(key) or 0)
        if row.get("estimated_cost_usd") is not None:
            cost = (cost or 0.0) + float(row["estimated_cost_usd"])
        parent = row.get("parent_session_id")
        prow = store.get_session(parent) if parent else None
        sid = parent if prow and prow.get("end_reason") in CONTINUED_REASONS else None
    lines = [
        f"input {totals['input_tokens']:,} tokens · output {totals['output_tokens']:,}"
        + (f" · reasoning {totals['reasoning_tokens']:,}" if totals["reasoning_tokens"] else ""),
        f"cache reads {totals['cache_read_tokens']:,} · cache writes {totals['cache_write_tokens']:,}",
        f"estimated cost ${cost:.4f}" if cost is not None else "estimated cost: not known for this model",
    ]
    used = context_used(agent)
    if used is not None:
        lines.append(f"context {used}% of {agent.context_length:,} tokens")
    return lines


def context_used(agent: Any) -> int | None:
    last = int(getattr(agent.engine, "last_prompt_tokens", 0) or 0)
    if last <= 0 or not agent.context_length:
        return None
    return min(100, round(100 * last / agent.context_length))


# -- the chat ---------------------------------------------------------------------------------


class Chat:
    """The interactive chat: a kernel, its agent, the screen and the slash commands."""

    def __init__(self, kernel: Any, agent: Any, screen: Screen, *, render: bool):
        self.kernel = kernel
        self.agent = agent
        self.screen = screen
        self.render = render
        self.tools = ToolLines(screen)
        agent.on_tool = self.tools
        self.title_thread: threading.Thread | None = None
        self.titled: set[str] = set()  # sessions whose title is settled (set or being made)

    # -- the agent ------------------------------------------------------------------------

    def make_agent(self, session_id: str | None) -> Any:
        from .agent import Agent

        agent = Agent(self.kernel, session_id, on_notice=self.screen.notice, on_tool=self.tools,
                      model=self.agent.model if self.agent else None)
        return agent

    def switch(self, session_id: str | None, reason: str) -> None:
        """Continue in another session: the new agent first, so that a failure leaves
        the current one in place."""
        new = self.make_agent(session_id)
        old, self.agent = self.agent, new
        try:
            old.close(reason)
        except HermesError as exc:
            self.screen.notice(f"the previous session was not closed cleanly: {exc}")

    # -- a turn ---------------------------------------------------------------------------

    def ask(self, text: str) -> None:
        text, replaced = clean_text(text)
        self.screen.new_turn()
        if replaced:
            self.screen.notice("your message had bytes that are not valid UTF-8; they were "
                               "replaced with �")
        stream = MarkdownStream(self.screen.write) if self.render else None
        on_text = stream.feed if stream else self.screen.write
        self.tools.before = stream.flush if stream else None
        try:
            result = run_turn(self.agent, text, on_text, self.screen)
        finally:
            self.tools.before = None
            if stream:
                stream.flush()
            self.screen.end_line()
        self.report(result)
        if result.status == "ok":
            self.maybe_title(text, result.answer)

    def report(self, result: Any) -> None:
        if result.status == "failed":
            error = " ".join(str(result.error or "unknown error").split())
            if not any(error in shown for shown in self.screen.shown):
                self.screen.notice(f"error: {error}")
        elif result.status == "interrupted":
            self.screen.notice("answer interrupted; what was shown is kept")
        elif result.status == "budget_exhausted":
            self.screen.notice("stopped: the iteration budget is used up")
        for notice in result.notices:
            self.screen.notice(notice)

    # -- titles ---------------------------------------------------------------------------

    def maybe_title(self, user_text: str, answer: str) -> None:
        """After a session's first exchange: a title from the auxiliary model, made on a
        background thread (the turn is already delivered); the first user line when the
        model cannot give one. Never replaces a title the user set."""
        sid = self.agent.session_id
        if sid in self.titled or self.agent.turn_number != 1:
            return
        self.titled.add(sid)
        if (self.agent.store.get_session(sid) or {}).get("title"):
            return
        self.title_thread = threading.Thread(
            target=make_title, args=(self.kernel, self.agent.store, sid, user_text, answer),
            name="hermes-title", daemon=True)
        self.title_thread.start()

    def wait_for_title(self, timeout: float = 3.0) -> None:
        if self.title_thread is not None:
            self.title_thread.join(timeout)

    # -- the loop -------------------------------------------------------------------------

    def loop(self, read: Callable[[], str]) -> None:
        while True:
            try:
                line = read()
            except EOFError:
                return
            except KeyboardInterrupt:
                return  # a Ctrl-C at an empty prompt (with text it only clears the line)
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/") and not text.startswith("//"):
                    if self.command(text):
                        return
                    continue
                self.ask(text[1:] if text.startswith("//") else line.strip("\n"))
            except Interrupted:
                self.screen.notice("leaving; the answer was cut short")
                return
            except KeyboardInterrupt:  # between turns, e.g. while a command ran
                self.screen.notice("interrupted")
            except HermesError as exc:
                # A write that could not land (locked or full store …): one line, chat open.
                self.screen.end_line()
                self.screen.notice(f"error: {exc}")

    def command(self, text: str) -> bool:
        """Handle a slash command; ``True`` means leave."""
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        agent, say = self.agent, self.screen.line
        self.screen.new_turn()
        if name in ("/exit", "/quit", "/q"):
            return True
        if name == "/help":
            say(help_text())
        elif name == "/new":
            self.switch(None, "new_session")
            say(f"new session {self.agent.session_id}", dim=True)
        elif name == "/compress":
            # The agent reports the outcome; the model call may take a while: interruptible.
            run_interruptibly(lambda _: agent.compact(arg or None, force=True, reason="manual"),
                              self.screen)
        elif name == "/title":
            if not arg:
                current = (agent.store.get_session(agent.session_id) or {}).get("title")
                say(f"this session is titled {current!r}; /title NAME renames it" if current
                    else "this session has no title yet; /title NAME names it", dim=True)
            else:
                self.wait_for_title()  # a title being made must not land after this one
                try:
                    title = agent.store.set_title(agent.session_id, arg)
                    self.titled.add(agent.session_id)
                    say(f"this session is now titled {title!r}", dim=True)
                except ValueError as exc:
                    say(str(exc), dim=True)
        elif name == "/memory":
            say(agent.memory.memory_inventory() or "(memory is empty)")
        elif name == "/sessions":
            self.list_sessions()
        elif name == "/resume":
            if not arg:
                self.list_sessions()
                say("/resume ID|TITLE switches to one of them", dim=True)
            else:
                target = live_tip(agent.store, resolve_session_ref(agent.store, arg))
                if target == agent.session_id:
                    say("that is this session", dim=True)
                else:
                    self.switch(target, "resumed_other")
                    self.titled.add(target)
                    say(self.describe_session(), dim=True)
                    self.replay_last()
        elif name == "/usage":
            for row in usage_lines(agent):
                say(row)
        elif name == "/model":
            if not arg:
                say(f"model: {agent.model} via {agent.provider}; /model NAME switches", dim=True)
            else:
                agent.switch_model(arg)
                say(f"model: {agent.model} (context window {agent.context_length:,} tokens)", dim=True)
        elif name == "/undo":
            branch = agent.session_id
            dropped = agent.undo()
            if dropped is None:
                say("nothing to undo", dim=True)
            else:
                self.titled.add(agent.session_id)
                say(f"dropped your last message ({_preview(dropped)}) and its answer; "
                    f"they stay in session {branch}", dim=True)
        elif name == "/retry":
            dropped = agent.undo()
            if dropped is None:
                say("nothing to retry", dim=True)
            else:
                self.titled.add(agent.session_id)
                say(f"asking again: {_preview(dropped)}", dim=True)
                self.ask(dropped)
        elif name == "/verbose":
            self.tools.verbose = not self.tools.verbose
            say(f"tool arguments and results: {'shown' if self.tools.verbose else 'hidden'}", dim=True)
        else:
            say(f"unknown command {name}; /help lists them (start a message with // to send a "
                f"leading slash)", dim=True)
        return False

    def list_sessions(self) -> None:
        rows = self.agent.store.list_sessions(source="cli", limit=10)
        if not rows:
            self.screen.line("no sessions yet", dim=True)
            return
        for row in rows:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.get("last_active") or 0))
            mark = "*" if live_tip(self.agent.store, row["id"]) == self.agent.session_id else " "
            label = row.get("title") or row.get("preview") or "(empty)"
            self.screen.line(f"{mark} {row['id']}  {when}  {row.get('lineage_messages', 0):>4} msgs  {label}")

    def describe_session(self) -> str:
        row = self.agent.store.get_session(self.agent.session_id) or {}
        title = f" {row['title']!r}" if row.get("title") else ""
        return f"session {self.agent.session_id}{title}, {len(self.agent.messages)} messages"

    def replay_last(self) -> None:
        """After /resume: the last exchange, so the user sees where they left off."""
        msgs = [m for m in self.agent.messages if m["role"] in ("user", "assistant") and m.get("content")]
        for m in msgs[-2:]:
            who = "you" if m["role"] == "user" else "hermes"
            text = " ".join(str(m["content"]).split())
            self.screen.line(f"{who}: {text[:200]}{'…' if len(text) > 200 else ''}", dim=True)

    def toolbar(self) -> str:
        agent = self.agent
        if agent is None:
            return ""
        row = agent.store.get_session(agent.session_id) or {}
        used = context_used(agent)
        cache = (f"cache on ({self.kernel.config.get('prompt_caching.cache_ttl')})"
                 if agent.caching_enabled else "cache off")
        title = str(row.get("title") or "untitled")
        title = title if len(title) <= 32 else title[:31] + "…"  # the line must fit
        parts = [f"{agent.model}", title,
                 f"context {used if used is not None else 0}%", cache, "/help"]
        return " " + " · ".join(parts)


def _preview(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def make_title(kernel: Any, store: Any, session_id: str, user_text: str, answer: str) -> None:
    """Title a session from its first exchange (see :meth:`Chat.maybe_title`)."""
    from ..contracts import LLMRequest
    from ..redaction import redact_secrets

    title = ""
    try:
        aux = kernel.auxiliary("title")
        if aux is not None:
            client, model = aux
            response = client.complete(LLMRequest(model=model, max_tokens=30, messages=[
                {"role": "system", "content": TITLE_PROMPT},
                {"role": "user", "content": redact_secrets(
                    f"User: {user_text[:1500]}\n\nAssistant: {answer[:1500]}")},
            ]))
            title = (response.content or "").strip().splitlines()[0] if (response.content or "").strip() else ""
    except Exception:  # the fallback below is good enough; a title is a convenience
        title = ""
    title = title.strip().strip("\"'“”*#").rstrip(".").strip()
    if not title or len(title) > 80:
        first = next((ln.strip() for ln in user_text.splitlines() if ln.strip()), "")
        title = first[:60] + ("…" if len(first) > 60 else "")
    if not title:
        return
    try:
        if (store.get_session(session_id) or {}).get("title"):
            return  # the user named it meanwhile
        for candidate in (title, f"{title} ({time.strftime('%Y-%m-%d %H:%M')})"):
            try:
                store.set_title(session_id, candidate)
                return
            except ValueError:
                continue  # the title is taken
    except Exception:  # the store is busy or gone; the session stays untitled
        return


# -- input ------------------------------------------------------------------------------------


#: The input history is trimmed to its newest entries when it grows past this size.
HISTORY_MAX_BYTES = 2_000_000


def history_file(home: Path) -> Path:
    """``$HERMES_HOME/chat_history``, created private (0600) before anything is written,
    and kept bounded: past :data:`HISTORY_MAX_BYTES` the older half is dropped (whole
    entries; prompt_toolkit reads the file at every start)."""
    from ..util import atomic_write_text

    path = Path(home) / "chat_history"
    fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    if path.stat().st_size > HISTORY_MAX_BYTES:
        data = path.read_bytes()[-HISTORY_MAX_BYTES // 2:]
        start = data.find(b"\n\n#")  # entries are "\n# time\n+line…"
        kept = data[start + 1:] if start >= 0 else b""
        atomic_write_text(path, kept.decode("utf-8", "replace"), mode=0o600)
    return path


def terminal_reader(chat: Chat, home: Path) -> Callable[[], str]:
    """A prompt_toolkit line reader (history, multi-line, completion, toolbar)."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import Completer, Completion
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

    class SafeHistory(FileHistory):
        def store_string(self, string: str) -> None:
            super().store_string(clean_text(string)[0])

    class SlashCompleter(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Any:
            text = document.text_before_cursor
            if not text.startswith("/") or " " in text:
                return
            for name, (arg, desc) in COMMANDS.items():
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text), display=f"{name} {arg}".strip(),
                                     display_meta=desc)

    keys = KeyBindings()

    @keys.add("escape", "enter")
    @keys.add("c-j")
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _interrupt(event: Any) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()  # Ctrl-C with text clears the line
        else:
            event.app.exit(exception=KeyboardInterrupt())

    try:
        history: Any = SafeHistory(str(history_file(home)))
    except OSError as exc:  # a read-only home: the chat works, the history is not kept
        from prompt_toolkit.history import InMemoryHistory

        chat.screen.notice(f"input history is not saved: cannot write {Path(home) / 'chat_history'} "
                           f"({exc.strerror or exc})")
        history = InMemoryHistory()
    session: Any = PromptSession(
        history=history, key_bindings=keys, completer=SlashCompleter(),
        complete_while_typing=True, bottom_toolbar=chat.toolbar, multiline=False,
        prompt_continuation=lambda width, line, wrap: "… ".rjust(width),
    )

    def read() -> str:
        chat.screen.prompting = False
        chat.screen.new_turn()
        chat.screen.prompting = True
        try:
            return str(session.prompt("› "))
        finally:
            chat.screen.prompting = False

    return read


# -- entry ------------------------------------------------------------------------------------


def read_stdin() -> str:
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    return data.decode("utf-8", "surrogateescape")


def run_chat(state: Any, *, resume: bool, resume_ref: str | None = None, query: str | None,
             json_out: bool = False, plain: bool = False, model: str | None, provider: str | None,
             base_url: str | None) -> None:
    from .agent import Agent

    interactive = query is None and sys.stdin.isatty()
    if query == "-" or (query is None and not interactive):
        query = read_stdin().strip()  # `-q -` or piped stdin: the whole input is one message
        if not query:
            raise click.UsageError("nothing to send: standard input was empty.")
    if json_out and interactive:
        raise click.UsageError("--json needs a message: use it with -q TEXT (or piped input).")
    if resume and resume_ref:
        raise click.UsageError("use either --continue or --resume, not both.")
    query, replaced = clean_text(query) if query is not None else (None, False)
    plain = plain or bool(os.environ.get("NO_COLOR"))  # https://no-color.org

    kernel = build_kernel(state, model, provider, base_url)
    agent = None
    try:
        problem = kernel.llm_client().credentials_problem()
        if problem:
            raise LLMAuthError(problem)
        session_id = None
        if resume_ref:
            session_id = live_tip(kernel.session_store, resolve_session_ref(kernel.session_store, resume_ref))
        elif resume:
            session_id = latest_session(kernel)
            if session_id is None:
                click.echo("No earlier session to continue; starting a new one.", err=True)
        if not interactive:
            one_shot(kernel, session_id, query or "", json_out=json_out, plain=plain, replaced=replaced)
            return
        styled = sys.stdout.isatty() and not plain
        screen = Screen(sys.stdout, styled=styled)
        agent = Agent(kernel, session_id, on_notice=screen.notice)
        chat = Chat(kernel, agent, screen, render=styled)
        status = f"on, {kernel.config.get('prompt_caching.cache_ttl')}" if agent.caching_enabled else "off"
        screen.line(f"hermes chat · {agent.model} via {agent.provider} (prompt caching {status}) · "
                    f"{chat.describe_session()}. /help for commands; Esc-Enter for a new line.",
                    dim=True)
        if session_id:
            chat.titled.add(session_id)
            chat.replay_last()
        try:
            chat.loop(terminal_reader(chat, kernel.home))
        finally:
            screen.end_line()
            chat.wait_for_title()
            agent = chat.agent
    finally:
        try:
            if agent is not None:
                agent.close("user_exit")
        except HermesError as exc:
            click.echo(f"hermes: could not close the session cleanly: {exc}", err=True)
        finally:
            kernel.close()


def one_shot(kernel: Any, session_id: str | None, text: str, *, json_out: bool, plain: bool,
             replaced: bool) -> None:
    """``-q``: answer one message. The answer goes to stdout (streamed on a terminal),
    notices to stderr; ``--json`` prints one object instead."""
    from .agent import Agent

    stream = sys.stdout.isatty() and not json_out
    screen = Screen(sys.stdout, styled=stream and not plain, notices=sys.stderr)
    agent = Agent(kernel, session_id, on_notice=screen.notice)
    if replaced:
        screen.notice("the message had bytes that are not valid UTF-8; they were replaced with �")
    try:
        renderer = MarkdownStream(screen.write) if stream and not plain else None
        on_text = (renderer.feed if renderer else screen.write) if stream else None
        if stream:  # a person is watching: tool lines too (never in a script's stdout)
            agent.on_tool = ToolLines(screen)
            agent.on_tool.before = renderer.flush if renderer else None
        try:
            result = run_turn(agent, text, on_text, screen)
        except Interrupted:
            raise click.exceptions.Exit(130) from None
        finally:
            if renderer:
                renderer.flush()
            screen.end_line()
        if json_out:
            click.echo(json.dumps({
                "answer": result.answer, "status": result.status, "session_id": result.session_id,
                "error": result.error, "usage": result.usage.as_dict(), "api_calls": result.api_calls,
                "tool_calls": result.tool_calls, "notices": result.notices,
            }, ensure_ascii=False))
        else:
            for notice in result.notices:
                screen.notice(notice)
            if not stream and result.answer:
                click.echo(result.answer)
        if result.status == "failed":
            if json_out:
                raise click.exceptions.Exit(1)
            raise HermesError(f"the model call failed: {result.error}")
        if result.status == "interrupted":
            raise click.exceptions.Exit(130)  # like any command stopped with Ctrl-C
        if result.status == "incomplete":
            # The answer broke off (a dropped connection, a proxy timeout): what arrived
            # is printed and stored, but a script must not take it for a whole answer.
            raise click.exceptions.Exit(EXIT_INCOMPLETE)
    finally:
        agent.close("user_exit")


def main_error(exc: LLMAuthError) -> None:
    """Print the credentials help (two lines, no traceback) and exit with status 2."""
    click.echo(f"hermes: {exc}", err=True)
    sys.exit(2)
