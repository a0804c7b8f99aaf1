"""The import surface of Hermes Agent's plugins (``tools``, ``hermes_constants``,
``hermes_cli``, ``utils``, ``agent``, ``plugins.memory`` …) given to Hermes-style plugin
code only — never to anybody else — and Hermes-style context engines."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import hermes
from hermes.hermes_compat import load_plugin_dir, manifest_reason
from hermes.hermes_shims import SHIMMED

PROVIDER = '''
import json
from agent.memory_provider import MemoryProvider
from tools.registry import tool_error
from hermes_constants import get_hermes_home
from hermes_cli.config import cfg_get, load_config
from utils import atomic_json_write
from plugins.memory.shimmy.store import Store  # upstream's absolute self-import
from .store import Store as RelativeStore


class ShimmyProvider(MemoryProvider):
    name = "shimmy"

    def is_available(self):
        return True

    def initialize(self, session_id, **kwargs):
        self.store = Store(get_hermes_home() / "shimmy.json")

    def get_tool_schemas(self):
        return [{"name": "shimmy", "description": "d", "parameters": {"type": "object", "properties": {}}}]

    def handle_tool_call(self, tool_name, args, **kwargs):
        # imported when the call runs, as upstream's providers do
        from hermes_constants import display_hermes_home
        from utils import env_var_enabled
        if not args:
            return tool_error("nothing to do", hint=display_hermes_home())
        self.store.write(args)
        return json.dumps({"ok": True, "same_store": Store is RelativeStore,
                           "flag": cfg_get(load_config(), "plugins", "shimmy", "flag", default=None),
                           "env": env_var_enabled("T_SHIMMY_FLAG")})


def register(ctx):
    ctx.register_memory_provider(ShimmyProvider())
'''

STORE = '''
from utils import atomic_json_write


class Store:
    def __init__(self, path):
        self.path = path

    def write(self, data):
        atomic_json_write(self.path, data)
'''

ENGINE = '''
from agent.context_engine import ContextEngine
from tools.registry import tool_error


class TinyEngine(ContextEngine):
    @property
    def name(self):
        return "tiny"

    def update_from_response(self, usage):
        self.last_prompt_tokens = usage.get("prompt_tokens", 0)

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, current_tokens=None, **kwargs):
        return messages

    def handle_tool_call(self, name, args, **kwargs):
        return tool_error(f"no tool {name}")


def register(ctx):
    ctx.register_context_engine(TinyEngine())
'''


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(textwrap.dedent(text))
    return directory


@pytest.fixture
def shimmy(hermes_home: Path) -> Path:
    (hermes_home / "config.yaml").write_text("plugins:\n  shimmy:\n    flag: 7\n")
    return write(hermes_home / "plugins" / "shimmy", {"__init__.py": PROVIDER, "store.py": STORE,
                                                      "plugin.yaml": "name: shimmy\nversion: 1.2.0\n"})


def test_upstream_imports_work_at_load_and_call_time(hermes_home: Path, shimmy: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_SHIMMY_FLAG", "yes")
    with hermes.Kernel(home=hermes_home, load_plugins=["shimmy"], check_selection=False) as kernel:
        record = kernel.pm.records["shimmy"]
        assert record.status == "active", record.failure and record.failure.line()
        assert record.source == "local" and record.version == "1.2.0"
        provider = kernel.create("memory-provider", "shimmy")
        provider.initialize("s1", hermes_home=str(hermes_home))
        out = json.loads(provider.handle_tool_call("shimmy", {"fact": "x"}))
        assert out == {"ok": True, "same_store": True, "flag": 7, "env": True}
        assert json.loads((hermes_home / "shimmy.json").read_text()) == {"fact": "x"}
        error = json.loads(provider.handle_tool_call("shimmy", {}))
        assert error["error"] == "nothing to do" and error["hint"]


def test_a_real_utils_package_of_the_user_is_never_shadowed(hermes_home: Path, shimmy: Path,
                                                             tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    site = write(tmp_path / "site" / "utils", {"__init__.py": "MARK = 'the user\\'s utils'\n"}).parent
    write(site / "agent", {"__init__.py": "MARK = 'the user\\'s agent'\n"})
    monkeypatch.syspath_prepend(str(site))
    for name in ("utils", "agent", "tools"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with hermes.Kernel(home=hermes_home, load_plugins=["shimmy"], check_selection=False) as kernel:
        provider = kernel.create("memory-provider", "shimmy")
        provider.initialize("s1")
        assert json.loads(provider.handle_tool_call("shimmy", {"a": 1}))["ok"]
        import agent  # the user's code, while the plugin is loaded
        import utils
        assert utils.MARK == "the user's utils" and agent.MARK == "the user's agent"
        assert not hasattr(utils, "atomic_json_write")
        assert "tools" not in sys.modules and "tools.registry" not in sys.modules
        assert "agent.memory_provider" not in sys.modules
    monkeypatch.delitem(sys.modules, "utils", raising=False)
    monkeypatch.delitem(sys.modules, "agent", raising=False)


def test_a_name_that_is_not_shimmed_fails_in_one_line_naming_it(hermes_home: Path) -> None:
    write(hermes_home / "plugins" / "needy", {"__init__.py": "from tools.web_tools import fetch\n"})
    with hermes.Kernel(home=hermes_home, load_plugins=["needy"], check_selection=False) as kernel:
        failure = kernel.pm.records["needy"].failure
        assert failure is not None and "tools.web_tools" in failure.line()
        assert "\n" not in failure.line()


def test_hermes_style_context_engine_is_discovered_and_selectable(hermes_home: Path) -> None:
    write(hermes_home / "plugins" / "context_engine" / "tiny",
          {"__init__.py": ENGINE, "plugin.yaml": "name: tiny\ndescription: A tiny engine\nversion: 0.3\n"})
    with hermes.Kernel(home=hermes_home, config={"context": {"engine": "tiny"}}, load_plugins=["tiny"]) as kernel:
        record = kernel.pm.records["tiny"]
        assert record.status == "active" and record.source == "local"
        engine = kernel.create("context-engine")
        assert isinstance(engine, hermes.ContextEngine) and engine.name == "tiny"
        assert json.loads(engine.handle_tool_call("x", {})) == {"error": "no tool x"}
        assert kernel.registries.context_engines.get("tiny").description == "A tiny engine"


def test_a_class_style_engine_is_its_own_class_not_one_it_imports(hermes_home: Path) -> None:
    """Without register(ctx) the engine is the package's own ContextEngine subclass, as for
    memory providers; the concrete engine it imports to extend came first before."""
    base = ENGINE.replace("def register(ctx):\n    ctx.register_context_engine(TinyEngine())\n", "")
    own = ('from .base import TinyEngine\n\n\nclass Mine(TinyEngine):\n'
           '    @property\n    def name(self):\n        return "mine"\n')
    write(hermes_home / "plugins" / "context_engine" / "mine", {"__init__.py": own, "base.py": base})
    with hermes.Kernel(home=hermes_home, config={"context": {"engine": "mine"}}, load_plugins=["mine"]) as kernel:
        assert kernel.create("context-engine").name == "mine"


def test_load_plugin_dir_registers_under_another_name(kernel: Any, shimmy: Path) -> None:
    kernel.register_plugin(load_plugin_dir(shimmy, name="upstream-shimmy"), "upstream-shimmy")
    assert kernel.create("memory-provider", "upstream-shimmy").name == "shimmy"


def test_a_provider_without_a_reason_gets_one_from_its_manifest(hermes_home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("T_SHIMMY_KEY", raising=False)
    write(hermes_home / "plugins" / "keyed", {
        "__init__.py": "from agent.memory_provider import MemoryProvider\n"
                       "class Keyed(MemoryProvider):\n"
                       "    name = 'keyed'\n"
                       "    def is_available(self): return False\n"
                       "    def initialize(self, session_id, **kw): pass\n"
                       "    def get_tool_schemas(self): return []\n",
        "plugin.yaml": "name: keyed\nrequires_env: [T_SHIMMY_KEY]\n"
                       "pip_dependencies: ['t-no-such-dist>=1']\n"
                       "external_dependencies: [{name: t-no-such-cmd, install: 'see docs'}]\n"})
    with hermes.Kernel(home=hermes_home, load_plugins=["keyed"], check_selection=False) as kernel:
        provider = kernel.create("memory-provider", "keyed")
        reason = provider.unavailable_reason()
    assert "set T_SHIMMY_KEY" in reason and "pip install t-no-such-dist>=1" in reason
    assert "t-no-such-cmd" in reason
    assert manifest_reason({}, provider) == ""


def test_every_shimmed_module_is_listed_in_the_docs() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "memory-providers.md").read_text()
    missing = [f"{m}.{n}" for m, names in SHIMMED.items() for n in names if f"{m}.{n}" not in docs
               and n not in docs]
    assert not missing, missing


def test_no_hook_without_hermes_style_plugins(tmp_path: Path) -> None:
    """A process that loads no Hermes-style directory keeps Python's own __import__."""
    import subprocess

    code = ("import builtins, hermes\n"
            f"k = hermes.Kernel(home={str(tmp_path)!r})\n"
            "k.close()\n"
            "print(type(builtins.__import__).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "builtin_function_or_method"
