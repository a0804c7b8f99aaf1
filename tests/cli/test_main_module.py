"""``python -m hermes`` is the ``hermes`` command (for a venv without the script on
PATH, ``pipx run``, ``python -m`` habits): same commands, same exit status, and just as
cheap to start (no SDK or terminal library imported for ``--help``)."""

from __future__ import annotations

import os
import subprocess
import sys

import hermes


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_HOME"] = str(tmp_path)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120)


def test_python_m_hermes_is_the_hermes_command(tmp_path):
    proc = run(tmp_path, "-m", "hermes", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"hermes {hermes.__version__}"
    usage = run(tmp_path, "-m", "hermes", "no-such-command")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_python_m_hermes_help_is_cheap(tmp_path):
    proc = run(tmp_path, "-X", "importtime", "-m", "hermes", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "chat" in proc.stdout and "sessions" in proc.stdout
    imported = proc.stderr
    for heavy in ("anthropic", "openai", "prompt_toolkit", "hermes.runtime.chat"):
        assert f" {heavy}\n" not in imported and f" {heavy}." not in imported, heavy
