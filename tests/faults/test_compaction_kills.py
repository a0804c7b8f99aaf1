"""SIGKILL ``hermes chat --continue -q`` while it compacts a conversation too big for its
(small) context window: during the summary call and at each step of the session split
(parent ended, continuation created, continuation filled). Afterwards the home must be
sound, nothing committed lost, and the next ``--continue`` must send the model the
conversation (not an empty one)."""

from __future__ import annotations

import importlib.util

import pytest

from .harness import (
    Checker,
    Proc,
    continue_succeeds,
    conversation,
    is_summarizer,
    kill_after,
    kill_at,
    last_is_tool_result,
    point_child_created,
    point_child_filled,
    point_parent_ended,
    read_messages,
    seed_session,
    seeded,
    write_config,
)

pytestmark = pytest.mark.faults

SEEDS = (3, 40)
#: The kernel's own named fault points (HERMES_FAULT_POINT), when this checkout has them.
KERNEL_POINTS = ["compaction-split"] if importlib.util.find_spec("hermes.testing.faults") else []


def test_compaction_survives_sigkill(home, fake, stats, seed):
    from hermes.testing.fakellm import Reply

    rng = seeded(seed, "compaction")
    provider = rng.choice(["openai", "anthropic"])
    # "resume": the stored conversation is over the window's trigger, so resuming it
    # compacts before the first call. "mid-turn": it is just under; the model's tool call
    # and its result push it over, so the turn compacts between the tool result and the
    # answer and finishes in the continuation.
    variant = rng.choice(["resume", "mid-turn"])
    write_config(home, fake, provider, **{"model.context_length": 8192})
    turns = conversation(rng.choice([30, 40, 60]) if variant == "resume" else 30, f"beta-{seed}",
                         bulk=60 if variant == "resume" else 30)
    parent = seed_session(home, turns)
    summary_delay = rng.uniform(0.05, 0.4)
    call = {"name": "memory", "arguments": {"action": "add", "content": f"beta fact {seed}"}}

    def handle(req):
        if is_summarizer(req):
            return Reply(text=f"## Goal\nSummary of the beta-{seed} talk.\n## Progress\nparts explained",
                         delay=summary_delay)
        if variant == "mid-turn" and not last_is_tool_result(req):
            return Reply(tool_calls=[call])
        return Reply(text="ok")

    fake.handler = handle
    mode = rng.choice(["random", "parent_ended", "child_created", "child_filled", *KERNEL_POINTS])
    check = Checker(home, stats, f"compaction seed={seed} provider={provider} {variant} kill={mode}")
    before = read_messages(home)
    text = "next part please"
    env = {"HERMES_FAULT_POINT": mode} if mode in KERNEL_POINTS else None
    proc = Proc(["chat", "--continue", "-q", text], home, env=env)
    if mode in KERNEL_POINTS:
        code = proc.wait()
        if code == -9:
            stats.kills += 1
            stats.points[mode] = stats.points.get(mode, 0) + 1
        else:
            stats.completed += 1
            check.expect(False, f"the kernel fault point {mode} was never reached (exit {code}): "
                                f"{proc.stderr[-400:]}")
        committed = read_messages(home)
    elif mode == "random":
        kill_after(proc, rng.uniform(0.2, 0.9 + summary_delay), stats)
        committed = read_messages(home)
    else:
        point = {"parent_ended": point_parent_ended, "child_created": point_child_created,
                 "child_filled": point_child_filled}[mode](parent)
        committed = kill_at(proc, home, point, stats, name=mode, timeout=20.0)
        if committed is None:
            check.expect(proc.returncode == 0, f"the compacting turn failed without a kill (exit "
                                               f"{proc.returncode}): {proc.stderr[-600:]}")
            committed = read_messages(home)
    check.all_static()
    check.nothing_lost(before, "(the parent's transcript) by the kill")
    check.nothing_lost(committed, "by the kill")
    check.memory_tool_results_kept()
    said = any(row[2] == "user" and row[3] == text for row in committed.values())
    history = [text] if said else [turns[-2]["content"]] if variant == "resume" else []
    continue_succeeds(check, fake, expect_history=history)
    check.nothing_lost(committed, "by the next --continue")
    check.all_static()
    assert not check.problems, "\n".join(check.problems)
