"""The agent turn loop (DESIGN §6).

user message → store it → (first turn) freeze the system prompt from the cached prompt
layers → memory prefetch, fenced, for this call only → context-engine preflight → LLM
call → usage to the engine → tool calls routed (memory, engine tools, registered tools;
parallel-safe batches run concurrently) → loop until a final answer within the iteration
budget → every message stored → memory ``sync_turn`` / ``queue_prefetch`` → compaction
when the engine asks (session split) → background memory review every
``memory.nudge_interval`` turns.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contracts import (
    CompactionEvent,
    LLMRequest,
    LLMResponse,
    Message,
    PromptContext,
    SessionInfo,
    ToolContext,
    TurnEvent,
    Usage,
)
from ..errors import ContextLengthError, HermesError, LLMError, StoreError
from ..pricing import Price, estimate_cost, load_prices
from ..util import estimate_messages_tokens
from .memory_manager import _call_filtered
from .session_lock import SessionLock, WriterLock
from .transcript import unanswered_tail, with_missing_results

log = logging.getLogger("hermes.runtime")

#: Used when neither config nor the client knows the model's window.
DEFAULT_CONTEXT_LENGTH = 128_000

_REVIEW_PROMPT = (
    "Review the conversation above and decide whether anything is worth saving to memory. "
    "Focus on (1) what the user revealed about themselves — persona, preferences, personal "
    "details — and (2) how they want you to behave and work. Below is what memory already "
    "holds; save only NEW information, with the memory tool. If nothing is worth saving, "
    "answer exactly \"Nothing to save.\" and stop.\n\nCurrent memory:\n{inventory}"
)


class IterationBudget:
    """A thread-safe count of model calls, shared by an agent and its sub-agents.

    At 70% and 90% of the budget a nudge is due once each; the runtime puts it inside a
    tool result's JSON, never as a new message (which would break the message structure
    and the prompt cache)."""

    WARN_AT = (0.7, "You have used 70% of your iteration budget; start wrapping up.")
    URGENT_AT = (0.9, "You have used 90% of your iteration budget; give your final answer now.")

    def __init__(self, limit: int = 90):
        self.limit = max(1, int(limit))
        self.used = 0
        self._nudged: set[float] = set()
        self._lock = threading.Lock()

    def consume(self) -> bool:
        """Take one call; ``False`` when the budget is spent."""
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    @property
    def remaining(self) -> int:
        return self.limit - self.used

    def due_nudge(self) -> str | None:
        """The nudge that has become due since the last one, if any."""
        with self._lock:
            for at, text in (self.URGENT_AT, self.WARN_AT):
                if self.used >= at * self.limit:
                    if at in self._nudged:
                        return None
                    self._nudged.update(a for a, _ in (self.WARN_AT, self.URGENT_AT) if a <= at)
                    return text
        return None


@dataclass
class TurnResult:
    """What :meth:`Agent.run_turn` returns."""

    answer: str
    #: "ok", "failed", "interrupted", "incomplete" (the stream broke mid-answer; the
    #: partial answer is stored marked incomplete), "budget_exhausted"
    status: str = "ok"
    session_id: str = ""
    api_calls: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    compacted: bool = False
    error: str | None = None
    notices: list[str] = field(default_factory=list)


class Agent:
    """One conversation with a model, its memory, tools and context engine.

    ``Agent(kernel)`` starts a new session; ``Agent(kernel, session_id)`` resumes one
    (its stored transcript and frozen system prompt). ``parent`` makes this a delegated
    sub-agent sharing the parent's iteration budget. Use :meth:`run_turn` per user
    message and :meth:`close` at the end.
    """

    def __init__(
        self,
        kernel: Any,
        session_id: str | None = None,
        *,
        source: str = "cli",
        platform: str | None = None,
        parent: Agent | None = None,
        skip_context_files: bool = False,
        skip_memory: bool = False,
        budget: IterationBudget | None = None,
        model: str | None = None,
        provider: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        memory_review: bool = True,
        on_notice: Callable[[str], None] | None = None,
        on_tool: Callable[..., None] | None = None,
    ):
        from .memory_manager import MemoryManager
        from .prompt import PromptBuilder

        self.kernel = kernel
        cfg = kernel.config
        self.source = source
        self.platform = platform or cfg.get("agent.platform") or "cli"
        self.parent = parent
        self.skip_context_files = skip_context_files
        self.skip_memory = skip_memory
        self.cwd = Path(cwd or os.getcwd())
        self.on_notice = on_notice
        # Observer of tool calls, for a front end: on_tool("start", name, args) before a
        # call, on_tool("end", name, args, result, seconds) after it (pool threads too).
        self.on_tool = on_tool
        self.memory_review_enabled = memory_review and not skip_memory
        self.provider = provider or kernel.selected("llm")
        self.model = model or str(cfg.get("model.name"))
        self.client = kernel.llm_client(self.provider)
        self.budget: IterationBudget = budget or (
            parent.budget if parent else IterationBudget(cfg.get("agent.max_iterations")))
        self.max_parallel = int(cfg.get("agent.max_parallel_tools") or 8)
        self.store = kernel.session_store
        # for each session's estimated_cost_usd; a sub-agent shares its parent's table
        # (each delegate_task would otherwise parse the YAML tables again)
        self.prices: list[Price] = parent.prices if parent else load_prices(kernel.home)
        self.engine = kernel.create("context-engine")
        self.context_length = self._resolve_context_length()
        # Per-model thresholds are the host's to hand over before the first update_model.
        self.engine.model_thresholds = dict(cfg.get("compression.model_thresholds") or {})
        self.engine.update_model(self.model, self.context_length, provider=self.provider)
        self.memory = MemoryManager(
            kernel, platform=self.platform,
            agent_context="subagent" if parent else "primary", skip_memory=skip_memory,
        )
        self.prompt_builder = PromptBuilder(kernel)
        #: Per-agent state of plugins' hooks (``hermes_tool_result``), by a key of theirs.
        self.plugin_state: dict[str, Any] = {}
        self.messages: list[Message] = []
        self.system_prompt: str | None = None
        self._compaction_note = ""
        self.turn_number = 0
        self._turns_since_memory = 0
        self._memory_used_this_turn = False
        self._review_thread: threading.Thread | None = None
        self.last_review: str | None = None
        self._closed = False
        self._tool_lock = threading.Lock()
        #: Transcript messages whose write failed, in order, with their finish reasons.
        self._unsaved: list[tuple[Message, str | None]] = []
        self._stream_error = ""
        #: id(user message) → the live memory-updates block it carries in every request
        #: (memory.live_updates; see kernel/runtime/prompt.with_notes)
        self._live_notes: dict[int, str] = {}

        self._lock: WriterLock | None = None
        if session_id and self.store.get_session(session_id):
            self.session_id = session_id
            self._lock_conversation()  # before anything is written to it
            self._resume()
        else:
            self.session_id = self.store.create_session(
                session_id, source=source, model=self.model,
                parent_session_id=parent.session_id if parent else None, cwd=str(self.cwd),
            )
            self._lock_conversation()
        self._start_session()

    # -- set-up -------------------------------------------------------------------------

    def _resolve_context_length(self) -> int:
        configured = self.kernel.config.get("model.context_length")
        if configured:
            return int(configured)
        try:
            known = self.client.context_length(self.model)
        except Exception:  # a client bug must not stop the agent
            known = None
        if known:
            return int(known)
        self._notice(
            f"context length of model {self.model!r} is unknown; assuming {DEFAULT_CONTEXT_LENGTH:,} "
            "tokens. Set model.context_length in config.yaml to be exact."
        )
        return DEFAULT_CONTEXT_LENGTH

    def _lock_conversation(self) -> None:
        """One writer per conversation (see :mod:`.session_lock`): a top-level agent
        locks the lineage root of its session, which compaction splits keep; a
        sub-agent writes only under its parent, which holds the lock."""
        if self.parent is not None:
            return
        root = self.store.lineage_root(self.session_id)
        # A store shared by several machines offers a lock that reaches them all; the
        # file lock sees this machine only.
        lock = self.store.writer_lock(root)
        if lock is None:
            lock = SessionLock(self.kernel.home, root)
        lock.acquire()
        if self._lock is not None:
            self._lock.release()
        self._lock = lock

    def _resume(self) -> None:
        self._skip_empty_continuation()
        self.store.reopen_session(self.session_id)
        row = self.store.get_session(self.session_id) or {}
        self.system_prompt = row.get("system_prompt") or None
        config = row.get("model_config")
        if isinstance(config, str):
            try:
                config = json.loads(config)
            except ValueError:
                config = None
        self._compaction_note = (config or {}).get("compaction_note", "") if isinstance(config, dict) else ""
        self.messages = [m for m in self.store.get_conversation(self.session_id) if m["role"] != "system"]
        self.turn_number = sum(1 for m in self.messages if m["role"] == "user")
        self._close_open_tail()

    def _skip_empty_continuation(self) -> None:
        """An empty compression continuation (what a crash in the middle of a split left
        before splits were one transaction) has nothing to continue: resume its parent
        instead, and drop the empty child so the conversation has one live end."""
        for _ in range(10):  # bounded: a chain of empty children is corrupt anyway
            row = self.store.get_session(self.session_id) or {}
            parent_id = row.get("parent_session_id")
            if not parent_id or row.get("message_count"):
                return
            parent = self.store.get_session(parent_id) or {}
            if parent.get("end_reason") != "compression":
                return
            self._notice(f"session {self.session_id} is an empty continuation left by an "
                         f"interrupted compaction; continuing {parent_id} instead")
            self.store.delete_session(self.session_id)
            self.session_id = parent_id

    def _start_session(self) -> None:
        self.memory.initialize(
            self.session_id, hermes_home=str(self.kernel.home), platform=self.platform,
            parent_session_id=self.parent.session_id if self.parent else "",
        )
        self.memory.reserved_names = {t.name for t in self.kernel.tools()}
        self.engine.on_session_start(
            self.session_id, hermes_home=str(self.kernel.home), platform=self.platform,
            model=self.model, context_length=self.context_length,
        )
        self.kernel.emit("hermes_session_start", session=self.session_info())
        if self.messages:
            self._hygiene()

    def session_info(self) -> SessionInfo:
        row = self.store.get_session(self.session_id) or {}
        return SessionInfo(
            id=self.session_id, source=self.source, model=self.model,
            parent_session_id=row.get("parent_session_id"), title=row.get("title"),
        )

    def _notice(self, text: str) -> None:
        log.info(text)
        if self.on_notice:
            self.on_notice(text)

    def _with_tool_notes(self, name: str, args: dict[str, Any], result: str) -> str:
        """``result`` with what ``hermes_tool_result`` implementations add (the prompt
        plugin's subdirectory hints)."""
        ctx = ToolContext(kernel=self.kernel, session_id=self.session_id, agent=self,
                          messages=[], cwd=self.cwd)
        notes = [n for n in self.kernel.emit("hermes_tool_result", context=ctx, tool_name=name,
                                             args=args, result=result) if isinstance(n, str) and n]
        return "\n\n".join([result, *notes])

    def _observe_tool(self, phase: str, *args: Any) -> None:
        if self.on_tool is None:
            return
        try:
            self.on_tool(phase, *args)
        except Exception as exc:  # a display bug must not fail the tool call
            log.debug("on_tool observer failed: %s", exc)

    # -- tools ----------------------------------------------------------------------------

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Every tool offered to the model: registered tools, memory tools, engine tools."""
        seen: set[str] = set()
        out: list[dict[str, Any]] = []
        # Tools marked ``subagents=False`` (Tool contract) are kept from sub-agents.
        excluded = {t.name for t in self.kernel.tools() if not t.subagents} if self.parent else set()

        def add(schema: dict[str, Any]) -> None:
            fn = schema.get("function", schema) if isinstance(schema, dict) else {}
            name = fn.get("name")
            if name and name not in seen and name not in excluded:
                seen.add(name)
                out.append({"name": name, "description": fn.get("description", ""),
                            "parameters": fn.get("parameters") or {"type": "object", "properties": {}}})

        for tool in self.kernel.tools():
            add(tool.openai_schema())
        for schema in self.memory.tool_schemas():
            add(schema)
        for schema in self.engine.get_tool_schemas() or []:
            add(schema)
        return out

    def _registered_tools(self) -> dict[str, Any]:
        return {t.name: t for t in self.kernel.tools()}

    def call_tool(self, name: str, args: dict[str, Any]) -> str:
        """Route one tool call; never raises (errors come back as JSON)."""
        try:
            tools = self._registered_tools()
            if name in tools and not (self.parent and not tools[name].subagents):
                ctx = ToolContext(kernel=self.kernel, session_id=self.session_id, agent=self,
                                  messages=list(self.messages), cwd=self.cwd)
                result = tools[name].handler(args, ctx)
            elif self.memory.has_tool(name):
                result = self.memory.handle_tool_call(
                    name, args, session_id=self.session_id, session=self.session_info())
                if name == self.memory.memory_tool():
                    self._memory_used_this_turn = True
            elif any((s.get("function", s)).get("name") == name for s in self.engine.get_tool_schemas() or []):
                result = self.engine.handle_tool_call(name, args, messages=list(self.messages))
            else:
                return json.dumps({"error": f"Unknown tool: {name}"})
        except Exception as exc:
            log.warning("tool %s failed: %s", name, exc, exc_info=exc)
            return json.dumps({"error": f"Tool {name!r} failed: {type(exc).__name__}: {exc}"})
        return result if isinstance(result, str) else json.dumps(result, default=str)

    def _run_tool_calls(self, tool_calls: list[dict[str, Any]]) -> list[str]:
        parsed: list[tuple[str, dict[str, Any] | None, str]] = []
        for call in tool_calls:
            fn = call.get("function", {})
            name = fn.get("name", "")
            raw = fn.get("arguments") or "{}"
            try:
                args = json.loads(raw) if isinstance(raw, str) else dict(raw)
                if not isinstance(args, dict):
                    raise ValueError("arguments must be a JSON object")
                parsed.append((name, args, ""))
            except (ValueError, TypeError) as exc:
                parsed.append((name, None, json.dumps({"error": f"Invalid JSON arguments for {name}: {exc}"})))

        tools = self._registered_tools()
        parallel = len(parsed) > 1 and all(
            args is not None and name in tools and tools[name].parallel_safe
            for name, args, _ in parsed
        )

        def run(item: tuple[str, dict[str, Any] | None, str]) -> str:
            name, args, error = item
            if args is None:
                return error
            self._observe_tool("start", name, args)
            started = time.monotonic()
            result = self.call_tool(name, args)
            self._observe_tool("end", name, args, result, time.monotonic() - started)
            return self._with_tool_notes(name, args, result)

        if parallel:
            with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(parsed))) as pool:
                return list(pool.map(run, parsed))
        return [run(item) for item in parsed]

    # -- prompt ---------------------------------------------------------------------------

    def prompt_context(self, **extra: Any) -> PromptContext:
        row = self.store.get_session(self.session_id) or {}
        return PromptContext(
            kernel=self.kernel, session_id=self.session_id, home=self.kernel.home, cwd=self.cwd,
            model=self.model, platform=self.platform,
            tool_names=frozenset(s["name"] for s in self.tool_schemas()),
            memory=self.memory, skip_context_files=self.skip_context_files,
            now=float(row.get("started_at") or time.time()), extra=dict(extra),
        )

    def ensure_system_prompt(self) -> str:
        """The frozen system prompt: built once per session, stored with it, and reused
        byte for byte until a compaction."""
        if self.system_prompt is None:
            built = self.prompt_builder.build(self.prompt_context())
            # A compacted session's one-time engine note follows its rebuilt prompt.
            self.system_prompt = built.text + self._compaction_note
            self.store.update_system_prompt(self.session_id, self.system_prompt)
        return self.system_prompt

    def _request_messages(self, recalled: str) -> list[Message]:
        # A gap an older run left mid-transcript is closed in the request only (the
        # provider rejects it); gaps at the end are stored when a turn starts.
        from .prompt import with_notes

        base = [{"role": "system", "content": self.ensure_system_prompt()},
                *with_notes(with_missing_results(self.messages), self._live_notes)]
        return self.prompt_builder.apply_ephemeral(base, self.prompt_context(recalled=recalled))

    def build_request(self, recalled: str = "") -> LLMRequest:
        """The request the next model call would send (also used by benchmarks)."""
        cfg = self.kernel.config
        caching = bool(cfg.get("prompt_caching.enabled")) and self.client.supports_prompt_caching(self.model)
        return LLMRequest(
            model=self.model, messages=self._request_messages(recalled), tools=self.tool_schemas(),
            max_tokens=cfg.get("model.max_tokens"), cache=caching,
            cache_ttl=str(cfg.get("prompt_caching.cache_ttl")), timeout=cfg.get("model.timeout"),
        )

    @property
    def caching_enabled(self) -> bool:
        return bool(self.kernel.config.get("prompt_caching.enabled")) and self.client.supports_prompt_caching(self.model)

    # -- persistence ----------------------------------------------------------------------

    def _append(self, message: Message, *, finish_reason: str | None = None, store: bool = True) -> None:
        """Add ``message`` to the transcript and store it (with ``store=False``, at the
        next store).

        A write that cannot land (the database stayed locked, the disk is full) raises
        :class:`StoreError`, so the turn fails visibly; the message stays in the
        transcript and in an ordered queue of unsaved messages that is written before
        anything else, at the next append or the next turn. Nothing the user typed is
        dropped silently."""
        self.messages.append(message)
        self._unsaved.append((message, finish_reason))
        if store:
            self._store_unsaved()

    def _store_unsaved(self) -> None:
        if not self._unsaved:
            return
        pending = list(self._unsaved)
        rows = [{"role": m["role"], "content": m.get("content"), "tool_calls": m.get("tool_calls"),
                 "tool_call_id": m.get("tool_call_id"), "tool_name": m.get("name"),
                 "finish_reason": finish} for m, finish in pending]
        try:
            if len(rows) == 1:
                row = rows[0]
                self.store.append_message(
                    self.session_id, row["role"], row["content"], tool_name=row["tool_name"],
                    tool_calls=row["tool_calls"], tool_call_id=row["tool_call_id"],
                    finish_reason=row["finish_reason"])
            else:
                self.store.append_messages(self.session_id, rows)  # one transaction
        except StoreError as exc:
            raise StoreError(
                f"{exc} {len(pending)} message(s) of this conversation are not stored yet; "
                "they are kept and stored with the next turn (they are lost if you quit now)."
            ) from exc
        del self._unsaved[:len(pending)]

    @property
    def unsaved_messages(self) -> int:
        """How many messages of the transcript are not stored yet (after a failed write)."""
        return len(self._unsaved)

    def _close_open_tail(self, *, store: bool = True) -> None:
        """Close what a crash (or a failed turn) left open at the end of the transcript:
        unanswered tool calls get an interrupted result, an unanswered user message an
        interrupted answer. Stored, so the repair persists (see :mod:`.transcript`)."""
        closing = unanswered_tail(self.messages)
        for message in closing:
            finish = message.pop("finish_reason", None)
            self._append(message, finish_reason=finish, store=False)
        calls = sum(1 for m in closing if m["role"] == "tool")
        if calls:
            self._notice(f"{calls} tool call(s) of an interrupted run never finished; "
                         "stored as interrupted so the conversation can continue")
        if store:
            self._store_unsaved()

    # -- the turn -------------------------------------------------------------------------

    def run_turn(
        self,
        user_message: str,
        *,
        on_text: Callable[[str], None] | None = None,
        interrupt: threading.Event | None = None,
    ) -> TurnResult:
        """Answer one user message. ``on_text`` receives streamed text (fence-scrubbed);
        setting ``interrupt`` stops the turn after the current call. Never loses the
        user's message: it joins the transcript before anything can fail, and a write
        that fails is retried with the next turn (the result says so)."""
        if self._closed:
            raise HermesError("this agent is closed; start a new one")
        self.wait_for_review()
        self.turn_number += 1
        result = TurnResult(answer="", session_id=self.session_id)
        self._memory_used_this_turn = False
        self.memory.on_turn_start(self.turn_number, user_message, model=self.model, platform=self.platform)
        try:
            recalled = self._start_turn(user_message)
            self._model_loop(result, recalled, on_text, interrupt)
        except LLMError as exc:
            # Reported through the result; the caller decides how to show it.
            result.status, result.error, result.answer = "failed", str(exc), ""
        except HermesError as exc:  # StoreError among them: a write that could not land
            result.status, result.error = "failed", str(exc)
            self._notice(f"turn failed: {exc}")
        if result.status == "ok":
            self._after_answer(user_message, result)
        self._end_turn(user_message, result)
        return result

    def _start_turn(self, user_message: str) -> str:
        """Close an open transcript end, add the user's message and store both together
        with whatever earlier turns left unsaved (one write); freeze the system prompt;
        return the fenced memory recall."""
        self._close_open_tail(store=False)
        self._append({"role": "user", "content": user_message})
        self.ensure_system_prompt()
        if self.kernel.config.get("memory.live_updates"):
            # Memory written since the snapshot (another session, the CLI, the review)
            # rides on this user message, never in the frozen system prompt.
            note = self.memory.live_changes()
            if note:
                self._live_notes[id(self.messages[-1])] = note
        return self.memory.fenced_prefetch(user_message, session_id=self.session_id)

    def _model_loop(self, result: TurnResult, recalled: str, on_text: Callable[[str], None] | None,
                    interrupt: threading.Event | None) -> None:
        """Call the model until it answers without tool calls (or the turn must stop)."""
        from .fencing import StreamScrubber

        retried_overflow = False
        while True:
            if interrupt is not None and interrupt.is_set():
                result.status = "interrupted"
                return
            if self.engine.should_compress_preflight([{"role": "system", "content": self.system_prompt}, *self.messages]):
                result.compacted |= self.compact(reason="preflight")
            if not self.budget.consume():
                result.status = "budget_exhausted"
                result.answer = "I stopped because the iteration budget is used up. Ask me to continue."
                self._append({"role": "assistant", "content": result.answer}, finish_reason="budget_exhausted")
                return
            try:
                response = self._call(self.build_request(recalled), on_text,
                                      StreamScrubber() if on_text else None, interrupt)
            except ContextLengthError as exc:
                if retried_overflow:
                    raise
                retried_overflow = True
                self._notice(f"context window exceeded ({exc}); compacting and retrying")
                if not self.compact(force=True, reason="context_length"):
                    raise
                result.compacted = True
                continue
            message = self._record_response(result, response)
            if not response.tool_calls:
                self._final_answer(result, message, response)
                return
            self._answer_tool_calls(result, response)
            if self.engine.should_compress():
                result.compacted |= self.compact(reason="threshold")

    def _record_response(self, result: TurnResult, response: LLMResponse) -> Message:
        """Store the assistant message (first: what the model said matters most), then
        count the call's usage."""
        result.api_calls += 1
        result.usage = result.usage + response.usage
        self.engine.update_from_response(response.usage.as_dict())
        message = response.as_message()
        message["content"] = self._scrub(message.get("content") or "")
        try:
            self._append(message, finish_reason=response.finish_reason)
        except StoreError:
            if not response.tool_calls:  # the turn fails, but the answer is still shown
                result.answer = message["content"]
            raise
        try:
            self.store.update_token_counts(
                self.session_id, input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                cache_read_tokens=response.usage.cache_read_tokens,
                cache_write_tokens=response.usage.cache_write_tokens,
                reasoning_tokens=response.usage.reasoning_tokens, model=self.model,
                estimated_cost_usd=estimate_cost(response.model or self.model, response.usage, self.prices),
            )
        except StoreError as exc:  # bookkeeping: the conversation itself is stored
            self._notice(f"the usage of this call was not counted: {exc}")
        return message

    def _final_answer(self, result: TurnResult, message: Message, response: LLMResponse) -> None:
        result.answer = message["content"]
        if response.finish_reason == "interrupted":
            result.status = "interrupted"
        elif response.finish_reason == "incomplete":
            result.status = "incomplete"
            note = "the answer was cut off before it was complete (it is stored marked incomplete)"
            if self._stream_error:
                note += f": {self._stream_error}"
            result.notices.append(note)
            self._notice(note)

    def _answer_tool_calls(self, result: TurnResult, response: LLMResponse) -> None:
        """Run the response's tool calls and store their results (the budget nudge, when
        one is due, inside the last result)."""
        results = self._run_tool_calls(response.tool_calls)
        result.tool_calls += len(results)
        nudge = self.budget.due_nudge()
        for i, (call, content) in enumerate(zip(response.tool_calls, results, strict=True)):
            if nudge and i == len(results) - 1:
                content = _with_nudge(content, nudge)
            self._append({"role": "tool", "tool_call_id": call.get("id", ""),
                          "name": call.get("function", {}).get("name", ""), "content": content})

    def _after_answer(self, user_message: str, result: TurnResult) -> None:
        """Memory sync and prefetch, threshold compaction and the memory review."""
        self.memory.sync_turn(user_message, result.answer, session_id=self.session_id)
        self.memory.queue_prefetch(user_message, session_id=self.session_id)
        info = self.engine.should_compress_info()
        if info[0]:
            result.compacted |= self.compact(reason="threshold")
        elif info[1]:
            result.notices.append(f"compaction blocked: {info[1]}")
        self._maybe_review(memory_used=self._memory_used_this_turn)

    def _end_turn(self, user_message: str, result: TurnResult) -> None:
        """Tell the engine and the event hooks that the turn is over."""
        result.session_id = self.session_id
        try:
            self.engine.on_turn_complete(list(self.messages), usage=result.usage.as_dict(),
                                         interrupted=result.status in ("interrupted", "incomplete"))
        except Exception as exc:  # an observer must not fail the turn
            log.debug("engine.on_turn_complete failed: %s", exc)
        self.kernel.emit("hermes_turn_end", session=self.session_info(), turn=TurnEvent(
            user_message=user_message, answer=result.answer, status=result.status,
            api_calls=result.api_calls, tool_calls=result.tool_calls, usage=result.usage,
            error=result.error,
        ))

    def _call(self, request: LLMRequest, on_text: Callable[[str], None] | None, scrubber: Any,
              interrupt: threading.Event | None) -> LLMResponse:
        """One model call. A stream that breaks after text was shown becomes an
        ``incomplete`` answer holding what the user saw (never a silent full answer)."""
        self._stream_error = ""
        if on_text is None:
            return self.client.complete(request)
        final: LLMResponse | None = None
        shown: list[str] = []
        try:
            for event in self.client.stream(request):
                if event.kind == "text" and event.text:
                    visible = scrubber.feed(event.text)
                    if visible:
                        shown.append(visible)
                        on_text(visible)
                elif event.kind == "done":
                    final = event.response
                if interrupt is not None and interrupt.is_set():
                    break
        except LLMError as exc:
            if not shown or isinstance(exc, ContextLengthError):
                raise
            self._stream_error = str(exc)
            final = LLMResponse(finish_reason="incomplete")
        tail = scrubber.flush()
        if tail:
            shown.append(tail)
            on_text(tail)
        if final is None:
            if interrupt is not None and interrupt.is_set():
                # Keep what the user already saw, so the transcript matches the screen.
                return LLMResponse(content="".join(shown), finish_reason="interrupted")
            raise LLMError("the stream ended without a final response")
        if final.finish_reason == "incomplete":
            # Only text the user saw is kept; a half-received tool call is never run.
            return LLMResponse(content="".join(shown), finish_reason="incomplete", usage=final.usage,
                               model=final.model)
        return final

    def _scrub(self, text: str) -> str:
        from .fencing import scrub

        return scrub(text) if text else text

    # -- compaction -------------------------------------------------------------------------

    def _hygiene(self) -> None:
        """Safety net for a resumed long session: compact before the first call when a
        rough estimate passes ``compression.hygiene_threshold`` of the window."""
        cfg = self.kernel.config
        if not cfg.get("compression.enabled") or len(self.messages) < 4:
            return
        rough = estimate_messages_tokens([{"role": "system", "content": self.system_prompt or ""}, *self.messages])
        if rough >= float(cfg.get("compression.hygiene_threshold")) * self.context_length:
            self._notice(f"resumed session is ~{rough:,} tokens; compacting before the first call")
            self.compact(reason="hygiene")

    def compact(self, focus_topic: str | None = None, *, force: bool = False, reason: str = "manual") -> bool:
        """Compact the conversation through the context engine and split the session:
        the old one ends with ``end_reason='compression'``, a child continues with the
        compacted transcript and a rebuilt system prompt. Returns whether it happened;
        a failed or empty compaction leaves the transcript untouched."""
        from hermes import call_compress  # public helper: filters kwargs by signature

        if not self.kernel.config.get("compression.enabled") and reason != "manual":
            return False
        system = self.ensure_system_prompt()
        before = [{"role": "system", "content": system}, *self.messages]
        tokens_before = self.engine.last_prompt_tokens if self.engine.last_prompt_tokens > 0 else estimate_messages_tokens(before)
        memory_context = self.memory.on_pre_compress(list(self.messages))
        try:
            after = call_compress(self.engine, before, current_tokens=tokens_before,
                                  focus_topic=focus_topic, force=force or reason == "manual",
                                  memory_context=memory_context)
        except Exception as exc:
            self._notice(f"compaction failed, history kept: {exc}")
            return False
        if not after or after == before:
            why = (getattr(self.engine, "last_compression", None) or {}).get("aborted")
            self._notice(f"nothing was compacted{f': {why}' if why else ''}")
            return False
        if after[0].get("role") == "system":
            # The engine may append a one-time note to the system prompt. The prompt is
            # rebuilt from its layers below, so keep the note separately (and with the
            # session, for resumes) and re-attach it to every continuation's prompt.
            head = after[0].get("content") or ""
            if isinstance(head, str) and head.startswith(system):
                self._compaction_note += head[len(system):]
            after = after[1:]

        old_id, new_id = self.session_id, self._continue_in_child(after)
        self._live_notes.clear()  # the continuation's messages are new; announce anew
        self.memory.reset_live_changes()
        info = getattr(self.engine, "last_compression", None) or {}
        self.kernel.emit("hermes_session_start", session=self.session_info())
        self.kernel.emit("hermes_compaction", session=self.session_info(), event=CompactionEvent(
            parent_session_id=old_id, child_session_id=new_id, messages_before=len(before),
            messages_after=len(after) + 1, tokens_before=tokens_before,
            tokens_after=estimate_messages_tokens([{"role": "system", "content": self.system_prompt}, *self.messages]),
            focus_topic=focus_topic, fallback_summary=bool(info.get("fallback")),
        ))
        self._notice(f"compacted {len(before)} → {len(after) + 1} messages; continuing in session {new_id}")
        return True

    def _continue_in_child(self, after: list[Message]) -> str:
        """Split the session: end it, continue in a child holding ``after`` (titled
        ``NAME #N``) with a rebuilt system prompt. Returns the child's id."""
        old_id, old_row = self.session_id, self.store.get_session(self.session_id) or {}
        title = None
        if old_row.get("title"):
            try:
                title = self.store.next_title_in_lineage(old_row["title"])
            except (ValueError, HermesError) as exc:
                log.debug("could not title the continuation: %s", exc)
        # End the parent, create the child and store its transcript in one unit: a
        # crash in between must not leave an ended parent with an empty continuation.
        messages = [dict(m) for m in after]
        new_id = self.store.split_session(
            old_id, messages, end_reason="compression", source=self.source, model=self.model,
            cwd=str(self.cwd), title=title,
            model_config={"compaction_note": self._compaction_note} if self._compaction_note else None)
        self._unsaved.clear()  # the continuation's transcript holds them now
        self.kernel.emit("hermes_session_end", session=self.session_info(), reason="compression")
        self.session_id, self.messages = new_id, messages
        # Everyone hears of the split, as in Hermes Agent: memory providers with the
        # reason (the built-in store reloads its files from disk, so the rebuilt prompt
        # shows what was written during the session), the engine as the start of the
        # continuation (so it can carry per-session state across the boundary).
        self.memory.on_session_switch(new_id, parent_session_id=old_id, reason="compression")
        try:
            _call_filtered(self.engine.on_session_start, new_id, hermes_home=str(self.kernel.home),
                           platform=self.platform, model=self.model, context_length=self.context_length,
                           boundary_reason="compression", old_session_id=old_id)
        except Exception as exc:  # the split is committed; a notification must not undo the turn
            log.warning("context engine failed in on_session_start after a compaction: %s: %s",
                        type(exc).__name__, exc)
        self.system_prompt = None
        self.ensure_system_prompt()  # rebuilt from the layers, the compaction note re-attached
        return new_id

    # -- memory review ----------------------------------------------------------------------

    def _maybe_review(self, *, memory_used: bool) -> None:
        interval = int(self.kernel.config.get("memory.nudge_interval") or 0)
        if not self.memory_review_enabled or interval <= 0 or not self.memory.memory_tool():
            return
        if memory_used:
            self._turns_since_memory = 0
            return
        self._turns_since_memory += 1
        if self._turns_since_memory < interval or self._review_thread is not None:
            return
        self._turns_since_memory = 0
        snapshot = [dict(m) for m in self.messages]
        self._review_thread = threading.Thread(
            target=self._review, args=(snapshot,), name="hermes-memory-review", daemon=True)
        self._review_thread.start()

    def _review(self, snapshot: list[Message]) -> None:
        """A forked, memory-tool-only pass over a copy of the conversation. It never
        touches the main transcript; its committed writes are reported in one line."""
        try:
            tool = self.memory.memory_tool()
            memory_schema = [s for s in self.memory.tool_schemas() if s.get("name") == tool]
            prompt = _REVIEW_PROMPT.format(inventory=self.memory.memory_inventory() or "(empty)")
            messages = [{"role": "system", "content": self.ensure_system_prompt()}, *snapshot,
                        {"role": "user", "content": prompt}]
            saved: list[str] = []
            for _ in range(4):  # a small iteration cap of its own
                response = self.client.complete(LLMRequest(model=self.model, messages=messages, tools=memory_schema))
                messages.append(response.as_message())
                if not response.tool_calls:
                    break
                for call in response.tool_calls:
                    fn = call.get("function", {})
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:
                        args = {}
                    if fn.get("name") != tool:
                        out = json.dumps({"error": f"only the {tool} tool is available in a review"})
                    else:
                        out = self.memory.handle_tool_call(tool, args, session_id=self.session_id,
                                                           session=self.session_info(), origin="review")
                        if _succeeded(out):
                            saved.append(_describe_write(args))
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": out})
            if saved:
                self.last_review = "memory updated: " + "; ".join(saved)
                self._notice(self.last_review)
        except Exception as exc:  # the review is best effort; the conversation is unaffected
            log.warning("background memory review failed: %s", exc)

    def wait_for_review(self, timeout: float | None = 30.0) -> None:
        """Wait for a running background memory review (tests, shutdown)."""
        thread = self._review_thread
        if thread is not None:
            thread.join(timeout)
            if not thread.is_alive():
                self._review_thread = None

    # -- delegation ---------------------------------------------------------------------------

    def delegate(self, task: str, context: str = "") -> dict[str, Any]:
        """Run ``task`` in a sub-agent: its own context and child session, no context
        files, no memory writes, the same iteration budget."""
        child = Agent(self.kernel, source="subagent", platform=self.platform, parent=self,
                      skip_context_files=True, skip_memory=True, model=self.model,
                      provider=self.provider, cwd=self.cwd, memory_review=False)
        try:
            prompt = f"{task}\n\nContext from the parent agent:\n{context}" if context else task
            outcome = child.run_turn(prompt)
        finally:
            child.close("delegation")
        self.memory.on_delegation(task, outcome.answer, child_session_id=child.session_id)
        return {"session_id": child.session_id, "status": outcome.status, "answer": outcome.answer,
                "api_calls": outcome.api_calls, "error": outcome.error}

    # -- end ----------------------------------------------------------------------------------

    def new_session(self) -> None:
        """``/new``: end this session and start a fresh one with the same settings."""
        old = self.session_id
        self.memory.on_session_end(list(self.messages))
        self.engine.on_session_end(old, list(self.messages))
        self.store.end_session(old, "new_session")
        self.kernel.emit("hermes_session_end", session=self.session_info(), reason="new_session")
        self.session_id = self.store.create_session(source=self.source, model=self.model, cwd=str(self.cwd))
        self._lock_conversation()
        self.messages, self.system_prompt, self.turn_number = [], None, 0
        self._compaction_note = ""
        self.engine.on_session_reset()
        self.engine.on_session_start(
            self.session_id, hermes_home=str(self.kernel.home), platform=self.platform,
            model=self.model, context_length=self.context_length,
        )
        self.memory.on_session_switch(self.session_id, parent_session_id="", reset=True,
                                      reason="new_session")
        self.kernel.emit("hermes_session_start", session=self.session_info())

    def undo(self) -> str | None:
        """``/undo``: drop the last exchange (the last user message and everything after
        it) from the live transcript and return that message (``None`` when there is
        none). Nothing is deleted: this session ends with ``end_reason='undo'`` and keeps
        the exchange as a branch; the conversation continues in a child session holding
        the rest, with the same frozen system prompt (title ``NAME #N``)."""
        last = next((i for i in range(len(self.messages) - 1, -1, -1)
                     if self.messages[i].get("role") == "user"), None)
        if last is None:
            return None
        dropped = self.messages[last].get("content")
        kept = [dict(m) for m in self.messages[:last]]
        old_id, old_row = self.session_id, self.store.get_session(self.session_id) or {}
        # Ended first: the continuation is the child started after its parent ended.
        self.store.end_session(old_id, "undo")
        self.kernel.emit("hermes_session_end", session=self.session_info(), reason="undo")
        new_id = self.store.create_session(
            source=self.source, model=self.model, parent_session_id=old_id, cwd=str(self.cwd),
            system_prompt=self.system_prompt,
            model_config={"compaction_note": self._compaction_note} if self._compaction_note else None)
        if kept:
            self.store.append_messages(new_id, kept)
        if old_row.get("title"):
            try:
                self.store.set_title(new_id, self.store.next_title_in_lineage(old_row["title"]))
            except (ValueError, HermesError) as exc:
                log.debug("could not title the continuation: %s", exc)
        self.session_id, self.messages = new_id, kept
        self.turn_number = max(0, self.turn_number - 1)
        self.memory.on_session_switch(new_id, parent_session_id=old_id, reason="undo")
        self.kernel.emit("hermes_session_start", session=self.session_info())
        return dropped if isinstance(dropped, str) else json.dumps(dropped)

    def switch_model(self, model: str) -> None:
        """``/model NAME``: use ``model`` from the next call on (same client); the context
        engine learns its window."""
        self.model = model
        self.context_length = self._resolve_context_length()
        self.engine.update_model(model, self.context_length, provider=self.provider)

    def close(self, reason: str = "user_exit") -> None:
        """End the session at a real boundary and flush memory providers."""
        if self._closed:
            return
        self._closed = True
        self.wait_for_review()
        try:
            self._store_unsaved()
        except StoreError as exc:
            self._notice(f"messages of this conversation could not be stored and are lost: {exc}")
        try:
            self.memory.on_session_end(list(self.messages))
            self.engine.on_session_end(self.session_id, list(self.messages))
        finally:
            try:
                self.store.end_session(self.session_id, reason)
                self.kernel.emit("hermes_session_end", session=self.session_info(), reason=reason)
                self.memory.shutdown()
            finally:
                if self._lock is not None:
                    self._lock.release()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _with_nudge(content: str, nudge: str) -> str:
    """Put a budget nudge inside a tool result's JSON (never as a new message)."""
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if isinstance(data, dict):
        data["_budget_warning"] = nudge
        return json.dumps(data, ensure_ascii=False)
    return json.dumps({"result": content, "_budget_warning": nudge}, ensure_ascii=False)


def _succeeded(result: str) -> bool:
    try:
        data = json.loads(result)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("success") is True


def _describe_write(args: dict[str, Any]) -> str:
    ops = args.get("operations") or [args]
    parts = []
    for op in ops:
        text = str(op.get("content") or op.get("old_text") or "")
        # ``operations`` share the call's target (the tool's schema requires one)
        target = op.get("target") or args.get("target") or "?"
        parts.append(f"{op.get('action', '?')} {target}: {text[:60]}")
    return "; ".join(parts)

