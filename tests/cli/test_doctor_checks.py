"""`hermes doctor` checks the selected components without touching the network."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from hermes.cli import cli


def doctor(home, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"])


def test_missing_credentials_are_a_problem(tmp_path, monkeypatch):
    result = doctor(tmp_path, monkeypatch)
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert any("ANTHROPIC_API_KEY" in p for p in report["problems"])
    assert any(c.startswith("context engine compressor") for c in report["checks"])


def test_a_configured_local_server_and_window_pass(tmp_path, monkeypatch):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"model": {
        "provider": "openai", "name": "llama3.1", "base_url": "http://127.0.0.1:9/v1",
        "context_length": 64000}}))
    result = doctor(tmp_path, monkeypatch)
    report = json.loads(result.output)
    assert report["problems"] == [], report["problems"]
    assert result.exit_code == 0
    engine = next(c for c in report["checks"] if c.startswith("context engine"))
    assert "window 64000" in engine


def test_an_unavailable_memory_provider_is_reported_with_its_reason(tmp_path, monkeypatch):
    plugin = tmp_path / "plugins" / "offline_memory.py"
    plugin.parent.mkdir()
    plugin.write_text('''
import hermes

class Offline(hermes.MemoryProvider):
    name = "offline"
    def is_available(self): return False
    def unavailable_reason(self): return "set OFFLINE_KEY"
    def initialize(self, session_id, **kw): pass
    def get_tool_schemas(self): return []

@hermes.hookimpl
def hermes_register_memory_providers(register):
    register("offline", Offline)
''')
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "memory": {"provider": "offline"},
        "model": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1"}}))
    report = json.loads(doctor(tmp_path, monkeypatch).output)
    assert any("offline unavailable: set OFFLINE_KEY" in p for p in report["problems"])
