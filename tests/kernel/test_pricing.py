"""Cost estimates: ``estimated_cost_usd`` per session from API usage and the price table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import hermes
from hermes.pricing import BUILTIN_TABLE, estimate_cost, load_prices, price_for
from hermes.runtime.agent import Agent
from hermes.testing.fakellm import Reply


def test_every_price_names_its_source_and_date() -> None:
    rows = yaml.safe_load(BUILTIN_TABLE.read_text())["models"]
    assert rows
    for row in rows:
        assert row["source"].startswith("https://"), row
        assert len(row["as_of"]) == 10, row
        assert row["input"] > 0 and row["output"] >= row["input"], row


def test_longest_prefix_wins_and_unknown_models_have_no_estimate() -> None:
    prices = load_prices()
    assert price_for("gpt-4o-mini-2024-07-18", prices).match == "gpt-4o-mini"
    assert price_for("openai/gpt-4o", prices).match == "gpt-4o"
    assert price_for("claude-sonnet-4-5-20250929", prices).match == "claude-sonnet-4"
    assert estimate_cost("fake-model", hermes.Usage(input_tokens=10), prices) is None
    usage = hermes.Usage(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=2_000_000,
                         cache_write_tokens=0)
    assert estimate_cost("claude-sonnet-4-5", usage, prices) == pytest.approx(3.0 + 1.5 + 0.6)


def test_the_home_table_overrides(tmp_path: Path) -> None:
    (tmp_path / "pricing.yaml").write_text(
        "models:\n  - {match: fake-model, input: 2, output: 4, source: 'https://example.test', as_of: '2026-01-01'}\n"
        "  - {match: gpt-4o, input: 100, output: 100}\n")
    prices = load_prices(tmp_path)
    assert estimate_cost("fake-model", hermes.Usage(input_tokens=500_000, output_tokens=250_000), prices) == 2.0
    assert price_for("gpt-4o", prices).input == 100


def test_a_broken_home_table_is_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "pricing.yaml").write_text("models: [ {match: x, input: }\n")
    assert load_prices(tmp_path) == load_prices()
    assert str(tmp_path / "pricing.yaml") in caplog.text


def test_a_session_stores_its_estimated_cost(kernel_factory, fake_llm) -> None:
    cfg = fake_llm.config(provider="openai")
    cfg["model"]["name"] = "gpt-4o-mini"
    cfg.setdefault("memory", {})["nudge_interval"] = 0
    kernel = kernel_factory(config=cfg)
    fake_llm.queue(Reply(text="one"))
    fake_llm.queue(Reply(text="two"))
    with Agent(kernel) as agent:
        agent.run_turn("hello")
        agent.run_turn("again")
        row = agent.store.get_session(agent.session_id)
    expected = estimate_cost("gpt-4o-mini", hermes.Usage(
        input_tokens=row["input_tokens"], output_tokens=row["output_tokens"],
        cache_read_tokens=row["cache_read_tokens"], cache_write_tokens=row["cache_write_tokens"]),
        load_prices(kernel.home))
    assert row["input_tokens"] > 0 and expected > 0
    assert row["estimated_cost_usd"] == pytest.approx(expected)


def test_a_model_without_a_price_leaves_it_unknown(kernel_factory, fake_llm) -> None:
    cfg = fake_llm.config(provider="openai")
    cfg.setdefault("memory", {})["nudge_interval"] = 0
    kernel = kernel_factory(config=cfg)
    fake_llm.queue(Reply(text="one"))
    with Agent(kernel) as agent:
        agent.run_turn("hello")
        assert agent.store.get_session(agent.session_id)["estimated_cost_usd"] is None
