"""`hermes chat` driven as a person drives it: a real process in a pseudo-terminal
(pexpect) against the loopback fake LLM server. Keys are typed as bytes, Ctrl-C is the
terminal's own SIGINT (or a SIGINT sent to the process), and what is checked is what the
screen showed and what the server and the store received."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import stat
import sys
import time
from pathlib import Path

import pytest

import hermes
from hermes.testing.fakellm import Reply

pexpect = pytest.importorskip("pexpect")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")

UP, ESC_ENTER, CTRL_C = "\x1b[A", "\x1b\r", "\x03"
ANSI = r"(?:\x1b\[[0-9;?]*[A-Za-z])*"
# prompt_toolkit turns bracketed paste on when a prompt starts and off when it ends
PROMPT_START, PROMPT_END = r"\x1b\[\?2004h", r"\x1b\[\?2004l"


class Term:
    """A `hermes chat` in a pty, answering prompt_toolkit's cursor-position requests the
    way a terminal does (without them the bottom toolbar is not drawn)."""

    def __init__(self, home: Path, server, *args: str, config: str = ""):
        (home / "config.yaml").write_text("model:\n  context_length: 100000\n  max_retries: 0\n" + config)
        env = {k: v for k, v in os.environ.items()
               if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "NO_COLOR")}
        env.update(HERMES_HOME=str(home), TERM="xterm-256color", COLUMNS="120", LINES="30")
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "hermes.cli", "chat", "--provider", "openai", "--base-url", server.openai_url,
             "--model", "fake-model", *args],
            env=env, encoding="utf-8", codec_errors="replace", dimensions=(30, 120), timeout=30)
        self.seen = ""

    def expect(self, pattern: str, timeout: float = 30) -> str:
        """Wait for ``pattern`` (a regex) in the output; returns the text up to it."""
        before = ""
        deadline = time.monotonic() + timeout
        while True:
            index = self.child.expect([pattern, r"\x1b\[6n"], timeout=max(0.1, deadline - time.monotonic()))
            before += self.child.before
            if index == 0:
                self.seen += before + self.child.after
                return before
            before += self.child.after
            self.child.send("\x1b[10;1R")  # cursor position report: row 10 of 30

    def prompt(self) -> str:
        """What was shown until the next prompt started."""
        return self.expect(PROMPT_START)

    def type(self, text: str) -> None:
        self.child.send(text)

    def say(self, text: str) -> str:
        """Type a message, send it, and return what was shown until the next prompt."""
        self.type(text + "\r")
        self.expect(PROMPT_END)
        return self.prompt()

    def leave(self) -> int:
        self.type("\x04")  # Ctrl-D at an empty prompt (not /quit: it would be the newest history entry)
        self.child.expect(pexpect.EOF, timeout=30)
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def term(tmp_path, fake_llm):
    started: list[Term] = []

    def start(*args: str, config: str = "") -> Term:
        t = Term(tmp_path, fake_llm, *args, config=config)
        started.append(t)
        t.prompt()
        return t

    yield start
    for t in started:
        t.close()


def user_texts(request) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "user"]


def chat_requests(server) -> list:
    """The conversation's requests (not the background title request)."""
    return [r for r in server.requests if "title of 2 to 6 words" not in r.system]


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_type_history_and_multiline(term, fake_llm, tmp_path):
    t = term()
    shown = t.say("hello there")
    assert "echo: hello there" in shown
    # Esc-Enter starts a new line; Enter sends both lines as one message
    t.type("line one" + ESC_ENTER + "line two")
    shown = t.say("")
    assert chat_requests(fake_llm)[-1].last_user_text == "line one\nline two"
    # Up recalls the previous message (the multi-line one) for sending again
    t.type(UP)
    t.say("")
    assert user_texts(chat_requests(fake_llm)[-1]) == ["hello there", "line one\nline two",
                                                       "line one\nline two"]
    # the toolbar names the model and says the cache is off for this provider
    t.type("x")  # one more key: the toolbar is drawn again
    t.expect("cache off")
    t.type("\x7f")
    assert "fake-model ·" in plain(t.seen)
    assert t.leave() == 0

    history = tmp_path / "chat_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    # history survives the process: a new chat recalls the last message with Up
    t2 = term()
    t2.type(UP)
    t2.say("")
    assert chat_requests(fake_llm)[-1].last_user_text == "line one\nline two"
    assert t2.leave() == 0


def test_tool_call_shown_on_one_line_while_it_runs(term, fake_llm):
    t = term()
    fake_llm.queue(Reply(text="Let me look that up",
                         tool_calls=[{"name": "session_search", "arguments": {"query": "kubernetes timeout"}}]),
                   Reply(text="Nothing about kubernetes yet."))
    shown = t.say("what did we say about kubernetes?")
    # text written before the call is shown whole, before the tool line, on its own line
    assert re.search(r"Let me look that up" + ANSI + r"\r?\n" + ANSI + "⚙ session_search", shown), shown
    assert re.search(r'⚙ session_search "kubernetes timeout" …' + ANSI + r" \d+ sessions?, \d+\.\d s", shown), shown
    assert "Nothing about kubernetes yet." in shown
    assert "arguments:" not in shown
    # /verbose shows the arguments and the result
    t.say("/verbose")
    fake_llm.queue(Reply(tool_calls=[{"name": "session_search", "arguments": {"query": "docker"}}]),
                   Reply(text="Nothing about docker either."))
    shown = plain(t.say("and docker?"))
    assert 'arguments: {"query": "docker"}' in shown
    assert "result: {" in shown
    assert t.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_ctrl_c_stops_the_answer_keeps_it_and_the_chat_goes_on(term, fake_llm, tmp_path):
    t = term()
    words = " ".join(f"w{i}" for i in range(400))  # ~6 s of streaming: time to interrupt it
    fake_llm.queue(Reply(text=words, chunk_delay=0.05))
    t.type("tell me a long story\r")
    t.expect(r"w20 ")
    t.type(CTRL_C)  # the terminal turns it into a real SIGINT for the process
    shown = plain(t.prompt())
    assert "answer interrupted" in shown
    assert "Traceback" not in t.seen
    # what was shown is what was stored and what the model sees next
    partial = re.search(r"(w0 .*?)\s*(?:\^C)?\s*answer interrupted", plain(t.seen), re.S).group(1)
    assert "w20" in partial and "w399" not in partial
    t.say("go on")
    sent = [m for m in chat_requests(fake_llm)[-1].messages if m["role"] == "assistant"]
    assert sent and sent[-1]["content"].startswith("w0 w1 w2")
    assert "w399" not in sent[-1]["content"]
    assert sent[-1]["content"].replace("^C", "").split()[-1] in partial
    assert "echo: go on" in t.seen

    # a signal sent to the process (not typed) does the same
    fake_llm.queue(Reply(text=words, chunk_delay=0.05))
    t.type("again\r")
    t.expect(r"w20 ")
    t.child.kill(signal.SIGINT)
    assert "answer interrupted" in plain(t.prompt())

    # Ctrl-C at an empty prompt leaves, cleanly
    t.type(CTRL_C)
    t.child.expect(pexpect.EOF, timeout=30)
    t.child.close()
    assert t.child.exitstatus == 0
    assert "Traceback" not in t.seen + (t.child.before or "")
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        rows = kernel.session_store.list_sessions(limit=5)
        assert rows[0]["end_reason"] == "user_exit"


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_ctrl_c_with_text_clears_the_line(term, fake_llm):
    t = term()
    t.type("never mind this")
    t.type(CTRL_C)
    t.say("hello")
    assert chat_requests(fake_llm)[-1].last_user_text == "hello"
    assert t.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_undo_retry_and_resume(term, fake_llm, tmp_path):
    t = term()
    t.say("first")
    t.say("second")
    shown = plain(t.say("/undo"))
    assert "dropped your last message ('second')" in shown
    t.say("third")
    assert user_texts(chat_requests(fake_llm)[-1]) == ["first", "third"]
    # /retry asks the last message again, without the old exchange
    before = len(chat_requests(fake_llm))
    shown = t.say("/retry")
    assert len(chat_requests(fake_llm)) == before + 1
    assert user_texts(chat_requests(fake_llm)[-1]) == ["first", "third"]
    assert "echo: third" in shown
    t.say("/title Numbers")
    t.say("/new")
    t.say("something else")
    shown = plain(t.say("/resume Numbers"))
    assert "you: third" in shown and "hermes: echo: third" in shown
    t.say("fourth")
    assert user_texts(chat_requests(fake_llm)[-1]) == ["first", "third", "fourth"]
    assert t.leave() == 0

    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        store = kernel.session_store
        branches = [r for r in store.list_sessions(limit=20, roots_only=False) if r["end_reason"] == "undo"]
        kept = [[m["content"] for m in store.get_messages(r["id"]) if m["role"] == "user"] for r in branches]
        assert ["first", "second"] in kept  # /undo kept the dropped exchange as a branch
        assert ["first", "third"] in kept   # /retry kept the first answer to "third"

    # the same conversation from the command line, by title
    t2 = term("--resume", "Numbers")
    assert "echo: fourth" in plain(t2.seen)
    t2.say("fifth")
    assert user_texts(chat_requests(fake_llm)[-1]) == ["first", "third", "fourth", "fifth"]
    assert t2.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_compress_notice_is_shown_once_on_its_own_line(term, fake_llm):
    t = term()
    for i in range(4):
        t.say(f"message number {i} " + "padding " * 30)
    shown = plain(t.say("/compress"))
    assert sum("compact" in line for line in shown.splitlines()) == 1, shown
    assert t.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_failed_write_is_one_line_and_the_chat_stays_open(term, fake_llm, tmp_path):
    t = term(config="plugins:\n  sqlite-sessions:\n    write_timeout: 0.5\n")
    t.say("before the lock")
    holder = sqlite3.connect(tmp_path / "state.db", timeout=5)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        shown = plain(t.say("while locked"))
        titled = plain(t.say("/title Locked out"))  # a command's write fails the same way
    finally:
        holder.rollback()
        holder.close()
    assert "Traceback" not in shown + titled
    errors = [line for line in shown.splitlines() if "locked" in line and "›" not in line]
    assert len(errors) == 1, shown
    assert len([line for line in titled.splitlines() if "locked" in line and "›" not in line]) == 1, titled
    shown = t.say("after the lock")
    assert "echo: after the lock" in shown
    assert t.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_pasted_invalid_utf8_never_becomes_a_traceback(term, fake_llm):
    t = term()
    os.write(t.child.child_fd, b"caf\xe9 \xff\xfe ok\r")
    shown = plain(t.prompt())
    assert "Traceback" not in shown
    assert "not valid UTF-8" in shown
    assert chat_requests(fake_llm)[-1].last_user_text == "caf\ufffd \ufffd\ufffd ok"
    t.say("still here")
    assert "echo: still here" in t.seen
    assert t.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_first_exchange_titles_the_session_in_the_background(term, fake_llm, tmp_path):
    fake_llm.handler = lambda req: "Greetings Exchange" if "title of 2 to 6 words" in req.system else None
    t = term()
    t.say("hello, how are you?")
    assert t.leave() == 0
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        rows = kernel.session_store.list_sessions(limit=1)
        assert rows[0]["title"] == "Greetings Exchange"


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_second_ctrl_c_leaves_when_the_model_does_not_answer(term, fake_llm, tmp_path):
    t = term()
    fake_llm.queue(Reply(text="too late", delay=20))
    t.type("are you there?\r")
    t.expect(PROMPT_END)
    time.sleep(0.3)
    t.type(CTRL_C)
    t.expect("stopping the answer")  # nothing streams, so it says it is waiting
    t.type(CTRL_C)
    t.child.expect(pexpect.EOF, timeout=30)
    t.child.close()
    assert t.child.exitstatus == 0
    assert "Traceback" not in t.seen + (t.child.before or "")
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        sid = kernel.session_store.list_sessions(limit=1)[0]["id"]
        kept = [m["content"] for m in kernel.session_store.get_messages(sid) if m["role"] == "user"]
        assert kept == ["are you there?"]  # the message is stored, not lost


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_slash_commands_completion_and_paste(term, fake_llm):
    t = term()
    t.type("/us")
    t.expect("tokens, cache reads")  # the completion menu offers /usage with its description
    t.type("\t")  # Tab takes it
    time.sleep(0.5)
    shown = plain(t.say(""))
    assert "input 0 tokens · output 0" in shown
    t.say("hello")
    shown = plain(t.say("/usage"))
    assert re.search(r"input [1-9][\d,]* tokens · output [1-9]", shown), shown
    assert "cache reads 0 · cache writes 0" in shown
    shown = plain(t.say("/help"))
    assert "/undo" in shown and "Esc-Enter" in shown
    shown = plain(t.say("/model other-model"))
    assert "model: other-model" in shown
    t.say("which model?")
    assert chat_requests(fake_llm)[-1].model == "other-model"
    shown = plain(t.say("/sessions"))
    assert "* " in shown  # this session is marked
    shown = plain(t.say("/frobnicate"))
    assert "unknown command /frobnicate" in shown
    # a pasted block keeps its lines in one message (bracketed paste)
    t.type("\x1b[200~first pasted line\nsecond pasted line\x1b[201~")
    t.say("")
    assert chat_requests(fake_llm)[-1].last_user_text == "first pasted line\nsecond pasted line"
    assert t.leave() == 0


MARKDOWN = "# Plan\n\n- **first** step\n- second step\n\n```python\nprint('**not bold**')\n```\n"


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_markdown_rendered_on_the_terminal_and_raw_with_plain(term, fake_llm):
    t = term()
    fake_llm.queue(Reply(text=MARKDOWN))
    shown = plain(t.say("plan?"))
    assert "• first step" in shown and "# Plan" not in shown
    assert "print('**not bold**')\r\n" in shown  # code verbatim: copyable
    assert t.leave() == 0
    raw = term("--plain")
    fake_llm.queue(Reply(text=MARKDOWN))
    shown = raw.say("plan?")
    assert "# Plan" in shown and "- **first** step" in shown
    assert "\x1b[1m" not in shown.split("plan?")[-1]
    assert raw.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_provider_failure_is_one_dimmed_line_and_the_chat_goes_on(term, fake_llm):
    t = term()
    fake_llm.queue(Reply(error=500))
    shown = plain(t.say("hello"))
    lines = [ln for ln in shown.splitlines() if "500" in ln]
    assert len(lines) == 1, shown
    assert "openai: openai:" not in shown and "Traceback" not in shown
    assert "echo: again" in t.say("again")
    assert t.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_background_memory_write_notice_once_on_its_own_line(term, fake_llm, tmp_path):
    def handler(request):
        if "Review the conversation above" in request.last_user_text:
            if any(m["role"] == "tool" for m in request.messages):
                return "Saved."
            return Reply(tool_calls=[{"name": "memory", "arguments": {
                "action": "add", "target": "user", "content": "Likes green tea."}}])
        return None

    fake_llm.handler = handler
    t = term(config="memory:\n  nudge_interval: 1\n")
    t.say("I like green tea")
    user_md = tmp_path / "memories" / "USER.md"
    deadline = time.monotonic() + 30  # the review runs after the answer, while the prompt is shown
    while not (user_md.exists() and "green tea" in user_md.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # its notice follows the write
    shown = plain(t.say("what do I like?"))
    notices = [ln for ln in shown.splitlines() if "memory updated" in ln]
    assert len(notices) == 1, shown
    assert notices[0].startswith("memory updated")  # its own line, not glued to text
    assert "Likes green tea." in (tmp_path / "memories" / "USER.md").read_text()
    assert t.leave() == 0


@pytest.mark.slow  # a chat process per check: the fast target keeps the core flows
def test_ctrl_c_during_a_one_shot_answer_exits_130_and_keeps_it(fake_llm, tmp_path):
    words = " ".join(f"w{i}" for i in range(400))
    fake_llm.queue(Reply(text=words, chunk_delay=0.05))
    t = Term(tmp_path, fake_llm, "-q", "a long story please")
    try:
        t.expect(r"w20 ")
        t.type(CTRL_C)
        t.child.expect(pexpect.EOF, timeout=30)
        t.child.close()
        assert t.child.exitstatus == 130
        assert "Traceback" not in t.seen + (t.child.before or "")
    finally:
        t.close()
    with hermes.Kernel(home=tmp_path, autoload=False) as kernel:
        sid = kernel.session_store.list_sessions(limit=1)[0]["id"]
        answer = [m["content"] for m in kernel.session_store.get_messages(sid) if m["role"] == "assistant"]
        assert answer and answer[-1].startswith("w0 w1") and "w399" not in answer[-1]
