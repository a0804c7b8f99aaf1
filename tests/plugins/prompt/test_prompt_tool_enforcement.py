"""Tool-use enforcement guidance (seed 000's layer): GPT/Codex-family models tend to
describe the tool call they would make instead of making it; their system prompt says
to act. Other models, and sessions without tools, do not get it."""

from __future__ import annotations

from typing import Any

import pytest

import hermes


def ctx(kernel: Any, model: str, tools: frozenset[str] = frozenset({"memory", "read_file"})) -> hermes.PromptContext:
    return hermes.PromptContext(kernel=kernel, session_id="s", home=kernel.home, cwd=kernel.home,
                                model=model, platform="cli", tool_names=tools, now=0.0)


@pytest.mark.parametrize("model", ["gpt-5", "openai/gpt-4.1-mini", "gpt-5-codex", "codex-mini-latest",
                                   "GPT-4o"])
def test_gpt_and_codex_models_are_told_to_act(kernel: Any, model: str) -> None:
    text = hermes.PromptBuilder(kernel).build(ctx(kernel, model)).text
    assert "Tool use" in text and "call the tool" in text


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "fake-model", "llama-3.1-70b"])
def test_other_models_are_not(kernel: Any, model: str) -> None:
    assert "call the tool" not in hermes.PromptBuilder(kernel).build(ctx(kernel, model)).text


def test_not_without_tools_and_can_be_disabled(kernel_factory: Any) -> None:
    kernel = kernel_factory()
    assert "call the tool" not in hermes.PromptBuilder(kernel).build(ctx(kernel, "gpt-5", frozenset())).text
    off = kernel_factory(config={"prompt": {"disabled_layers": ["tool_use_enforcement"]}})
    assert "call the tool" not in hermes.PromptBuilder(off).build(ctx(off, "gpt-5")).text


def test_it_sits_after_the_tool_guidance(kernel: Any) -> None:
    built = hermes.PromptBuilder(kernel).build(ctx(kernel, "gpt-5"))
    names = [layer.name for layer in built.layers]
    assert names.index("tool_use_enforcement") == names.index("tool_guidance") + 1
    assert built.text.index("# Tool use") > built.text.index("persistent memory")
