"""Shared helpers: a real `hermes mcp serve` subprocess driven by the MCP SDK's client."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

HERMES = [sys.executable, "-m", "hermes.cli"]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(HERMES_HOME=str(home), **extra)
    return env


def hermes(home: Path, *args: str, input: str | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(HERMES + list(args), input=input, capture_output=True, text=True,
                          env=clean_env(home, **(env or {})), timeout=120)


@asynccontextmanager
async def stdio_client(home: Path, *serve_args: str, name: str = "test-client") -> AsyncIterator[Any]:
    """The SDK's client on a real `hermes mcp serve` over stdio, initialised as ``name``."""
    from mcp import Client, StdioServerParameters
    from mcp.types import Implementation

    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "hermes.cli", "mcp", "serve", *serve_args],
                                   env=clean_env(home))
    async with Client(params, client_info=Implementation(name=name, version="1.0"),
                      read_timeout_seconds=60) as client:
        yield client


def text_of(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http(home: Path, *serve_args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """A real `hermes mcp serve --http 127.0.0.1:<random port>`; waits until it listens."""
    import socket
    import time

    port = free_port()
    proc = subprocess.Popen(HERMES + ["mcp", "serve", "--http", f"127.0.0.1:{port}", *serve_args],
                            env=clean_env(home, **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("server did not listen in 60s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@asynccontextmanager
async def http_client(url: str, token: str | None, name: str = "http-client") -> AsyncIterator[Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import Implementation

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http),
                          client_info=Implementation(name=name, version="1.0")) as client:
            yield client
