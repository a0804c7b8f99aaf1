"""Shared helpers of the hermes-lcm tests (a uniquely named module, so that it never
collides with another test tree's helpers): a synthetic conversation generator and a host
loop that drives an engine the way the runtime does."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

SYSTEM = {"role": "system", "content": "You are a careful engineering assistant."}
FACT = "the staging database password rotation day is Thursday"
WINDOW = 8_000


def conversation(turns: int, *, seed: int = 0, fact_turn: int | None = None,
                 tool_every: int = 4, max_calls: int = 2) -> Iterator[list[dict[str, Any]]]:
    """Yield one turn at a time: ``[user, (assistant tool call, tool result)*, assistant]``;
    every ``tool_every``-th turn makes one to ``max_calls`` tool calls. Deterministic for a
    seed; ``fact_turn`` states :data:`FACT` in that turn's user message."""
    rng = random.Random(seed)
    topics = ["deploy", "billing", "search index", "cache", "migrations", "alerts", "auth"]
    for i in range(turns):
        topic = topics[rng.randrange(len(topics))]
        if i == fact_turn:
            text = f"Note for later: {FACT}. Please remember it."
        else:
            text = f"Turn {i}: what about the {topic} work? " + " ".join(
                rng.choice(["status", "plan", "risk", "owner", "deadline", "metric"]) for _ in range(rng.randrange(8, 30)))
        turn = [{"role": "user", "content": text}]
        if tool_every and i % tool_every == 1:
            calls = rng.randrange(1, max_calls + 1)
            ids = [f"call_{i}_{k}" for k in range(calls)]
            turn.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": "search_notes", "arguments": json.dumps({"query": topic, "n": k})}}
                for k, cid in enumerate(ids)]})
            for k, cid in enumerate(ids):
                turn.append({"role": "tool", "tool_call_id": cid, "name": "search_notes",
                             "content": f"{topic} notes #{k}: " + "lorem ipsum " * rng.randrange(5, 40)})
        turn.append({"role": "assistant", "content": f"On the {topic} question (turn {i}): "
                     + " ".join(rng.choice(["done", "pending", "blocked", "shipped", "reviewed"]) for _ in range(rng.randrange(5, 25)))})
        yield turn


def drive(engine: Any, turns: Iterator[list[dict[str, Any]]], *,
          on_compact: Callable[[list[dict[str, Any]], list[dict[str, Any]]], None] | None = None,
          stats: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Drive ``engine`` the way the runtime does: append each turn, report the provider's
    prompt size (estimated), compact when the engine asks (forced when the prompt is over
    the window) and continue with what it returned. Returns ``(live transcript, messages seen)``; ``stats`` (if given) collects
    ``compactions`` and ``compress_seconds``."""
    from hermes import call_compress, estimate_messages_tokens

    live: list[dict[str, Any]] = [dict(SYSTEM)]
    seen = 0
    stats = {} if stats is None else stats
    stats.setdefault("compactions", 0)
    stats.setdefault("compress_seconds", 0.0)
    for turn in turns:
        live.extend(turn)
        seen += len(turn)
        prompt = estimate_messages_tokens(live)
        engine.update_from_response({"prompt_tokens": prompt, "completion_tokens": 50,
                                     "total_tokens": prompt + 50})
        # Like the runtime: compact when the engine says so, and force it when the prompt
        # no longer fits the window (the provider's context-length error).
        overflow = bool(engine.context_length) and prompt > engine.context_length
        if engine.should_compress() or overflow:
            before = [dict(m) for m in live]
            started = time.perf_counter()
            after = call_compress(engine, live, current_tokens=prompt, force=overflow)
            stats["compress_seconds"] += time.perf_counter() - started
            assert live == before, "compress mutated its input"
            if after != before:
                stats["compactions"] += 1
            if on_compact:
                on_compact(before, after)
            live = after
        engine.on_turn_complete([m for m in live if m["role"] != "system"])
    return live, seen
