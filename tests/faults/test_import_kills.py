"""SIGKILL ``hermes sessions import`` of a large file (one session bigger than a batch)
at random moments and right after a batch committed. After each kill the home must be
sound and nothing committed lost; importing the same file again must finish the job:
every session complete, in order, nothing twice. The conversation that existed before
must still continue."""

from __future__ import annotations

import pytest

from .harness import (
    Checker,
    Proc,
    continue_succeeds,
    conversation,
    kill_after,
    kill_at,
    point_messages_over,
    read_messages,
    run,
    seed_session,
    seeded,
    write_config,
    write_import_file,
)

pytestmark = pytest.mark.faults

SEEDS = (2, 30)


def test_import_survives_sigkill(home, tmp_path, fake, stats, seed):
    from hermes.testing.fakellm import Reply

    rng = seeded(seed, "import")
    write_config(home, fake, rng.choice(["openai", "anthropic"]))
    chat = conversation(6, f"gamma-{seed}")
    seed_session(home, chat)
    sizes = [rng.choice([200, 3000]), rng.choice([7000, 12000]), rng.choice([1, 500])]
    rng.shuffle(sizes)
    source = tmp_path / "big.jsonl"
    expected = write_import_file(source, sizes, f"s{seed}")
    total = sum(sizes)
    check = Checker(home, stats, f"import seed={seed} sizes={sizes}")

    for attempt in range(rng.randint(1, 3)):
        base = read_messages(home)
        proc = Proc(["sessions", "import", str(source)], home)
        if rng.random() < 0.5:
            kill_after(proc, rng.uniform(0.05, 0.5), stats)
            committed = read_messages(home)
        else:
            point = point_messages_over(len(base) + rng.randint(1, max(1, total - 1)))
            committed = kill_at(proc, home, point, stats, name="import-batch-committed", timeout=30.0)
            if committed is None:
                committed = read_messages(home)
        if proc.returncode not in (0, -9):
            check.expect(False, f"attempt {attempt}: import failed without a kill (exit "
                                f"{proc.returncode}): {proc.stderr[-600:]}")
        check.all_static()
        check.nothing_lost(base, f"(present before attempt {attempt}) by the kill")
        check.nothing_lost(committed, f"by the kill of attempt {attempt}")

    final = run(["sessions", "import", str(source)], home, timeout=120)
    check.expect(final.returncode == 0, f"the import after the kills failed (exit "
                                        f"{final.returncode}): {final.stderr[-600:]}")
    conn_rows = read_messages(home)
    got: dict[str, list[str]] = {}
    for mid in sorted(conn_rows):
        row = conn_rows[mid]
        if row[1] in expected:
            got.setdefault(row[1], []).append(row[3])
    for sid, contents in expected.items():
        have = got.get(sid, [])
        check.expect(have == contents,
                     f"session {sid} after re-import holds {len(have)} messages, the source "
                     f"{len(contents)}" + ("" if len(have) != len(contents) else " (order/content differs)"))
    again = run(["sessions", "import", str(source)], home, timeout=120)
    check.expect(again.returncode == 0 and len(read_messages(home)) == len(conn_rows),
                 f"a third import changed the store or failed: {again.stdout[-300:]} {again.stderr[-300:]}")
    check.all_static()
    fake.handler = lambda req: Reply(text="ok")
    continue_succeeds(check, fake, expect_history=[chat[-2]["content"]])
    assert not check.problems, "\n".join(check.problems)
