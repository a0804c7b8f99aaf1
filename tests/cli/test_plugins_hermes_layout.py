"""`hermes plugins install PATH` with a plugin directory in Hermes Agent's layout: copied
into ``$HERMES_HOME/plugins/`` (engines into ``plugins/context_engine/``), listed with its
source and path, selectable, and uninstallable."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from hermes.cli import cli

PROVIDER = '''
from agent.memory_provider import MemoryProvider
from tools.registry import tool_error


class Jotter(MemoryProvider):
    name = "jotter"

    def is_available(self):
        return True

    def initialize(self, session_id, **kwargs):
        pass

    def get_tool_schemas(self):
        return []


def register(ctx):
    ctx.register_memory_provider(Jotter())
'''

ENGINE = '''
from agent.context_engine import ContextEngine


class Keeper(ContextEngine):
    name = "keeper"

    def update_from_response(self, usage):
        pass

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, current_tokens=None, **kwargs):
        return messages
'''


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def make(tmp_path: Path, name: str, source: str) -> Path:
    src = tmp_path / "src" / name
    src.mkdir(parents=True)
    (src / "__init__.py").write_text(textwrap.dedent(source))
    (src / "plugin.yaml").write_text(f"name: {name}\nversion: 2.1.0\ndescription: the {name} plugin\n")
    return src


def test_install_list_select_uninstall_a_memory_provider(hermes_home: Path, tmp_path: Path) -> None:
    src = make(tmp_path, "jotter", PROVIDER)
    result = run("plugins", "install", str(src))
    assert result.exit_code == 0, result.output
    target = hermes_home / "plugins" / "jotter"
    assert (target / "__init__.py").read_text() == (src / "__init__.py").read_text()
    assert "jotter" in result.stdout and "memory-provider" in result.stdout

    listing = json.loads(run("plugins", "list", "--json").stdout)
    row = next(r for r in listing if r["name"] == "jotter")
    assert row["source"] == "local" and row["status"] == "active" and row["version"] == "2.1.0"
    assert row["registered"] == {"memory-provider": ["jotter"]}
    text = run("plugins", "list").stdout
    assert f"path: {target}" in text

    assert run("plugins", "select", "memory-provider", "jotter").exit_code == 0
    assert "provider: jotter" in (hermes_home / "config.yaml").read_text()

    again = run("plugins", "install", str(src))
    assert again.exit_code == 1 and "already installed" in again.stderr and "--upgrade" in again.stderr

    gone = run("plugins", "uninstall", "-y", "jotter")
    assert gone.exit_code == 0, gone.output
    assert not target.exists()
    assert not any(r["name"] == "jotter" for r in json.loads(run("plugins", "list", "--json").stdout))


def test_install_a_context_engine(hermes_home: Path, tmp_path: Path) -> None:
    src = make(tmp_path, "keeper", ENGINE)
    result = run("plugins", "install", str(src))
    assert result.exit_code == 0, result.output
    assert (hermes_home / "plugins" / "context_engine" / "keeper" / "__init__.py").is_file()
    assert run("plugins", "select", "context-engine", "keeper").exit_code == 0
    listing = json.loads(run("plugins", "list", "--json").stdout)
    row = next(r for r in listing if r["name"] == "keeper")
    assert row["registered"] == {"context-engine": ["keeper"]}
    assert run("plugins", "uninstall", "-y", "keeper").exit_code == 0
    assert not (hermes_home / "plugins" / "context_engine" / "keeper").exists()


def test_a_directory_that_does_not_load_is_not_kept(hermes_home: Path, tmp_path: Path) -> None:
    src = make(tmp_path, "broken", "from tools.nowhere import x\nfrom agent.memory_provider import MemoryProvider\n")
    result = run("plugins", "install", str(src))
    assert result.exit_code == 1
    assert "tools.nowhere" in result.stderr and "\n" not in result.stderr.strip()
    assert not (hermes_home / "plugins" / "broken").exists()
