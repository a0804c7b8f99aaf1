"""Prompt-cache cost of a simulated 50-turn tool-using session.

Replays one deterministic session (system prompt, tool schemas, 50 user turns with tool
rounds, two compactions that replace the middle of the history with a summary and add
the one-time note to the system prompt) through the real ``anthropic`` client and its
request builder, against the loopback fake server, whose cache accounting follows the
Anthropic API (prefix up to each ``cache_control`` breakpoint, 20-block lookback,
1,024-token minimum). Input is priced with Anthropic's multipliers: uncached 1x, cache
read 0.1x, 5-minute write 1.25x, 1-hour write 2x.

Printed, one JSON line each: the machine; then per TTL the input cost with caching, the
cost of the same requests without caching (a second replay with ``cache=False`` in the
same run), and the lower bound where only new tokens are paid in full (every token of a
prefix already sent by an earlier request is read at 0.1x, no write premium, no minimum
length). Costs are in base-price input tokens; ``usd`` figures assume $3 per million.

With ``--memory-writes`` it also measures live memory updates (``memory.live_updates``,
issue 20): the same session with a memory write made outside it every seventh turn,
replayed three ways — without any block (``off``), with the runtime's placement (the
``<memory-updates>`` block rendered by the built-in memory and kept on the user message of
the turn that first carried it, ``hermes.runtime.prompt.with_notes``: ``sticky``), and,
for contrast, with the block on the current request only (``ephemeral``, the way recalled
context is placed). One JSON line per TTL with the three costs and their ratios to ``off``.

Run: ``.venv/bin/python benchmarks/cache_cost.py [--turns 50] [--seed 7] [--memory-writes]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from typing import Any

import hermes
from hermes.plugins.llm.anthropic_plugin import AnthropicClient
from hermes.testing.fakellm import FakeLLMServer, Reply, anthropic_prefixes

MODEL = "claude-haiku-4-5"
READ, WRITE = 0.1, {"5m": 1.25, "1h": 2.0}
USD_PER_TOKEN = 3.0 / 1_000_000
WORDS = ("memory context session search compaction summary prompt cache tool result file "
         "python kernel plugin config token budget user agent answer error test").split()


def prose(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` tokens of deterministic filler text."""
    out, size = [], 0
    while size < tokens * 4:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def make_tools(rng: random.Random) -> list[dict[str, Any]]:
    names = ["read_file", "write_file", "search_files", "terminal", "memory", "session_search",
             "web_search", "skill_view"]
    return [{"name": n, "description": prose(rng, 120),
             "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}
            for n in names]


def plan_session(turns: int, seed: int) -> list[dict[str, Any]]:
    """The scripted turns: user text, tool rounds (calls and result sizes), answer."""
    rng = random.Random(seed)
    plan = []
    for t in range(turns):
        rounds = []
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
            calls = [{"name": rng.choice(["read_file", "search_files", "terminal"]),
                      "arguments": {"arg": f"src/module_{t}_{i}.py"}}
                     for i in range(rng.choice([1, 1, 2]))]
            results = [prose(rng, rng.randint(100, 1200)) for _ in calls]
            rounds.append((calls, results))
        plan.append({"user": f"Turn {t}: " + prose(rng, rng.randint(20, 150)), "rounds": rounds,
                     "answer": prose(rng, rng.randint(40, 300)),
                     "compact": t in (turns * 36 // 100, turns * 72 // 100)})
    return plan


def compact(messages: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """What a compaction does to the transcript: head (system + first exchange) and a tail
    starting at a user message survive, the middle becomes one summary, the system
    prompt gets its one-time note (so its cache is lost once)."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    tail_start = users[-2] if len(users) >= 3 else users[-1]
    head_end = users[1] if len(users) > 1 else 1
    system = dict(messages[0])
    note = "\n\n[Note: some earlier conversation turns have been compacted into a summary.]"
    if note not in system["content"]:
        system["content"] += note
    summary = {"role": "user", "content": "[CONTEXT SUMMARY — reference only]\n" + prose(rng, 1500)}
    middle = [summary, {"role": "assistant", "content": "Understood; continuing from the summary."}]
    return [system, *messages[1:head_end], *middle, *messages[tail_start:]]


def replay(turns: int, seed: int, *, cache: bool, ttl: str, live: str = "none") -> dict[str, Any]:
    """``live``: ``none`` (no memory writes: the classic replay), or, with a memory write
    every seventh turn, ``off`` / ``sticky`` / ``ephemeral`` (see the module docstring)."""
    import tempfile

    from hermes.plugins.memory.store import MemoryStore
    from hermes.runtime.prompt import with_notes

    rng = random.Random(seed + 1)
    facts = random.Random(seed + 2)  # its own stream: the plan stays the same
    renderer = MemoryStore(tempfile.gettempdir())  # render_changes only; nothing is written
    current: dict[str, list[str]] = {"memory": [], "user": []}
    shown: dict[str, list[str]] = {"memory": [], "user": []}
    notes: dict[int, str] = {}
    system = prose(rng, 3000)
    tools = make_tools(rng)
    plan = plan_session(turns, seed)
    with FakeLLMServer() as server:
        client = AnthropicClient(base_url=server.url, api_key="bench", max_retries=0, timeout=30)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        usage = hermes.Usage()
        compactions = 0
        started = time.perf_counter()
        for t, turn in enumerate(plan):
            user = {"role": "user", "content": turn["user"]}
            messages.append(user)
            turn_notes = notes
            if live != "none" and t % 7 == 3:
                current["memory"] = [*current["memory"], f"Fact {t}: " + prose(facts, 30)]
            if live in ("sticky", "ephemeral"):
                block = renderer.render_changes(shown, current)
                if block:
                    shown = {k: list(v) for k, v in current.items()}
                    if live == "sticky":
                        notes[id(user)] = block
                    else:
                        turn_notes = {id(user): block}

            for calls, results in turn["rounds"]:
                server.queue(Reply(tool_calls=calls))
                response = client.complete(hermes.LLMRequest(
                    model=MODEL, messages=with_notes(messages, turn_notes), tools=tools, cache=cache, cache_ttl=ttl))
                usage += response.usage
                messages.append(response.as_message())
                for call, result in zip(response.tool_calls, results, strict=True):
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            server.queue(Reply(text=turn["answer"]))
            response = client.complete(hermes.LLMRequest(
                model=MODEL, messages=with_notes(messages, turn_notes), tools=tools, cache=cache, cache_ttl=ttl))
            usage += response.usage
            messages.append(response.as_message())
            if turn["compact"]:
                messages = compact(messages, rng)
                compactions += 1
                # As the runtime does: the continuation's messages are copies, so their
                # notes are gone, and every change since the snapshot is announced anew.
                messages = [dict(m) for m in messages]
                notes.clear()
                shown = {"memory": [], "user": []}
        elapsed = time.perf_counter() - started
        bodies = [r.body for r in server.requests]
    return {"usage": usage, "bodies": bodies, "compactions": compactions, "seconds": elapsed}


def lower_bound(bodies: list[dict[str, Any]]) -> tuple[float, int, int]:
    """Ideal cost: per request, the longest prefix any earlier request already sent is
    read at 0.1x, everything after it paid at 1x. Returns (cost, new, reused)."""
    seen: set[str] = set()
    new_total = reused_total = 0
    for body in bodies:
        prefixes = anthropic_prefixes(body)
        reused = max((tokens for h, tokens in prefixes if h in seen), default=0)
        total = prefixes[-1][1] if prefixes else 0
        new_total += total - reused
        reused_total += reused
        seen.update(h for h, _ in prefixes)
    return new_total + READ * reused_total, new_total, reused_total


def machine() -> dict[str, Any]:
    return {"bench": "cache_cost", "machine": {
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "python": sys.version.split()[0]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--memory-writes", action="store_true",
                        help="also measure live memory updates (off / sticky / ephemeral)")
    args = parser.parse_args()
    print(json.dumps(machine()))
    if args.memory_writes:
        for ttl in ("5m", "1h"):
            costs = {}
            for live in ("off", "sticky", "ephemeral"):
                u = replay(args.turns, args.seed, cache=True, ttl=ttl, live=live)["usage"]
                costs[live] = u.input_tokens + READ * u.cache_read_tokens + WRITE[ttl] * u.cache_write_tokens
            print(json.dumps({
                "bench": "cache_cost_live_memory", "ttl": ttl, "turns": args.turns,
                "memory_writes": len(range(3, args.turns, 7)),
                **{f"cost_{k}": round(v) for k, v in costs.items()},
                "sticky_over_off": round(costs["sticky"] / costs["off"] - 1, 4),
                "ephemeral_over_off": round(costs["ephemeral"] / costs["off"] - 1, 4),
            }))
        return
    for ttl in ("5m", "1h"):
        cached = replay(args.turns, args.seed, cache=True, ttl=ttl)
        plain = replay(args.turns, args.seed, cache=False, ttl=ttl)
        u, p = cached["usage"], plain["usage"]
        cost_cached = u.input_tokens + READ * u.cache_read_tokens + WRITE[ttl] * u.cache_write_tokens
        cost_plain = float(p.input_tokens + p.cache_read_tokens + p.cache_write_tokens)
        bound, new, reused = lower_bound(cached["bodies"])
        assert plain["bodies"] and len(plain["bodies"]) == len(cached["bodies"])
        print(json.dumps({
            "bench": "cache_cost", "ttl": ttl, "turns": args.turns, "requests": len(cached["bodies"]),
            "compactions": cached["compactions"],
            "prompt_tokens": u.prompt_tokens, "uncached_prompt_tokens_same_requests": p.prompt_tokens,
            "input_tokens": u.input_tokens, "cache_read_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens,
            "ideal_new_tokens": new, "ideal_reused_tokens": reused,
            "cost_with_caching": round(cost_cached), "cost_without_caching": round(cost_plain),
            "cost_lower_bound": round(bound),
            "with_caching_over_lower_bound": round(cost_cached / bound - 1, 4),
            "saving_vs_uncached": round(1 - cost_cached / cost_plain, 4),
            "usd_with_caching": round(cost_cached * USD_PER_TOKEN, 4),
            "usd_without_caching": round(cost_plain * USD_PER_TOKEN, 4),
            "usd_lower_bound": round(bound * USD_PER_TOKEN, 4),
            "replay_seconds": round(cached["seconds"], 2),
        }))


if __name__ == "__main__":
    main()
