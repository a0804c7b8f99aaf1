"""The documentation stays true: every config key and every built-in command is
documented, the user guide links every page, links resolve, and the README's commands
exist. (docs/hooks.md is checked by test_hookspecs.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from hermes.cli import cli
from hermes.config import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def leaf_paths(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.extend(leaf_paths(value, path + "."))
        else:
            out.append(path)
    return out


def test_every_default_key_is_documented_in_config_md():
    text = (DOCS / "config.md").read_text(encoding="utf-8")
    missing = [path for path in leaf_paths(DEFAULTS) if f"`{path}`" not in text]
    assert not missing, f"document these keys in docs/config.md (a table row with `key`): {missing}"


def builtin_commands(group: click.Group, prefix: str = "hermes") -> list[str]:
    out = []
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        out.append(path)
        if isinstance(command, click.Group):
            out.extend(builtin_commands(command, path))
    return out


def test_every_builtin_command_and_option_is_documented_in_cli_md():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = [path for path in builtin_commands(cli) if f"`{path}" not in text]
    assert not missing, f"document these commands in docs/cli.md: {missing}"
    options = [opt for param in cli.params for opt in param.opts if opt.startswith("--")]
    assert [opt for opt in options if f"`{opt}" not in text] == []


def test_the_user_guide_links_every_page():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w\-]+\.md)\)", index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert not sorted(pages - linked), f"add a link line to docs/index.md for {sorted(pages - linked)}"


def test_relative_links_resolve():
    broken = []
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_readme_newcomer_commands_are_true():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash .ci/run" in readme and (ROOT / ".ci" / "run").is_file()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -q" in ci and "ruff check" in ci
    assert ".venv/bin/pip install -e ." in readme and ".venv/bin/hermes chat" in readme
    assert "chat" in cli.commands


@pytest.mark.slow  # installs the tutorial plugin and runs hermes; the other docs checks stay fast
def test_the_tutorial_plugin_works_as_printed(tmp_path):
    """Every file of docs/writing-plugins.md is written out; the distribution is made
    visible as if pip-installed (its dist-info from its own pyproject), and its tests —
    the memory-provider conformance suite included — run in a subprocess."""
    import os
    import subprocess
    import sys
    import tomllib

    from hermes.testing import make_distribution

    text = (DOCS / "writing-plugins.md").read_text(encoding="utf-8")
    files = {}
    for block in re.findall(r"```(?:python|toml)\n(.*?)```", text, re.S):
        first = block.splitlines()[0]
        if first.startswith("# hermes-recall/"):
            files[first.removeprefix("# ")] = block
    assert set(files) == {"hermes-recall/pyproject.toml", "hermes-recall/hermes_recall/__init__.py",
                          "hermes-recall/tests/test_recall.py"}
    for rel, body in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body, encoding="utf-8")
    project = tomllib.loads(files["hermes-recall/pyproject.toml"])["project"]
    site = tmp_path / "site"
    make_distribution(site, project["name"], version=project["version"],
                      plugins=project["entry-points"]["hermes.plugins"])
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{tmp_path / 'hermes-recall'}",
           "HERMES_STRICT_PLUGINS": "1"}
    for var in ("HERMES_HOME", "HERMES_LOAD_PLUGINS", "HERMES_DISABLE_PLUGINS", "HERMES_NO_PLUGINS"):
        env.pop(var, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=tmp_path / "hermes-recall", env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\b(1[5-9]|[2-9]\d) passed", done.stdout), done.stdout[-500:]
