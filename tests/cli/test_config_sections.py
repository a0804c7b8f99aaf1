"""`hermes config validate` and top-level sections that belong to a plugin: a section an
installed, loaded plugin declares (``hermes_config_sections``) is known, so it is not
reported as unknown; a section nobody declares still gets the warning (usually a typo).
Real `hermes` processes: the installed hermes-mcp plugin and a local plugin file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

LOCAL = """
import hermes

hermes_config_sections = ("t_widgets",)

@hermes.hookimpl
def hermes_register_commands(cli):
    pass
"""


def validate(home: Path, config: str, **env_extra: str) -> subprocess.CompletedProcess:
    (home / "config.yaml").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), **env_extra)
    return subprocess.run([sys.executable, "-m", "hermes.cli", "config", "validate"],
                          capture_output=True, text=True, env=env, timeout=120)


def warned(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if "unknown top-level section" in line]


def test_a_section_a_loaded_local_plugin_declares_is_known(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "t_widgets_plugin.py").write_text(LOCAL)
    proc = validate(tmp_path, "t_widgets:\n  size: 3\nt_widgetz:\n  size: 3\n",
                    HERMES_LOAD_PLUGINS="t_widgets_plugin")
    assert proc.returncode == 0, proc.stderr
    lines = warned(proc)
    assert len(lines) == 1 and "section 't_widgetz'" in lines[0], proc.stderr
    assert "did you mean 't_widgets'" in lines[0]  # the hint knows plugin sections too
    # the plugin not loaded (blocked for this run): nothing declares the section
    blocked = validate(tmp_path, "t_widgets:\n  size: 3\n", HERMES_LOAD_PLUGINS="t_widgets_plugin",
                       HERMES_DISABLE_PLUGINS="t_widgets_plugin")
    assert any("section 't_widgets'" in line for line in warned(blocked)), blocked.stderr


def test_mcp_servers_is_known_when_hermes_mcp_is_installed(tmp_path):
    pytest.importorskip("hermes_mcp")
    proc = validate(tmp_path, "mcp_servers: {}\nmcp_servrs: {}\n", HERMES_LOAD_PLUGINS="mcp")
    assert proc.returncode == 0, proc.stderr
    lines = warned(proc)
    assert not any("section 'mcp_servers'" in line for line in lines), proc.stderr
    assert any("section 'mcp_servrs'" in line for line in lines), proc.stderr
