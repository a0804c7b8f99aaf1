"""CPU time of one compaction by the ``compressor`` engine on tool-heavy transcripts.

For transcripts of about 200, 1,000 and 5,000 messages (user requests, rounds of parallel
tool calls with outputs of a few hundred to a few thousand characters, some repeated, some
errors, some long JSON arguments), this times ``Compressor.compress`` — all four phases:
duplicate collapse and tail pressure relief, boundaries, serializing the middle for the
summarizer and cleaning its answer, assembly and orphan removal — with a fast in-process
summarizer, so that only Hermes' own work is measured. Beside it, in the same run, the
plain baseline: ``copy.deepcopy`` of the same transcript. A third figure times the
deterministic local fallback summary (the path taken when no summarizer is reachable).

Printed, one JSON line each: the machine, then per size the medians of ``--repeat`` runs
in CPU milliseconds (``time.process_time``), with the transcript's size before and after.

Run: ``.venv/bin/python benchmarks/compaction.py [--sizes 200,1000,5000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import hermes
from hermes.plugins.compressor.engine import Compressor
from hermes.testing.conformance.context import make_conversation, transcript_problems

WINDOW = 200_000  # a Claude-sized window: trigger 150,000 tokens, tail budget 30,000


class InstantSummarizer(hermes.LLMClient):
    """A summarizer that answers at once with a fixed checkpoint (benchmark only: it
    keeps model latency out of the measurement)."""

    name = "instant"

    def complete(self, request: hermes.LLMRequest) -> hermes.LLMResponse:
        size = len(request.messages[0]["content"])
        return hermes.LLMResponse(content=f"## Goal\nBenchmark work.\n## Progress\n### Done\n- read {size} chars")


def transcript(messages: int, seed: int = 7) -> list[dict[str, Any]]:
    """A valid tool-heavy conversation of about ``messages`` messages ending on a request."""
    turns = max(1, messages // 9)
    while True:
        msgs = make_conversation(turns, seed=seed, result_chars=(300, 3_000))
        if len(msgs) >= messages:
            return msgs
        turns += max(1, (messages - len(msgs)) // 9 + 1)


def cpu_ms(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median CPU milliseconds of ``fn()`` over ``repeat`` runs, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        times.append((time.process_time() - start) * 1000)
    return round(statistics.median(times), 2), result


def engine(summarizer: bool) -> Compressor:
    aux = (lambda: (InstantSummarizer(), "instant")) if summarizer else None
    eng = Compressor(auxiliary=aux)
    eng.update_model("bench-model", WINDOW)
    return eng


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,1000,5000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    logging.getLogger("hermes.compressor").setLevel(logging.ERROR)  # fallback runs warn by design

    print(json.dumps({
        "machine": platform.machine(), "system": platform.system(), "python": sys.version.split()[0],
        "cpus": os.cpu_count(), "processor": platform.processor() or None,
        "window_tokens": WINDOW,
    }))
    for size in (int(s) for s in args.sizes.split(",")):
        msgs = transcript(size)
        tokens = hermes.estimate_messages_tokens(msgs)
        baseline, _ = cpu_ms(lambda m=msgs: copy.deepcopy(m), args.repeat)
        # A fresh engine per run: every run is a first compaction of the same transcript.
        compress, out = cpu_ms(lambda m=msgs: engine(True).compress(m, force=True), args.repeat)
        fallback, fb_out = cpu_ms(lambda m=msgs: engine(False).compress(m, force=True), args.repeat)
        assert not transcript_problems(out) and not transcript_problems(fb_out)
        print(json.dumps({
            "benchmark": "compaction", "messages": len(msgs), "tokens": tokens,
            "compress_cpu_ms": compress, "fallback_compress_cpu_ms": fallback,
            "deepcopy_cpu_ms": baseline, "compress_vs_deepcopy": round(compress / max(baseline, 1e-6), 1),
            "messages_after": len(out), "tokens_after": hermes.estimate_messages_tokens(out),
            "repeat": args.repeat,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
