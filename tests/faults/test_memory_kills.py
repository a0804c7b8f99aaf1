"""SIGKILL ``hermes memory add|remove`` (alone and several at once) at random moments
and inside the atomic write; no acknowledged entry may be lost, every file must parse,
and the next write and read must work."""

from __future__ import annotations

import json

import pytest

from .harness import (
    Checker,
    Proc,
    kill_after,
    kill_when_tmp,
    run,
    seeded,
    write_config,
)

pytestmark = pytest.mark.faults

SEEDS = (2, 30)
ROUNDS = 6


def test_memory_writes_survive_sigkill(home, stats, seed):
    rng = seeded(seed, "memory")
    write_config(home, None)
    check = Checker(home, stats, f"memory seed={seed}")
    acked: dict[str, set[str]] = {"memory": set(), "user": set()}
    memories = home / "memories"
    for r in range(ROUNDS):
        writers = []
        for w in range(rng.randint(1, 3)):
            target = rng.choice(["memory", "user"])
            if acked[target] and rng.random() < 0.2:
                old = rng.choice(sorted(acked[target]))
                args = ["memory", "remove", "-t", target, "--old", old]
                writers.append((Proc(args, home), target, None, old))
            else:
                text = f"seed {seed} round {r} writer {w}: naïve café ✓ {rng.random():.8f}"
                writers.append((Proc(["memory", "add", "-t", target, text], home), target, text, None))
        in_write = rng.random() < 0.4
        for proc, target, text, old in writers:
            if in_write:
                killed = kill_when_tmp(proc, memories, stats)
            else:
                killed = kill_after(proc, rng.uniform(0.0, 0.2), stats)
            if old is not None:
                # A removal that was acknowledged is gone; a killed one may or may not be:
                # either way the entry is no longer promised.
                acked[target].discard(old)
            elif not killed and proc.returncode == 0:
                acked[target].add(text)
            elif not killed:
                check.expect(False, f"`memory add` exited {proc.returncode} without a "
                                    f"kill: {proc.stderr.strip()[-400:]}")
        check.files_parse()
        check.memory_kept(acked)

    # The next write of each file after all those kills works and cleans up the temp
    # files killed writers of that file left behind.
    for target in ("memory", "user"):
        final = f"the {target} write after the kills"
        proc = run(["memory", "add", "-t", target, final], home)
        if check.expect(proc.returncode == 0,
                        f"`memory add -t {target}` after the kills failed: {proc.stderr[-400:]}"):
            acked[target].add(final)
    leftovers = sorted(p.name for p in memories.glob(".*.tmp"))
    check.expect(not leftovers, f"temp files of killed writers left after the next write: {leftovers}")
    # Hermes itself reads back every acknowledged entry.
    shown = run(["memory", "show", "--json"], home)
    ok = shown.returncode == 0
    check.expect(ok, f"`memory show --json` failed: {shown.stderr[-400:]}")
    if ok:
        data = json.loads(shown.stdout)
        for target, entries in acked.items():
            lost = entries - set(data[target]["entries"])
            check.expect(not lost, f"`memory show` lacks acknowledged {target} entries {sorted(lost)[:3]}")
    check.memory_kept(acked)
    assert not check.problems, "\n".join(check.problems)
