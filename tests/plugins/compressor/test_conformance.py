"""The ``compressor`` engine passes the context-engine conformance suite, both with a
working summarizer (the real OpenAI client against the fake LLM server) and with none at
all (every summary is the deterministic local fallback)."""

from __future__ import annotations

from typing import Any

import pytest

from hermes.testing.conformance import ContextEngineConformance


class TestCompressorWithSummarizer(ContextEngineConformance):
    engine_name = "compressor"

    @pytest.fixture
    def fake_summarizer(self, fake_llm: Any) -> Any:
        return fake_llm

    @pytest.fixture
    def llm_config(self, fake_summarizer: Any) -> dict[str, Any]:
        return fake_summarizer.config(provider="openai")


class TestCompressorWithoutSummarizer(ContextEngineConformance):
    engine_name = "compressor"

    @pytest.fixture
    def llm_config(self) -> dict[str, Any]:
        # A provider nobody registered: no auxiliary model and no main client either.
        return {"model": {"provider": "no-such-provider"}}
