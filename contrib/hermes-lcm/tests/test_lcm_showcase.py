"""The showcase: a 2,000-message session in which turn 3 states a unique fact. Both
engines are driven the same way (same turns, same host loop, same summarizer — the fake
LLM server behind the real OpenAI SDK client, answering with a summary that does not keep
the fact). After many compactions ``lcm`` still returns the fact verbatim through
``lcm_grep`` + ``lcm_expand``; the default ``compressor`` has lost it.

Run ``pytest contrib/hermes-lcm/tests/test_lcm_showcase.py -s`` to see the side-by-side
report that ``contrib/hermes-lcm/README.md`` quotes.
"""

from __future__ import annotations

import json

from lcm_helpers import FACT, conversation, drive

from hermes import LLMRequest
from hermes.testing.fakellm import Reply

WINDOW = 8_000


def lossy_summary(request):
    """What a summarizer under pressure writes: the gist, not the details."""
    return Reply(text="## Goal\nKeep the platform work moving.\n## Progress\nThe user and the assistant "
                      "went through deploy, billing, cache, alerts and auth questions; tools were used "
                      "to search notes. Most items are done or pending review.")


def test_lcm_recovers_a_turn_3_fact_the_compressor_lost(lcm_kernel, fake_llm):
    fake_llm.handler = lossy_summary
    kernel = lcm_kernel({"fresh_tail_count": 16}, **fake_llm.config(provider="openai"))
    turns = list(conversation(800, seed=2026, fact_turn=2, tool_every=4, max_calls=1))
    assert sum(len(t) for t in turns) == 2_000
    assert FACT in turns[2][0]["content"]  # the third turn states it

    # Warm the SDK client up (import, connection) so that neither engine's timing pays for it.
    client, model = kernel.auxiliary("compression")
    client.complete(LLMRequest(model=model, messages=[{"role": "user", "content": "warm up"}], max_tokens=8))

    report = {}
    for name in ("lcm", "compressor"):
        engine = kernel.create("context-engine", name)
        engine.update_model("fake-model", WINDOW)
        engine.on_session_start(f"showcase-{name}")
        stats: dict = {}
        live, seen = drive(engine, iter(turns), stats=stats)
        assert seen == 2_000 and stats["compactions"] >= 5
        in_live = any(FACT in json.dumps(m) for m in live) or any("Thursday" in json.dumps(m) for m in live)
        report[name] = {"engine": engine, "live": live, "in_live": in_live, **stats}

    lcm, compressor = report["lcm"], report["compressor"]
    engine = lcm["engine"]

    # lcm: the fact left the live context, but one grep and one expand bring it back verbatim.
    grep = json.loads(engine.handle_tool_call("lcm_grep", {"pattern": "password rotation"},
                                              messages=lcm["live"][1:]))
    [hit] = grep["messages"]
    page = json.loads(engine.handle_tool_call("lcm_expand", {**hit["expand"], "max_chars": 500},
                                              messages=lcm["live"][1:]))
    restored = page["messages"][0]
    assert restored["content"] == turns[2][0]["content"] and FACT in restored["content"]
    node = json.loads(engine.handle_tool_call("lcm_describe", {"node_id": hit["lineage"][-1]},
                                              messages=lcm["live"][1:]))
    assert not lcm["in_live"]

    # compressor: the fact is gone from its live context and it has nothing to search with.
    assert not compressor["in_live"]
    attempt = compressor["engine"].handle_tool_call("lcm_grep", {"pattern": "password rotation"},
                                                    messages=compressor["live"][1:])
    assert "error" in json.loads(attempt)

    engine.close()  # folds the write-ahead log into the database file
    stats = engine.store.stats()
    rows = [
        ("compactions", lcm["compactions"], compressor["compactions"]),
        ("compaction time, total", f"{lcm['compress_seconds']:.2f} s", f"{compressor['compress_seconds']:.2f} s"),
        ("live messages at the end", len(lcm["live"]), len(compressor["live"])),
        ("fact in live context", "no" if not lcm["in_live"] else "yes",
         "no" if not compressor["in_live"] else "yes"),
        ("search tool", "lcm_grep", "none"),
    ]
    print(f"\n2,000-message session; turn 3 said: {FACT!r}")
    print(f"{'':28}{'lcm':>24}{'compressor':>24}")
    for label, a, b in rows:
        print(f"{label:28}{a!s:>24}{b!s:>24}")
    print(f"\nlcm_grep('password rotation') -> message {hit['message_id']} (#{hit['position']}), "
          f"node {hit['node_id']}, lineage {' -> '.join(hit['lineage'])}")
    print(f"lcm_expand({hit['expand']['node_id']!r}, cursor={hit['expand']['cursor']!r}) -> "
          f"{restored['role']}: {restored['content']!r}")
    print(f"lcm_describe({node['node_id']!r}) -> {node['kind']}, depth {node['depth']}, messages "
          f"#{node['messages']['positions'][0]}-#{node['messages']['positions'][1]}, "
          f"{node['tokens']['source_messages']:,} source tokens in a {node['tokens']['summary']}-token summary")
    print(f"compressor.handle_tool_call('lcm_grep', ...) -> {attempt}")
    print(f"lcm store: {stats['messages']:,} messages, {stats['nodes']} nodes, depth {stats['max_depth']}, "
          f"{stats['db_bytes'] / 1024:,.0f} KiB on disk")
