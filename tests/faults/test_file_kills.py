"""SIGKILL the commands that rewrite a file or delete a whole conversation: an export
over an existing file, ``hermes plugins disable|enable`` (config.yaml), and
``hermes sessions delete`` of a compressed conversation. A file is the old one or the
new one, never a mix; a deletion happens entirely or not at all."""

from __future__ import annotations

import pytest
import yaml

from .harness import (
    Checker,
    Proc,
    connect,
    continue_succeeds,
    conversation,
    kill_after,
    kill_at,
    read_messages,
    run,
    seed_session,
    seeded,
    write_config,
)

pytestmark = pytest.mark.faults

SEEDS = (2, 20)


@pytest.mark.faults(seeds=(1, 15))
def test_export_over_a_file_survives_sigkill(home, tmp_path, stats, seed):
    rng = seeded(seed, "export")
    write_config(home, None)
    seed_session(home, conversation(20, f"delta-{seed}"))
    out = tmp_path / "export.jsonl"
    first = run(["sessions", "export", "--all", "-o", str(out)], home)
    assert first.returncode == 0, first.stderr
    old = out.read_bytes()
    seed_session(home, conversation(rng.choice([3000, 8000]), f"epsilon-{seed}"))
    reference = tmp_path / "reference.jsonl"
    ref = run(["sessions", "export", "--all", "-o", str(reference)], home)
    assert ref.returncode == 0, ref.stderr
    new = reference.read_bytes()
    check = Checker(home, stats, f"export seed={seed}")
    before = read_messages(home)
    for attempt in range(3):
        proc = Proc(["sessions", "export", "--all", "-o", str(out)], home)
        kill_after(proc, rng.uniform(0.05, 0.6), stats)
        data = out.read_bytes()
        check.expect(data in (old, new), f"attempt {attempt}: the export file is neither the old "
                                         f"({len(old)} bytes) nor the new one ({len(new)} bytes): "
                                         f"{len(data)} bytes")
        if data == new:
            old = new
        check.files_parse()
        check.nothing_lost(before, "by a killed export")
    done = run(["sessions", "export", "--all", "-o", str(out)], home)
    check.expect(done.returncode == 0 and out.read_bytes() == new,
                 f"the export after the kills failed or differs: {done.stderr[-400:]}")
    leftovers = sorted(p.name for p in tmp_path.glob(".export.jsonl.*"))
    check.expect(not leftovers, f"killed exports' temp files left after the next export: {leftovers}")
    assert not check.problems, "\n".join(check.problems)


@pytest.mark.faults(seeds=(1, 15))
def test_config_edits_survive_sigkill(home, fake, stats, seed):
    from hermes.testing.fakellm import Reply

    rng = seeded(seed, "config")
    write_config(home, fake, "openai")
    config = home / "config.yaml"
    with open(config, "a", encoding="utf-8") as f:
        f.write("# a comment the editor must keep\n")
    seed_session(home, conversation(4, f"zeta-{seed}"))
    check = Checker(home, stats, f"config seed={seed}")
    states = {config.read_bytes()}
    for attempt in range(6):
        verb = rng.choice(["disable", "enable"])
        name = rng.choice(["honcho", "mem0"])
        proc = Proc(["plugins", verb, name], home)
        killed = kill_after(proc, rng.uniform(0.0, 0.3), stats)
        data = config.read_bytes()
        try:
            parsed = yaml.safe_load(data.decode("utf-8"))
            ok = isinstance(parsed, dict) and parsed.get("model", {}).get("base_url") == fake.openai_url
        except (UnicodeDecodeError, yaml.YAMLError):
            ok = False
        check.expect(ok, f"attempt {attempt} ({verb} {name}, killed={killed}): config.yaml lost "
                         f"its content or does not parse: {data[:200]!r}")
        check.expect(b"# a comment the editor must keep" in data,
                     f"attempt {attempt}: config.yaml lost its comment")
        if not killed and proc.returncode not in (0, 1, 2):
            check.expect(False, f"`plugins {verb} {name}` crashed (exit {proc.returncode}): "
                                f"{proc.stderr[-400:]}")
        states.add(data)
    done = run(["plugins", "disable", "honcho"], home)
    check.expect(done.returncode == 0, f"`plugins disable` after the kills failed: {done.stderr[-400:]}")
    leftovers = sorted(p.name for p in home.glob(".config.yaml.*"))
    check.expect(not leftovers, f"killed config writers' temp files left after the next write: {leftovers}")
    check.files_parse()
    fake.handler = lambda req: Reply(text="ok")
    continue_succeeds(check, fake, expect_history=[f"zeta-{seed} question 2"])
    assert not check.problems, "\n".join(check.problems)


def _lineage(home, seed, sizes):
    """A compressed conversation: root → continuation → continuation, plus a sub-agent
    session of the root; and an unrelated conversation."""
    import hermes

    with hermes.Kernel(home=home, autoload=False) as kernel:
        store = kernel.session_store
        ids = []
        parent = None
        for n, size in enumerate(sizes):
            sid = store.create_session(source="cli", parent_session_id=parent, started_at=1000.0 + n * 10)
            store.append_messages(sid, conversation(size, f"eta-{seed}-{n}"))
            if n < len(sizes) - 1:
                store.end_session(sid, "compression", ended_at=1000.0 + n * 10 + 5)
            ids.append(sid)
            parent = sid
        sub = store.create_session(source="subagent", parent_session_id=ids[0], started_at=1001.0)
        store.append_messages(sub, conversation(10, f"eta-{seed}-sub"))
        ids.append(sub)
        other = store.create_session(source="cli", started_at=900.0)
        store.append_messages(other, conversation(8, f"theta-{seed}"))
    return ids, other


def test_deleting_a_conversation_is_all_or_nothing(home, stats, seed):
    rng = seeded(seed, "delete")
    write_config(home, None)
    sizes = [rng.choice([500, 3000]) for _ in range(3)]
    ids, other = _lineage(home, seed, sizes)
    check = Checker(home, stats, f"delete seed={seed} sizes={sizes}")
    before = read_messages(home)
    kept = {i: row for i, row in before.items() if row[1] == other}
    ref = ids[rng.randrange(len(ids) - 1)]  # any part of the chain names the conversation

    def partly_gone(conn):
        present = {r[0] for r in conn.execute(
            f"SELECT id FROM sessions WHERE id IN ({','.join('?' * len(ids))})", ids)}
        return 0 < len(present) < len(ids)

    for attempt in range(2):
        proc = Proc(["sessions", "delete", "-y", ref], home)
        if rng.random() < 0.5:
            kill_after(proc, rng.uniform(0.05, 0.5), stats)
        else:
            kill_at(proc, home, partly_gone, stats, name="delete-partial", timeout=20.0)
        conn = connect(home)
        try:
            present = {r[0] for r in conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({','.join('?' * len(ids))})", ids)}
            msgs = {sid: n for sid, n in conn.execute(
                f"SELECT session_id, count(*) FROM messages WHERE session_id IN "
                f"({','.join('?' * len(ids))}) GROUP BY session_id", ids)}
        finally:
            conn.close()
        whole = {sid for sid in ids if sid in present}
        check.expect(len(whole) in (0, len(ids)),
                     f"attempt {attempt}: a killed delete left {len(whole)} of the conversation's "
                     f"{len(ids)} sessions")
        orphans = set(msgs) - present
        check.expect(not orphans, f"attempt {attempt}: messages of deleted sessions remain: {sorted(orphans)}")
        check.all_static()
        check.nothing_lost(kept, "(an unrelated conversation) by a killed delete")
        if not present:
            break
    assert not check.problems, "\n".join(check.problems)
