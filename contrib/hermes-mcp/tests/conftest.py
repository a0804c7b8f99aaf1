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


def hermes(home: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(HERMES + list(args), input=input, capture_output=True, text=True,
                          env=clean_env(home), timeout=120)


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
