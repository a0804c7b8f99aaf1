"""Upstream's cheap pre-pass: old tool outputs are pruned to one-liners before the middle
is summarized, so a forced compaction of many tool turns no longer sends the summarizer
every old output in full (only the newest few, which the active task most likely still
needs, go in verbatim)."""

from __future__ import annotations

import json
import random
from typing import Any

import hermes
from hermes.plugins.compressor.prune import SUMMARY_KEEP_RECENT_RESULTS


class CapturingSummarizer(hermes.LLMClient):
    name = "capture"

    def __init__(self) -> None:
        self.inputs: list[str] = []

    def complete(self, request: hermes.LLMRequest) -> hermes.LLMResponse:
        self.inputs.append("\n".join(str(m.get("content")) for m in request.messages))
        return hermes.LLMResponse(content="## Goal\nWork on the files.\n## Progress\n### Done\n- read them")


def tool_turns(n: int, chars: int = 3_000) -> list[dict[str, Any]]:
    rng = random.Random(n)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are careful."}]
    for i in range(n):
        body = f"OUTPUT-{i:03d} " + " ".join(rng.choice(("alpha", "beta", "gamma", "delta"))
                                             for _ in range(chars // 6))
        msgs += [
            {"role": "user", "content": f"read file {i}"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": f"c{i}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": body},
            {"role": "assistant", "content": f"File {i} read."},
        ]
    msgs.append({"role": "user", "content": "now summarize what you found"})
    return msgs


def test_forced_compaction_of_40_tool_turns_prunes_old_outputs(engine_factory):
    summarizer = CapturingSummarizer()
    engine = engine_factory(window=40_000, auxiliary=lambda: (summarizer, "capture"))
    msgs = tool_turns(40)
    out = engine.compress(msgs, force=True)
    assert engine.last_compression["committed"], engine.last_compression
    (sent,) = summarizer.inputs
    summarized = engine.last_compression["summarized_messages"]
    assert summarized >= 40  # most of the 40 turns are in the middle
    in_full = [i for i in range(40) if f"OUTPUT-{i:03d}" in sent]
    # only the newest few outputs of the middle go in verbatim ...
    assert 0 < len(in_full) <= SUMMARY_KEEP_RECENT_RESULTS
    assert in_full == sorted(in_full)[-len(in_full):]
    # ... every older one is still visible as a one-liner naming its tool and path
    # (turn 0 sits in the protected head, not in the summarized middle)
    for i in range(1, in_full[0]):
        assert f"[read_file] path=src/m{i}.py" in sent, i
    assert len(sent) < 40 * 3_000 / 3
    # the pruned copies never leak into the transcript the engine returns
    assert not any(m.get("role") == "tool" and "output cleared" in str(m.get("content"))
                   for m in out if m not in msgs)
    assert engine.last_compression["summary_input_tokens"] > 0


def test_pruning_leaves_the_callers_messages_alone(engine_factory):
    summarizer = CapturingSummarizer()
    engine = engine_factory(window=40_000, auxiliary=lambda: (summarizer, "capture"))
    msgs = tool_turns(12)
    snapshot = json.dumps(msgs)
    engine.compress(msgs, force=True)
    assert json.dumps(msgs) == snapshot
