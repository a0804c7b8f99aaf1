"""Concurrency helpers for memory providers and other plugins that talk to slow or flaky
backends: a circuit breaker, a serial daemon worker and a one-slot background prefetch.

Standard library only, so a plugin importing them stays cheap. Public as
``hermes.CircuitBreaker``, ``hermes.SerialWorker`` and ``hermes.BackgroundSlot``; with
them :class:`BackgroundMemoryProvider` (``hermes.BackgroundMemoryProvider``), the skeleton
of a memory provider for a remote backend, and its helpers ``hermes.merge_settings`` and
``hermes.importable``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from .contracts import MemoryProvider
from .errors import HermesError

log = logging.getLogger("hermes.workers")

class CircuitBreaker:
    """Stops calling a failing backend for a while.

    After ``threshold`` consecutive failures the breaker opens for ``cooldown`` seconds:
    :meth:`allow` is false and callers skip the backend instead of waiting on timeouts
    every turn. When the cooldown has passed one call is let through (half-open); its
    success closes the breaker, its failure opens it again for another cooldown.
    """

    def __init__(self, threshold: int = 5, cooldown: float = 120.0,
                 clock: Callable[[], float] = time.monotonic):
        self.threshold = max(1, int(threshold))
        self.cooldown = float(cooldown)
        self._clock = clock
        self._lock = threading.Lock()
        self.failures = 0
        self.opened_at: float | None = None
        self.last_error = ""

    def allow(self) -> bool:
        """Whether a call may go to the backend now."""
        with self._lock:
            if self.opened_at is None:
                return True
            if self._clock() - self.opened_at >= self.cooldown:
                # Half-open: let this call probe; a failure re-opens at once.
                self.opened_at = None
                self.failures = self.threshold - 1
                return True
            return False

    def success(self) -> None:
        """Record a call that worked: the breaker closes."""
        with self._lock:
            self.failures = 0
            self.opened_at = None

    def failure(self, exc: BaseException | str) -> None:
        """Record a failed call; opens the breaker at the threshold."""
        with self._lock:
            self.failures += 1
            self.last_error = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
            if self.failures >= self.threshold and self.opened_at is None:
                self.opened_at = self._clock()
                log.warning("backend paused for %.0fs after %d consecutive failures: %s",
                            self.cooldown, self.failures, self.last_error)

    @property
    def is_open(self) -> bool:
        """Whether calls are being refused right now."""
        with self._lock:
            return self.opened_at is not None and self._clock() - self.opened_at < self.cooldown

    def retry_in(self) -> float:
        """Seconds until the next probe is allowed (0 when closed)."""
        with self._lock:
            if self.opened_at is None:
                return 0.0
            return max(0.0, self.cooldown - (self._clock() - self.opened_at))

    def status(self) -> dict[str, Any]:
        """Figures for status output."""
        return {"open": self.is_open, "consecutive_failures": self.failures,
                "retry_in_s": round(self.retry_in(), 1), "last_error": self.last_error}


class SerialWorker:
    """One daemon thread that runs submitted jobs in submission order.

    Writes go through it so they never block a turn and never race each other. The
    thread is a daemon: a backend that hangs cannot keep the process alive at exit.
    """

    def __init__(self, name: str):
        self.name = name
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Queue ``fn(*args, **kwargs)``; False once the worker is closed."""
        with self._lock:
            if self._closed:
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._queue.put((fn, args, kwargs))
            return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            fn, args, kwargs = item
            try:
                fn(*args, **kwargs)
            except Exception as exc:  # a job reports its own failures; never kill the thread
                log.debug("%s job failed: %s", self.name, exc, exc_info=exc)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far has run; False on timeout."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                return True
            done = threading.Event()
            self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float | None = 5.0) -> bool:
        """Drain for at most ``timeout`` seconds, then stop; later submits are refused.
        Jobs still queued after the timeout are dropped (with one warning): they would
        otherwise run against a backend that has been shut down. Returns whether
        everything queued had run."""
        drained = self.flush(timeout)
        with self._lock:
            self._closed = True
            dropped = 0
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, threading.Event):
                    item.set()  # a flush waiting behind dropped jobs returns
                elif item is not None:
                    dropped += 1
            if self._thread is not None:
                self._queue.put(None)
        if dropped:
            log.warning("%s: %d queued job(s) dropped at shutdown", self.name, dropped)
        return drained


class BackgroundSlot:
    """One background computation at a time, whose result the next caller collects.

    ``start(fn, *args)`` runs ``fn`` on a daemon thread unless one is still running;
    ``take(timeout)`` waits at most ``timeout`` seconds and returns the result (once),
    or ``None`` when nothing finished in time — a late result stays for the next take.
    """

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._result: Any = None
        self._has_result = False

    @property
    def busy(self) -> bool:
        """Whether a computation is running."""
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    @property
    def pending(self) -> bool:
        """Whether a computation is running or a result waits to be taken."""
        with self._lock:
            return self._has_result or (self._thread is not None and self._thread.is_alive())

    def start(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Start ``fn(*args)`` unless a computation is already running."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return False

            def run() -> None:
                try:
                    value = fn(*args)
                except Exception as exc:  # fn reports its own failures
                    log.debug("%s failed: %s", self.name, exc, exc_info=exc)
                    value = None
                with self._lock:
                    self._result, self._has_result = value, True

            self._thread = threading.Thread(target=run, name=self.name, daemon=True)
            self._thread.start()
            return True

    def take(self, timeout: float) -> Any:
        """The finished result (consumed), waiting at most ``timeout`` seconds."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(max(0.0, timeout))
        with self._lock:
            if not self._has_result:
                return None
            value, self._result, self._has_result = self._result, None, False
            return value

    def join(self, timeout: float | None = None) -> None:
        """Wait for a running computation (shutdown, tests)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)


def merge_settings(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` overlaid by ``override``: nested mappings merged key by key, a ``None``
    in ``override`` meaning "not set" (the default stays)."""
    out = dict(base)
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_settings(out[key], value)
        elif value is not None:
            out[key] = value
    return out


def importable(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (availability checks
    must stay fast)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None (blocked)
        return False


class BackgroundMemoryProvider(MemoryProvider):
    """The skeleton of a memory provider backed by a remote or slow service, so that such
    a provider writes only what is its own.

    It keeps the settings of ``plugins.<settings_key>`` over :attr:`defaults` (an unset
    ``{$env: VAR}`` becomes :attr:`config_error`, the reason the provider is unavailable,
    instead of a crash), the kernel's environment (:attr:`env`, for ``$VAR`` fallbacks),
    a :class:`CircuitBreaker` around every backend call (:meth:`call`), writes on one
    :class:`SerialWorker` (:meth:`submit`, never for subagents or after shutdown), a
    one-slot :class:`BackgroundSlot` prefetch bounded by ``prefetch_timeout``, and an
    orderly :meth:`shutdown` (queued writes get ``sync_timeout`` seconds).

    A subclass sets :attr:`settings_key` and :attr:`defaults` (holding
    ``prefetch_timeout``, ``sync_timeout``, ``breaker_threshold`` and
    ``breaker_cooldown``), implements :attr:`name`, :meth:`recall`,
    :meth:`unavailable_reason` and :meth:`get_tool_schemas`, and releases its client in
    :meth:`close_backend`.
    """

    #: The ``plugins.<settings_key>`` config section; also names the worker threads.
    settings_key: ClassVar[str] = ""
    #: Every setting and its default.
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: Skip recall for greetings and slash commands (``hermes.is_trivial_prompt``).
    skip_trivial_prompts: ClassVar[bool] = True
    #: Raised by :meth:`call` while the breaker is open.
    paused_error: ClassVar[type[Exception]] = HermesError

    def __init__(self, kernel: Any = None, *, settings: Mapping[str, Any] | None = None):
        if kernel is not None:
            configured, self.config_error = kernel.config.plugin_lenient(self.settings_key)
        else:
            configured, self.config_error = {}, ""
        #: The kernel's environment (process over ``$HERMES_HOME/.env``), never another home's.
        self.env: Mapping[str, str] = getattr(kernel, "env", None) or os.environ
        self.home: Path | None = Path(kernel.home) if kernel is not None else None
        self.settings = merge_settings(merge_settings(self.defaults, configured), settings)
        self.breaker = CircuitBreaker(int(self.settings["breaker_threshold"]),
                                      float(self.settings["breaker_cooldown"]))
        self._writer = SerialWorker(f"hermes-{self.settings_key}-sync")
        self._prefetch = BackgroundSlot(f"hermes-{self.settings_key}-prefetch")
        self.session_id = ""
        self.agent_context = "primary"
        self.platform = "cli"
        self._closing = False  # shutdown started: no new work is accepted
        self._closed = False  # the backend client is gone

    # -- what a subclass provides ---------------------------------------------------------

    def recall(self, query: str) -> str:
        """The text recalled for ``query`` (runs in the background; ``""`` for nothing).
        Failures should be logged and give ``""``."""
        return ""

    def close_backend(self) -> None:
        """Release the backend client (called once by :meth:`shutdown`)."""

    # -- availability and lifecycle -------------------------------------------------------

    def is_available(self) -> bool:
        # Only configuration and importable packages: never the network.
        return not self.unavailable_reason()

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        self.session_id = session_id
        if kwargs.get("hermes_home"):
            self.home = Path(kwargs["hermes_home"])
        self.agent_context = str(kwargs.get("agent_context") or "primary")
        self.platform = str(kwargs.get("platform") or "cli")

    def shutdown(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._writer.close(float(self.settings["sync_timeout"])):
            log.warning("%s: shutdown before every queued write finished", self.settings_key)
        self._prefetch.join(float(self.settings["prefetch_timeout"]))
        self.close_backend()
        self._closed = True

    # -- backend calls and writes ---------------------------------------------------------

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` through the circuit breaker: :attr:`paused_error` while it is
        open; a failure counts towards opening it, a success closes it."""
        if not self.breaker.allow():
            raise self.paused_error(
                f"{self.settings_key} is paused for {self.breaker.retry_in():.0f}s after "
                f"{self.breaker.failures} consecutive failures ({self.breaker.last_error})")
        try:
            out = fn()
        except Exception as exc:
            self.breaker.failure(exc)
            raise
        self.breaker.success()
        return out

    def writes_allowed(self) -> bool:
        """Whether this agent may write: not shutting down and the primary agent (a
        subagent or a cron run reads only)."""
        return not self._closing and self.agent_context == "primary"

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue a write on the background worker, in order."""
        self._writer.submit(fn, *args)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until queued writes have run (tests, shutdown); False on timeout."""
        return self._writer.flush(timeout)

    # -- recall ---------------------------------------------------------------------------

    def _skip(self, query: str) -> bool:
        from .runtime.memory_manager import is_trivial_prompt

        return (self.skip_trivial_prompts and is_trivial_prompt(query)) or not self.breaker.allow()

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        if self._closing or self._skip(query):
            return
        self._prefetch.start(self._queued_recall, query)

    def _queued_recall(self, query: str) -> str:
        # Let the writes queued before this point land first, so that the next turn
        # also recalls what was just synced.
        self._writer.flush(float(self.settings["sync_timeout"]))
        return self.recall(query)

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        # Serve what the last queue_prefetch warmed; on a cold start recall for this
        # message. Either way wait at most prefetch_timeout: a late result is kept for
        # the next turn instead of delaying this one.
        if self._closing:
            return ""
        if not self._prefetch.pending:
            if self._skip(query):
                return ""
            self._prefetch.start(self.recall, query)
        return self._prefetch.take(float(self.settings["prefetch_timeout"])) or ""

    def breaker_status(self) -> dict[str, Any]:
        """Availability and circuit-breaker state, the common part of ``status()``."""
        return {"provider": self.name, "available": self.is_available(),
                "reason": self.unavailable_reason() or None, "breaker": self.breaker.status()}


#: The longest wait between two attempts, seconds (a server's ``retry-after`` included).
MAX_BACKOFF = 60.0


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The wait a server asks for in its response headers, in seconds:
    ``retry-after-ms`` (milliseconds), else ``retry-after`` as seconds or as an HTTP
    date; ``None`` when there is none or it cannot be read."""
    if not headers:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000.0)
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    from email.utils import parsedate_to_datetime  # only for the rare date form

    try:
        when = parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_delay(attempt: int, base: float, retry_after: float | None = None,
                  cap: float = MAX_BACKOFF) -> float:
    """The wait before retry number ``attempt + 1``: exponential backoff with jitter,
    ``base * 2**attempt`` scaled by a random factor in [0.5, 1.5), at least the server's
    ``retry_after`` (see :func:`retry_after`), at most ``cap`` seconds."""
    import random

    delay = base * (2**attempt) * (0.5 + random.random())
    if retry_after is not None:
        delay = max(delay, retry_after)
    return min(delay, cap)
