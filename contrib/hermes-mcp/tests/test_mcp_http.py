"""`hermes mcp serve --http`: real HTTP on 127.0.0.1, bearer tokens and scopes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2
import pytest
import yaml
from mcp_helpers import hermes, http_client, start_http, stop, text_of

FULL, READER = "full-token-7f3a9c", "reader-token-51be02"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"plugins": {"mcp": {"tokens": [
        {"name": "laptop", "token": {"$env": "HERMES_MCP_TEST_TOKEN"}},
        {"name": "recall-only", "token": READER, "scopes": ["memory:read"]},
    ]}}}))
    return tmp_path


@pytest.fixture
def server(home: Path):
    proc, url = start_http(home, env={"HERMES_MCP_TEST_TOKEN": FULL})
    yield url
    stop(proc)


def test_no_token_or_a_bad_token_is_refused(server: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {FULL}x"},
                 {"Authorization": FULL}):
        response = httpx2.post(server, json=body, headers={**headers, **auth}, timeout=30)
        assert response.status_code == 401, (auth, response.text)
        assert "bearer token" in response.text


def test_full_token_writes_and_the_write_is_journalled(home: Path, server: str) -> None:
    async def scenario() -> tuple[set[str], dict]:
        async with http_client(server, FULL, name="cursor") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            added = json.loads(text_of(await client.call_tool(
                "memory", {"action": "add", "target": "memory", "content": "HTTP write works"})))
            return names, added

    names, added = asyncio.run(scenario())
    assert {"memory", "session_search", "sessions_list"} <= names
    assert added["success"] is True
    assert (home / "memories" / "MEMORY.md").read_text() == "HTTP write works"
    assert "mcp:cursor" in hermes(home, "memory", "log").stdout


def test_scopes_are_enforced_per_token(home: Path, server: str) -> None:
    assert hermes(home, "memory", "add", "Recall me").returncode == 0

    async def scenario() -> tuple[set[str], dict, dict, dict, str, list[str]]:
        async with http_client(server, READER) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            view = json.loads(text_of(await client.call_tool("memory", {"action": "view"})))
            write = json.loads(text_of(await client.call_tool(
                "memory", {"action": "add", "target": "memory", "content": "not allowed"})))
            search = json.loads(text_of(await client.call_tool("session_search", {"query": "x"})))
            resources = [str(r.uri) for r in (await client.list_resources()).resources]
            try:
                await client.read_resource("hermes://session/anything")
                denied = ""
            except Exception as exc:  # the SDK raises the server's error
                denied = str(exc)
            return names, view, write, search, denied, resources

    names, view, write, search, denied, resources = asyncio.run(scenario())
    assert names == {"memory"}
    assert "Recall me" in view["content"]
    assert write["success"] is False and "memory:write" in write["error"]
    assert search["success"] is False and "sessions:read" in search["error"]
    assert "sessions:read" in denied
    assert resources and all(r.startswith("hermes://memory/") for r in resources)
    assert (home / "memories" / "MEMORY.md").read_text() == "Recall me"


def test_non_loopback_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    proc = hermes(tmp_path, "mcp", "serve", "--http", "0.0.0.0:0")
    assert proc.returncode != 0
    assert "bearer token" in proc.stderr and "plugins.mcp.tokens" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_token_whose_env_variable_is_unset_is_one_line(home: Path) -> None:
    proc = hermes(home, "mcp", "serve", "--http", "127.0.0.1:0")
    assert proc.returncode != 0
    assert "plugins.mcp.tokens[0]" in proc.stderr and "Traceback" not in proc.stderr
