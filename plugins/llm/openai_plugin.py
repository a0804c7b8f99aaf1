"""The ``openai`` LLM client: Chat Completions through the official SDK.

Works with OpenAI and with any OpenAI-compatible server set as ``model.base_url``
(OpenRouter, vLLM, Ollama, llama.cpp, LM Studio …). The kernel's messages already have
the Chat Completions shape; they are cleaned of non-wire keys at the edge. For Claude
models behind an OpenAI-compatible router (OpenRouter-style ``anthropic/claude-…``),
``request.cache`` places ``cache_control`` markers on content parts.

The ``openai`` SDK is imported on first use, never when this module is imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import hermes

from .caching import apply_cache_control, is_claude_model
from .common import BaseClient, describe_body, function_schema, sdk_kwargs

#: Key sent to a custom ``base_url`` when none is configured: local servers (Ollama,
#: vLLM, llama.cpp) ignore it, and a remote one answers 401, which explains itself.
LOCAL_PLACEHOLDER_KEY = "no-key-required"

# Reasoning model families that take ``max_completion_tokens`` instead of ``max_tokens``.
_COMPLETION_TOKENS_MODELS = re.compile(r"(^|/)(o\d|gpt-5)", re.IGNORECASE)


def to_openai(msg: hermes.Message) -> dict[str, Any]:
    """One kernel message as a Chat Completions message (non-wire keys dropped)."""
    role = msg.get("role")
    out: dict[str, Any] = {"role": role, "content": msg.get("content")}
    if role == "assistant" and msg.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id", ""), "type": "function",
             "function": {"name": (c.get("function") or {}).get("name", ""),
                          "arguments": (c.get("function") or {}).get("arguments") or "{}"}}
            for c in msg["tool_calls"]
        ]
        if not out["content"]:
            out["content"] = None
    elif role == "tool":
        out["tool_call_id"] = msg.get("tool_call_id", "")
        if out["content"] is None:
            out["content"] = ""
    elif out["content"] is None:
        out["content"] = ""
    return out


def usage_of(raw: Any) -> hermes.Usage:
    """:class:`hermes.Usage` from a Chat Completions usage object: ``prompt_tokens``
    includes cached tokens, so the uncached part is what is left after subtracting them."""
    if raw is None:
        return hermes.Usage()
    prompt = int(getattr(raw, "prompt_tokens", 0) or 0)
    details = getattr(raw, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details else 0
    written = int(getattr(details, "cache_write_tokens", 0) or 0) if details else 0
    out_details = getattr(raw, "completion_tokens_details", None)
    reasoning = int(getattr(out_details, "reasoning_tokens", 0) or 0) if out_details else 0
    return hermes.Usage(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
    )


def _reasoning_of(obj: Any) -> str | None:
    # vLLM/DeepSeek say reasoning_content, OpenRouter says reasoning (SDK extra fields).
    for key in ("reasoning_content", "reasoning"):
        value = getattr(obj, key, None)
        if isinstance(value, str) and value:
            return value
    return None


def to_response(completion: Any) -> hermes.LLMResponse:
    """:class:`hermes.LLMResponse` from a ``ChatCompletion``."""
    if not completion.choices:
        raise hermes.LLMError("openai: the response has no choices", provider="openai")
    choice = completion.choices[0]
    msg = choice.message
    calls = [{"id": c.id, "type": "function",
              "function": {"name": c.function.name, "arguments": c.function.arguments or "{}"}}
             for c in msg.tool_calls or []]
    return hermes.LLMResponse(
        content=msg.content or "",
        tool_calls=calls,
        finish_reason=choice.finish_reason or ("tool_calls" if calls else "stop"),
        usage=usage_of(completion.usage),
        model=completion.model or "",
        reasoning=_reasoning_of(msg),
    )


class OpenAIClient(BaseClient):
    """:class:`hermes.LLMClient` for Chat Completions APIs.

    Built by the kernel as ``OpenAIClient(kernel, base_url=..., api_key=...)``.
    Credentials: ``api_key``, else ``model.api_key`` (when ``model.provider`` is
    ``openai``), else ``$OPENAI_API_KEY``; endpoint likewise with ``$OPENAI_BASE_URL``.
    A custom endpoint without a key gets a placeholder (local servers need none).
    """

    name = "openai"
    key_env = "OPENAI_API_KEY"
    url_env = "OPENAI_BASE_URL"

    def __init__(self, kernel: Any = None, **kwargs: Any) -> None:
        super().__init__(kernel, **kwargs)
        configured = kernel.config.get("model.max_tokens") if kernel is not None else None
        self.default_max_tokens: int | None = int(configured) if configured else None

    def _sdk_module(self) -> Any:
        import openai

        return openai

    def _keyless_ok(self) -> bool:
        return bool(self.base_url)

    def _build_sdk(self) -> Any:
        key = self.api_key() or (LOCAL_PLACEHOLDER_KEY if self._keyless_ok() else None)
        if not key:
            raise self.missing_credentials()
        # Our own loop counts retries (model.max_retries); the SDK's would multiply them.
        return self._sdk_module().OpenAI(api_key=key, base_url=self.base_url,
                                         max_retries=0, timeout=self.timeout)

    def supports_prompt_caching(self, model: str) -> bool:
        """Claude models on OpenRouter-style routes honour ``cache_control`` parts;
        other models cache automatically (nothing to place)."""
        return is_claude_model(model)

    def build_params(self, request: hermes.LLMRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        messages = request.messages
        if request.cache and self.supports_prompt_caching(request.model):
            messages = apply_cache_control(messages, ttl=request.cache_ttl, native=False)
        params: dict[str, Any] = {"model": request.model,
                                  "messages": [to_openai(m) for m in messages]}
        if request.tools:
            params["tools"] = [{"type": "function", "function": function_schema(t)}
                               for t in request.tools]
        max_tokens = request.max_tokens or self.default_max_tokens
        if max_tokens:
            key = "max_completion_tokens" if _COMPLETION_TOKENS_MODELS.search(request.model) else "max_tokens"
            params[key] = int(max_tokens)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        params.update(request.extra)
        return params

    def complete(self, request: hermes.LLMRequest) -> hermes.LLMResponse:
        """One non-streaming call, retried on transient failures."""
        params = self.build_params(request)
        sdk = self.sdk()
        timeout = self.call_timeout(request)
        kwargs = sdk_kwargs(sdk.chat.completions.create, params)
        try:
            completion = self.with_retries(lambda: sdk.chat.completions.create(**kwargs, timeout=timeout))
        except ValueError as exc:  # a cut-off or malformed JSON body
            raise self.not_an_api_response(f"invalid JSON: {exc}") from exc
        if not hasattr(completion, "choices"):  # the SDK hands back a non-JSON body as text
            raise self.not_an_api_response(describe_body(completion))
        return to_response(completion)

    def stream(self, request: hermes.LLMRequest) -> Iterator[hermes.StreamEvent]:
        """Text deltas as they arrive, then ``done`` with the assembled response
        (tool-call deltas joined by index, usage from the final chunk)."""
        params = self.build_params(request)
        sdk = self.sdk()
        timeout = self.call_timeout(request)
        kwargs = sdk_kwargs(sdk.chat.completions.create, params)

        def start() -> Iterator[hermes.StreamEvent]:
            text: list[str] = []
            reasoning: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            finish, usage, model = None, None, ""
            stream = sdk.chat.completions.create(
                **kwargs, stream=True, stream_options={"include_usage": True}, timeout=timeout)
            chunks = 0
            with stream:
                for chunk in _checked(stream, self):
                    chunks += 1
                    model = chunk.model or model
                    if chunk.usage is not None:
                        usage = chunk.usage
                    for choice in chunk.choices or []:
                        finish = choice.finish_reason or finish
                        delta = choice.delta
                        if delta is None:
                            continue
                        if piece := _reasoning_of(delta):
                            reasoning.append(piece)
                        for call in delta.tool_calls or []:
                            slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                            slot["id"] = call.id or slot["id"]
                            if call.function is not None:
                                slot["name"] += call.function.name or ""
                                slot["arguments"] += call.function.arguments or ""
                        if delta.content:
                            text.append(delta.content)
                            yield hermes.StreamEvent("text", text=delta.content)
            if not chunks:  # a JSON body or a web page parses as an empty event stream
                kind = stream.response.headers.get("content-type", "none")
                raise self.not_an_api_response(f"no stream events, content-type {kind}")
            tool_calls = [{"id": c["id"], "type": "function",
                           "function": {"name": c["name"], "arguments": c["arguments"] or "{}"}}
                          for _, c in sorted(calls.items())]
            if finish is None:
                # The stream ended without a finish reason: the answer was cut off. Its
                # text is kept, marked incomplete; a half-received tool call is dropped.
                tool_calls, finish = [], "incomplete"
            response = hermes.LLMResponse(
                content="".join(text), tool_calls=tool_calls,
                finish_reason=finish,
                usage=usage_of(usage), model=model, reasoning="".join(reasoning) or None)
            yield hermes.StreamEvent("done", response=response)

        yield from self.stream_with_retries(start)


def _checked(stream: Any, client: OpenAIClient) -> Iterator[Any]:
    """The stream's chunks; a malformed event becomes the one-line bad-response error."""
    try:
        yield from stream
    except ValueError as exc:
        raise client.not_an_api_response(f"malformed stream event: {exc}") from exc


@hermes.hookimpl
def hermes_register_llm_clients(register: Any) -> None:
    """Register the ``openai`` client factory."""
    register("openai", OpenAIClient,
             description="OpenAI Chat Completions and any OpenAI-compatible base_url (official SDK)")
