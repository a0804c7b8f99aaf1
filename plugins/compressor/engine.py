"""The ``compressor`` context engine: lossy, summarizing compaction with guards.

``compress`` runs four phases (see the sibling modules): prune tool traffic, lay out
head / pinned request / tail, summarize the middle with the auxiliary model (updating the
previous summary), assemble a valid transcript. Around them sit the policies that keep
users from losing history or paying for useless compactions:

======================  ===============================  ======================  ==========
summary failure         unforced compaction              forced (``/compress``,   cooldown
                                                          context overflow)
======================  ===============================  ======================  ==========
no summarizer at all    local fallback summary           local fallback          —
summarizer too small    local fallback summary           local fallback          —
empty answer            local fallback summary           local fallback          60 s
timeout / 5xx / 429     **abort** (transcript unchanged) local fallback          60/300/900 s
auth / permission       **abort**                        local fallback          600 s
other model error       **abort**                        local fallback          60 s
======================  ===============================  ======================  ==========

``compression.abort_on_summary_failure: true`` turns every "fallback" above into an abort.
A failing separate summarizer is retried once on the main model first. Fallback and
abort are never silent: :attr:`last_compression` and :meth:`get_status` say what happened,
and the parent session keeps the full transcript either way.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import hermes

from .assemble import assemble
from .boundaries import SOFT_CEILING, align_forward, plan
from .prune import (
    SUMMARY_KEEP_RECENT_RESULTS,
    call_index,
    dedupe,
    prune_for_summary,
    prune_range,
    relieve_pressure,
)
from .summary import (
    EmptySummaryError,
    bound,
    build_prompt,
    clean_summary,
    fallback_summary,
    serialize,
    summary_budget,
)
from .transcript import Message, message_tokens, messages_tokens, tokens_of_text

log = logging.getLogger("hermes.compressor")

#: Failure classes that fall back to the local summary even on an automatic compaction:
#: waiting would not help (nothing to call, a window too small, an empty answer).
FALLBACK_CLASSES = frozenset({"no_model", "too_small", "empty"})
TRANSIENT_CLASSES = frozenset({"timeout", "unavailable", "rate_limit"})


class Compressor(hermes.ContextEngine):
    """Hermes' default context engine (``context.engine: compressor``).

    Built by the plugin's factory from the ``compression.*`` config; every argument has
    the documented default. ``auxiliary`` returns the summarizer ``(client, model)`` or
    ``None``; ``main_client(provider)`` returns the main model's client for a one-shot
    retry when a separate summarizer fails. ``clock`` is injectable for tests.
    """

    name = "compressor"
    threshold_percent = 0.50
    protect_first_n = 3
    protect_last_n = 20

    #: Windows below this get the small-window trigger floor.
    SMALL_WINDOW_LIMIT = 512_000
    #: Trigger floor in tokens (a usable agent needs this much); degenerate windows use 85%.
    MIN_THRESHOLD_TOKENS = 64_000
    DEGENERATE_TRIGGER = 0.85
    #: The protected tail is never more than this share of the window.
    TAIL_MAX_WINDOW_FRACTION = 0.20
    AUTH_COOLDOWN = 600.0
    ERROR_COOLDOWN = 60.0
    TRANSIENT_COOLDOWNS = (60.0, 300.0, 900.0)
    #: Anti-thrash: this many ineffective compactions (or fallback summaries in a row) block
    #: automatic compaction until the prompt grows by RECOVERY_* tokens.
    STRIKE_LIMIT = 2
    RECOVERY_MIN_TOKENS = 4_096
    RECOVERY_FRACTION = 0.10
    #: Frequency guard: at most FREQUENCY_LIMIT automatic compactions per FREQUENCY_WINDOW s.
    FREQUENCY_LIMIT = 5
    FREQUENCY_WINDOW = 600.0

    def __init__(
        self,
        *,
        auxiliary: Callable[[], tuple[Any, str] | None] | None = None,
        main_client: Callable[[str | None], Any] | None = None,
        threshold_percent: float = 0.50,
        target_ratio: float = 0.20,
        protect_first_n: int = 3,
        protect_last_n: int = 20,
        model_thresholds: dict[str, float] | None = None,
        small_window_floor: float = 0.75,
        threshold_tokens_cap: int | None = None,
        max_tokens: int | None = None,
        abort_on_summary_failure: bool = False,
        summary_timeout: float = 120.0,
        enabled: bool = True,
        proactive_prune_tokens: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._auxiliary = auxiliary
        self._main_client = main_client
        self.threshold_percent = float(threshold_percent)
        self._config_threshold_percent = float(threshold_percent)
        self.target_ratio = min(max(float(target_ratio), 0.10), 0.80)
        self.protect_first_n = int(protect_first_n)
        self.protect_last_n = int(protect_last_n)
        self.model_thresholds = dict(model_thresholds or {})
        self.small_window_floor = float(small_window_floor or 0.0)
        self.threshold_tokens_cap = threshold_tokens_cap
        self.max_tokens = max_tokens
        self.abort_on_summary_failure = bool(abort_on_summary_failure)
        self.summary_timeout = float(summary_timeout)
        self.enabled = bool(enabled)
        self.proactive_prune_tokens = int(proactive_prune_tokens)
        #: Tool results of the middle the summarizer still gets verbatim (newest first).
        self.summary_keep_recent_results = SUMMARY_KEEP_RECENT_RESULTS
        self._clock = clock

        self.model = ""
        self.provider = ""
        self.session_id = ""
        self._route: tuple[str, str, str, str] | None = None
        self.tail_token_budget = 0
        self.max_summary_tokens = 0
        self.last_compression: dict[str, Any] | None = None
        self._reset_state()

    # -- state ------------------------------------------------------------------------------

    def _reset_state(self) -> None:
        """Forget everything that belongs to one session (summary, guards, calibration)."""
        self._previous_summary = ""
        self._cooldown_until = 0.0
        self._cooldown_error = ""
        self._transient_failures = 0
        self._strikes = 0
        self._fallback_streak = 0
        self._recent: deque[float] = deque()
        self._last_attempt_tokens = 0
        self._reset_calibration()

    def _reset_calibration(self) -> None:
        self._awaiting_usage = False
        self._verify_pending = False
        self._last_real_prompt = 0
        self._rough_at_real: int | None = None
        self._last_preflight_rough: int | None = None

    def _recompute(self) -> None:
        """Derive trigger, tail budget and summary ceiling from the window."""
        window = self.context_length
        override = hermes.resolve_model_threshold(self.model, self.model_thresholds, -1.0,
                                                  provider=self.provider)
        if override > 0:
            pct = override  # an explicit per-model choice wins over the small-window floor
        else:
            pct = self._config_threshold_percent
            if window and window < self.SMALL_WINDOW_LIMIT and self.small_window_floor:
                pct = max(pct, self.small_window_floor)
        self.threshold_percent = pct
        if not window:
            self.threshold_tokens = self.tail_token_budget = self.max_summary_tokens = 0
            return
        effective = window - self.max_tokens if self.max_tokens and 0 < self.max_tokens < window else window
        threshold = max(int(effective * pct), self.MIN_THRESHOLD_TOKENS)
        if threshold >= effective:  # a small model: the floor would be the whole window
            threshold = max(1, min(int(effective * self.DEGENERATE_TRIGGER), effective - 1))
        if self.threshold_tokens_cap:
            threshold = min(threshold, int(self.threshold_tokens_cap), window)
        self.threshold_tokens = threshold
        self.tail_token_budget = max(1, min(int(threshold * self.target_ratio),
                                            int(window * self.TAIL_MAX_WINDOW_FRACTION)))
        self.max_summary_tokens = min(int(window * 0.05), 12_000)

    # -- the contract: model and usage ---------------------------------------------------

    def update_model(self, model: str, context_length: int, base_url: str = "", api_key: str = "",
                     provider: str = "", api_mode: str = "") -> None:
        """Set the main model: re-derive the trigger (per-model override, small-window
        floor, reserved output), reset usage calibration and the ineffective counter; a
        real change of route also clears the failure cooldown and the fallback streak."""
        route = (model or "", provider or "", base_url or "", api_mode or "")
        changed = route != self._route
        self._route = route
        self.model, self.provider = route[0], route[1]
        self.context_length = int(context_length or 0)
        self._recompute()
        self.last_prompt_tokens = 0
        self._reset_calibration()
        self._strikes = 0
        if changed:
            self._fallback_streak = 0
            self._transient_failures = 0
            self._cooldown_until, self._cooldown_error = 0.0, ""

    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Record real usage. A reading below the trigger resets the ineffective counter;
        the first reading after a compaction is its verdict (still over the trigger: one
        strike, since the system prompt and tools alone may exceed it)."""
        usage = usage or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        self.last_prompt_tokens = prompt
        self.last_completion_tokens = completion
        self.last_total_tokens = int(usage.get("total_tokens") or prompt + completion)
        verify = self._verify_pending
        self._verify_pending = self._awaiting_usage = False  # consumed even without usage
        if prompt <= 0:
            return
        self._last_real_prompt = prompt
        self._rough_at_real = self._last_preflight_rough
        if prompt < self.threshold_tokens:
            self._strikes = 0
        elif verify:
            self._strikes += 1
            log.warning(
                "compaction did not bring the prompt under the trigger (%d ≥ %d tokens); the "
                "system prompt and tool schemas may be larger than compaction can help with",
                prompt, self.threshold_tokens)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether to compact now (see :meth:`should_compress_info`)."""
        return self.should_compress_info(prompt_tokens)[0]

    def should_compress_info(self, prompt_tokens: int | None = None) -> tuple[bool, str | None]:
        """``(due and allowed, reason it is blocked)``. Reasons: ``"disabled"``,
        ``"cooldown:<s>"`` (a summary failed recently), ``"ineffective"`` (compactions
        freed nothing, or fell back twice in a row; lifts once the prompt grows by
        ``max(4096, 10% of the trigger)`` tokens), ``"frequency:<s>"`` (too many in ten
        minutes)."""
        tokens = self.last_prompt_tokens if prompt_tokens is None else int(prompt_tokens)
        if not self.threshold_tokens or tokens < self.threshold_tokens:
            return False, None
        reason = self._blocked_reason(tokens)
        return reason is None, reason

    def _blocked_reason(self, tokens: int) -> str | None:
        if not self.enabled:
            return "disabled"
        remaining = self._cooldown_remaining()
        if remaining > 0:
            return f"cooldown:{remaining}"
        if self._strikes >= self.STRIKE_LIMIT or self._fallback_streak >= self.STRIKE_LIMIT:
            recovery = max(self.RECOVERY_MIN_TOKENS, int(self.threshold_tokens * self.RECOVERY_FRACTION))
            if tokens < self._last_attempt_tokens + recovery:
                return "ineffective"
        now = self._clock()
        while self._recent and now - self._recent[0] >= self.FREQUENCY_WINDOW:
            self._recent.popleft()
        if len(self._recent) >= self.FREQUENCY_LIMIT:
            return f"frequency:{math.ceil(self.FREQUENCY_WINDOW - (now - self._recent[0]))}"
        return None

    def _cooldown_remaining(self) -> int:
        return max(0, math.ceil(self._cooldown_until - self._clock()))

    def _projected(self, rough: int) -> int:
        """Real usage of the last call plus the rough growth since, else the rough figure."""
        if self._last_real_prompt > 0 and self._rough_at_real is not None:
            return self._last_real_prompt + max(0, rough - self._rough_at_real)
        if self._last_real_prompt > 0:
            return max(rough, self._last_real_prompt)
        return rough

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        """Before a call: compact if the projected prompt passes the trigger. The projection
        is the last real count plus the rough growth of the messages since (rough figures
        skew by tokenizer); before any real usage it is the CJK-aware rough estimate.
        Right after a compaction it waits for real usage instead of compacting again."""
        rough = messages_tokens(messages)
        self._last_preflight_rough = rough
        if self._awaiting_usage:
            return False
        return self.should_compress(self._projected(rough))

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        """``True`` right after a compaction, or when real usage says a rough figure over
        the trigger is only tokenizer skew."""
        if self._awaiting_usage:
            return True
        return rough_tokens >= self.threshold_tokens > self._projected(rough_tokens)

    # -- compaction ---------------------------------------------------------------------------

    def _plan(self, messages: list[Message]) -> Any:
        return plan(messages, protect_first_n=self.protect_first_n,
                    first_compaction=self.compression_count == 0,
                    tail_budget=self.tail_token_budget or 1, protect_last_n=self.protect_last_n)

    def has_content_to_compress(self, messages: list[Message]) -> bool:
        """Whether a compaction of ``messages`` would summarize anything."""
        p = self._plan(messages)
        return p.has_middle and p.cut < len(p.work)

    def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[Message]:
        """Compact ``messages``; see the module docstring for what happens on failure.
        Returns an equal copy of the input when nothing was compacted (then
        ``last_compression["aborted"]`` says why).

        Steps: the record of this pass (:meth:`_start_pass`), the layout (``_plan``),
        phase 1 pruning (:meth:`_prune_phase`), the summary or its fallback
        (:meth:`_summary_phase`), assembly, and the bookkeeping of a committed pass
        (:meth:`_commit_pass`)."""
        started = time.perf_counter()
        rough_before = messages_tokens(messages)
        info = self._start_pass(messages, rough_before, current_tokens, force, focus_topic)

        def unchanged(reason: str) -> list[Message]:
            info["aborted"] = reason
            info["duration_s"] = round(time.perf_counter() - started, 4)
            return [dict(m) for m in messages]

        if force:
            self._cooldown_until = 0.0
        elif (remaining := self._cooldown_remaining()) > 0:
            info["error"] = self._cooldown_error
            return unchanged(f"cooldown:{remaining} (last summary failure: {self._cooldown_error})")

        p = self._plan(messages)
        if not p.has_middle or p.cut >= len(p.work):
            self._strikes += 1
            return unchanged("nothing to compress yet")

        work, index, pruned, turns = self._prune_phase(p)
        body, abort = self._summary_phase(turns, index, p.previous_summary, focus_topic,
                                          memory_context, info, force)
        if body is None:
            return unchanged(abort)

        # Phase 4: assembly.
        pinned = [work[p.pinned]] if p.pinned is not None else []
        out = assemble(work[: p.head_end], pinned, body, work[p.cut:])
        rough_after = messages_tokens(out)
        if rough_after >= rough_before and not force:
            # An automatic pass that frees nothing would only repeat (#40803); a forced one
            # (overflow, /compress) was demanded and is kept.
            self._strikes += 1
            return unchanged("compaction would not make the transcript smaller")
        self._commit_pass(body, force, info)
        info.update(
            committed=True, messages_after=len(out), tokens_after=rough_after,
            summary_tokens=tokens_of_text(body), summarized_messages=len(turns), pruned=pruned,
            duration_s=round(time.perf_counter() - started, 4),
        )
        return out

    def _start_pass(self, messages: list[Message], rough_before: int, current_tokens: int | None,
                    force: bool, focus_topic: str | None) -> dict[str, Any]:
        """The ``last_compression`` record of a new pass, with the tokens it starts from
        (the caller's count, else the provider's last one, else an estimate)."""
        if current_tokens and current_tokens > 0:
            tokens_before = int(current_tokens)
        elif self.last_prompt_tokens > 0:
            tokens_before = self.last_prompt_tokens
        else:
            tokens_before = rough_before
        info: dict[str, Any] = {
            "committed": False, "aborted": None, "fallback": False, "fallback_reason": None,
            "error": None, "forced": bool(force), "focus_topic": focus_topic,
            "messages_before": len(messages), "messages_after": len(messages),
            "tokens_before": tokens_before, "tokens_after": tokens_before,
            "summary_tokens": 0, "summarized_messages": 0, "pruned": 0,
            "summary_input_tokens": 0, "summary_model": None, "duration_s": 0.0,
        }
        self.last_compression = info
        self._last_attempt_tokens = tokens_before
        return info

    def _prune_phase(self, p: Any) -> tuple[list[Message], dict[str, tuple[str, Any]], int, list[Message]]:
        """Phase 1: duplicates collapse everywhere but the head; the tail sheds tool bulk
        (oldest first, never user or assistant text) when it is over its soft ceiling.
        Returns ``(work, call index, pruned count, the middle turns to summarize)``; the
        summarizer sees old tool outputs of the middle as one-liners (tool, key arguments,
        size, exit code), the newest few in full — upstream's pre-pass."""
        work = list(p.work)
        index = call_index(work)
        pruned = dedupe(work, p.head_end)
        pruned += relieve_pressure(work, p.cut, int(self.tail_token_budget * SOFT_CEILING),
                                   index, message_tokens)
        turns = list(work)
        prune_for_summary(turns, p.middle, index, self.summary_keep_recent_results)
        return work, index, pruned, [turns[i] for i in p.middle]

    def _summary_phase(self, turns: list[Message], index: dict[str, tuple[str, Any]], previous: str,
                       focus_topic: str | None, memory_context: str, info: dict[str, Any],
                       force: bool) -> tuple[str | None, str]:
        """Phase 3: ``(summary body, "")``, the deterministic fallback when the failure
        policy allows it, or ``(None, why the pass is aborted)``."""
        text = serialize(turns, index)
        info["summary_input_tokens"] = tokens_of_text(text)
        budget = summary_budget(tokens_of_text(text), self.context_length)
        body, failure, error = self._summarize(text, budget, previous, focus_topic,
                                               memory_context, info)
        if body is not None:
            return body, ""
        use_fallback = self._record_failure(failure, error, force)
        info["error"] = f"{failure}: {error}"
        if not use_fallback:
            remaining = self._cooldown_remaining()
            retry = f"; automatic compaction retries in {remaining}s" if remaining else ""
            log.warning("summary failed (%s: %s); the transcript was kept unchanged", failure, error)
            return None, f"summary failed ({failure}: {error}); history kept{retry}"
        info["fallback"], info["fallback_reason"] = True, failure
        log.warning("summary failed (%s: %s); used the local fallback summary", failure, error)
        return fallback_summary(turns, f"{failure}: {error}", previous=previous, index=index), ""

    def _commit_pass(self, body: str, force: bool, info: dict[str, Any]) -> None:
        """The state a committed pass leaves: counters, the summary to carry over, the
        failure streaks reset after a real summary, and the wait for the provider's count
        of the compacted prompt before judging again (#36718)."""
        self.compression_count += 1
        self._previous_summary = body
        if info["fallback"]:
            self._fallback_streak += 1
        else:
            self._fallback_streak = 0
            self._transient_failures = 0
            self._cooldown_until, self._cooldown_error = 0.0, ""
        if not force:
            self._recent.append(self._clock())
        self.last_prompt_tokens = -1
        self._awaiting_usage = self._verify_pending = True
        self._rough_at_real = None

    # -- the summarizer ---------------------------------------------------------------------------

    def _routes(self) -> list[tuple[Any, str]]:
        """Summarizer routes to try in order: the auxiliary model, then the main model."""
        routes: list[tuple[Any, str]] = []
        if self._auxiliary is not None:
            try:
                aux = self._auxiliary()
            except Exception as exc:  # a broken auxiliary config must not break compaction
                log.warning("auxiliary compression model unavailable: %s", exc)
                aux = None
            if aux and aux[0] is not None and aux[1]:
                routes.append((aux[0], str(aux[1])))
        if self._main_client is not None and self.model:
            try:
                client = self._main_client(self.provider or None)
            except Exception as exc:
                log.debug("main model client unavailable for summaries: %s", exc)
                client = None
            if client is not None and not any(c is client and m == self.model for c, m in routes):
                routes.append((client, self.model))
        return routes

    def _summarize(self, text: str, budget: int, previous: str, focus_topic: str | None,
                   memory_context: str, info: dict[str, Any]) -> tuple[str | None, str, str]:
        """``(body, "", "")`` on success, else ``(None, failure class, error text)``."""
        routes = self._routes()
        if not routes:
            return None, "no_model", "no summarizer model is configured or reachable"
        failure, error = "error", ""
        for client, model in routes:
            try:
                body = self._call_summarizer(client, model, text, budget, previous, focus_topic,
                                             memory_context)
            except Exception as exc:  # classified below; every failure has a policy
                failure, error = _classify(exc), _short_error(exc)
                log.info("summarizer %s failed (%s): %s", model, failure, error)
                continue
            info["summary_model"] = model
            return body, "", ""
        return None, failure, error

    def _call_summarizer(self, client: Any, model: str, text: str, budget: int, previous: str,
                         focus_topic: str | None, memory_context: str) -> str:
        max_tokens = 2 * budget  # room for the whole checkpoint: a cap mid-section truncates it
        prompt = build_prompt(text, budget=budget, previous=previous, focus_topic=focus_topic,
                              memory_context=memory_context)
        try:
            window = int(client.context_length(model) or 0)
        except Exception:
            window = 0
        if window:
            max_tokens = min(max_tokens, max(256, window // 4))
            room = window - max_tokens - 256
            need = tokens_of_text(prompt)
            if need > room:
                overhead = need - tokens_of_text(text)
                allowed = room - overhead
                if allowed < 500:
                    raise hermes.ContextLengthError(
                        f"summarizer {model} has a {window:,}-token window, too small for "
                        f"{need:,} tokens of compaction input")
                text = _fit(text, allowed)
                prompt = build_prompt(text, budget=budget, previous=previous,
                                      focus_topic=focus_topic, memory_context=memory_context)
        response = client.complete(hermes.LLMRequest(
            model=model, messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens, timeout=self.summary_timeout,
        ))
        try:
            return clean_summary(response.content)
        except EmptySummaryError:
            raise
        except Exception as exc:
            raise EmptySummaryError(str(exc)) from exc

    def _record_failure(self, failure: str, error: str, force: bool) -> bool:
        """Arm the cooldown for ``failure``; return whether to use the fallback summary."""
        if failure == "auth":
            cooldown = self.AUTH_COOLDOWN
        elif failure in TRANSIENT_CLASSES:
            step = min(self._transient_failures, len(self.TRANSIENT_COOLDOWNS) - 1)
            cooldown = self.TRANSIENT_COOLDOWNS[step]
            self._transient_failures += 1
        elif failure in FALLBACK_CLASSES and failure != "empty":
            cooldown = 0.0
        else:
            cooldown = self.ERROR_COOLDOWN
        if cooldown:
            self._cooldown_until = self._clock() + cooldown
            self._cooldown_error = f"{failure}: {error}"
        if self.abort_on_summary_failure:
            return False
        return failure in FALLBACK_CLASSES or force

    # -- cheap pruning ----------------------------------------------------------------------------

    def prune_tool_results_only(self, messages: list[Message],
                                current_tokens: int | None = None) -> tuple[list[Message], int]:
        """Phase 1 alone, with no model call: old tool results outside the newest
        ``protect_last_n`` messages become one-line placeholders, duplicates collapse, big
        arguments shrink (valid JSON). The head stays verbatim. With
        ``proactive_prune_tokens`` set, nothing happens below that many tokens. Returns
        the input object itself when nothing changed."""
        if self.proactive_prune_tokens > 0 and current_tokens is not None \
                and current_tokens < self.proactive_prune_tokens:
            return messages, 0
        work = list(messages)
        head_start = 1 if work and work[0].get("role") == "system" else 0
        first = self.protect_first_n if self.compression_count == 0 else 0
        head_end = align_forward(work, min(head_start + first, len(work)))
        tail = max(head_end, len(work) - self.protect_last_n)
        while head_end < tail < len(work) and work[tail].get("role") == "tool":
            tail -= 1  # keep a tool group whole: its call stays with its protected results
        index = call_index(work)
        count = dedupe(work, head_end) + prune_range(work, head_end, tail, index)
        return (work, count) if count else (messages, 0)

    # -- lifecycle and status -------------------------------------------------------------------

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """Remember the session id (for logs and status)."""
        self.session_id = session_id

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        """Clear all per-session state, so nothing leaks into the next session."""
        self._reset_state()
        self.last_compression = None

    def forget(self, request: hermes.ForgetRequest) -> hermes.ForgetReport:
        """The compressor keeps nothing between calls (summaries live in the session
        store's messages), so there is nothing of its own to forget."""
        return hermes.ForgetReport(component=f"context engine {self.name}", note="keeps no copies")

    def on_session_reset(self) -> None:
        """``/new``: zero the counters and clear the summary, guards and calibration."""
        super().on_session_reset()
        self._reset_state()
        self.last_compression = None

    def blocked_reason(self) -> str | None:
        """Why an automatic compaction would be refused right now (``None`` if it would
        not be), whatever the current prompt size: for ``hermes doctor``."""
        return self._blocked_reason(max(self.last_prompt_tokens, 0))

    def get_status(self) -> dict[str, Any]:
        """The base figures plus the compressor's: effective ``threshold_percent``,
        ``tail_token_budget``, ``max_summary_tokens``, ``blocked`` (a reason or ``None``),
        ``cooldown_remaining_s`` and ``cooldown_error``, ``ineffective_strikes``,
        ``fallback_streak``, ``recent_compactions``, ``awaiting_real_usage``,
        ``previous_summary_tokens`` and ``last_compression``."""
        status = super().get_status()
        status.update(
            engine=self.name,
            enabled=self.enabled,
            model=self.model,
            threshold_percent=self.threshold_percent,
            tail_token_budget=self.tail_token_budget,
            max_summary_tokens=self.max_summary_tokens,
            blocked=self.blocked_reason(),
            cooldown_remaining_s=self._cooldown_remaining(),
            cooldown_error=self._cooldown_error or None,
            ineffective_strikes=self._strikes,
            fallback_streak=self._fallback_streak,
            recent_compactions=len(self._recent),
            awaiting_real_usage=self._awaiting_usage,
            previous_summary_tokens=tokens_of_text(self._previous_summary),
            last_compression=dict(self.last_compression) if self.last_compression else None,
        )
        return status


def _fit(text: str, tokens: int) -> str:
    """``text`` cut (head and tail kept) to about ``tokens`` tokens."""
    size = max(1, tokens_of_text(text))
    return bound(text, max(1000, int(len(text) * tokens / size)))


def _classify(exc: BaseException) -> str:
    if isinstance(exc, EmptySummaryError):
        return "empty"
    if isinstance(exc, hermes.ContextLengthError):
        return "too_small"
    if isinstance(exc, hermes.LLMAuthError):
        return "auth"
    if isinstance(exc, hermes.LLMRateLimitError):
        return "rate_limit"
    text = str(exc).lower()
    if isinstance(exc, TimeoutError) or "timed out" in text or "timeout" in text:
        return "timeout"
    if isinstance(exc, hermes.LLMUnavailableError):
        return "unavailable"
    return "error"


def _short_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 220 else text[:219] + "…"
