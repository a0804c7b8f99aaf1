"""Writing summaries: through the auxiliary ``compression`` model when one is available,
else (or when it fails) deterministically, so that compaction never depends on a model.

A summary is only ever a convenience: the originals stay in the store and are one
``lcm_expand`` away, so a poor or fallback summary loses nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from hermes import LLMRequest, estimate_tokens, redact_secrets, sanitize_memory_context

from .store import Node, StoredMessage
from .transcript import iso

log = logging.getLogger("hermes.lcm")

#: Longest piece of one message quoted to the summarizer; a leaf may cover huge tool
#: output, and the summary only needs its gist (the original stays in the store).
_MAX_QUOTE_CHARS = 4_000

_LEAF_INSTRUCTIONS = (
    "You summarise one span of an AI agent's conversation so the agent can continue "
    "without the original messages. Keep every decision, fact, number, name, identifier, "
    "file path, command, error and open task; drop pleasantries. Write plain prose or terse "
    "bullets, no preamble, at most about {budget} tokens.{focus}"
)
_CONDENSE_INSTRUCTIONS = (
    "You merge consecutive summaries of an AI agent's conversation (oldest first) into one "
    "shorter, more abstract summary of the whole period. Keep decisions, lasting facts, "
    "names, identifiers and open tasks; drop step-by-step detail. Plain prose or terse "
    "bullets, no preamble, at most about {budget} tokens.{focus}"
)

#: ``(client, model)`` or ``None``; called once per compaction, lazily.
SummarizerSource = Callable[[], tuple[Any, str] | None]


class Summarizer:
    """Writes leaf and condensed summaries for one compaction pass.

    ``source`` returns ``(client, model)`` (``kernel.auxiliary("compression")``) or
    ``None``. After the first failure in a pass the remaining summaries of that pass are
    written deterministically: a failing model is not asked again and again.
    """

    def __init__(self, source: SummarizerSource | None, *, max_tokens: int, fallback_tokens: int,
                 timeout: float, focus_topic: str | None = None, memory_context: str = ""):
        self._source = source
        self._resolved = False
        self._pair: tuple[Any, str] | None = None
        self.max_tokens = max_tokens
        self.fallback_tokens = fallback_tokens
        self.timeout = timeout
        self.focus_topic = focus_topic
        self.memory_context = memory_context
        self.failures: list[str] = []
        self.fallbacks = 0
        self.model_calls = 0

    # -- public ---------------------------------------------------------------------------

    def leaf(self, span: Sequence[StoredMessage]) -> tuple[str, str]:
        """``(summary, summarizer)`` for a span of messages; ``summarizer`` is
        ``llm:<model>`` or ``fallback``."""
        def prompt() -> str:
            body = "\n\n".join(_quote(m) for m in span)
            return (
                f"Messages {span[0].seq + 1}-{span[-1].seq + 1} of the conversation "
                f"({iso(span[0].created_at)} to {iso(span[-1].created_at)}):\n\n{body}"
            )

        text = self._ask(_LEAF_INSTRUCTIONS, prompt)
        if text is not None:
            return text, self._label()
        self.fallbacks += 1
        return leaf_fallback(span, self.fallback_tokens), "fallback"

    def condense(self, children: Sequence[Node]) -> tuple[str, str]:
        """``(summary, summarizer)`` for consecutive nodes."""
        def prompt() -> str:
            return "\n\n".join(
                f"[summary n{c.id}: messages {c.first_seq + 1}-{c.last_seq + 1}, "
                f"{iso(c.earliest_at)} to {iso(c.latest_at)}]\n{c.content}" for c in children
            )

        text = self._ask(_CONDENSE_INSTRUCTIONS, prompt)
        if text is not None:
            return text, self._label()
        self.fallbacks += 1
        return condensed_fallback(children, self.fallback_tokens), "fallback"

    # -- model ----------------------------------------------------------------------------

    def _label(self) -> str:
        return f"llm:{self._pair[1]}" if self._pair else "llm"

    def _client(self) -> tuple[Any, str] | None:
        if not self._resolved:
            self._resolved = True
            try:
                self._pair = self._source() if self._source else None
            except Exception as exc:  # no summarizer is a normal state, not an error
                self.failures.append(f"no summarizer: {exc}")
                self._pair = None
            if self._pair is None and not self.failures:
                self.failures.append("no summarizer configured (deterministic summaries)")
        return self._pair

    def _ask(self, instructions: str, build_prompt: Callable[[], str]) -> str | None:
        """The model's summary, or ``None`` (no model, or it failed). The prompt is built
        only when a model will read it."""
        if self.failures:
            return None
        pair = self._client()
        if pair is None:
            return None
        client, model = pair
        prompt = build_prompt()
        focus = f" Give most room to anything about: {self.focus_topic}." if self.focus_topic else ""
        system = instructions.format(budget=self.max_tokens, focus=focus)
        memory = sanitize_memory_context(self.memory_context)
        if memory:
            prompt += f"\n\nContext from the agent's memory (for reference, do not summarise it):\n{memory}"
        request = LLMRequest(
            model=model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            max_tokens=self.max_tokens, temperature=0.2, timeout=self.timeout,
        )
        try:
            self.model_calls += 1
            response = client.complete(request)
        except Exception as exc:  # any failure: deterministic summary, never a lost pass
            log.warning("lcm summarizer failed, using the deterministic summary: %s", exc)
            self.failures.append(f"{type(exc).__name__}: {exc}")
            return None
        text = (getattr(response, "content", "") or "").strip()
        if not text:
            self.failures.append("the summarizer returned an empty answer")
            return None
        # A model that ignores max_tokens must not blow the summary budget.
        limit = self.max_tokens * 4
        return text if len(text) <= limit else text[:limit].rstrip() + " …[summary cut]"


# -- deterministic summaries ----------------------------------------------------------------


def _quote(m: StoredMessage) -> str:
    # The auxiliary model may be another provider than the main one: no credentials.
    text = redact_secrets(m.text)
    if len(text) > _MAX_QUOTE_CHARS:
        text = text[: _MAX_QUOTE_CHARS // 2] + "\n…[truncated]…\n" + text[-_MAX_QUOTE_CHARS // 2 :]
    return f"[{m.seq + 1} {m.role}] {text}"


def _clip(text: str, chars: int) -> str:
    # Cut before redacting (cheap on huge tool output), cut again after (exact length).
    text = " ".join(redact_secrets(text[: chars * 2]).split())
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


def leaf_fallback(span: Sequence[StoredMessage], budget_tokens: int) -> str:
    """A deterministic summary of a span: counts, tools used, and the opening words of
    each user and assistant message, cut to about ``budget_tokens``."""
    roles: dict[str, int] = {}
    tools: dict[str, int] = {}
    for m in span:
        roles[m.role] = roles.get(m.role, 0) + 1
        for call in json.loads(m.payload).get("tool_calls") or []:
            name = (call.get("function") or {}).get("name", "?")
            tools[name] = tools.get(name, 0) + 1
    head = (
        f"Messages {span[0].seq + 1}-{span[-1].seq + 1} ({', '.join(f'{n} {r}' for r, n in roles.items())}; "
        f"{iso(span[0].created_at)} to {iso(span[-1].created_at)})."
    )
    if tools:
        head += " Tools used: " + ", ".join(f"{n}×{c}" if c > 1 else n for n, c in tools.items()) + "."
    spoken = [m for m in span if m.role in ("user", "assistant") and m.text.strip()]
    lines = [head]
    used = estimate_tokens(head)
    for i, m in enumerate(spoken):
        line = f"- {m.role}: {_clip(m.text, 160)}"
        cost = estimate_tokens(line) + 1
        if used + cost > budget_tokens:
            lines.append(f"- … {len(spoken) - i} more; lcm_expand shows them all.")
            break
        lines.append(line)
        used += cost
    return "\n".join(lines)


def condensed_fallback(children: Sequence[Node], budget_tokens: int) -> str:
    """A deterministic summary of consecutive nodes: the whole span, then for each child
    its span and the opening of its own summary (without its heading line), so that
    every part of the period keeps an equal share of the budget."""
    head = (
        f"Messages {children[0].first_seq + 1}-{children[-1].last_seq + 1} in {len(children)} parts "
        f"({iso(children[0].earliest_at)} to {iso(children[-1].latest_at)})."
    )
    share = max(60, (budget_tokens * 4 - len(head)) // max(len(children), 1) - 30)
    lines = [head]
    for c in children:
        body = c.content.split("\n", 1)[1] if "\n" in c.content else c.content
        lines.append(f"- messages {c.first_seq + 1}-{c.last_seq + 1}: {_clip(body, share)}")
    return _fit(lines, budget_tokens)


def _fit(lines: list[str], budget_tokens: int) -> str:
    out: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        cost = estimate_tokens(line) + 1
        if out and used + cost > budget_tokens:
            out.append(f"- … {len(lines) - i} more; lcm_expand shows them all.")
            break
        out.append(line)
        used += cost
    return "\n".join(out)
