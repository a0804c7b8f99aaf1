"""The default LLM clients, two blockable plugins sharing this package.

* ``anthropic`` (:mod:`.anthropic_plugin`) — Claude through the Messages API.
* ``openai`` (:mod:`.openai_plugin`) — Chat Completions, for OpenAI and any
  OpenAI-compatible ``base_url`` (OpenRouter, vLLM, Ollama, llama.cpp).

:mod:`.common` holds what both share (credentials, retries, error mapping, the table of
known context windows) and :mod:`.caching` the ``cache_control`` placement. No module of
this package imports an SDK at import time.
"""
