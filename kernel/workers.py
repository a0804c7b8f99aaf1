"""Concurrency helpers for memory providers and other plugins that talk to slow or flaky
backends: a circuit breaker, a serial daemon worker and a one-slot background prefetch.

Standard library only, so a plugin importing them stays cheap. Public as
``hermes.CircuitBreaker``, ``hermes.SerialWorker`` and ``hermes.BackgroundSlot``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

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
        Returns whether everything queued had run."""
        drained = self.flush(timeout)
        with self._lock:
            self._closed = True
            if self._thread is not None:
                self._queue.put(None)
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
