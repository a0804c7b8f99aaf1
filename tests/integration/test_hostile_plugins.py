"""Plugins cannot take the host down (issue 12): a plugin that calls ``sys.exit()`` or
prints to stdout at import, in a registration hook, while registering commands or in an
event hook, run through the real ``hermes`` console script. ``--json`` output stays
parseable, the process lives, the culprit is named on stderr in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERMES = Path(sys.executable).with_name("hermes")

NOISY = """
import sys
import click
import hermes
print("noisy says hello at import")
click.echo("noisy says hello through click")

@hermes.hookimpl
def hermes_register_tools(register):
    print("noisy says hello while registering")

@hermes.hookimpl
def hermes_register_commands(cli):
    print("noisy says hello from commands")
"""

EXITS_AT_IMPORT = "import sys\nsys.exit(3)\n"

EXITS_IN_HOOK = """
import sys
import hermes

@hermes.hookimpl
def hermes_register_context_engines(register):
    sys.exit("bye from a hook")
"""

EXITS_IN_COMMANDS = """
import sys
import hermes

@hermes.hookimpl
def hermes_register_commands(cli):
    raise SystemExit(0)
"""


def hermes(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(home), **extra}
    for var in ("HERMES_LOAD_PLUGINS", "HERMES_DISABLE_PLUGINS", "HERMES_NO_PLUGINS",
                "HERMES_STRICT_PLUGINS", "HERMES_TRACE_PLUGINS"):
        env.pop(var, None)
    return subprocess.run([str(HERMES), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "plugins").mkdir(parents=True)
    return home


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_printing_plugin_never_corrupts_json(home, encoding):
    (home / "plugins" / "noisy.py").write_text(NOISY)
    result = hermes(home, "plugins", "list", "--json", PYTHONIOENCODING=encoding)
    assert result.returncode == 0, result.stderr
    listed = {p["name"]: p for p in json.loads(result.stdout)}  # stdout is pure JSON
    assert listed["noisy"]["status"] == "active"
    assert "noisy says hello" not in result.stdout
    for stage in ("loading", "running hermes_register_tools"):
        assert f"hermes: plugin noisy printed to stdout while {stage}" in result.stderr
    helped = hermes(home, "--help")  # collects the plugins' commands
    assert helped.returncode == 0 and "noisy says" not in helped.stdout
    assert "hermes: plugin noisy printed to stdout while registering commands" in helped.stderr


@pytest.mark.parametrize("source, stage", [
    (EXITS_AT_IMPORT, "sys.exit(3) while loading"),
    (EXITS_IN_HOOK, "sys.exit('bye from a hook') while running hermes_register_context_engines"),
])
def test_sys_exit_in_a_plugin_is_its_failure_not_the_end(home, source, stage):
    (home / "plugins" / "quitter.py").write_text(source)
    result = hermes(home, "plugins", "list", "--all", "--json")
    assert result.returncode == 0, result.stderr
    listed = {p["name"]: p for p in json.loads(result.stdout)}
    assert listed["quitter"]["status"] == "failed"
    assert stage in listed["quitter"]["error"]
    assert "builtin-memory" in listed, "the rest of the listing is there"
    lines = [line for line in result.stderr.splitlines() if "quitter" in line]
    assert len(lines) == 1 and "Traceback" not in result.stderr


def test_sys_exit_while_registering_commands_leaves_the_cli_working(home):
    (home / "plugins" / "quitter.py").write_text(EXITS_IN_COMMANDS)
    result = hermes(home, "--help")
    assert result.returncode == 0 and "Usage:" in result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if "quitter" in line]
    assert len(lines) == 1, result.stderr
    assert "failed to register commands: PluginExit: called sys.exit(0) while registering commands" in lines[0]
