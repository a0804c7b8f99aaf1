"""A loopback fake LLM server that speaks the real wire formats.

Tests point the official ``openai`` and ``anthropic`` SDKs at it, unmodified, instead of
mocking them::

    from hermes.testing.fakellm import FakeLLMServer, Reply

    with FakeLLMServer() as server:
        server.queue(Reply(text="hi"))
        client = anthropic.Anthropic(base_url=server.url, api_key="x")
        ...
        server.requests[-1].body          # what the SDK sent

Endpoints: OpenAI ``POST /v1/chat/completions`` (plain and SSE streaming, tool calls,
``stream_options.include_usage``), ``POST /v1/embeddings`` (deterministic vectors),
Anthropic ``POST /v1/messages`` (plain and SSE streaming, ``tool_use`` blocks) and
``POST /v1/messages/count_tokens``, plus ``GET /v1/models``.

``Reply(fault=...)`` serves broken answers the way flaky proxies and wrong base URLs do:
a stream cut half way (``"cut"``: ends cleanly without a finish event; ``"drop"``: the
connection closes mid-body), or an HTTP 200 whose body is the non-streaming JSON
(``"plain"``), half a JSON body (``"truncated"``) or a web page (``"html"``).

Replies come from, in order: the queue (:meth:`FakeLLMServer.queue`), the
:attr:`FakeLLMServer.handler` function, else a deterministic ``"echo: <last user text>"``.

Usage is counted with :func:`hermes.estimate_tokens`. Anthropic ``cache_control``
breakpoints are honoured the way the real API does it: the request is cut into blocks
(tools, system, messages, in that order); a breakpoint writes the prefix ending at it to
a per-server cache when that prefix is at least ``min_cache_tokens`` long; a later
request whose prefix matches a written one (looking back up to 20 blocks from each of its
breakpoints) reports those tokens as ``cache_read_input_tokens``. The OpenAI side reports
``prompt_tokens_details.cached_tokens`` by automatic prefix caching at message
boundaries. Requests are validated like the real APIs validate them (orphan tool calls or
results, empty text blocks, more than four ``cache_control`` blocks give the provider's
400), so bugs that a real provider would reject fail in tests too.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import itertools
import json
import math
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..util import estimate_tokens

__all__ = ["FakeLLMServer", "Reply", "Request", "anthropic_prefixes", "embed"]

#: How far back (in blocks) from a breakpoint the Anthropic API looks for a cache hit.
LOOKBACK_BLOCKS = 20
#: Cache lifetimes, seconds, by ``cache_control.ttl``.
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
#: The window named in a forced context-length error when none is configured.
DEFAULT_WINDOW = 200_000

_STOP_TO_FINISH = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                   "stop_sequence": "stop"}
_FINISH_TO_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                   "content_filter": "refusal"}


@dataclass
class Reply:
    """What the fake model answers to one request.

    ``tool_calls`` items are ``{"name": str, "arguments": dict, "id": optional str}``.
    ``error`` injects a failure: an HTTP status (``429``, ``500``, ``401``, ``403``,
    ``529`` …) answered with the provider's real error JSON, ``"context_length"`` (a 400
    with the provider's real context-length message) or ``"timeout"`` (the server stays
    silent for longer than the client's timeout). ``delay`` sleeps before answering.
    ``usage`` is merged over the computed usage, in the wire format's own key names
    (``input_tokens``/``cache_read_input_tokens`` … for Anthropic, ``prompt_tokens`` …
    for OpenAI). ``stop_reason`` overrides the stop/finish reason (either provider's
    vocabulary; it is translated).
    """

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: int | str | None = None
    delay: float = 0.0
    #: seconds between streamed text pieces (a slow stream, to interrupt mid-answer)
    chunk_delay: float = 0.0
    #: A broken answer, as a flaky proxy or a wrong ``base_url`` produces: ``"cut"`` (the
    #: stream stops half way through the text and ends cleanly, with no finish reason or
    #: end event), ``"drop"`` (half way through, the connection closes mid-body),
    #: ``"plain"`` (HTTP 200 with the non-streaming JSON body to a streaming request),
    #: ``"truncated"`` (HTTP 200 with half of a JSON body), ``"html"`` (HTTP 200 with a
    #: web page).
    fault: str | None = None
    usage: dict[str, Any] | None = None
    stop_reason: str | None = None


@dataclass
class Request:
    """One recorded request. ``api`` is ``"openai"``, ``"anthropic"`` or
    ``"embeddings"``; ``body`` the decoded JSON; ``headers`` lower-cased names."""

    api: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    method: str = "POST"
    time: float = 0.0

    @property
    def stream(self) -> bool:
        """Whether the client asked for server-sent events."""
        return bool(self.body.get("stream"))

    @property
    def model(self) -> str:
        """The requested model name."""
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` list as sent (wire format)."""
        return list(self.body.get("messages") or [])

    @property
    def system(self) -> str:
        """The system prompt as one string, for either wire format."""
        if self.api == "anthropic":
            return _text_of(self.body.get("system"))
        msgs = self.messages
        return _text_of(msgs[0].get("content")) if msgs and msgs[0].get("role") == "system" else ""

    @property
    def last_user_text(self) -> str:
        """The text of the newest user message (tool results included as text when the
        newest user turn holds nothing else)."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                return _text_of(msg.get("content"), include_tool_results=True)
        return ""


def _text_of(content: Any, *, include_tool_results: bool = False) -> str:
    """Plain text of a string or a list of content blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts, results = [], []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            results.append(_text_of(block.get("content")))
    if not texts and include_tool_results:
        texts = results
    return "\n".join(texts)


def _strip_cc(obj: Any) -> Any:
    """A copy without ``cache_control`` keys: markers never change what a prefix is."""
    if isinstance(obj, dict):
        return {k: _strip_cc(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [_strip_cc(v) for v in obj]
    return obj


def _block_tokens(block: Any) -> int:
    """Tokens of one block: its text where it has one, else its compact JSON."""
    if isinstance(block, str):
        return estimate_tokens(block)
    if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
        return estimate_tokens(block["text"])
    return estimate_tokens(json.dumps(_strip_cc(block), separators=(",", ":"), sort_keys=True))


@dataclass
class _Block:
    key: str  # canonical serialization, markers stripped
    tokens: int
    marker: dict[str, Any] | None  # the block's cache_control, if any


def _anthropic_blocks(body: dict[str, Any]) -> list[_Block]:
    """The request cut into cacheable blocks: tools, system, then messages."""
    out: list[_Block] = []

    def add(role: str, block: Any) -> None:
        marker = block.get("cache_control") if isinstance(block, dict) else None
        key = json.dumps([role, _strip_cc(block)], separators=(",", ":"), sort_keys=True)
        out.append(_Block(key, _block_tokens(block), marker))

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    if isinstance(system, str) and system:
        add("system", {"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add("system", block)
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            add(msg.get("role", ""), {"type": "text", "text": content})
        else:
            for block in content or []:
                add(msg.get("role", ""), block)
    top = body.get("cache_control")
    if top and out and out[-1].marker is None:  # automatic caching: the last block
        out[-1].marker = top
    return out


def _openai_blocks(body: dict[str, Any]) -> list[_Block]:
    """The request cut at message boundaries (tools first) for automatic caching."""
    out: list[_Block] = []
    if body.get("tools"):
        key = json.dumps(_strip_cc(body["tools"]), separators=(",", ":"), sort_keys=True)
        out.append(_Block(key, estimate_tokens(key), None))
    for msg in body.get("messages") or []:
        content = msg.get("content")
        tokens = estimate_tokens(_text_of(content)) if content else 0
        rest = {k: v for k, v in msg.items() if k != "content"}
        tokens += estimate_tokens(json.dumps(rest, separators=(",", ":"), sort_keys=True))
        if isinstance(content, list):  # non-text parts (images …) count as JSON
            others = [p for p in content if isinstance(p, dict) and p.get("type") != "text"]
            if others:
                tokens += estimate_tokens(json.dumps(_strip_cc(others), separators=(",", ":")))
        key = json.dumps(_strip_cc(msg), separators=(",", ":"), sort_keys=True)
        out.append(_Block(key, tokens, None))
    return out


def _prefix_hashes(blocks: list[_Block]) -> tuple[list[str], list[int]]:
    """Chained hashes and cumulative token counts of every prefix ending at a block."""
    hashes, totals = [], []
    digest, total = hashlib.sha256(), 0
    for block in blocks:
        digest.update(block.key.encode())
        digest.update(b"\x00")
        total += block.tokens
        hashes.append(digest.copy().hexdigest())
        totals.append(total)
    return hashes, totals


def anthropic_prefixes(body: dict[str, Any]) -> list[tuple[str, int]]:
    """``(hash, tokens)`` of every prefix of a Messages request that ends at a block
    boundary (tools, system, messages; markers ignored), as the fake's cache sees it.
    Benchmarks use it to compute what an ideal cache could have reused."""
    hashes, totals = _prefix_hashes(_anthropic_blocks(body))
    return list(zip(hashes, totals, strict=True))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeLLMServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120  # idle keep-alive connections close eventually
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if self.path.rstrip("/").endswith("/models"):
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "hermes",
                     "type": "model", "display_name": "Fake model", "created_at": "2025-01-01T00:00:00Z"}
            self._send_json(200, {"object": "list", "data": [model], "has_more": False,
                                  "first_id": "fake-model", "last_id": "fake-model"})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            self.server.fake._dispatch(self, path, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to answer

    # -- writing ---------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake_{id(payload):x}")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _sse(self, data: str, event: str | None = None) -> None:
        frame = (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
        chunk = frame.encode()
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def _end_sse(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class FakeLLMServer:
    """A threaded HTTP server on ``127.0.0.1`` (ephemeral port), scripted per test.

    Use it as a context manager (or :meth:`start`/:meth:`stop`). ``min_cache_tokens`` is
    the shortest cacheable prefix (1024 like the real APIs; lower it in tests).
    ``embedding_dim`` is the default embedding size (a request's ``dimensions`` wins).
    ``context_window`` makes every request longer than that many tokens fail with the
    provider's context-length error, as a real small-window model would. ``validate``
    rejects malformed transcripts with the provider's 400 (on by default).
    ``timeout_sleep`` caps how long a ``"timeout"`` reply stays silent when the client
    does not announce its timeout.
    """

    def __init__(
        self,
        *,
        min_cache_tokens: int = 1024,
        embedding_dim: int = 64,
        context_window: int | None = None,
        validate: bool = True,
        timeout_sleep: float = 30.0,
    ) -> None:
        self.min_cache_tokens = min_cache_tokens
        self.embedding_dim = embedding_dim
        self.context_window = context_window
        self.validate = validate
        self.timeout_sleep = timeout_sleep
        #: ``fn(request) -> Reply | str`` answering chat requests when the queue is empty.
        self.handler: Callable[[Request], Reply | str] | None = None
        #: Every request received, oldest first.
        self.requests: list[Request] = []
        self._queue: deque[tuple[str | None, Reply]] = deque()
        self._cache: dict[str, float] = {}  # anthropic prefix hash -> expiry (monotonic)
        self._seen: set[str] = set()  # openai prefix hashes (automatic caching)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        """Bind an ephemeral loopback port and serve in a background thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-llm",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; wakes any reply that is still sleeping."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not started")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` — the Anthropic SDK's ``base_url``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """``url + "/v1"`` — the OpenAI SDK's ``base_url``."""
        return self.url + "/v1"

    # -- scripting -------------------------------------------------------------------

    def queue(self, *replies: Reply | str, api: str | None = None) -> None:
        """Answer the next request(s) with these replies, in order. ``api=None`` serves
        chat requests of either provider; ``api="embeddings"`` queues an embeddings
        reply (only its ``error``/``delay`` matter)."""
        with self._lock:
            for reply in replies:
                self._queue.append((api, Reply(text=reply) if isinstance(reply, str) else reply))

    @property
    def pending(self) -> int:
        """How many queued replies are still unused."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Forget recorded requests, queued replies, the handler and the prompt cache."""
        with self._lock:
            self.requests.clear()
            self._queue.clear()
            self._cache.clear()
            self._seen.clear()
            self.handler = None

    def clear_cache(self) -> None:
        """Forget every cached prefix (as if the cache expired)."""
        with self._lock:
            self._cache.clear()
            self._seen.clear()

    def config(self, provider: str = "openai", model: str = "fake-model") -> dict[str, Any]:
        """A ``Kernel(config=...)`` dict pointing the main model at this server, with
        fast retries and a short timeout. A fresh dict every call (callers may edit it)."""
        if provider not in ("openai", "anthropic"):
            raise ValueError(f"provider must be 'openai' or 'anthropic', not {provider!r}")
        return {
            "model": {
                "provider": provider,
                "name": model,
                "base_url": self.url if provider == "anthropic" else self.openai_url,
                "api_key": "fake-key",
                "retry_base_delay": 0.01,
                "timeout": 10.0,
            }
        }

    # -- dispatch --------------------------------------------------------------------

    def _dispatch(self, h: _Handler, path: str, body: dict[str, Any]) -> None:
        if path.endswith("/chat/completions"):
            api = "openai"
        elif path.endswith("/messages/count_tokens"):
            api = "count_tokens"
        elif path.endswith("/messages"):
            api = "anthropic"
        elif path.endswith("/embeddings"):
            api = "embeddings"
        else:
            h._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found_error"}})
            return
        headers = {k.lower(): v for k, v in h.headers.items()}
        request = Request(api=api, path=path, body=body, headers=headers, time=time.time())
        if api == "count_tokens":
            h._send_json(200, {"input_tokens": sum(b.tokens for b in _anthropic_blocks(body))})
            return
        with self._lock:
            self.requests.append(request)
        reply = self._next_reply(request)
        if reply.delay:
            self._stopping.wait(reply.delay)
        if reply.error == "timeout":
            announced = headers.get("x-stainless-timeout") or headers.get("x-stainless-read-timeout")
            try:
                wait = float(announced) + 1.0 if announced else self.timeout_sleep
            except ValueError:
                wait = self.timeout_sleep
            self._stopping.wait(wait)
            h.close_connection = True
            return
        if reply.fault in ("plain", "truncated", "html") and api != "embeddings":
            self._broken_body(h, request, reply)
            return
        if api == "embeddings":
            self._embeddings(h, request, reply)
        elif api == "openai":
            self._openai(h, request, reply)
        else:
            self._anthropic(h, request, reply)

    def _broken_body(self, h: _Handler, request: Request, reply: Reply) -> None:
        """An HTTP 200 whose body is not what the client asked for."""
        if reply.fault == "plain":  # the complete non-streaming answer
            plain = Request(api=request.api, path=request.path, body=dict(request.body, stream=False),
                            headers=request.headers, time=request.time)
            (self._openai if request.api == "openai" else self._anthropic)(h, plain, dataclasses.replace(reply, fault=None))
            return
        if reply.fault == "html":
            data, kind = (b"<!DOCTYPE html><html><head><title>Welcome</title></head>"
                          b"<body><h1>It works!</h1></body></html>"), "text/html; charset=utf-8"
        else:
            full = json.dumps({"id": "x", "object": "chat.completion", "type": "message",
                               "content": [{"type": "text", "text": reply.text or "cut"}],
                               "choices": []}).encode()
            data, kind = full[: len(full) // 2], "application/json"
        h.send_response(200)
        h.send_header("content-type", kind)
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def _cut_short(self, h: _Handler, reply: Reply, index: int, total: int) -> bool:
        """For a ``cut``/``drop`` fault, end the stream half way: ``True`` when it did."""
        if reply.fault not in ("cut", "drop") or index < max(1, total // 2):
            return False
        if reply.fault == "cut":
            h._end_sse()
        else:
            h.close_connection = True  # no terminating chunk: the body breaks off
        return True

    def _next_reply(self, request: Request) -> Reply:
        want = "embeddings" if request.api == "embeddings" else None
        with self._lock:
            for i, (api, reply) in enumerate(self._queue):
                if api == want or (want is None and api == request.api):
                    del self._queue[i]
                    return reply
        if want is not None:
            return Reply()
        handler = self.handler
        if handler is not None:
            try:
                out = handler(request)
            except Exception as exc:  # surface a broken test handler as a server error
                return Reply(error=500, text=f"fake handler raised {type(exc).__name__}: {exc}")
            if out is not None:
                return Reply(text=out) if isinstance(out, str) else out
        return Reply(text="echo: " + request.last_user_text[:200])

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    # -- OpenAI ----------------------------------------------------------------------

    def _openai_error(self, h: _Handler, reply: Reply, tokens: int) -> None:
        error = reply.error
        if error == "context_length":
            window = self.context_window or 128_000
            n = max(tokens, window + 1)
            payload = {"message": (
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {n} tokens. Please reduce the length of the messages."),
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}
            h._send_json(400, {"error": payload})
            return
        status = int(error) if isinstance(error, int) else 500
        kinds = {
            400: ("invalid_request_error", None, "Invalid request."),
            401: ("invalid_request_error", "invalid_api_key",
                  "Incorrect API key provided: fake-***. You can find your API key at "
                  "https://platform.openai.com/account/api-keys."),
            403: ("invalid_request_error", "unsupported_country_region_territory",
                  "Country, region, or territory not supported"),
            404: ("invalid_request_error", "model_not_found", "The model does not exist."),
            429: ("requests", "rate_limit_exceeded",
                  "Rate limit reached for requests. Please try again in 20ms."),
        }
        kind, code, message = kinds.get(status, (
            "server_error", None,
            "The server had an error while processing your request. Sorry about that!"))
        if reply.text and status >= 400:
            message = reply.text
        h._send_json(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})

    def _openai_validate(self, body: dict[str, Any]) -> str | None:
        if not body.get("model"):
            return "you must provide a model parameter"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "Invalid 'messages': empty array. Expected an array with minimum length 1."
        pending: list[str] = []
        for i, msg in enumerate(messages):
            role = msg.get("role")
            if role == "tool":
                if msg.get("tool_call_id") not in pending:
                    return (f"Invalid parameter: messages with role 'tool' must be a response to a "
                            f"preceeding message with 'tool_calls'. (messages[{i}])")
                pending.remove(msg["tool_call_id"])
                continue
            if pending:
                return ("An assistant message with 'tool_calls' must be followed by tool messages "
                        "responding to each 'tool_call_id'. The following tool_call_ids did not "
                        f"have response messages: {', '.join(pending)}")
            if role not in ("system", "developer", "user", "assistant"):
                return f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'tool'."
            pending = [c.get("id") for c in msg.get("tool_calls") or []]
        if pending:
            return ("An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(pending)}")
        return None

    def _openai_usage(self, body: dict[str, Any], reply: Reply, output_tokens: int) -> dict[str, Any]:
        blocks = _openai_blocks(body)
        hashes, totals = _prefix_hashes(blocks)
        total = totals[-1] if totals else 0
        cached = 0
        with self._lock:
            for h, t in zip(hashes, totals, strict=True):
                if h in self._seen and t >= self.min_cache_tokens:
                    cached = t
            for h, t in zip(hashes, totals, strict=True):
                if t >= self.min_cache_tokens:
                    self._seen.add(h)
        usage: dict[str, Any] = {
            "prompt_tokens": total,
            "completion_tokens": output_tokens,
            "total_tokens": total + output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0},
        }
        if reply.usage:
            usage.update(reply.usage)
        return usage

    def _openai(self, h: _Handler, request: Request, reply: Reply) -> None:
        body = request.body
        tokens = sum(b.tokens for b in _openai_blocks(body))
        if reply.error is None and self.context_window and tokens > self.context_window:
            reply = Reply(error="context_length")
        if reply.error is not None:
            self._openai_error(h, reply, tokens)
            return
        problem = self._openai_validate(body) if self.validate else None
        if problem:
            h._send_json(400, {"error": {"message": problem, "type": "invalid_request_error",
                                         "param": "messages", "code": None}})
            return
        calls: list[dict[str, Any]] = [{"id": c.get("id") or self._new_id("call_"), "type": "function",
                  "function": {"name": c["name"],
                               "arguments": json.dumps(c.get("arguments") or {})}}
                 for c in reply.tool_calls]
        finish = reply.stop_reason or ("tool_calls" if calls else "stop")
        finish = _STOP_TO_FINISH.get(finish, finish)
        out_tokens = estimate_tokens(reply.text) + sum(
            estimate_tokens(c["function"]["name"] + c["function"]["arguments"]) for c in calls)
        usage = self._openai_usage(body, reply, out_tokens)
        model = request.model
        cid, created = self._new_id("chatcmpl-fake"), int(time.time())
        if not request.stream:
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None,
                                       "refusal": None}
            if calls:
                message["tool_calls"] = calls
            h._send_json(200, {
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish,
                             "logprobs": None}],
                "usage": usage, "system_fingerprint": "fp_fake",
            })
            return

        self._openai_stream(h, reply, body, calls, finish, usage, cid, created, model)

    def _openai_stream(self, h: _Handler, reply: Reply, body: dict[str, Any], calls: list[dict[str, Any]],
                       finish: str, usage: dict[str, Any], cid: str, created: int, model: str) -> None:
        """The answer as Chat Completions server-sent events."""
        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            return json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                               "model": model, "system_fingerprint": "fp_fake",
                               "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                            "finish_reason": finish_reason}]})

        h._start_sse()
        h._sse(chunk({"role": "assistant", "content": ""}))
        pieces = list(_pieces(reply.text))
        for i, piece in enumerate(pieces):
            if self._cut_short(h, reply, i, len(pieces)):
                return
            if reply.chunk_delay and self._stopping.wait(reply.chunk_delay):
                break
            h._sse(chunk({"content": piece}))
        for index, call in enumerate(calls):
            h._sse(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
            for piece in _pieces(call["function"]["arguments"]):
                h._sse(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        h._sse(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            h._sse(json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                               "model": model, "choices": [], "usage": usage}))
        h._sse("[DONE]")
        h._end_sse()

    # -- embeddings ------------------------------------------------------------------

    def _embeddings(self, h: _Handler, request: Request, reply: Reply) -> None:
        if reply.error is not None:
            self._openai_error(h, reply, 0)
            return
        body = request.body
        inputs = body.get("input")
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        dim = int(body.get("dimensions") or self.embedding_dim)
        data, tokens = [], 0
        for i, item in enumerate(inputs or []):
            text = item if isinstance(item, str) else " ".join(map(str, item))
            tokens += estimate_tokens(text)
            vector = embed(text, dim)
            if body.get("encoding_format") == "base64":
                value: Any = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
            else:
                value = vector
            data.append({"object": "embedding", "index": i, "embedding": value})
        h._send_json(200, {"object": "list", "data": data, "model": request.model,
                           "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    # -- Anthropic -------------------------------------------------------------------

    def _anthropic_error(self, h: _Handler, reply: Reply, tokens: int) -> None:
        error = reply.error
        if error == "context_length":
            window = self.context_window or DEFAULT_WINDOW
            n = max(tokens, window + 1)
            h._send_json(400, {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {n} tokens > {window} maximum"}})
            return
        status = int(error) if isinstance(error, int) else 500
        kinds = {
            400: ("invalid_request_error", "Invalid request."),
            401: ("authentication_error", "invalid x-api-key"),
            403: ("permission_error", "Your API key does not have permission to use the specified resource."),
            404: ("not_found_error", "The requested resource could not be found."),
            413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
            429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
            529: ("overloaded_error", "Overloaded"),
        }
        kind, message = kinds.get(status, ("api_error", "Internal server error"))
        if reply.text and status >= 400:
            message = reply.text
        h._send_json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def _anthropic_validate(self, body: dict[str, Any], blocks: list[_Block]) -> str | None:
        for key in ("model", "max_tokens", "messages"):
            if key not in body:
                return f"{key}: Field required"
        marks = sum(1 for b in blocks if b.marker)
        if marks > 4:
            return f"A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        messages = body["messages"]
        if not messages:
            return "messages: at least one message is required"
        previous_uses: set[str] = set()
        for i, msg in enumerate(messages):
            role, content = msg.get("role"), msg.get("content")
            if role not in ("user", "assistant"):
                return (f"messages.{i}.role: Input should be 'user' or 'assistant'"
                        + ("; use the top-level `system` parameter" if role == "system" else ""))
            last = i == len(messages) - 1
            if content == "" or content == []:
                if not (last and role == "assistant"):
                    return (f"messages.{i}: all messages must have non-empty content except for "
                            "the optional final assistant message")
            blocks_i = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            results = set()
            for j, block in enumerate(blocks_i):
                kind = block.get("type")
                if kind == "text" and not block.get("text"):
                    return f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
                if kind == "tool_result":
                    if role != "user" or block.get("tool_use_id") not in previous_uses:
                        return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                                f"`tool_result` blocks: {block.get('tool_use_id')}. Each "
                                "`tool_result` block must have a corresponding `tool_use` block "
                                "in the previous message.")
                    results.add(block["tool_use_id"])
            missing = previous_uses - results
            if missing:
                return (f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                        f"immediately after: {', '.join(sorted(missing))}. Each `tool_use` block "
                        "must have a corresponding `tool_result` block in the next message.")
            previous_uses = {str(b.get("id")) for b in blocks_i if b.get("type") == "tool_use"}
        if previous_uses:
            return (f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
                    f"blocks immediately after: {', '.join(sorted(previous_uses))}. Each `tool_use` "
                    "block must have a corresponding `tool_result` block in the next message.")
        return None

    def _anthropic_usage(self, blocks: list[_Block]) -> dict[str, Any]:
        """Cache read/write accounting over the blocks, as the real API does it."""
        hashes, totals = _prefix_hashes(blocks)
        total = totals[-1] if totals else 0
        breakpoints = [i for i, b in enumerate(blocks) if b.marker]
        now = time.monotonic()
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if v > now}
            read_end = -1
            for bp in breakpoints:
                for j in range(bp, max(-1, bp - LOOKBACK_BLOCKS), -1):
                    if hashes[j] in self._cache:
                        read_end = max(read_end, j)
                        break
            read = totals[read_end] if read_end >= 0 else 0
            written = {"5m": 0, "1h": 0}
            last = read_end
            for bp in breakpoints:
                if bp <= read_end or totals[bp] < self.min_cache_tokens:
                    continue
                ttl = "1h" if (blocks[bp].marker or {}).get("ttl") == "1h" else "5m"
                written[ttl] += totals[bp] - (totals[last] if last >= 0 else 0)
                self._cache[hashes[bp]] = now + TTL_SECONDS[ttl]
                last = bp
            if read_end >= 0:  # a hit refreshes the entry's lifetime
                self._cache[hashes[read_end]] = max(self._cache[hashes[read_end]], now + 300.0)
        creation = written["5m"] + written["1h"]
        return {
            "input_tokens": total - read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": written["5m"],
                               "ephemeral_1h_input_tokens": written["1h"]},
            "output_tokens": 0,
            "service_tier": "standard",
        }

    def _anthropic(self, h: _Handler, request: Request, reply: Reply) -> None:
        body = request.body
        blocks = _anthropic_blocks(body)
        tokens = sum(b.tokens for b in blocks)
        if reply.error is None and self.context_window and tokens > self.context_window:
            reply = Reply(error="context_length")
        if reply.error is not None:
            self._anthropic_error(h, reply, tokens)
            return
        problem = self._anthropic_validate(body, blocks) if self.validate else None
        if problem:
            h._send_json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                          "message": problem}})
            return
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            content.append({"type": "tool_use", "id": call.get("id") or self._new_id("toolu_fake"),
                            "name": call["name"], "input": call.get("arguments") or {}})
        stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        stop = _FINISH_TO_STOP.get(stop, stop)
        out_tokens = estimate_tokens(reply.text) + sum(
            estimate_tokens(c["name"] + json.dumps(c["input"])) for c in content if c["type"] == "tool_use")
        usage = self._anthropic_usage(blocks)
        usage["output_tokens"] = out_tokens
        if reply.usage:
            usage.update(reply.usage)
        message = {"id": self._new_id("msg_fake"), "type": "message", "role": "assistant",
                   "model": request.model, "content": content, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        if not request.stream:
            h._send_json(200, message)
            return

        self._anthropic_stream(h, reply, message, content, usage, stop)

    def _anthropic_stream(self, h: _Handler, reply: Reply, message: dict[str, Any],
                          content: list[dict[str, Any]], usage: dict[str, Any], stop: str) -> None:
        """The answer as Messages API server-sent events."""
        def event(name: str, payload: dict[str, Any]) -> None:
            h._sse(json.dumps({"type": name, **payload}), event=name)

        h._start_sse()
        start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
        event("message_start", {"message": start})
        event("ping", {})
        for index, block in enumerate(content):
            if block["type"] == "text":
                event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                pieces = list(_pieces(block["text"]))
                for i, piece in enumerate(pieces):
                    if self._cut_short(h, reply, i, len(pieces)):
                        return
                    if reply.chunk_delay and self._stopping.wait(reply.chunk_delay):
                        break
                    event("content_block_delta", {"index": index,
                                                  "delta": {"type": "text_delta", "text": piece}})
            else:
                event("content_block_start", {"index": index, "content_block": dict(block, input={})})
                for piece in _pieces(json.dumps(block["input"])):
                    event("content_block_delta", {"index": index, "delta": {
                        "type": "input_json_delta", "partial_json": piece}})
            event("content_block_stop", {"index": index})
        event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": usage["output_tokens"]}})
        event("message_stop", {})
        h._end_sse()


def _pieces(text: str, size: int = 12) -> Iterator[str]:
    """Cut ``text`` into small chunks so that streaming is really exercised."""
    for i in range(0, len(text), size):
        yield text[i:i + size]


def embed(text: str, dim: int = 64) -> list[float]:
    """The fake server's deterministic unit-length embedding of ``text``.

    Equal texts give equal vectors; different texts give (practically) different ones.
    """
    values: list[float] = []
    counter = 0
    while len(values) < dim:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend(b / 127.5 - 1.0 for b in digest)
        counter += 1
    values = values[:dim]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]
