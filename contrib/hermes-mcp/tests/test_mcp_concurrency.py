"""An agent chatting and two MCP servers writing memory at once: nothing is lost.

Three real processes share one HERMES_HOME: `hermes chat` (its model, the loopback fake,
makes a memory tool call per round) and two `hermes mcp serve` over stdio, each driven by
the SDK's client adding entries as fast as it can.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from mcp_helpers import HERMES, clean_env, hermes, stdio_client, text_of

from hermes.testing.fakellm import Reply

ROUNDS = 12


@pytest.mark.slow  # an agent and two MCP server processes; test_mcp_stdio covers writes over MCP in the fast target
def test_agent_and_two_mcp_clients_lose_no_memory_write(tmp_path: Path, fake_llm) -> None:
    fake_llm.queue(*[Reply(tool_calls=[{"name": "memory", "arguments": {
        "action": "add", "target": "memory", "content": f"agent fact {i}"}}], delay=0.05)
        for i in range(ROUNDS)], "done")
    flags = ["--provider", "openai", "--base-url", fake_llm.openai_url, "--model", "fake-model"]

    async def writer(name: str, ready: asyncio.Event, go: asyncio.Event) -> list[dict]:
        async with stdio_client(tmp_path, name=name) as client:
            await client.list_tools()  # the server has booted its kernel
            ready.set()
            await go.wait()
            results = []
            for i in range(ROUNDS):
                results.append(json.loads(text_of(await client.call_tool(
                    "memory", {"action": "add", "target": "memory", "content": f"{name} fact {i}"}))))
                await asyncio.sleep(0.03)  # spread over the agent's rounds
            return results

    async def scenario() -> tuple[list[list[dict]], subprocess.CompletedProcess]:
        go = asyncio.Event()
        readies = [asyncio.Event(), asyncio.Event()]
        tasks = [asyncio.create_task(writer(n, r, go)) for n, r in zip(("alpha", "beta"), readies, strict=True)]
        await asyncio.gather(*(r.wait() for r in readies))
        chat = await asyncio.create_subprocess_exec(
            *HERMES, "chat", *flags, "-q", "remember things", env=clean_env(tmp_path),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while not fake_llm.requests and chat.returncode is None:  # the agent's turn has begun
            await asyncio.sleep(0.02)
        go.set()
        out, err = await chat.communicate()
        done = subprocess.CompletedProcess([], chat.returncode, out.decode(), err.decode())
        return list(await asyncio.gather(*tasks)), done

    results, chat = asyncio.run(scenario())
    assert chat.returncode == 0, chat.stderr
    assert all(r["success"] for rs in results for r in rs), results

    shown = json.loads(hermes(tmp_path, "memory", "show", "--json", "-t", "memory").stdout)
    entries = shown["memory"]["entries"]
    expected = {f"{who} fact {i}" for who in ("agent", "alpha", "beta") for i in range(ROUNDS)}
    assert set(entries) == expected
    assert len(entries) == len(expected)  # once each
