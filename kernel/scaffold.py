"""``hermes plugins new NAME``: a plugin distribution that installs and passes its tests.

It writes ``hermes-NAME/`` with a ``pyproject.toml`` declaring the ``hermes.plugins``
entry point, a package with one hook (a memory provider: the component kind with the
smallest contract that still exercises the whole path — registration, selection, the
memory manager), tests that use Hermes' pytest plugin and the memory-provider
conformance suite, and a README saying how to install, test and select it. The files are
templates below; ``docs/writing-plugins.md`` walks through the same layout.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from .errors import HermesError
from .util import atomic_write_text

_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "A Hermes memory provider: {name}"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["hermes-kernel>=0.1"]

[project.optional-dependencies]
test = ["pytest"]

# Hermes finds the plugin through this entry point; its name is the plugin's name.
[project.entry-points."hermes.plugins"]
{name} = "{module}"

[tool.setuptools]
packages = ["{module}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

PACKAGE = '''\
"""{dist}: a Hermes memory provider.

It keeps what the user said in ``{name}.json`` in the Hermes home and recalls the
messages sharing the most words with a new question. Replace the storage and the
matching with your own; keep the contract (see the tests).
"""

import json
import re
from pathlib import Path

import hermes


def words(text):
    """Words of four letters or more: a naive relevance signal without dependencies."""
    return {{w for w in re.findall(r"\\w+", text.lower()) if len(w) >= 4}}


class {cls}(hermes.MemoryProvider):
    """A memory provider that recalls earlier user messages."""

    name = "{name}"

    def __init__(self, kernel):
        settings = kernel.plugin_config("{name}")  # plugins.{name} in config.yaml
        self.max_results = int(settings.get("max_results", 3))
        self.path = Path(kernel.home) / "{name}.json"

    def is_available(self):
        return True  # fast, no network: say here whether credentials are configured

    def initialize(self, session_id, **kwargs):
        self.path = Path(kwargs.get("hermes_home") or self.path.parent) / "{name}.json"

    def get_tool_schemas(self):
        return []  # tools the model may call; handle them in handle_tool_call

    def _load(self):
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return []

    def search(self, query):
        wanted = words(query)
        scored = [(len(wanted & words(said)), said) for said in self._load()]
        return [said for score, said in sorted(scored, reverse=True) if score][: self.max_results]

    def prefetch(self, query, *, session_id=""):
        return "\\n".join(f"- the user said: {{said}}" for said in self.search(query))

    def sync_turn(self, user_content, assistant_content, *, session_id=""):
        if user_content.strip():
            hermes.atomic_write_text(self.path, json.dumps(self._load() + [user_content.strip()]))


@hermes.hookimpl
def hermes_register_memory_providers(register):
    register("{name}", {cls}, description="recalls what the user said before")
'''

TESTS = '''\
"""Tests for {dist}. The fixtures (kernel, hermes_home, register_plugin …) come from
Hermes' pytest plugin, installed with Hermes."""

import json

import pytest
from click.testing import CliRunner

import {module}
from hermes.cli import cli
from hermes.testing.conformance import MemoryProviderConformance


class Test{cls}Conformance(MemoryProviderConformance):
    recalls_synced_turns = True  # prefetch finds what sync_turn stored

    @pytest.fixture
    def provider(self, kernel):
        return {module}.{cls}(kernel)


def test_registers_the_provider(kernel, register_plugin):
    record = register_plugin({module}, "{name}")
    assert record.status == "active"
    assert kernel.registries.memory_providers.get("{name}").plugin == "{name}"


def test_recalls_the_best_match(kernel_factory):
    kernel = kernel_factory(config={{"plugins": {{"{name}": {{"max_results": 1}}}}}})
    provider = {module}.{cls}(kernel)
    provider.initialize("s1", hermes_home=str(kernel.home))
    provider.sync_turn("My cat is called Miso.", "Nice!")
    provider.sync_turn("I deploy with Kubernetes every Friday.", "Noted.")
    assert provider.prefetch("When do I deploy to kubernetes?") == (
        "- the user said: I deploy with Kubernetes every Friday.")


def test_installed_and_listed(hermes_home, monkeypatch):
    """Through the real entry point and the real CLI (after `pip install -e .`)."""
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "{name}")
    listed = CliRunner().invoke(cli, ["plugins", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [p["status"] for p in json.loads(listed.stdout) if p["name"] == "{name}"] == ["active"]
'''

README = '''\
# {dist}

A Hermes memory provider plugin, made with `hermes plugins new {name}`.

```bash
hermes plugins install -e .                        # into Hermes' own interpreter
hermes plugins list                                # {name}  [{dist} 0.1.0]  entrypoint  active
hermes plugins select memory-provider {name}      # writes memory.provider: {name}
```

Settings go under `plugins.{name}` in `config.yaml`:

```yaml
plugins:
  {name}:
    max_results: 3
```

## Tests

```bash
pip install -e ".[test]"
HERMES_STRICT_PLUGINS=1 pytest
```

The tests use Hermes' pytest fixtures and the memory-provider conformance suite
(`hermes.testing.conformance.MemoryProviderConformance`), which checks the contract the
memory manager relies on.
'''


def plugin_names(name: str) -> dict[str, str]:
    """The names derived from NAME: plugin (entry point), distribution, module, class."""
    plain = name.strip().lower()
    if plain.startswith("hermes-") or plain.startswith("hermes_"):
        plain = plain[len("hermes-"):]
    if not _NAME.match(plain):
        raise ValueError(f"{name!r} is not a usable plugin name. Use lowercase letters, digits "
                         "and single '-' or '_' between them, starting with a letter (e.g. 'recall').")
    module = "hermes_" + plain.replace("-", "_")
    if keyword.iskeyword(module):
        raise ValueError(f"{name!r} would make a Python keyword; choose another name.")
    cls = "".join(part.capitalize() for part in re.split(r"[-_]", plain)) + "Provider"
    return {"name": plain, "dist": "hermes-" + plain.replace("_", "-"), "module": module, "cls": cls}


def scaffold(name: str, parent: str | Path = ".") -> Path:
    """Write the distribution for plugin ``name`` into ``parent/hermes-NAME``; returns the
    directory. Refuses (:class:`HermesError`) a bad name or an existing, non-empty
    directory: nothing of the user's is overwritten."""
    try:
        names = plugin_names(name)
    except ValueError as exc:
        raise HermesError(str(exc)) from None
    root = Path(parent) / names["dist"]
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise HermesError(f"{root} already exists and is not empty; choose another name or "
                          "directory (--dir).")
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{names['module']}/__init__.py": PACKAGE,
        f"tests/test_{names['name'].replace('-', '_')}.py": TESTS,
    }
    try:
        for rel, template in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            # Source files of a project: readable by others, as an editor would leave them.
            atomic_write_text(path, template.format(**names), mode=0o644)
    except OSError as exc:
        raise HermesError(f"cannot write {root}: {exc.strerror or exc}. Choose a writable "
                          "directory (--dir).") from None
    return root


__all__ = ["plugin_names", "scaffold"]
