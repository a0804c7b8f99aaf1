"""Discovery for real: the installed distribution's entry point, the kernel loading it,
``hermes plugins list --json``, ``hermes plugins select context-engine lcm`` and the
``hermes lcm`` commands, in subprocesses on a temporary home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lcm_helpers import FACT, conversation, drive

from hermes import Kernel

HERMES = str(Path(sys.executable).with_name("hermes"))


def run(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    return subprocess.run([HERMES, *args], capture_output=True, text=True, env=env, timeout=120)


def test_the_entry_point_is_installed():
    from importlib.metadata import entry_points

    [ep] = [ep for ep in entry_points(group="hermes.plugins") if ep.name == "lcm"]
    assert ep.value == "hermes_lcm"
    assert ep.dist.metadata["Name"] == "hermes-lcm"
    assert "hermes-kernel" in " ".join(ep.dist.requires or [])


def test_the_kernel_loads_it_from_its_entry_point(hermes_home):
    kernel = Kernel(home=hermes_home, load_plugins=["lcm"], check_selection=False)
    record = {r.name: r for r in kernel.plugins}["lcm"]
    assert (record.source, record.status, record.dist) == ("entrypoint", "active", "hermes-lcm")
    assert record.registered == {"context-engine": ["lcm"]}
    entry = kernel.registries.context_engines.get("lcm")
    assert entry.plugin == "lcm" and "Lossless" in entry.description


def test_hermes_load_plugins_env(hermes_home, monkeypatch):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "lcm")
    kernel = Kernel(home=hermes_home, config={"context": {"engine": "lcm"}}, check_selection=False)
    assert not [e for e in kernel.selection_errors if e.kind == "context-engine"]
    engine = kernel.create("context-engine")
    assert engine.name == "lcm" and type(engine).__module__ == "hermes_lcm.engine"
    kernel.close()


def test_plugins_list_select_and_use(tmp_path):
    home = tmp_path / "home"
    listed = run(home, "plugins", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    lcm = {p["name"]: p for p in json.loads(listed.stdout)}["lcm"]
    assert lcm["status"] == "active" and lcm["distribution"] == "hermes-lcm"
    assert lcm["registered"] == {"context-engine": ["lcm"]}
    assert "hermes_register_context_engines" in lcm["hooks"]

    selected = run(home, "plugins", "select", "context-engine", "lcm")
    assert selected.returncode == 0, selected.stderr
    assert "context.engine" in selected.stdout
    kernel = Kernel(home=home, check_selection=False)
    assert kernel.selected("context-engine") == "lcm"
    assert not [e for e in kernel.selection_errors if e.kind == "context-engine"]
    engine = kernel.create("context-engine")
    assert engine.name == "lcm" and engine.db_path == home / "lcm.db"
    engine.update_model("m", 3_000)
    engine.on_session_start("cli-session")
    drive(engine, conversation(60, seed=31, fact_turn=2))
    engine.close()
    kernel.close()

    status = run(home, "lcm", "status", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["db_path"] == str(home / "lcm.db") and data["totals"]["messages"] > 100
    grep = run(home, "lcm", "grep", "password rotation")
    assert grep.returncode == 0 and FACT in grep.stdout and "cursor" in grep.stdout
    hit = json.loads(run(home, "lcm", "grep", "password rotation", "--json").stdout)["messages"][0]
    expand = run(home, "lcm", "expand", hit["expand"]["node_id"], "--cursor", hit["expand"]["cursor"],
                 "--max-chars", "300")
    assert expand.returncode == 0 and FACT in expand.stdout
    describe = run(home, "lcm", "describe", hit["node_id"])
    assert describe.returncode == 0 and f"{hit['node_id']}: leaf node" in describe.stdout
    missing = run(home, "lcm", "describe", "n99999")
    assert missing.returncode != 0 and "no node" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("name", ["compressor"])
def test_switching_back_is_a_config_edit(tmp_path, name):
    home = tmp_path / "home"
    assert run(home, "plugins", "select", "context-engine", "lcm").returncode == 0
    assert run(home, "plugins", "select", "context-engine", name).returncode == 0
    kernel = Kernel(home=home, check_selection=False)
    assert kernel.selected("context-engine") == name
    assert not [e for e in kernel.selection_errors if e.kind == "context-engine"]


def test_imports_only_public_hermes_names():
    import ast

    import hermes_lcm

    package = Path(hermes_lcm.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                if name == "hermes" or name.startswith("hermes."):
                    # Only the package itself, and the CLI helpers it documents for plugins.
                    assert name in ("hermes", "hermes.cli"), f"{path.name} imports {name}"
                    if name == "hermes.cli":
                        assert {a.name for a in node.names} <= {"pass_state", "echo_json"}
    import hermes

    used = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "hermes":
                used |= {a.name for a in node.names}
    assert used <= set(hermes.__all__), used - set(hermes.__all__)


def test_loading_the_plugin_is_cheap():
    code = ("import sys, hermes_lcm; "
            "print(sorted(m for m in ('hermes_lcm.engine', 'hermes_lcm.store', 'sqlite3', 'openai', 'click') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
