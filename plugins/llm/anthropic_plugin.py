"""The ``anthropic`` LLM client: Claude through the Messages API and the official SDK.

The kernel's OpenAI-style messages become Anthropic ones at the edge: leading system
messages turn into ``system`` text blocks, assistant tool calls into ``tool_use`` blocks,
``tool`` messages into user-role ``tool_result`` blocks, and consecutive messages of one
role are merged as the API requires. With ``request.cache`` the system prompt and the
last three messages carry ``cache_control`` breakpoints (:mod:`.caching`).

The ``anthropic`` SDK is imported on first use, never when this module is imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import hermes

from .caching import apply_cache_control, is_claude_model
from .common import BaseClient, describe_body, function_schema, parse_arguments, sdk_kwargs

#: ``max_tokens`` is mandatory on the Messages API; used when neither the request nor
#: ``model.max_tokens`` sets it.
DEFAULT_MAX_TOKENS = 8192

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
           "max_tokens": "length", "refusal": "content_filter", "pause_turn": "stop"}


def _text_block(text: str) -> dict[str, Any] | None:
    # The API rejects empty and whitespace-only text blocks.
    return {"type": "text", "text": text} if text and text.strip() else None


def _image_block(part: dict[str, Any]) -> dict[str, Any] | None:
    url = (part.get("image_url") or {}).get("url", "")
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    if url:
        return {"type": "image", "source": {"type": "url", "url": url}}
    return None


def content_blocks(content: Any) -> list[dict[str, Any]]:
    """Anthropic content blocks for OpenAI-style content (string or parts); empty text is
    dropped, part-level ``cache_control`` is kept."""
    if content is None:
        return []
    if isinstance(content, str):
        block = _text_block(content)
        return [block] if block else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            block = _text_block(part)
        elif not isinstance(part, dict):
            continue
        elif part.get("type") == "text":
            block = _text_block(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            block = _image_block(part)
        else:  # already an Anthropic block (image, document …)
            block = {k: v for k, v in part.items() if k != "cache_control"}
        if block is None:
            continue
        if isinstance(part, dict) and "cache_control" in part:
            block["cache_control"] = part["cache_control"]
        blocks.append(block)
    return blocks


def _tool_result_content(content: Any) -> Any:
    if isinstance(content, list):
        return content_blocks(content)
    return "" if content is None else str(content)


def to_anthropic(messages: list[hermes.Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system_blocks, messages)`` in the Messages API shape.

    A message-level ``cache_control`` (what :func:`.caching.apply_cache_control` puts on
    tool results and empty messages) lands on the converted message's last block.
    """
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]], marker: Any) -> None:
        if not blocks:
            return
        if marker:
            blocks[-1] = {**blocks[-1], "cache_control": marker}
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for msg in messages:
        role, marker = msg.get("role"), msg.get("cache_control")
        if role == "system":
            blocks = content_blocks(msg.get("content"))
            if out:  # a system note mid-conversation travels as user text
                push("user", blocks, marker)
            else:
                if marker and blocks:
                    blocks[-1] = {**blocks[-1], "cache_control": marker}
                system.extend(blocks)
        elif role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.get("tool_call_id", "")}
            result = _tool_result_content(msg.get("content"))
            if result:
                block["content"] = result
            if msg.get("is_error"):
                block["is_error"] = True
            push("user", [block], marker)
        elif role == "assistant":
            blocks = content_blocks(msg.get("content"))
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": call.get("id", ""),
                               "name": fn.get("name", ""),
                               "input": parse_arguments(fn.get("arguments"))})
            push("assistant", blocks, marker)
        else:
            push("user", content_blocks(msg.get("content")), marker)
    return system, out


def to_anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function schemas as Anthropic tool definitions."""
    out = []
    for tool in tools:
        fn = function_schema(tool)
        out.append({"name": fn["name"], "description": fn["description"],
                    "input_schema": fn["parameters"]})
    return out


def usage_of(raw: Any) -> hermes.Usage:
    """:class:`hermes.Usage` from an Anthropic usage object (``input_tokens`` there
    already excludes cached tokens)."""
    if raw is None:
        return hermes.Usage()
    return hermes.Usage(
        input_tokens=int(getattr(raw, "input_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "output_tokens", 0) or 0),
        cache_read_tokens=int(getattr(raw, "cache_read_input_tokens", 0) or 0),
        cache_write_tokens=int(getattr(raw, "cache_creation_input_tokens", 0) or 0),
    )


def to_response(message: Any) -> hermes.LLMResponse:
    """:class:`hermes.LLMResponse` from an SDK ``Message``."""
    texts, calls, thinking = [], [], []
    for block in message.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind == "tool_use":
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name,
                                       "arguments": json.dumps(block.input, ensure_ascii=False)}})
        elif kind == "thinking":
            thinking.append(getattr(block, "thinking", "") or "")
    stop = getattr(message, "stop_reason", None) or "end_turn"
    return hermes.LLMResponse(
        content="".join(texts),
        tool_calls=calls,
        finish_reason=_FINISH.get(stop, stop),
        usage=usage_of(getattr(message, "usage", None)),
        model=getattr(message, "model", "") or "",
        reasoning="\n".join(thinking) or None,
    )


class AnthropicClient(BaseClient):
    """:class:`hermes.LLMClient` for the Anthropic Messages API.

    Built by the kernel as ``AnthropicClient(kernel, base_url=..., api_key=...)``.
    Credentials: ``api_key``, else ``model.api_key`` (when ``model.provider`` is
    ``anthropic``), else ``$ANTHROPIC_API_KEY``; endpoint likewise with
    ``$ANTHROPIC_BASE_URL``.
    """

    name = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    url_env = "ANTHROPIC_BASE_URL"

    def __init__(self, kernel: Any = None, **kwargs: Any) -> None:
        super().__init__(kernel, **kwargs)
        configured = kernel.config.get("model.max_tokens") if kernel is not None else None
        self.default_max_tokens = int(configured or DEFAULT_MAX_TOKENS)

    def _sdk_module(self) -> Any:
        import anthropic

        return anthropic

    def _build_sdk(self) -> Any:
        key = self.api_key()
        if not key:
            raise self.missing_credentials()
        # Our own loop counts retries (model.max_retries); the SDK's would multiply them.
        return self._sdk_module().Anthropic(api_key=key, base_url=self.base_url,
                                            max_retries=0, timeout=self.timeout)

    def supports_prompt_caching(self, model: str) -> bool:
        """Claude models honour ``cache_control`` on the native API."""
        return is_claude_model(model)

    def build_params(self, request: hermes.LLMRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request`` (cache
        breakpoints included); public so benchmarks and tests can inspect them."""
        messages = request.messages
        if request.cache and self.supports_prompt_caching(request.model):
            messages = apply_cache_control(messages, ttl=request.cache_ttl, native=True)
        system, wire = to_anthropic(messages)
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": int(request.max_tokens or self.default_max_tokens),
            "messages": wire,
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        params.update(request.extra)
        return params

    def complete(self, request: hermes.LLMRequest) -> hermes.LLMResponse:
        """One non-streaming call, retried on transient failures."""
        params = self.build_params(request)
        sdk = self.sdk()
        timeout = self.call_timeout(request)
        kwargs = sdk_kwargs(sdk.messages.create, params)
        try:
            message = self.with_retries(lambda: sdk.messages.create(**kwargs, timeout=timeout))
        except ValueError as exc:  # a cut-off or malformed JSON body
            raise self.not_an_api_response(f"invalid JSON: {exc}") from exc
        if not hasattr(message, "content"):  # the SDK hands back a non-JSON body as text
            raise self.not_an_api_response(describe_body(message))
        return to_response(message)

    def stream(self, request: hermes.LLMRequest) -> Iterator[hermes.StreamEvent]:
        """Text deltas as they arrive, then ``done`` with the final message."""
        params = self.build_params(request)
        sdk = self.sdk()
        timeout = self.call_timeout(request)

        kwargs = sdk_kwargs(sdk.messages.stream, params)

        def start() -> Iterator[hermes.StreamEvent]:
            with sdk.messages.stream(**kwargs, timeout=timeout) as stream:
                try:
                    for text in stream.text_stream:
                        if text:
                            yield hermes.StreamEvent("text", text=text)
                    message = stream.get_final_message()
                except (AssertionError, ValueError) as exc:
                    # The SDK asserts that events arrive in order (message_start first,
                    # a final message at the end): a JSON body, a web page or a stream
                    # with no events at all ends here.
                    kind = stream.response.headers.get("content-type", "none")
                    raise self.not_an_api_response(
                        f"not a complete event stream, content-type {kind}"
                        + (f": {exc}" if str(exc) else "")) from exc
            response = to_response(message)
            if getattr(message, "stop_reason", None) is None:
                # No message_delta/message_stop: the stream was cut off. Keep the text,
                # marked incomplete; never a half-received tool call.
                response.finish_reason, response.tool_calls = "incomplete", []
            yield hermes.StreamEvent("done", response=response)

        yield from self.stream_with_retries(start)


@hermes.hookimpl
def hermes_register_llm_clients(register: Any) -> None:
    """Register the ``anthropic`` client factory."""
    register("anthropic", AnthropicClient,
             description="Claude via the Anthropic Messages API (official SDK), prompt caching")
