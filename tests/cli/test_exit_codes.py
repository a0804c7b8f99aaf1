"""One exit-status rule for every command (docs/cli.md): 0 ok, 1 the command ran and
failed, 2 a usage or configuration error. Swept over real `hermes` processes, each case
also checked for a one-line, traceback-free message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

OK, FAILURE, USAGE = 0, 1, 2
BROKEN_CONFIG = "model:\n  timeout: abc\n"
MEM0_SELECTED = "memory:\n  provider: mem0\n"

# (arguments, config.yaml text, expected status)
CASES = [
    (["--version"], "", OK),
    (["--help"], "", OK),
    (["config", "show"], "", OK),
    (["config", "validate"], "", OK),
    (["memory", "show"], "", OK),
    (["memory", "status"], "", OK),
    (["sessions", "list"], "", OK),
    (["plugins", "list"], "", OK),
    (["prompt", "show"], "", OK),
    # usage errors
    (["no-such-command"], "", USAGE),
    (["chat", "--no-such-option"], "", USAGE),
    (["plugins", "enable"], "", USAGE),
    (["sessions", "list", "--limit", "many"], "", USAGE),
    (["memory", "add"], "", USAGE),
    (["chat", "-c", "-r", "x", "-q", "hi"], "", USAGE),
    # configuration errors
    (["chat", "-q", "hi"], "", USAGE),  # no credentials
    (["config", "validate"], BROKEN_CONFIG, USAGE),
    (["config", "show"], BROKEN_CONFIG, USAGE),
    (["sessions", "list"], BROKEN_CONFIG, USAGE),
    (["memory", "status"], BROKEN_CONFIG, USAGE),
    # the command ran and failed
    (["memory", "status"], MEM0_SELECTED, FAILURE),  # the selected provider cannot run
    (["sessions", "show", "no-such-session"], "", FAILURE),
    (["plugins", "info", "no-such-plugin"], "", FAILURE),
    (["plugins", "select", "context-engine", "no-such-engine"], "", FAILURE),
    (["memory", "remove", "--old", "text that is not there"], "", FAILURE),
    (["sessions", "export", "--all", "-o", "/nonexistent-dir/x.jsonl"], "", FAILURE),
    (["doctor"], "", FAILURE),  # no credentials is a problem doctor reports
]


#: One case of each kind runs in the fast target (`-m "not slow"`); all run in the full suite.
FAST = {(("--version",), ""), (("chat", "--no-such-option"), ""), (("chat", "-q", "hi"), ""),
        (("sessions", "show", "no-such-session"), ""), (("memory", "status"), MEM0_SELECTED),
        (("config", "validate"), BROKEN_CONFIG)}
PARAMS = [pytest.param(a, c, e, id=" ".join(a) + (" [config]" if c else ""),
                       marks=() if (tuple(a), c) in FAST else pytest.mark.slow)
          for a, c, e in CASES]


@pytest.mark.parametrize(("args", "config", "expected"), PARAMS)
def test_exit_status_rule(tmp_path: Path, args: list[str], config: str, expected: int) -> None:
    home = tmp_path / "home"
    home.mkdir()
    if config:
        (home / "config.yaml").write_text(config)
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "MEM0_API_KEY")}
    env["HERMES_HOME"] = str(home)
    proc = subprocess.run([sys.executable, "-m", "hermes.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == expected, f"{args}: {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    if expected == FAILURE and "doctor" not in args and "status" not in args:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("hermes:")]
        assert len(errors) == 1, proc.stderr


def test_memory_cli_messages_are_written_for_a_person(tmp_path: Path) -> None:
    """The store's wording for the model (a retry budget, the tool's 'operations'
    parameter) stays in the tool; the CLI says what a person does next."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("memory:\n  memory_char_limit: 40\n")
    env = {**os.environ, "HERMES_HOME": str(home)}

    def hermes(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hermes.cli", *args], capture_output=True,
                              text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)

    missing = hermes("memory", "remove", "--old", "never said")
    assert missing.returncode == FAILURE
    assert "retry once" not in missing.stderr and "hermes memory show" in missing.stderr
    assert hermes("memory", "add", "The user prefers tea.").returncode == OK
    full = hermes("memory", "add", "The user deploys on Fridays with Kubernetes.")
    assert full.returncode == FAILURE
    assert "'operations'" not in full.stderr and "hermes memory remove" in full.stderr
