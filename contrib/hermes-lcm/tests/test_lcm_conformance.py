"""The kernel's context-engine conformance suite, unchanged, against ``lcm``: once with
deterministic summaries only, once with the summarizer wired to the fake LLM server
through the real OpenAI SDK client."""

from __future__ import annotations

import pytest

from hermes.testing.conformance import ContextEngineConformance
from hermes.testing.fakellm import Reply


class TestLCMDeterministicConformance(ContextEngineConformance):
    """No summarizer configured: every summary is the deterministic fallback."""

    @pytest.fixture
    def engine(self, lcm_kernel):
        return lcm_kernel({"summarizer": "deterministic"}).create("context-engine", "lcm")


class TestLCMWithSummarizerConformance(ContextEngineConformance):
    """Summaries from ``kernel.auxiliary("compression")`` — the fake LLM server."""

    @pytest.fixture
    def fake_summarizer(self, fake_llm):
        fake_llm.handler = lambda request: Reply(text="The user and the assistant worked on the code base.")
        return fake_llm

    @pytest.fixture
    def llm_config(self, fake_summarizer):
        return fake_summarizer.config(provider="openai")

    @pytest.fixture
    def engine(self, lcm_kernel, llm_config):
        return lcm_kernel(None, **llm_config).create("context-engine", "lcm")
