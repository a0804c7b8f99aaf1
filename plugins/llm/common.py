"""What the Anthropic and OpenAI clients share: credentials, retries, error mapping and
the table of known context windows.

Nothing here imports an SDK; the clients pass their SDK module in when they classify an
exception, so importing this module stays cheap.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import hermes

log = logging.getLogger("hermes.llm")

T = TypeVar("T")

# Known context windows, matched by the longest key contained in the lower-cased model
# name (provider prefixes like ``anthropic/`` or ``openai/`` need no special handling).
CONTEXT_LENGTHS: dict[str, int] = {
    "claude": 200_000,
    "claude-opus-4-6": 1_000_000,
    "claude-sonnet-4-6": 1_000_000,
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-32k": 32_768,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gemini": 1_048_576,
    "deepseek": 128_000,
    "qwen": 131_072,
    "kimi": 262_144,
    "llama-3.1": 131_072,
    "llama3.1": 131_072,
    "llama-3.2": 131_072,
    "llama3.2": 131_072,
    "llama-3.3": 131_072,
    "llama3.3": 131_072,
    "mistral-large": 131_072,
    "mixtral": 32_768,
}


def known_context_length(model: str) -> int | None:
    """The context window of ``model`` from :data:`CONTEXT_LENGTHS`, or ``None``.

    The longest matching key wins, so ``gpt-4o-mini`` finds ``gpt-4o`` and not ``gpt-4``.
    A key matches where a name part starts (``o1`` does not match inside ``foo1``, but
    ``qwen`` matches ``qwen2.5-coder:32b`` and ``openai/gpt-4o``).
    """
    name = (model or "").lower()
    best: str | None = None
    for key in CONTEXT_LENGTHS:
        if re.search(rf"(?:^|[/:_\-\s]){re.escape(key)}", name):
            if best is None or len(key) > len(best):
                best = key
    return CONTEXT_LENGTHS[best] if best else None


# Context-length errors as the providers (and OpenAI-compatible servers) word them.
_CONTEXT_PATTERNS = re.compile(
    r"prompt is too long|context_length_exceeded|maximum context length|context length"
    r"|context window|too many tokens|exceed context limit|input length and `max_tokens`"
    r"|max_model_len|request_too_large|reduce the length of the messages",
    re.IGNORECASE,
)


def is_context_length_message(text: str) -> bool:
    """Whether a provider error message says the request did not fit the window."""
    return bool(_CONTEXT_PATTERNS.search(text or ""))


#: Exponential backoff with jitter, at least the server's ``retry-after`` (kernel helper).
backoff_delay = hermes.backoff_delay


def _retry_after(exc: Exception) -> float | None:
    """The wait the provider asked for (``retry-after-ms`` / ``retry-after`` headers of
    the SDK error's response)."""
    return hermes.retry_after(getattr(getattr(exc, "response", None), "headers", None))


def _error_text(exc: Exception) -> str:
    """The provider's own message from an SDK status error, else ``str(exc)``."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            code = inner.get("code")
            return f"{inner['message']}" + (f" ({code})" if code else "")
        if isinstance(inner, str):
            return inner
    return getattr(exc, "message", None) or str(exc)


class BaseClient(hermes.LLMClient):
    """Config resolution, the lazily built SDK client and the retry loop.

    Subclasses set :attr:`name`, :attr:`key_env`, :attr:`url_env` and implement
    :meth:`_build_sdk`, :meth:`_sdk_module`, :meth:`complete` and :meth:`stream`.

    ``base_url``/``api_key`` of ``None`` mean: the ``model`` section of the config when
    ``model.provider`` names this client, else the SDK's usual environment variables.
    ``max_retries``, ``retry_base_delay`` and ``timeout`` default to ``model.*``.
    """

    key_env = ""
    url_env = ""

    def __init__(
        self,
        kernel: Any = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int | None = None,
        retry_base_delay: float | None = None,
        timeout: float | None = None,
    ) -> None:
        cfg = kernel.config if kernel is not None else None

        def setting(key: str, default: Any = None) -> Any:
            return cfg.get(f"model.{key}", default) if cfg is not None else default

        mine = cfg is not None and setting("provider") == self.name
        # The kernel's environment (process over $HERMES_HOME/.env); the key and URL are
        # handed to the SDK explicitly, which never reads another home's .env.
        self.env: Mapping[str, str] = getattr(kernel, "env", None) or os.environ
        self.base_url = base_url or (setting("base_url") if mine else None) or (
            self.env.get(self.url_env) or None)
        self._explicit_key = api_key or (setting("api_key") if mine else None)
        self.max_retries = int(max_retries if max_retries is not None else setting("max_retries", 3))
        self.retry_base_delay = float(
            retry_base_delay if retry_base_delay is not None else setting("retry_base_delay", 1.0))
        self.timeout = float(timeout if timeout is not None else setting("timeout", 600.0))
        self._client: Any = None
        self._lock = threading.Lock()

    # -- credentials and the SDK -----------------------------------------------------

    def api_key(self) -> str | None:
        """The key to send: explicit or configured, else ``$<key_env>``."""
        return self._explicit_key or self.env.get(self.key_env) or None

    def missing_credentials(self) -> hermes.LLMAuthError:
        """The two-line explanation raised when no key is configured."""
        return hermes.LLMAuthError(
            f"no API key for the {self.name} provider: set {self.key_env} "
            f"(or model.api_key: {{$env: {self.key_env}}} in config.yaml).\n"
            "For a local OpenAI-compatible server (Ollama, vLLM, llama.cpp) set "
            "model.provider: openai and model.base_url: http://localhost:11434/v1 instead.",
            provider=self.name,
        )

    def credentials_problem(self) -> str | None:
        """The missing-credentials explanation, or ``None`` when a key (or a keyless
        local endpoint) is configured."""
        if self.api_key() or self._keyless_ok():
            return None
        return str(self.missing_credentials())

    def _keyless_ok(self) -> bool:
        """Whether this client may call without a key (a local OpenAI-compatible server)."""
        return False

    def sdk(self) -> Any:
        """The SDK client, built on first use (raises when credentials are missing)."""
        with self._lock:
            if self._client is None:
                self._client = self._build_sdk()
            return self._client

    def _build_sdk(self) -> Any:
        raise NotImplementedError

    def _sdk_module(self) -> Any:
        raise NotImplementedError

    # -- errors and retries ----------------------------------------------------------

    def translate_error(self, exc: Exception) -> hermes.LLMError | None:
        """The :class:`hermes.LLMError` for an SDK exception (``None``: not an API error)."""
        sdk = self._sdk_module()
        where = self.base_url or "the default endpoint"
        if isinstance(exc, sdk.APITimeoutError):
            return hermes.LLMUnavailableError(
                f"{self.name}: request to {where} timed out. Raise model.timeout if the model "
                "is slow, or check the server.", provider=self.name)
        if isinstance(exc, sdk.APIConnectionError):
            return hermes.LLMUnavailableError(
                f"{self.name}: cannot reach {where} ({exc}). Check model.base_url and the "
                "network.", provider=self.name)
        if _is_broken_transfer(exc):
            # Raised by the HTTP layer while a (streamed) body is read: the SDKs do not
            # wrap it. Retryable before any text was shown.
            return hermes.LLMUnavailableError(
                f"{self.name}: the connection to {where} broke off before the answer was "
                f"complete ({exc}).", provider=self.name)
        if not isinstance(exc, sdk.APIStatusError):
            return None
        status = int(getattr(exc, "status_code", 0) or 0)
        text = _error_text(exc)
        if status in (401, 403):
            what = "refused the API key" if status == 401 else "denied access"
            return hermes.LLMAuthError(
                f"{self.name} {what} ({status}: {text}). Check {self.key_env} or "
                "model.api_key in config.yaml.", status=status, provider=self.name)
        if status in (400, 413, 422) and is_context_length_message(text):
            return hermes.ContextLengthError(
                f"{self.name}: the request does not fit the model's context window ({text}).",
                status=status, provider=self.name)
        if status == 429:
            return hermes.LLMRateLimitError(
                f"{self.name} is rate limiting (429: {text}).", status=status, provider=self.name)
        if status in (408, 409) or status >= 500:
            return hermes.LLMUnavailableError(
                f"{self.name} server error ({status}: {text}).", status=status, provider=self.name)
        return hermes.LLMError(f"{self.name} rejected the request ({status}: {text}).",
                               status=status, provider=self.name)

    def with_retries(self, call: Callable[[], T]) -> T:
        """Run ``call``; retry retryable failures with backoff, then raise the
        translated error (non-API exceptions propagate unchanged)."""
        attempt = 0
        while True:
            try:
                return call()
            except hermes.LLMError:
                raise
            except Exception as exc:
                self._wait_or_raise(exc, attempt)
                attempt += 1

    def _wait_or_raise(self, exc: Exception, attempt: int, *, shown: bool = False) -> None:
        """The one retry decision of both loops: raise the translated error (or ``exc``
        itself when it is no API error) when it is final — not retryable, out of attempts,
        or part of a streamed answer already shown — else sleep the backoff, at least
        what the provider's ``retry-after`` asks for."""
        error = self.translate_error(exc)
        if error is None:
            raise exc
        if shown and self._dropped(exc):
            raise self.dropped_mid_answer(exc) from exc
        if shown or not error.retryable or attempt >= self.max_retries:
            if error.retryable and attempt and not shown:
                error.args = (f"{error.args[0]} Gave up after {attempt + 1} attempts.",)
            raise error from exc
        delay = backoff_delay(attempt, self.retry_base_delay, _retry_after(exc))
        log.warning("%s: %s (retry %d/%d in %.2fs)", self.name, error, attempt + 1,
                    self.max_retries, delay)
        time.sleep(delay)

    def _dropped(self, exc: Exception) -> bool:
        """Whether ``exc`` is a connection that closed (not one that timed out)."""
        sdk = self._sdk_module()
        return _is_broken_transfer(exc) or (
            isinstance(exc, sdk.APIConnectionError) and not isinstance(exc, sdk.APITimeoutError))

    def dropped_mid_answer(self, exc: Exception) -> hermes.LLMUnavailableError:
        """The error for a connection that closed after part of a streamed answer had
        arrived. The server was reached and answering, so this is not a setup problem
        (the OpenAI SDK calls it a connection error, which reads like a wrong base_url):
        a proxy or the server ended it. The caller keeps the part that arrived."""
        cause = exc.__cause__ or exc.__context__
        detail = str(exc) if _is_broken_transfer(exc) or cause is None else f"{exc} {cause}"
        where = self.base_url or "the default endpoint"
        return hermes.LLMUnavailableError(
            f"{self.name}: the connection to {where} dropped in the middle of the answer "
            f"({' '.join(detail.split())}). The server was reached, the settings are not "
            "the problem: ask again for a whole answer.", provider=self.name)

    def stream_with_retries(
        self, start: Callable[[], Iterator[hermes.StreamEvent]]
    ) -> Iterator[hermes.StreamEvent]:
        """Yield the events of ``start()``; failures before the first text chunk are
        retried like :meth:`with_retries`, a failure after it is raised (the caller
        already showed part of the answer, a silent restart would repeat it)."""
        attempt = 0
        while True:
            shown = False
            try:
                for event in start():
                    shown = shown or event.kind == "text"
                    yield event
                return
            except hermes.LLMError:
                raise
            except Exception as exc:
                self._wait_or_raise(exc, attempt, shown=shown)
                attempt += 1

    def not_an_api_response(self, detail: str) -> hermes.LLMError:
        """The one-line error for an HTTP 200 whose body is not this API's answer (a web
        page, a cut-off JSON body, a plain body to a streaming request): usually a
        ``base_url`` that points at a website or a proxy instead of the API."""
        where = self.base_url or "the default endpoint"
        return hermes.LLMError(
            f"{self.name}: {where} answered with something that is not a valid {self.name} "
            f"API response ({detail}). Check model.base_url: it must be the API's address "
            "(for OpenAI-compatible servers it usually ends in /v1), not a web page or a proxy.",
            provider=self.name)

    # -- LLMClient -------------------------------------------------------------------

    def context_length(self, model: str) -> int | None:
        """The window from :data:`CONTEXT_LENGTHS`; ``None`` for unknown models."""
        return known_context_length(model)

    def call_timeout(self, request: hermes.LLMRequest) -> float:
        """Seconds for one attempt: the request's own timeout, else ``model.timeout``."""
        return float(request.timeout or self.timeout)


def _is_broken_transfer(exc: BaseException) -> bool:
    """Whether ``exc`` is an HTTP-layer transport error (a body that broke off mid-way).
    Matched by name: the SDKs ship with ``httpx`` or a renamed copy of it (``httpx2``)."""
    return any(cls.__name__ == "TransportError" and cls.__module__.startswith("httpx")
               for cls in type(exc).__mro__)


def describe_body(raw: object) -> str:
    """A short description of an unexpected response body, for error messages."""
    text = raw if isinstance(raw, str) else repr(raw)
    text = " ".join(text.split())
    return f"body starts {text[:60]!r}" if text else "empty body"


def sdk_kwargs(method: Callable[..., Any], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as keyword arguments for an SDK ``method``: names its signature does
    not accept (a field newer or older than the installed SDK, a server-specific
    option) travel in ``extra_body`` so they still reach the wire."""
    try:
        accepted = set(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return dict(params)
    known = {k: v for k, v in params.items() if k in accepted}
    extra = {k: v for k, v in params.items() if k not in accepted}
    if extra:
        known["extra_body"] = {**(known.get("extra_body") or {}), **extra}
    return known


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict: JSON text is decoded; text that is not a JSON
    object is kept under ``_raw`` so nothing the model said is lost."""

    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {"_raw": str(arguments)}
    return value if isinstance(value, dict) else {"_raw": str(arguments)}


def function_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """``{"name", "description", "parameters"}`` from either a bare function schema or
    the ``{"type": "function", "function": {...}}`` wrapper."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        tool = tool["function"]
    return {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
    }
