"""Helpers for the compressor tests: engines built directly or through a kernel, a
settable clock, and transcripts from the conformance generator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermes.plugins.compressor.engine import Compressor


class Clock:
    """A monotonic clock the test moves by hand (cooldowns, frequency windows)."""

    def __init__(self, now: float = 1_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine_factory(clock: Clock) -> Callable[..., Compressor]:
    """``engine_factory(window=8000, model="m", **kwargs)`` — a Compressor with no
    summarizer (every summary is the local fallback) unless ``auxiliary`` is given."""

    def make(window: int = 8_000, model: str = "m", provider: str = "", **kwargs: Any) -> Compressor:
        kwargs.setdefault("clock", clock)
        engine = Compressor(**kwargs)
        engine.update_model(model, window, provider=provider)
        engine.on_session_start("s1")
        return engine

    return make


@pytest.fixture
def llm_engine(kernel_factory: Any, fake_llm: Any, clock: Clock) -> Callable[..., Any]:
    """``llm_engine(window=8000, config=None)`` — the compressor built by its factory on a
    kernel whose models are the fake LLM server (OpenAI wire format, no retries)."""

    def make(window: int = 8_000, config: dict[str, Any] | None = None, provider: str = "openai") -> Any:
        cfg = fake_llm.config(provider=provider)
        cfg["model"]["max_retries"] = 0
        for section, values in (config or {}).items():
            cfg.setdefault(section, {}).update(values)
        kernel = kernel_factory(config=cfg)
        engine = kernel.create("context-engine", "compressor")
        engine._clock = clock
        engine.update_model(cfg["model"]["name"], window, provider=provider)
        engine.on_session_start("s1")
        return engine

    return make
