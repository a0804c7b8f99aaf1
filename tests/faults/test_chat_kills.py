"""SIGKILL ``hermes chat --continue -q`` in the middle of turns with tool calls (memory,
session_search, delegate_task): while the model is thinking, while a tool runs, between
the tool results and the answer, in the middle of a streamed answer. After each kill the
home must be sound, nothing committed may be lost, and the next ``--continue`` must be a
request the (validating) provider accepts, carrying the conversation so far."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import (
    SUBTASK,
    Checker,
    Proc,
    connect,
    continue_succeeds,
    conversation,
    first_user_text,
    is_summarizer,
    kill_after,
    kill_at,
    last_is_tool_result,
    point_call_unanswered,
    point_results_stored,
    point_user_stored,
    read_messages,
    run,
    seed_session,
    seeded,
    write_config,
)

pytestmark = pytest.mark.faults

SEEDS = (3, 30)
ROUNDS = 3
FINAL = "Here is the answer, streamed in many small pieces so a kill can cut it. " * 6


def _handler(rng: Any, calls: list[dict[str, Any]]) -> Any:
    from hermes.testing.fakellm import Reply

    call_delay = rng.uniform(0.0, 0.3)
    slow = rng.uniform(0.2, 0.6)
    final_delay = rng.uniform(0.0, 0.3)

    def handle(req: Any) -> Any:
        if is_summarizer(req):  # session_search's recap of the older session
            return Reply(text="Recap: the alpha project deadline was discussed.", delay=slow)
        if first_user_text(req).startswith(SUBTASK):  # the delegated sub-agent
            return Reply(text="sub-agent: done", delay=slow)
        if last_is_tool_result(req):
            return Reply(text=FINAL, delay=final_delay)
        return Reply(tool_calls=calls, delay=call_delay)

    return handle, call_delay + slow + final_delay


def _first_turn(home: Any, fake: Any, stats: Any, seed: int, name: str, opening: str) -> tuple[Any, Checker]:
    """The scenario's random generator and checker, after a random provider is configured
    and one complete (unkilled) turn has stored ``opening``."""
    rng = seeded(seed, name)
    provider = rng.choice(["openai", "anthropic"])
    write_config(home, fake, provider)
    check = Checker(home, stats, f"{name} seed={seed} provider={provider}")
    first = run(["chat", "-q", opening], home)
    assert first.returncode == 0, first.stderr
    return rng, check


@pytest.mark.faults(seeds=(2, 30))
def test_chat_turns_with_tools_survive_sigkill(home, fake, stats, seed):
    seed_session(home, conversation(6, "alpha project deadline"))
    codeword = f"my codeword is kestrel-{seed}"
    rng, check = _first_turn(home, fake, stats, seed, "chat", codeword)
    scenario = check.label
    history = [codeword]

    for r in range(ROUNDS):
        choices = [
            {"name": "memory", "arguments": {"action": "add", "target": "memory",
                                             "content": f"fact {seed}-{r}: the user likes tea"}},
            {"name": "session_search", "arguments": {"query": "alpha deadline"}},
            {"name": "delegate_task", "arguments": {"task": f"{SUBTASK} count to {r + 3}"}},
        ]
        calls = rng.sample(choices, rng.randint(1, 2))
        slow_tool = any(c["name"] != "memory" for c in calls)
        handle, expected = _handler(rng, calls)
        fake.reset()
        fake.handler = handle
        tty = rng.random() < 0.5
        fake.chunk_delay = 0.01 if tty else 0.0
        text = f"round {r}: please use your tools"
        base = max(read_messages(home), default=0)
        modes = ["random", "user_stored", "results_stored"] + (["call_unanswered"] * 2 if slow_tool else [])
        mode = rng.choice(modes)
        proc = Proc(["chat", "--continue", "-q", text], home, tty=tty)
        label = f"round {r} kill={mode} tools={[c['name'] for c in calls]} tty={tty}"
        if mode == "random":
            kill_after(proc, rng.uniform(0.1, 0.6 + expected + (0.6 if tty else 0.0)), stats)
            committed = read_messages(home)
        else:
            point = {"user_stored": point_user_stored, "call_unanswered": point_call_unanswered,
                     "results_stored": point_results_stored}[mode](base)
            committed = kill_at(proc, home, point, stats, name=mode, timeout=20.0)
            if committed is None:
                check.expect(proc.returncode == 0, f"{label}: the turn failed without a kill "
                                                   f"(exit {proc.returncode}): {proc.stderr[-600:]}")
                committed = read_messages(home)
        check.label = f"{scenario} {label}"
        check.all_static()
        check.nothing_lost(committed, "by the kill")
        check.memory_tool_results_kept()
        if any(row[2] == "user" and row[3] == text for i, row in committed.items() if i > base):
            history.append(text)
        if rng.random() < 0.3:
            # Kill the recovery too: the resume that repairs the transcript is itself a
            # writer that can die half way.
            fake.reset()
            fake.handler = handle
            again = Proc(["chat", "--continue", "-q", f"round {r}: recovering"], home)
            kill_after(again, rng.uniform(0.0, 1.0), stats)
            committed = read_messages(home)
            check.all_static()
            if any(row[3] == f"round {r}: recovering" for row in committed.values()):
                history.append(f"round {r}: recovering")
        continue_succeeds(check, fake, expect_history=history)
        check.nothing_lost(committed, "by the next --continue")
        check.all_static()
        check.memory_tool_results_kept()
    assert not check.problems, "\n".join(check.problems)


@pytest.mark.faults(seeds=(1, 15))
def test_first_run_killed_while_creating_the_home(home, fake, stats, seed):
    """Kill the very first ``hermes chat`` on an empty home (while it creates state.db,
    its schema and the memory directory), twice more, then let one finish."""
    from hermes.testing.fakellm import Reply

    rng = seeded(seed, "first-run")
    write_config(home, fake, rng.choice(["openai", "anthropic"]))
    fake.handler = lambda req: Reply(text="first answer", delay=rng.uniform(0.0, 0.3))
    check = Checker(home, stats, f"first run seed={seed}")
    for attempt in range(3):
        proc = Proc(["chat", "-q", f"hello number {attempt}"], home)
        kill_after(proc, rng.uniform(0.05, 0.8), stats)
        check.all_static()
    committed = read_messages(home)
    proc = run(["chat", "-q", "finally"], home)
    check.expect(proc.returncode == 0, f"the first complete run failed: {proc.stderr[-600:]}")
    check.all_static()
    check.nothing_lost(committed, "by the first complete run")
    continue_succeeds(check, fake, expect_history=["finally"])
    assert not check.problems, "\n".join(check.problems)


@pytest.mark.faults(seeds=(1, 15))
def test_two_terminals_on_one_session_then_sigkill(home, fake, stats, seed):
    """Two ``hermes chat --continue -q`` on the same conversation at once, one of them
    killed mid-turn: the other finishes or is refused in one line, and the stored
    conversation stays one valid transcript."""
    opening = f"the shared topic is falcon-{seed}"
    rng, check = _first_turn(home, fake, stats, seed, "two-terminals", opening)
    calls = [{"name": "memory", "arguments": {"action": "add", "target": "memory",
                                              "content": f"falcon fact {seed}"}},
             {"name": "delegate_task", "arguments": {"task": f"{SUBTASK} check falcon"}}]
    handle, expected = _handler(rng, rng.sample(calls, rng.randint(1, 2)))
    fake.reset()
    fake.handler = handle
    procs = [Proc(["chat", "--continue", "-q", f"terminal {n} speaking"], home) for n in range(2)]
    victim = rng.randrange(2)
    kill_after(procs[victim], rng.uniform(0.2, 0.8 + expected), stats)
    survivor = procs[1 - victim]
    code = survivor.wait(60)
    check.expect(code == 0 or ("Traceback" not in survivor.stderr and survivor.stderr.strip()),
                 f"the other terminal crashed (exit {code}): {survivor.stderr[-600:]}")
    committed = read_messages(home)
    check.all_static()
    check.memory_tool_results_kept()
    continue_succeeds(check, fake, expect_history=[opening])
    check.nothing_lost(committed, "by the next --continue")
    check.all_static()
    assert not check.problems, "\n".join(check.problems)


@pytest.mark.faults(seeds=(1, 15))
def test_stream_cut_then_sigkill(home, fake, stats, seed):
    """The network drops a streamed answer (text or tool call) part way, and the process
    is sometimes killed right after: a cut answer is never stored as a complete one, and
    the conversation continues."""
    from hermes.testing.fakellm import Reply

    opening = f"the topic is heron-{seed}"
    rng, check = _first_turn(home, fake, stats, seed, "stream-cut", opening)
    scenario = check.label
    history = [opening]
    for r in range(ROUNDS):
        calls = [{"name": "memory", "arguments": {"action": "add", "target": "memory",
                                                  "content": f"heron fact {seed}-{r} " + "x" * 60}}]
        use_tool = rng.random() < 0.5

        def handle(req, use_tool=use_tool, calls=calls):
            if use_tool and not last_is_tool_result(req):
                return Reply(tool_calls=calls)
            return Reply(text=FINAL)

        fake.reset()
        fake.handler = handle
        fake.chunk_delay = 0.005
        fake.cut_after = rng.randint(1, 25)
        text = f"round {r}: go on"
        base = max(read_messages(home), default=0)
        proc = Proc(["chat", "--continue", "-q", text], home, tty=True)
        label = f"round {r} tool={use_tool} cut_after={fake.cut_after}"
        if rng.random() < 0.3:
            kill_after(proc, rng.uniform(0.3, 1.5), stats)
        else:
            code = proc.wait(60)
            check.expect("Traceback" not in proc.stderr,
                         f"{label}: a cut stream gave a traceback (exit {code}): {proc.stderr[-600:]}")
        check.label = f"{scenario} {label}"
        committed = read_messages(home)
        for mid, row in committed.items():
            if mid <= base or row[2] != "assistant" or not row[3]:
                continue
            if row[3] != FINAL and FINAL.startswith(row[3]):
                conn = connect(home)
                try:
                    finish = conn.execute("SELECT finish_reason FROM messages WHERE id = ?",
                                          (mid,)).fetchone()[0]
                finally:
                    conn.close()
                check.expect(finish == "incomplete", f"a cut answer ({len(row[3])} of {len(FINAL)} "
                                                     f"chars) is stored as finish_reason={finish!r}")
        check.all_static()
        check.memory_tool_results_kept()
        if any(row[2] == "user" and row[3] == text for i, row in committed.items() if i > base):
            history.append(text)
        continue_succeeds(check, fake, expect_history=history)
        check.nothing_lost(committed, "by the next --continue")
    assert not check.problems, "\n".join(check.problems)
