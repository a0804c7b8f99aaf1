"""``hermes prompt show``: layer by layer with source, size, tokens, kind and the hash."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import hermes
from hermes.cli import cli


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--home", str(home), "--no-plugins", "prompt", "show", *args],
                                catch_exceptions=False)
    return result.exit_code, result.output


def test_json_lists_every_layer_with_its_figures(hermes_home: Path, tmp_path: Path):
    (hermes_home / "SOUL.md").write_text("You are Athena.")
    (hermes_home / "memories").mkdir(exist_ok=True)
    (tmp_path / "AGENTS.md").write_text("Use pytest.")
    code, out = run(hermes_home, "--json", "--cwd", str(tmp_path))
    assert code == 0, out
    data = json.loads(out)
    layers = {layer["name"]: layer for layer in data["layers"]}
    assert list(layers)[:2] == ["identity", "tool_guidance"]
    identity = layers["identity"]
    assert identity["text"] == "You are Athena." and identity["kind"] == "cached"
    assert identity["plugin"] == "prompt-layers" and identity["chars"] == len("You are Athena.")
    assert identity["tokens"] == hermes.estimate_tokens("You are Athena.")
    assert layers["recalled_memory"]["kind"] == "ephemeral" and layers["recalled_memory"]["placement"] == "user"
    assert "Use pytest." in layers["context_files"]["text"]
    # the memory tool and the skill tools are enabled: their guidance is there
    assert "persistent memory" in layers["tool_guidance"]["text"]
    assert "skill_view" in layers["tool_guidance"]["text"]
    assert data["hash"] == hermes.prompt_hash(data["text"]) and len(data["hash"]) == 64
    assert data["chars"] == len(data["text"])


def test_memory_snapshot_appears(hermes_home: Path, tmp_path: Path):
    kernel = hermes.Kernel(home=hermes_home, autoload=False, check_selection=False)
    from hermes.runtime.memory_manager import MemoryManager

    memory = MemoryManager(kernel)
    memory.initialize("setup")
    assert json.loads(memory.handle_tool_call(
        "memory", {"target": "user", "action": "add", "content": "Name: Alice"}))["success"]
    memory.shutdown()
    code, out = run(hermes_home, "--json", "--cwd", str(tmp_path))
    layers = {layer["name"]: layer for layer in json.loads(out)["layers"]}
    assert "Name: Alice" in layers["user_snapshot"]["text"]


def test_human_output(hermes_home: Path, tmp_path: Path):
    code, out = run(hermes_home, "--cwd", str(tmp_path))
    assert code == 0, out
    assert "── identity · order 100 · cached · plugin prompt-layers ·" in out
    assert "── recalled_memory · order 1300 · ephemeral → user" in out
    assert "You are Hermes Agent" in out  # texts shown
    assert "cached prompt:" in out and "sha256 " in out
    code, brief = run(hermes_home, "--brief", "--cwd", str(tmp_path))
    assert "You are Hermes Agent" not in brief and "── identity" in brief


def test_disabled_layers_are_reported(hermes_home: Path, tmp_path: Path):
    (hermes_home / "config.yaml").write_text("prompt:\n  disabled_layers: [timestamp, platform_hint]\n")
    code, out = run(hermes_home, "--json", "--cwd", str(tmp_path))
    data = json.loads(out)
    assert data["disabled"] == ["timestamp", "platform_hint"]
    assert "Conversation started" not in data["text"]
    code, out = run(hermes_home, "--brief", "--cwd", str(tmp_path))
    assert "disabled layers: timestamp, platform_hint" in out


def test_platform_option(hermes_home: Path, tmp_path: Path):
    code, out = run(hermes_home, "--json", "--platform", "telegram", "--cwd", str(tmp_path))
    layers = {layer["name"]: layer for layer in json.loads(out)["layers"]}
    assert "Telegram" in layers["platform_hint"]["text"]


def test_session_option_compares_with_the_stored_prompt(hermes_home: Path, tmp_path: Path):
    kernel = hermes.Kernel(home=hermes_home, autoload=False, check_selection=False)
    store = kernel.session_store
    session_id = store.create_session(source="cli")
    store.update_system_prompt(session_id, "an old frozen prompt")
    kernel.close()
    code, out = run(hermes_home, "--json", "--session", session_id, "--cwd", str(tmp_path))
    assert code == 0, out
    data = json.loads(out)
    assert data["session"] == {"id": session_id, "hash": hermes.prompt_hash("an old frozen prompt"),
                               "chars": len("an old frozen prompt"), "stored": True}
    code, out = run(hermes_home, "--brief", "--session", session_id, "--cwd", str(tmp_path))
    assert f"session {session_id}: sha256 {hermes.prompt_hash('an old frozen prompt')} (differs from" in out
    result = CliRunner().invoke(cli, ["--home", str(hermes_home), "--no-plugins", "prompt", "show",
                                      "--session", "no-such-session"])
    assert result.exit_code != 0 and "no session matches 'no-such-session'" in result.output
