"""Hermes Agent's plugins read their keys from ``os.environ``; Hermes Agent loads
``$HERMES_HOME/.env`` into it at start, this kernel never writes ``os.environ`` (each
kernel keeps its own environment). So a key kept only in ``.env`` — where Hermes Agent's
own setup puts it — must still reach the plugin: its code sees the process environment
over its home's ``.env``, and nothing else in the process (nor a child process started
without an explicit ``env=``) does.

A local Hermes-style plugin exercises every way plugin code reads the environment; the
upstream ``hermes-agent`` wheel's mem0 and supermemory providers (cached by
tests/integration/test_hermes_agent_plugins.py) check it against real upstream code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import hermes

PLUGIN = '''
import os
import os.path
import subprocess
import sys
from os import environ, getenv

from agent.memory_provider import MemoryProvider


class EnvProbe(MemoryProvider):
    name = "envprobe"

    def is_available(self):
        return bool(os.environ.get("T_PROBE_KEY"))

    def initialize(self, session_id, **kwargs):
        pass

    def get_tool_schemas(self):
        return []

    def probe(self):
        child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('T_PROBE_KEY', '-'))"],
                               capture_output=True, text=True).stdout.strip()
        own_child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('T_PROBE_KEY', '-'))"],
                                   capture_output=True, text=True, env=os.environ.copy()).stdout.strip()
        return {"get": os.environ.get("T_PROBE_KEY"), "getenv": getenv("T_PROBE_KEY"),
                "from_import": environ.get("T_PROBE_KEY"), "in": "T_PROBE_KEY" in os.environ,
                "item": os.environ["T_PROBE_KEY"], "copy": os.environ.copy().get("T_PROBE_KEY"),
                "listed": "T_PROBE_KEY" in list(os.environ), "process_wins": os.environ.get("T_PROBE_BOTH"),
                "path": os.path.join("a", "b"), "child": child, "own_child": own_child}

    def write(self):
        os.environ["T_PROBE_WRITTEN"] = "by-plugin"
        os.environ.setdefault("T_PROBE_KEY", "not-used")
        del os.environ["T_PROBE_BOTH"]
        return (os.environ.get("T_PROBE_WRITTEN"), os.environ["T_PROBE_KEY"], "T_PROBE_BOTH" in os.environ)
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / "plugins" / "envprobe").mkdir(parents=True)
    (home / "plugins" / "envprobe" / "__init__.py").write_text(PLUGIN)
    (home / "plugins" / "envprobe" / "plugin.yaml").write_text(
        "name: envprobe\nrequires_env: [T_PROBE_KEY, T_PROBE_MISSING]\n")
    (home / ".env").write_text("T_PROBE_KEY=from-dotenv\nT_PROBE_BOTH=from-dotenv\n")
    monkeypatch.delenv("T_PROBE_KEY", raising=False)
    monkeypatch.delenv("T_PROBE_MISSING", raising=False)
    monkeypatch.setenv("T_PROBE_BOTH", "from-process")
    return home


def test_plugin_code_sees_its_homes_dotenv_and_nothing_else_does(home: Path) -> None:
    with hermes.Kernel(home=home, load_plugins=["envprobe"], check_selection=False) as kernel:
        assert kernel.pm.records["envprobe"].status == "active", kernel.failures
        provider = kernel.create("memory-provider", "envprobe")
        assert provider.is_available()
        # the hint derived from plugin.yaml looks where the plugin looks
        assert provider.unavailable_reason() == "set T_PROBE_MISSING"
        seen = provider.probe()
    assert seen == {"get": "from-dotenv", "getenv": "from-dotenv", "from_import": "from-dotenv",
                    "in": True, "item": "from-dotenv", "copy": "from-dotenv", "listed": True,
                    "process_wins": "from-process", "path": os.path.join("a", "b"),
                    "child": "-",  # a child started without env= inherits the process environment only
                    "own_child": "from-dotenv"}  # the plugin handing its environment on is its choice
    assert "T_PROBE_KEY" not in os.environ  # never written into the process


def test_a_plugins_writes_stay_in_its_homes_view(home: Path) -> None:
    with hermes.Kernel(home=home, load_plugins=["envprobe"], check_selection=False) as kernel:
        provider = kernel.create("memory-provider", "envprobe")
        assert provider.write() == ("by-plugin", "from-dotenv", False)
        assert provider.probe()["own_child"] == "from-dotenv"
    # the process environment is untouched: no other kernel, home or child sees the writes
    assert "T_PROBE_WRITTEN" not in os.environ and os.environ["T_PROBE_BOTH"] == "from-process"


def test_an_edited_dotenv_is_seen_by_the_next_kernel(home: Path) -> None:
    with hermes.Kernel(home=home, load_plugins=["envprobe"], check_selection=False) as kernel:
        assert kernel.create("memory-provider", "envprobe").is_available()
    (home / ".env").write_text("# the key was removed\n")
    with hermes.Kernel(home=home, load_plugins=["envprobe"], check_selection=False) as kernel:
        provider = kernel.create("memory-provider", "envprobe")
        assert not provider.is_available()
        assert provider.unavailable_reason() == "set T_PROBE_KEY, T_PROBE_MISSING"


def test_another_homes_plugin_does_not_see_this_dotenv(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / "plugins").mkdir(parents=True)
    (other / "plugins" / "envprobe").symlink_to(home / "plugins" / "envprobe")
    with hermes.Kernel(home=home, load_plugins=["envprobe"], check_selection=False) as k1, \
            hermes.Kernel(home=other, load_plugins=["envprobe"], check_selection=False) as k2:
        assert k1.create("memory-provider", "envprobe").is_available()
        assert not k2.create("memory-provider", "envprobe").is_available()


@pytest.mark.slow  # the upstream wheel (downloaded once into the test cache)
def test_upstream_providers_find_a_key_kept_only_in_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_hermes_agent_plugins import WHEEL, _cache, install_providers  # same directory

    wheel = _cache() / WHEEL
    if not wheel.is_file():
        pytest.skip(f"{WHEEL} is not in the test cache (tests/integration/test_hermes_agent_plugins.py fetches it)")
    from hermes.hermes_compat import load_plugin_dir

    for var in ("MEM0_API_KEY", "MEM0_HOST", "MEM0_MODE", "SUPERMEMORY_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    install_providers(wheel, home, ("mem0", "supermemory"))
    (home / ".env").write_text("MEM0_API_KEY=m0-key-from-dotenv\nSUPERMEMORY_API_KEY=sm-key-from-dotenv\n")
    with hermes.Kernel(home=home, load_plugins=["supermemory"], check_selection=False) as kernel:
        kernel.register_plugin(load_plugin_dir(home / "plugins" / "mem0", name="upstream-mem0"), "upstream-mem0")
        for name in ("upstream-mem0", "supermemory"):
            provider = kernel.create("memory-provider", name)
            assert provider.is_available(), (name, provider.unavailable_reason())
    assert "MEM0_API_KEY" not in os.environ and "SUPERMEMORY_API_KEY" not in os.environ
