"""``context.engine`` naming an engine that is not installed falls back to the built-in
``compressor`` with a one-line warning (Hermes Agent's rule); strict mode keeps the error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hermes

HERMES = [sys.executable, "-m", "hermes.cli"]


def test_missing_engine_falls_back_to_the_compressor(kernel_factory, capsys):
    kernel = kernel_factory(config={"context": {"engine": "t-not-installed"}}, check_selection=True)
    capsys.readouterr()
    engine = kernel.create("context-engine")
    assert engine.name == "compressor"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "t-not-installed" in err[0] and "compressor" in err[0] and "--strict" in err[0]
    kernel.create("context-engine")  # warned once per kernel
    assert capsys.readouterr().err == ""
    # the diagnosis still names it (config validate, doctor)
    assert [e.name for e in kernel.config_problems] == ["t-not-installed"]


def test_strict_keeps_the_error(kernel_factory):
    with pytest.raises(hermes.UnknownPluginError, match="unknown context-engine 't-not-installed'"):
        kernel_factory(config={"context": {"engine": "t-not-installed"}}, check_selection=True,
                       strict=True)


def test_a_missing_llm_client_still_fails_at_start(kernel_factory):
    # no fallback: another provider's client would be sent a model name it does not serve
    with pytest.raises(hermes.UnknownPluginError, match="unknown llm"):
        kernel_factory(config={"model": {"provider": "t-nope"}}, check_selection=True)


def test_a_missing_session_store_falls_back_to_sqlite_unless_strict(kernel_factory, capsys):
    kernel = kernel_factory(config={"sessions": {"store": "t-nope"}}, check_selection=True)
    assert type(kernel.session_store).__name__ == type(kernel_factory().session_store).__name__
    assert "sessions.store 't-nope'" in capsys.readouterr().err
    with pytest.raises(hermes.UnknownPluginError, match="unknown session-store"):
        kernel_factory(config={"sessions": {"store": "t-nope"}}, check_selection=True, strict=True)


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "HERMES_STRICT_PLUGINS")}
    env["HERMES_HOME"] = str(home)
    return subprocess.run(HERMES + args, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow  # hermes processes; the in-process fallback tests stay fast
def test_chat_falls_back_and_strict_refuses(tmp_path, fake_llm):
    (tmp_path / "config.yaml").write_text("context:\n  engine: t-not-installed\n")
    flags = ["--provider", "openai", "--base-url", fake_llm.openai_url, "--model", "fake-model"]
    proc = _run(["chat", *flags, "-q", "hello"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "echo: hello"
    warnings = [line for line in proc.stderr.splitlines() if "t-not-installed" in line]
    assert len(warnings) == 1 and "compressor" in warnings[0], proc.stderr
    strict = _run(["--strict", "chat", *flags, "-q", "hello"], tmp_path)
    assert strict.returncode == 1
    assert "unknown context-engine 't-not-installed'" in strict.stderr
    assert "Traceback" not in strict.stderr
