"""`mcp_servers:` in config.yaml: an MCP server's tools inside a real `hermes chat`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from mcp_helpers import hermes, start_http, stop

from hermes.testing.fakellm import Reply

CALC = str(Path(__file__).with_name("calc_server.py"))


def configure(home: Path, **servers: dict) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"mcp_servers": servers}))


def chat(home: Path, fake_llm, text: str = "go"):
    return hermes(home, "chat", "--provider", "openai", "--base-url", fake_llm.openai_url,
                  "--model", "fake-model", "-q", text)


def offered(request) -> set[str]:
    return {t["function"]["name"] for t in request.body.get("tools") or []}


def tool_results(request) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def test_server_tools_are_offered_and_called(tmp_path: Path, fake_llm) -> None:
    configure(tmp_path, calc={"command": sys.executable, "args": [CALC]})
    fake_llm.queue(Reply(tool_calls=[{"name": "mcp_calc_add", "arguments": {"a": 2, "b": 40}}]), "the sum is 42")
    proc = chat(tmp_path, fake_llm)
    assert proc.returncode == 0, proc.stderr
    assert {"mcp_calc_add", "mcp_calc_slow", "mcp_calc_crash"} <= offered(fake_llm.requests[0])
    assert tool_results(fake_llm.requests[1]) == ["42"]
    assert proc.stdout.strip() == "the sum is 42"


@pytest.mark.slow  # hermes and MCP server processes with real timeouts; test_server_tools_are_offered_and_called stays fast
def test_a_call_times_out_and_the_chat_goes_on(tmp_path: Path, fake_llm) -> None:
    configure(tmp_path, calc={"command": sys.executable, "args": [CALC], "timeout": 1})
    fake_llm.queue(Reply(tool_calls=[{"name": "mcp_calc_slow", "arguments": {"seconds": 30}}]),
                   Reply(tool_calls=[{"name": "mcp_calc_add", "arguments": {"a": 1, "b": 1}}]), "done")
    proc = chat(tmp_path, fake_llm)
    assert proc.returncode == 0, proc.stderr
    assert "timed out after 1s" in tool_results(fake_llm.requests[1])[0]
    assert tool_results(fake_llm.requests[2])[-1] == "2"  # the server still answers


@pytest.mark.slow  # hermes and MCP server processes with real timeouts; test_server_tools_are_offered_and_called stays fast
def test_a_server_that_dies_is_reported_once_and_withdrawn(tmp_path: Path, fake_llm) -> None:
    configure(tmp_path, calc={"command": sys.executable, "args": [CALC]})
    fake_llm.queue(Reply(tool_calls=[{"name": "mcp_calc_crash", "arguments": {}}]),
                   Reply(tool_calls=[{"name": "mcp_calc_add", "arguments": {"a": 1, "b": 1}}]), "still here")
    proc = chat(tmp_path, fake_llm)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "still here"
    assert "mcp_calc_add" in offered(fake_llm.requests[0])
    assert not any(n.startswith("mcp_calc_") for n in offered(fake_llm.requests[-1]))
    assert proc.stderr.count("MCP server 'calc' stopped") == 1, proc.stderr


def test_a_server_that_fails_to_start_is_reported_once_and_chat_goes_on(tmp_path: Path, fake_llm) -> None:
    configure(tmp_path, calc={"command": sys.executable, "args": [CALC], "env": {"CALC_FAIL_AT_START": "1"}},
              ghost={"command": str(tmp_path / "no-such-server")})
    proc = chat(tmp_path, fake_llm, "hello")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "echo: hello"
    assert not any(n.startswith("mcp_") for n in offered(fake_llm.requests[-1]))
    assert proc.stderr.count("MCP server 'calc' could not start") == 1, proc.stderr
    assert proc.stderr.count("MCP server 'ghost' could not start") == 1, proc.stderr


def test_mcp_list_shows_servers_state_and_tools(tmp_path: Path) -> None:
    configure(tmp_path, calc={"command": sys.executable, "args": [CALC]},
              ghost={"command": str(tmp_path / "no-such-server")})
    proc = hermes(tmp_path, "mcp", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["calc"]["state"] == "ready" and rows["calc"]["transport"] == "stdio"
    assert rows["calc"]["tools"] == ["mcp_calc_add", "mcp_calc_slow", "mcp_calc_crash"]
    assert rows["ghost"]["state"] == "failed" and rows["ghost"]["tools"] == []
    assert rows["ghost"]["reason"]


@pytest.mark.slow  # an HTTP MCP server process; test_mcp_http.py covers HTTP in the fast target
def test_http_server_with_an_env_header_is_used(tmp_path: Path, fake_llm) -> None:
    """The other direction over HTTP: a Hermes memory server (token required) as a client's server."""
    served, client = tmp_path / "served", tmp_path / "client"
    served.mkdir()
    client.mkdir()
    (served / "config.yaml").write_text(yaml.safe_dump(
        {"plugins": {"mcp": {"tokens": [{"token": "s3cret-token", "scopes": ["memory:read"]}]}}}))
    assert hermes(served, "memory", "add", "Served over HTTP").returncode == 0
    proc, url = start_http(served)
    try:
        configure(client, mem={"url": url, "headers": {"Authorization": {"$env": "MEM_AUTH"}}})
        listed = hermes(client, "mcp", "list", "--json", env={"MEM_AUTH": "Bearer s3cret-token"})
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == [{"name": "mem", "transport": "http", "state": "ready",
                                              "reason": "", "tools": ["mcp_mem_memory"]}]
        fake_llm.queue(Reply(tool_calls=[{"name": "mcp_mem_memory", "arguments": {"action": "view"}}]), "ok")
        done = hermes(client, "chat", "--provider", "openai", "--base-url", fake_llm.openai_url,
                      "--model", "fake-model", "-q", "what do you remember?", env={"MEM_AUTH": "Bearer s3cret-token"})
        assert done.returncode == 0, done.stderr
        assert "Served over HTTP" in tool_results(fake_llm.requests[1])[0]
        # without the header the server refuses: reported once, the chat goes on
        bad = hermes(client, "mcp", "list", "--json", env={"MEM_AUTH": "Bearer wrong"})
        assert json.loads(bad.stdout)[0]["state"] == "failed"
    finally:
        stop(proc)
