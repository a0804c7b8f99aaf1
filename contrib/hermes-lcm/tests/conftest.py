"""Fixtures for the hermes-lcm tests: engines built the way the runtime builds them
(a kernel with the plugin registered, ``kernel.create("context-engine", "lcm")``), a
synthetic conversation generator and a host loop that drives an engine like the runtime.

Helpers shared by the test modules live in ``lcm_helpers.py``. The tests need the
distribution installed (``pip install -e contrib/hermes-lcm[test]``,
as CI does); without it they are not collected.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest

if importlib.util.find_spec("hermes_lcm") is None:  # pragma: no cover - environment guard
    collect_ignore_glob = ["test_*.py"]

@pytest.fixture
def lcm_kernel(kernel_factory: Any) -> Callable[..., Any]:
    """``lcm_kernel(settings=None, **config)`` — a kernel (temp home, no entry points)
    with the hermes_lcm plugin registered and ``plugins.lcm`` set to ``settings``."""
    import hermes_lcm

    def make(settings: dict[str, Any] | None = None, **config: Any) -> Any:
        cfg = dict(config)
        cfg.setdefault("plugins", {})["lcm"] = dict(settings or {})
        kernel = kernel_factory(config=cfg)
        kernel.register_plugin(hermes_lcm, "lcm")
        return kernel

    return make


@pytest.fixture
def make_engine(lcm_kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``make_engine(settings=None, window=WINDOW, **config)`` — an ``lcm`` engine built by
    its kernel, with a model window set and a session started."""

    def make(settings: dict[str, Any] | None = None, window: int = 8_000, **config: Any) -> Any:
        kernel = lcm_kernel(settings, **config)
        engine = kernel.create("context-engine", "lcm")
        engine.update_model("fake-model", window)
        engine.on_session_start("session-1", hermes_home=str(kernel.home))
        return engine

    return make


@pytest.fixture
def deterministic() -> dict[str, Any]:
    """Settings that never call a model and keep tails short (small, fast tests)."""
    return {"summarizer": "deterministic", "fresh_tail_count": 6, "leaf_fanout": 3}
