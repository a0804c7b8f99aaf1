"""The plugin itself: loaded by every `hermes` command, so it must stay cheap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mcp_helpers import clean_env


def test_hermes_help_lists_mcp_without_importing_the_sdk(tmp_path: Path) -> None:
    code = ("import sys\nfrom hermes.cli import cli\n"
            "try:\n    cli(['--help'], standalone_mode=False)\nfinally:\n"
            "    heavy = sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'asyncio', 'uvicorn')))\n"
            "    print('HEAVY', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=clean_env(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "  mcp " in proc.stdout  # the command group is there
    assert "HEAVY []" in proc.stdout, proc.stdout
