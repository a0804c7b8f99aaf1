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
A last line (``summary_input``) gives the tokens the summarizer is sent for a forced
compaction of 40 tool turns, with the pre-pass that sends old tool outputs as one-liners
and, as the baseline in the same run, without it.

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
    summary_input()
    return 0


class CountingSummarizer(InstantSummarizer):
    """Records the size of what the summarizer is sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def complete(self, request: hermes.LLMRequest) -> hermes.LLMResponse:
        self.sent.append("\n".join(str(m.get("content")) for m in request.messages))
        return super().complete(request)


def tool_turns(turns: int, chars: int = 3_000) -> list[dict[str, Any]]:
    """``turns`` rounds of one ``read_file`` call with a ``chars``-character output."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant."}]
    for i in range(turns):
        body = f"contents of src/m{i}.py\n" + "\n".join(f"line {k}: value_{i}_{k} = compute({k})"
                                                       for k in range(chars // 32))
        msgs += [{"role": "user", "content": f"read file {i}"},
                 {"role": "assistant", "content": "", "tool_calls": [{
                     "id": f"c{i}", "type": "function",
                     "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": body},
                 {"role": "assistant", "content": f"File {i} read."}]
    msgs.append({"role": "user", "content": "what did you find?"})
    return msgs


def summary_input(turns: int = 40) -> None:
    """Tokens the summarizer is sent for a forced compaction of ``turns`` tool turns, with
    the pre-pass (old tool outputs as one-liners) and, as the baseline in the same run,
    without it (every output of the middle in full, what the engine did before)."""
    msgs = tool_turns(turns)
    figures = {}
    for label, keep in (("before_prune", 10**9), ("after_prune", None)):
        summarizer = CountingSummarizer()
        eng = Compressor(auxiliary=lambda s=summarizer: (s, "instant"))
        eng.update_model("bench-model", 40_000)  # a small window: the middle holds most turns
        if keep is not None:
            eng.summary_keep_recent_results = keep
        out = eng.compress(msgs, force=True)
        assert not transcript_problems(out)
        figures[label] = {"summary_input_tokens": hermes.estimate_tokens(summarizer.sent[-1]),
                          "summary_input_chars": len(summarizer.sent[-1]),
                          "summarized_messages": eng.last_compression["summarized_messages"]}
    before, after = figures["before_prune"], figures["after_prune"]
    print(json.dumps({
        "benchmark": "summary_input", "tool_turns": turns, "messages": len(msgs),
        "tokens": hermes.estimate_messages_tokens(msgs), **{f"{k}_{lbl}": v for lbl, f in figures.items()
                                                            for k, v in f.items()},
        "ratio_after_vs_before": round(after["summary_input_tokens"] / max(before["summary_input_tokens"], 1), 3),
    }))


if __name__ == "__main__":
    sys.exit(main())
