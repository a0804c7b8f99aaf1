"""`hermes config show|validate` and how every bad config reaches the user: one line
naming the culprit and the fix, exit status 1, config.yaml untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hermes.cli import cli

HERMES = Path(sys.executable).with_name("hermes")


@pytest.fixture(autouse=True)
def no_third_party(hermes_home, monkeypatch):
    """Only the default plugins: these tests are about config, not about what else is
    installed in the environment."""
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "")


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def config(home: Path, text: str) -> Path:
    path = home / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_show_merges_defaults_and_keeps_references(hermes_home):
    config(hermes_home, "model:\n  api_key: {$env: T_KEY}\ncompression:\n  threshold: 0.6\n")
    result = run("config", "show")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"# {hermes_home.resolve() / 'config.yaml'}\n")
    data = yaml.safe_load(result.stdout)
    assert data["compression"]["threshold"] == 0.6
    assert data["compression"]["target_ratio"] == 0.2, "defaults are shown too"
    assert data["model"]["api_key"] == {"$env": "T_KEY"}, "secrets stay references"
    as_json = json.loads(run("config", "show", "--json").stdout)
    assert as_json == data


LOCAL = """
import hermes

@hermes.hookimpl
def hermes_register_context_engines(register):
    register("t-engine", dict)

@hermes.hookimpl
def hermes_register_session_stores(register):
    register("t-store", dict)

@hermes.hookimpl
def hermes_register_llm_clients(register):
    register("t-llm", dict)
"""


def test_validate_ok(hermes_home, monkeypatch):
    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / "t_all.py").write_text(LOCAL)
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "t_all")
    config(hermes_home, "context:\n  engine: t-engine\nsessions:\n  store: t-store\n"
                        "model:\n  provider: t-llm\n")
    result = run("config", "validate")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{hermes_home.resolve() / 'config.yaml'}: OK"


def test_validate_unknown_selection(hermes_home):
    config(hermes_home, "context:\n  engine: t-no-such-engine\n")
    result = run("config", "validate")
    assert result.exit_code == 1
    assert ("error: unknown context-engine 't-no-such-engine' (config `context.engine`). "
            "Choose one of:") in result.stderr


def test_validate_warns_about_unknown_sections(hermes_home):
    config(hermes_home, "memroy:\n  provider: x\n")
    result = run("config", "validate")
    assert "warning: unknown top-level section 'memroy' (did you mean 'memory'?); Hermes ignores it." in result.stderr


def test_validate_unset_env_reference(hermes_home, monkeypatch):
    monkeypatch.delenv("T_HERMES_UNSET", raising=False)
    config(hermes_home, "model:\n  api_key: {$env: T_HERMES_UNSET}\n")
    result = run("config", "validate")
    assert result.exit_code == 1
    assert ("error: model.api_key: environment variable 'T_HERMES_UNSET' is not set. "
            f"Export it or add it to {hermes_home.resolve() / '.env'}.") in result.stderr


@pytest.mark.parametrize("text, expected", [
    ("model:\n  name: [oops\n", ", line 3, column 1: malformed YAML"),
    ("compression:\n  threshold: high\n", "compression.threshold: expected a number, got 'high' (str)."),
    ("memory:\n  nudge_interval: -1\n", "memory.nudge_interval: expected 0 (off) or a positive number of turns, got -1."),
    ("plugins:\n  disabled: mem0\n", "plugins.disabled: expected a list of plugin names"),
])
@pytest.mark.parametrize("command", [("config", "validate"), ("config", "show"), ("plugins", "list"),
                                     ("sessions", "list"), ("memory", "show")])
def test_bad_config_is_one_line_for_every_command(hermes_home, text, expected, command):
    path = config(hermes_home, text)
    before = path.read_bytes()
    result = run(*command)
    if command == ("plugins", "list"):  # still lists, with the problem as a warning
        assert result.exit_code == 0 and "hermes: warning: " in result.stderr
        assert expected in result.stderr and "Traceback" not in result.output
        return
    assert result.exit_code == 2  # a configuration error
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"hermes: error: {hermes_home.resolve() / 'config.yaml'}")
    assert expected in lines[-1]
    assert path.read_bytes() == before


def test_doctor_survives_a_bad_config(hermes_home):
    config(hermes_home, "model:\n  name: [oops\n")
    result = run("doctor", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert any("malformed YAML" in p for p in report["problems"])
    assert report["home"] == str(hermes_home.resolve())


def test_subprocess_malformed_yaml_names_file_and_line(hermes_home):
    config(hermes_home, "context:\n  engine: compressor\n  bad: [\n")
    result = subprocess.run([str(HERMES), "config", "validate"], capture_output=True, text=True,
                            env={**os.environ}, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"hermes: error: {hermes_home.resolve() / 'config.yaml'}, line 4")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_home_option_beats_the_environment(hermes_home, tmp_path):
    other = tmp_path / "other"
    result = run("--home", str(other), "config", "show", "--json")
    assert result.exit_code == 0 and other.is_dir()
    assert run("--home", str(other), "doctor", "--json").stdout.count(str(other.resolve())) >= 1
