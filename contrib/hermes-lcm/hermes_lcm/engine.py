"""``LCMEngine``: the lossless context engine.

Every message the host shows the engine is stored (append-only SQLite). Compaction
summarises the oldest unsummarised span into leaf nodes and condenses leaves into
higher nodes when they accumulate; the live context becomes
``system + one summary message naming the top-level nodes + the fresh tail``. The tools
``lcm_grep`` / ``lcm_describe`` / ``lcm_expand`` reach back into the store, so nothing
that left the context is ever out of reach.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from hermes import (
    SUMMARY_END_MARKER,
    ContextEngine,
    estimate_messages_tokens,
)

from . import tools
from .settings import LCMSettings
from .store import LCMStore, Node, StoredMessage
from .summarize import Summarizer
from .transcript import (
    MERGE_SEPARATOR,
    Message,
    fingerprint,
    is_summary,
    render_summary,
    split_summary,
)

log = logging.getLogger("hermes.lcm")

#: Share of the compaction threshold the verbatim tail may use, and the summary block.
#: Together they leave room below the threshold for the next turns.
TAIL_BUDGET = 0.5
SUMMARY_BUDGET = 0.25


class LCMEngine(ContextEngine):
    """Lossless context management (``context.engine: lcm``).

    ``LCMEngine(kernel)`` reads ``plugins.lcm.*`` (see :class:`LCMSettings`), keeps its
    database at ``plugins.lcm.db_path`` (default ``$HERMES_HOME/lcm.db``) and summarises
    through ``kernel.auxiliary("compression")``. Without a kernel (scripts, tests) pass
    ``home`` or ``settings`` and, optionally, ``summarizer`` — a zero-argument callable
    returning ``(client, model)`` or ``None``.

    After :meth:`compress`, :attr:`last_compression` tells what happened: ``leaves`` and
    ``condensed`` (new node ids), ``summarised_messages``, ``fallback`` (a deterministic
    summary was used), ``aborted`` (why nothing was done), timings and token figures.
    """

    def __init__(self, kernel: Any = None, *, settings: LCMSettings | None = None,
                 home: str | os.PathLike[str] | None = None, summarizer: Any = None):
        self.kernel = kernel
        if settings is None:
            settings = LCMSettings.from_config(kernel.plugin_config("lcm") if kernel is not None else {})
        self.settings = settings
        self.threshold_percent = settings.threshold
        self.protect_last_n = settings.fresh_tail_count
        self._home = Path(home) if home is not None else (Path(kernel.home) if kernel is not None else None)
        if summarizer is None and kernel is not None:
            summarizer = lambda: kernel.auxiliary("compression")  # noqa: E731
        self._summarizer_source = summarizer if settings.summarizer == "auxiliary" else None
        self._store: LCMStore | None = None
        self._lock = threading.RLock()
        self._session_id: str | None = None
        self._conversation_id: int | None = None
        self._noop_size: int | None = None
        # (conversation, copies of the originals last seen, their seqs): the fast path of
        # ingest, so that each turn costs one comparison per live message, not a hash.
        self._seen: tuple[int, list[Message], list[int]] | None = None
        self.last_compression: dict[str, Any] = {}

    # -- identity and storage ----------------------------------------------------------------

    @property
    def name(self) -> str:
        """``lcm``."""
        return "lcm"

    @property
    def db_path(self) -> Path:
        """Where the store lives."""
        home = self._home or Path(os.environ.get("HERMES_HOME") or "~/.hermes").expanduser()
        if self.settings.db_path:
            path = Path(self.settings.db_path).expanduser()
            return path if path.is_absolute() else home / path
        return home / "lcm.db"

    @property
    def store(self) -> LCMStore:
        """The store, opened on first use."""
        with self._lock:
            if self._store is None:
                self._store = LCMStore(self.db_path)
            return self._store

    def close(self) -> None:
        """Close the database connection (a later call reopens it)."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    @property
    def conversation_id(self) -> int | None:
        """The store's id of the conversation this engine is working on (``None`` until
        the first message or tool call)."""
        return self._conversation_id

    def _conversation(self, summary_ids: list[int] | None = None) -> int:
        """The conversation to use: the one the summary message names (a resumed or
        handed-over transcript), else the current one, else a new one for this session."""
        if summary_ids:
            found = self.store.conversation_of_nodes(summary_ids)
            if found is not None:
                self._conversation_id = found
                return found
        if self._conversation_id is None:
            key = self._session_id or f"anonymous-{uuid.uuid4().hex}"
            self._conversation_id = self.store.conversation(key)
        return self._conversation_id

    # -- ingestion ---------------------------------------------------------------------------

    def _originals(self, messages: list[Message]) -> tuple[list[Message], list[int]]:
        """The host's transcript without system messages and without this engine's own
        summary block: ``(originals, node ids the summary named)``."""
        originals: list[Message] = []
        named: list[int] = []
        for msg in messages:
            if not isinstance(msg, dict) or msg.get("role") == "system":
                continue
            if is_summary(msg):
                ids, original = split_summary(msg)
                named.extend(ids)
                if original is not None:
                    originals.append(original)
                continue
            originals.append(msg)
        return originals, named

    def ingest(self, messages: list[Message]) -> tuple[int, list[Message], list[int]]:
        """Store what is new in ``messages``: ``(conversation, originals, their seqs)``.

        The host hands back the transcript it holds: a stretch the store already has
        (the tail kept by the last compaction, or everything so far) followed by new
        messages. Usually the originals seen last time are exactly its beginning (checked
        by equality against copies kept in memory, while the store has not moved on);
        otherwise — a resumed session, a host that dropped a compaction — the longest
        suffix of the stored conversation that is a prefix of the incoming originals is
        found by fingerprint. Everything after it is appended.
        """
        with self._lock:
            originals, named = self._originals(messages)
            conv = self._conversation(named)
            if not originals:
                return conv, [], []
            seen = self._seen
            if (seen is not None and seen[0] == conv and seen[2] and len(seen[1]) <= len(originals)
                    and self.store.last_seq(conv) == seen[2][-1] and originals[: len(seen[1])] == seen[1]):
                known, seqs = list(seen[1]), list(seen[2])
            else:
                recent = self.store.recent(conv, len(originals))
                overlap = _overlap([fp for _, fp in recent], [fingerprint(m) for m in originals])
                known = [dict(m) for m in originals[:overlap]]
                seqs = [seq for seq, _ in recent[len(recent) - overlap:]]
            new = originals[len(known):]
            if new:
                seqs += self.store.append(conv, new, self._session_id)
                known += [dict(m) for m in new]
            self._seen = (conv, known, seqs)
            return conv, originals, seqs

    # -- the ContextEngine contract ------------------------------------------------------------

    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Record the provider's counts of the last call."""
        usage = usage or {}
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens") or 0)
        self.last_total_tokens = int(usage.get("total_tokens") or self.last_prompt_tokens + self.last_completion_tokens)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Compact once the prompt reaches ``plugins.lcm.threshold`` of the window."""
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return self.threshold_tokens > 0 and tokens is not None and tokens >= self.threshold_tokens

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        """The rough size of ``messages`` is past the threshold (and the last pass at this
        size did not already find nothing to compact)."""
        if self.threshold_tokens <= 0 or len(messages) == self._noop_size:
            return False
        return estimate_messages_tokens(messages) >= self.threshold_tokens

    def has_content_to_compress(self, messages: list[Message]) -> bool:
        """Whether some older span could be summarised (a forced pass would do work)."""
        originals, _ = self._originals(list(messages))
        return _choose_cut(originals, list(range(len(originals))), covered=-1,
                           fresh_tail=1, tail_budget=None) is not None

    def compress(self, messages: list[Message], current_tokens: int | None = None,
                 focus_topic: str | None = None, force: bool = False,
                 memory_context: str = "") -> list[Message]:
        """Store every message, summarise the oldest unsummarised span (leaf nodes),
        condense accumulated nodes, and return ``system + summary message + fresh tail``.

        The fresh tail is the newest ``fresh_tail_count`` messages (fewer when they alone
        pass half the threshold, or when ``force``), always starting at an assistant or
        user message so that no tool call is parted from its results, and always holding
        the newest user message. ``messages`` is never mutated. When there is nothing to
        summarise the transcript comes back unchanged (as a copy) and
        ``last_compression["aborted"]`` says why.
        """
        started = time.perf_counter()
        messages = [dict(m) for m in messages]
        with self._lock:
            head: list[Message] = []
            for msg in messages:
                if msg.get("role") != "system":
                    break
                head.append(msg)
            conv, originals, seqs = self.ingest(messages)
            covered = self.store.covered_upto(conv)
            tail_budget = int(self.threshold_tokens * TAIL_BUDGET) if self.threshold_tokens else None
            fresh_tail = 1 if force else self.settings.fresh_tail_count
            cut = _choose_cut(originals, seqs, covered=covered, fresh_tail=fresh_tail, tail_budget=tail_budget)
            tokens_before = current_tokens or estimate_messages_tokens(messages)
            self.last_compression = {"aborted": None, "fallback": False, "leaves": [], "condensed": [],
                                     "summarised_messages": 0, "tokens_before": tokens_before}
            if cut is None:
                self._noop_size = len(messages)
                self.last_compression["aborted"] = (
                    "nothing to summarise yet: every message is in the fresh tail "
                    f"(plugins.lcm.fresh_tail_count = {self.settings.fresh_tail_count})"
                )
                return messages
            span = self.store.messages_in_range(conv, covered, seqs[cut])
            summarizer = Summarizer(
                self._summarizer_source, max_tokens=self.settings.summary_max_tokens,
                fallback_tokens=self.settings.fallback_max_tokens, timeout=self.settings.summary_timeout,
                focus_topic=focus_topic, memory_context=memory_context or "",
            )
            leaves = [self._leaf(conv, chunk, summarizer) for chunk in _chunks(span, self.settings.leaf_chunk_tokens)]
            condensed = self._condense(conv, summarizer)
            roots = self.store.roots(conv)
            tail = originals[cut:]
            out = head + _with_summary(roots, tail, self._summary_budget())
            if self._seen is not None and len(self._seen[1]) == len(originals):
                self._seen = (conv, self._seen[1][cut:], self._seen[2][cut:])

            self._noop_size = None
            self.compression_count += 1
            self.last_prompt_tokens = -1  # compaction ran: wait for the provider's real count
            self.last_compression.update({
                "leaves": [tools.node_ref(n.id) for n in leaves],
                "condensed": [tools.node_ref(n.id) for n in condensed],
                "summarised_messages": len(span),
                "fallback": summarizer.fallbacks > 0,
                "summarizer_failures": summarizer.failures,
                "model_calls": summarizer.model_calls,
                "top_level_nodes": [tools.node_ref(r.id) for r in roots],
                "messages_before": len(messages),
                "messages_after": len(out),
                "tokens_after": estimate_messages_tokens(out),
                "seconds": round(time.perf_counter() - started, 4),
            })
            return out

    def _leaf(self, conv: int, span: list[StoredMessage], summarizer: Summarizer) -> Node:
        content, who = summarizer.leaf(span)
        return self.store.add_leaf(conv, span, content, who)

    def _condense(self, conv: int, summarizer: Summarizer) -> list[Node]:
        """Condense top-level nodes, repeatedly: the oldest run of ``leaf_fanout`` nodes
        of one depth becomes their parent; and while the top-level summaries are over
        their share of the threshold, the oldest run of two or more same-depth nodes is
        condensed early. (What still does not fit is shown by id only; see
        :func:`_with_summary`.)"""
        made: list[Node] = []
        fanout = self.settings.leaf_fanout
        while True:
            roots = self.store.roots(conv)
            group = _oldest_run(roots, fanout, fanout)
            if group is None and sum(r.tokens for r in roots) > self._summary_budget():
                group = _oldest_run(roots, 2, fanout)
            if group is None:
                return made
            content, who = summarizer.condense(group)
            made.append(self.store.add_condensed(conv, group, content, who))

    def _summary_budget(self) -> float:
        return self.threshold_tokens * SUMMARY_BUDGET if self.threshold_tokens else float("inf")

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """Remember the session; its conversation is found or created on first use."""
        with self._lock:
            if kwargs.get("hermes_home") and self._home is None and self.kernel is None:
                self._home = Path(kwargs["hermes_home"])
            if session_id != self._session_id:
                self._session_id = session_id
                self._conversation_id = None
            if kwargs.get("context_length") and not self.context_length:
                # Only for hosts that never call update_model; never override the host's call.
                self.update_model(str(kwargs.get("model") or ""), int(kwargs["context_length"]))

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        """Store whatever of the final transcript is not stored yet."""
        self._safe_ingest(messages)

    def on_session_reset(self) -> None:
        """``/new``: zero the counters; the next messages start a new conversation."""
        super().on_session_reset()
        with self._lock:
            self._session_id = None
            self._conversation_id = None
            self._noop_size = None
            self._seen = None

    def on_turn_complete(self, messages: list[Message], usage: dict | None = None, **kw: Any) -> None:
        """Store the turn's messages now, so ``lcm_grep`` sees them before any compaction."""
        self._safe_ingest(messages)

    def _safe_ingest(self, messages: list[Message]) -> None:
        try:
            if messages:
                self.ingest(list(messages))
        except Exception as exc:  # observation must never break a turn
            log.warning("lcm could not store messages: %s", exc)

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """``lcm_grep``, ``lcm_describe`` and ``lcm_expand`` (OpenAI function schemas)."""
        return [json.loads(json.dumps(s)) for s in tools.SCHEMAS]

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run a tool and return its JSON answer (errors as ``{"error": ...}``).
        ``messages`` (the live transcript) tells which conversation is meant."""
        if name not in tools.TOOL_NAMES:
            return json.dumps({"error": f"Unknown context engine tool: {name}"})
        try:
            with self._lock:
                live = kwargs.get("messages")
                conv = self.ingest(list(live))[0] if live else self._conversation()
                args = dict(args or {})
                if name == "lcm_grep":
                    result = tools.grep(self.store, conv, args, self.settings)
                elif name == "lcm_describe":
                    result = tools.describe(self.store, conv, args)
                else:
                    result = tools.expand(self.store, conv, args, self.settings)
        except tools.ToolError as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # a tool never raises into the turn
            log.warning("lcm tool %s failed: %s", name, exc, exc_info=exc)
            result = {"error": f"{name} failed: {type(exc).__name__}: {exc}"}
        return json.dumps(result, ensure_ascii=False, default=str)

    def forget(self, request: Any) -> Any:
        """``hermes forget``: scrub the text from this engine's store (messages and
        summaries); whole sessions cannot be cut out of the summary DAG, so a request
        without a query is answered "cannot forget"."""
        import re

        from hermes import ForgetReport

        component = f"context engine lcm ({self.db_path})"
        query = (request.query or "").strip()
        if not query:
            return ForgetReport(component=component, supported=False,
                                note="lcm removes text, not whole sessions (its summaries span "
                                     "them); give a QUERY as well")
        if not self.db_path.exists():
            return ForgetReport(component=component, note="no store yet")
        pattern = re.compile(re.escape(query), re.IGNORECASE)
        found = self.store.forget(pattern, "[forgotten]", session_ids=request.session_ids,
                                  before=request.before, dry_run=request.dry_run)
        return ForgetReport(component=component, found=found,
                            removed=0 if request.dry_run else len(found))

    def get_status(self) -> dict[str, Any]:
        """The base figures plus the store's: path, messages, nodes, depth."""
        status = super().get_status()
        status["engine"] = self.name
        status["db_path"] = str(self.db_path)
        try:
            with self._lock:
                status["store"] = self.store.stats(self._conversation_id) if self._conversation_id else self.store.stats()
        except Exception as exc:  # status must always answer
            status["store"] = {"error": str(exc)}
        return status


# -- pure helpers -------------------------------------------------------------------------------


def _overlap(stored: list[str], incoming: list[str]) -> int:
    """The length of the longest suffix of ``stored`` that is a prefix of ``incoming``."""
    for size in range(min(len(stored), len(incoming)), 0, -1):
        if stored[len(stored) - size] == incoming[0] and stored[len(stored) - size:] == incoming[:size]:
            return size
    return 0


def _choose_cut(originals: list[Message], seqs: list[int], *, covered: int, fresh_tail: int,
                tail_budget: int | None) -> int | None:
    """Where the fresh tail starts, as an index into ``originals`` — or ``None``.

    A cut is valid when the tail starts at an assistant or user message (so no tool call
    is parted from its results), holds the newest user message, and something
    unsummarised lies before it (``seqs[cut] > covered + 1``). Of the valid cuts that
    leave at least ``fresh_tail`` messages, the latest is taken — an assistant one if
    possible, so that the summary (a user message) keeps roles alternating; when the tail
    is then over ``tail_budget`` tokens, later cuts are tried.
    """
    users = [i for i, m in enumerate(originals) if m.get("role") == "user"]
    if not users:
        return None
    last_user = users[-1]
    valid = [
        i for i, m in enumerate(originals)
        if m.get("role") in ("assistant", "user") and i <= last_user and seqs[i] > covered + 1
    ]
    if not valid:
        return None
    limit = len(originals) - fresh_tail
    within = [i for i in valid if i <= limit]
    if not within:
        return None
    assistant = [i for i in within if originals[i].get("role") == "assistant"]
    cut = assistant[-1] if assistant else within[-1]
    if tail_budget is not None:
        sizes = [estimate_messages_tokens([m]) for m in originals[cut:]]
        base, tail_tokens = cut, sum(sizes)
        for later in (i for i in valid if i > cut):
            if tail_tokens <= tail_budget:
                break
            tail_tokens -= sum(sizes[cut - base: later - base])
            cut = later
    return cut


def _chunks(span: list[StoredMessage], max_tokens: int) -> list[list[StoredMessage]]:
    """Split a span into leaf-sized chunks, never starting a chunk at a tool result."""
    chunks: list[list[StoredMessage]] = []
    current: list[StoredMessage] = []
    size = 0
    for msg in span:
        if current and size + msg.tokens > max_tokens and msg.role != "tool":
            chunks.append(current)
            current, size = [], 0
        current.append(msg)
        size += msg.tokens
    if current:
        chunks.append(current)
    return chunks


def _oldest_run(roots: list[Node], at_least: int, at_most: int) -> list[Node] | None:
    """The first ``at_most`` nodes of the oldest run of consecutive same-depth top-level
    nodes that is at least ``at_least`` long (``None`` if there is none)."""
    runs: list[list[Node]] = []
    for node in roots:
        if runs and runs[-1][-1].depth == node.depth:
            runs[-1].append(node)
        else:
            runs.append([node])
    for run in runs:
        if len(run) >= at_least:
            return run[:at_most]
    return None


def _with_summary(roots: list[Node], tail: list[Message], budget: float) -> list[Message]:
    """The summary message followed by the tail. When the tail opens with a user message
    the summary is merged into it (behind a separator the engine recognises), so that
    two user messages never follow each other."""
    text = render_summary(roots, total_messages=sum(r.message_count for r in roots), budget=budget)
    if tail and tail[0].get("role") == "user" and isinstance(tail[0].get("content"), str):
        first = dict(tail[0])
        first["content"] = text + MERGE_SEPARATOR + first["content"]
        return [first, *tail[1:]]
    return [{"role": "user", "content": f"{text}\n\n{SUMMARY_END_MARKER}"}, *tail]
