"""The default context engine, ``compressor``: lossy summarizing compaction.

Selected by ``context.engine: compressor`` (the default). The factory reads the
``compression.*`` settings (see ``docs/context.md``); the engine itself lives in
:mod:`.engine` and is imported only when a kernel builds one, so listing plugins stays
cheap.
"""

from __future__ import annotations

from typing import Any

import hermes


def _model_thresholds(raw: Any) -> dict[str, float]:
    """``compression.model_thresholds`` checked: substring keys, fractions (or percents)."""
    if raw in (None, ""):
        return {}
    if not isinstance(raw, dict):
        raise hermes.ConfigError(
            "compression.model_thresholds: expected a mapping of model-name substrings to "
            f"fractions, e.g. {{qwen: 0.6}}, got {raw!r}.", path="compression.model_thresholds")
    out = {}
    for key, value in raw.items():
        path = f"compression.model_thresholds.{key}"
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 100
        if not ok or not str(key).strip():
            raise hermes.ConfigError(
                f"{path}: expected a fraction between 0 and 1 (or a percent up to 100), got {value!r}.",
                path=path)
        out[str(key)] = float(value)
    return out


def build_compressor(kernel: Any) -> Any:
    """Build the ``compressor`` engine from the kernel's ``compression.*`` config."""
    from .engine import Compressor

    cfg = kernel.config
    return Compressor(
        auxiliary=lambda: kernel.auxiliary("compression"),
        main_client=lambda provider: kernel.llm_client(provider),
        threshold_percent=float(cfg.get("compression.threshold", 0.50)),
        target_ratio=float(cfg.get("compression.target_ratio", 0.20)),
        protect_last_n=int(cfg.get("compression.protect_last_n", 20)),
        model_thresholds=_model_thresholds(cfg.get("compression.model_thresholds")),
        small_window_floor=float(cfg.get("compression.small_window_floor", 0.75) or 0.0),
        threshold_tokens_cap=cfg.get("compression.threshold_tokens"),
        max_tokens=cfg.get("model.max_tokens"),
        abort_on_summary_failure=bool(cfg.get("compression.abort_on_summary_failure", False)),
        summary_timeout=float(cfg.get("compression.summary_timeout", 120.0)),
        enabled=bool(cfg.get("compression.enabled", True)),
    )


@hermes.hookimpl
def hermes_register_context_engines(register: Any) -> None:
    """Register ``compressor``."""
    register("compressor", build_compressor,
             description="Summarizing compaction: prune tool output, keep head and tail, "
                         "summarize the middle with the auxiliary model")
