"""Trigger derivation: config, per-model overrides, small-window floors, reserved output,
caps and the derived budgets (reference §2.2, §9.1, §9.3; #14690, #117915)."""

from __future__ import annotations

import pytest

import hermes
from hermes.plugins.compressor.engine import Compressor


def build(window: int, model: str = "m", provider: str = "", **kwargs) -> Compressor:
    engine = Compressor(**kwargs)
    engine.update_model(model, window, provider=provider)
    return engine


@pytest.mark.parametrize("window", [128_000, 200_000, 262_144, 511_999])
def test_small_windows_are_floored_at_75_percent(window):
    engine = build(window)
    assert engine.threshold_percent == 0.75
    assert engine.threshold_tokens == int(window * 0.75)


def test_large_windows_keep_the_configured_fraction():
    engine = build(1_000_000)
    assert engine.threshold_percent == 0.50
    assert engine.threshold_tokens == 500_000


@pytest.mark.parametrize("window, expected", [(64_000, 54_400), (32_000, 27_200), (8_000, 6_800)])
def test_a_small_model_still_compresses(window, expected):
    # The 64K floor would equal the whole window (#14690): trigger at 85% instead.
    engine = build(window)
    assert engine.threshold_tokens == expected < window
    assert engine.should_compress(expected)
    assert not engine.should_compress(expected - 1)


@pytest.mark.parametrize("window, reserved, expected", [
    (200_000, None, 100_000),
    (100_000, None, 64_000),   # floored at the minimum usable context
    (200_000, 65_536, 67_232),
    (128_000, 65_536, 53_094),
])
def test_threshold_math_without_the_floor(window, reserved, expected):
    engine = build(window, small_window_floor=0, max_tokens=reserved)
    assert engine.threshold_tokens == expected


def test_reserved_output_larger_than_the_window_is_ignored():
    engine = build(32_000, max_tokens=40_000)
    assert engine.threshold_tokens == 27_200


def test_absolute_cap():
    engine = build(1_000_000, threshold_tokens_cap=256_000)
    assert engine.threshold_tokens == 256_000
    assert build(100_000, threshold_tokens_cap=500_000).threshold_tokens == 75_000


def test_per_model_override_longest_match_wins_and_beats_the_floor():
    thresholds = {"qwen": 0.6, "qwen3-coder": 0.9, "openrouter:qwen3": 0.55}
    assert build(128_000, "Qwen3-Coder-30B", model_thresholds=thresholds).threshold_percent == 0.9
    assert build(128_000, "qwen2.5", model_thresholds=thresholds).threshold_percent == 0.6
    # provider-scoped keys apply to that provider only
    scoped = build(128_000, "qwen3-8b", provider="openrouter", model_thresholds=thresholds)
    assert scoped.threshold_percent == 0.55
    assert build(128_000, "claude", model_thresholds=thresholds).threshold_percent == 0.75


def test_update_model_rederives_in_both_directions():
    engine = build(128_000, model_thresholds={"big": 0.9})
    assert (engine.threshold_percent, engine.threshold_tokens) == (0.75, 96_000)
    engine.update_model("m", 1_000_000)
    assert (engine.threshold_percent, engine.threshold_tokens) == (0.50, 500_000)
    engine.update_model("big-model", 1_000_000)
    assert engine.threshold_percent == 0.9
    # back to a model without an override: the configured value, not the last override
    engine.update_model("m", 200_000)
    assert (engine.threshold_percent, engine.threshold_tokens) == (0.75, 150_000)


def test_abc_update_model_snapshots_the_config_percent():
    class Tiny(hermes.ContextEngine):
        name = "tiny"
        threshold_percent = 0.6
        model_thresholds = {"special": 0.9}

        def update_from_response(self, usage):
            pass

        def should_compress(self, prompt_tokens=None):
            return False

        def compress(self, messages, current_tokens=None, focus_topic=None, force=False,
                     memory_context=""):
            return list(messages)

    engine = Tiny()
    engine.update_model("special-1", 100_000)
    assert engine.threshold_tokens == 90_000
    engine.update_model("plain", 100_000)
    assert engine.threshold_tokens == 60_000


def test_budgets():
    engine = build(200_000)
    assert engine.tail_token_budget == 30_000       # threshold × target_ratio
    assert engine.max_summary_tokens == 10_000      # 5% of the window
    assert build(1_000_000).max_summary_tokens == 12_000  # the ceiling
    huge_ratio = build(200_000, target_ratio=5.0)
    assert huge_ratio.target_ratio == 0.80
    assert huge_ratio.tail_token_budget == 40_000   # never more than 20% of the window
    assert build(200_000, target_ratio=0.01).target_ratio == 0.10


def test_factory_reads_the_compression_config(kernel_factory):
    kernel = kernel_factory(config={"compression": {
        "threshold": 0.6, "target_ratio": 0.3, "protect_last_n": 9, "small_window_floor": 0,
        "model_thresholds": {"m-large": 80}, "abort_on_summary_failure": True,
        "summary_timeout": 7.5, "threshold_tokens": 90_000}})
    engine = kernel.create("context-engine", "compressor")
    engine.update_model("m", 200_000)
    assert engine.threshold_tokens == 90_000   # 120K capped
    assert engine.protect_last_n == 9 and engine.target_ratio == 0.3
    assert engine.abort_on_summary_failure and engine.summary_timeout == 7.5
    engine.update_model("m-large", 200_000)
    assert engine.threshold_percent == 0.8


def test_factory_names_the_bad_model_threshold(kernel_factory):
    kernel = kernel_factory(config={"compression": {"model_thresholds": {"qwen": "lots"}}})
    with pytest.raises(hermes.ConfigError, match=r"compression\.model_thresholds\.qwen"):
        kernel.create("context-engine", "compressor")


@pytest.mark.parametrize("key, value", [("small_window_floor", 2), ("summary_timeout", 0),
                                        ("threshold_tokens", 10)])
def test_bad_values_fail_at_start_naming_the_key(kernel_factory, key, value):
    with pytest.raises(hermes.ConfigError, match=rf"compression\.{key}"):
        kernel_factory(config={"compression": {key: value}})


def test_resolve_model_threshold_reads_percents():
    assert hermes.resolve_model_threshold("gpt-5", {"gpt": 60}, 0.5) == 0.6
    assert hermes.resolve_model_threshold("gpt-5", None, 0.5) == 0.5
