"""Private by default: real files, real modes, the real CLI. A home Hermes creates is
0700 with memories/ 0700; the session database (with its WAL and SHM), memory files,
exports and the log file are 0600; `hermes config show` masks secrets; `hermes doctor`
warns about a home or .env other users can read; the log file is redacted and rotates."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import hermes
from hermes.testing.fakellm import Reply
from hermes.testing.stubs import StubMemoryProvider, memory_provider_plugin

HERMES = Path(sys.executable).with_name("hermes")
SECRET = "sk-proj-" + "Q7w" * 14


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def hermes_cli(home: Path, *args: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMES_HOME": str(home), "HERMES_LOAD_PLUGINS": ""}
    preexec = (lambda: os.umask(umask)) if umask is not None else None  # the child's, not ours
    return subprocess.run([str(HERMES), *args], env=env, capture_output=True, text=True, timeout=60,
                          preexec_fn=preexec)


def test_a_home_hermes_creates_is_private_even_with_a_permissive_umask(tmp_path: Path) -> None:
    home = tmp_path / "new" / "hermes-home"
    result = hermes_cli(home, "config", "show", umask=0)
    assert result.returncode == 0, result.stderr
    assert mode(home) == 0o700
    assert mode(home / "memories") == 0o700
    assert mode(home.parent) == 0o777  # parents are the user's business: umask 0 applies


def test_an_existing_home_keeps_its_mode(tmp_path: Path) -> None:
    home = tmp_path / "mine"
    home.mkdir(mode=0o750)
    os.chmod(home, 0o750)
    hermes.Kernel(home=home, autoload=False).close()
    assert mode(home) == 0o750


def test_conversation_files_are_0600(tmp_path: Path, fake_llm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes.runtime.agent import Agent

    home = tmp_path / "fresh-home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    cfg = fake_llm.config(provider="openai")
    cfg["memory"] = {"nudge_interval": 0}
    kernel = hermes.Kernel(config=cfg, home=home, autoload=False)
    try:
        if "sqlite" not in kernel.registries.session_stores:
            pytest.skip("no session store registered")
        agent = Agent(kernel, memory_review=False)
        fake_llm.queue(Reply(tool_calls=[{"name": "memory", "arguments": {
            "action": "add", "target": "user", "content": "Prefers metric units"}}]), Reply(text="Noted."))
        assert agent.run_turn("I prefer metric units, remember that.").status == "ok"
        db = home / "state.db"
        wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
        assert wal.exists() and shm.exists(), "WAL mode keeps these while the database is open"
        files = {"state.db": db, "state.db-wal": wal, "state.db-shm": shm,
                 "USER.md": home / "memories" / "USER.md"}
        modes = {name: oct(mode(path)) for name, path in files.items()}
        assert modes == {name: "0o600" for name in files}
        agent.close()
    finally:
        kernel.close()
    export = tmp_path / "export.jsonl"
    result = hermes_cli(home, "sessions", "export", "--all", "--output", str(export))
    assert result.returncode == 0, result.stderr
    assert export.read_text() and mode(export) == 0o600
    assert mode(home) == 0o700 and mode(home / "memories") == 0o700


def test_config_show_masks_secret_looking_values(hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text(
        f"model:\n  api_key: {SECRET}\n  base_url: https://me:hunter2pass@llm.internal/v1\n"
        "plugins:\n  mem0:\n    api_key: {$env: MEM0_API_KEY}\n    user_token: plain-token-value\n"
        "  notes:\n    comment: my password is Tr0ub4dor&3\n", encoding="utf-8")
    for args in (("config", "show"), ("config", "show", "--json")):
        result = hermes_cli(hermes_home, *args)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        for secret in (SECRET, "hunter2pass", "plain-token-value", "Tr0ub4dor&3"):
            assert secret not in out, (args, secret)
        assert "MEM0_API_KEY" in out  # a reference names the variable; it stays visible
        assert "[REDACTED]" in out and "max_tokens" in out
    data = json.loads(hermes_cli(hermes_home, "config", "show", "--json").stdout)
    assert data["model"]["api_key"] == "[REDACTED]"
    assert data["model"]["base_url"] == "https://me:[REDACTED]@llm.internal/v1"
    assert data["plugins"]["mem0"]["api_key"] == {"$env": "MEM0_API_KEY"}


def test_doctor_warns_about_a_readable_home_and_env_with_the_fix(hermes_home: Path) -> None:
    env = hermes_home / ".env"
    env.write_text(f"OPENAI_API_KEY={SECRET}\n", encoding="utf-8")
    os.chmod(hermes_home, 0o755)
    os.chmod(env, 0o644)
    result = hermes_cli(hermes_home, "doctor")
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert any(str(hermes_home) in w and "other users" in w and f"chmod 700 {hermes_home}" in w
               for w in warnings), result.stdout
    assert any(f"chmod 600 {env}" in w for w in warnings), result.stdout
    assert SECRET not in result.stdout + result.stderr
    report = json.loads(hermes_cli(hermes_home, "doctor", "--json").stdout)
    assert len(report["warnings"]) == 2
    os.chmod(hermes_home, 0o700)
    os.chmod(env, 0o600)
    fixed = hermes_cli(hermes_home, "doctor")
    assert "warning:" not in fixed.stdout, fixed.stdout


def test_doctor_names_group_readable_separately(hermes_home: Path) -> None:
    os.chmod(hermes_home, 0o750)
    result = hermes_cli(hermes_home, "doctor")
    assert f"{hermes_home} can be read by its group (mode 0750)" in result.stdout


class FailingProvider(StubMemoryProvider):
    name = "failing"  # type: ignore[assignment]

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "") -> None:
        raise RuntimeError(f"backend refused the key {SECRET} (401)")


def test_the_log_file_is_written_redacted_and_private(kernel_factory: Any, hermes_home: Path) -> None:
    from hermes.runtime.memory_manager import MemoryManager

    kernel = kernel_factory(config={"memory": {"provider": "failing"}})
    kernel.register_plugin(memory_provider_plugin(FailingProvider()))
    manager = MemoryManager(kernel)
    manager.initialize("s1")
    manager.sync_turn("hello", "world")
    manager.shutdown(timeout=5)
    log_file = hermes_home / "logs" / "hermes.log"
    text = log_file.read_text(encoding="utf-8")
    assert "memory provider 'failing' failed in sync_turn" in text
    assert "backend refused the key sk-proj-[REDACTED]" in text
    assert "Traceback" in text and SECRET not in text  # the traceback is redacted too
    assert mode(log_file) == 0o600 and mode(log_file.parent) == 0o700


def test_the_log_file_rotates_and_every_file_stays_private(kernel_factory: Any, hermes_home: Path) -> None:
    kernel_factory(config={"logging": {"level": "INFO", "max_bytes": 2048, "backup_count": 2}})
    log = logging.getLogger("hermes.test")
    for i in range(200):
        log.info("record %d with token=%s", i, "aB3dE5fG7hJ9kL1mN3pQ")
    files = sorted((hermes_home / "logs").iterdir())
    assert [f.name for f in files] == ["hermes.log", "hermes.log.1", "hermes.log.2"]
    assert all(mode(f) == 0o600 for f in files)
    assert all("aB3dE5fG7hJ9kL1mN3pQ" not in f.read_text() for f in files)
    assert "record 199 with token=[REDACTED]" in files[0].read_text()


def test_close_detaches_the_log_file(kernel_factory: Any, hermes_home: Path) -> None:
    logger = logging.getLogger("hermes")
    before = list(logger.handlers)
    kernel = kernel_factory(config={"logging": {"level": "INFO"}})
    assert len(logger.handlers) == len(before) + 1
    assert logger.getEffectiveLevel() <= logging.INFO
    kernel.close()
    kernel.close()  # twice is harmless
    assert logger.handlers == before
    logging.getLogger("hermes.test").warning("after close")
    assert not (hermes_home / "logs").exists(), "nothing written after close"


def test_level_off_writes_no_file(kernel_factory: Any, hermes_home: Path) -> None:
    logger = logging.getLogger("hermes")
    before = list(logger.handlers)
    kernel_factory(config={"logging": {"level": "OFF"}})
    logging.getLogger("hermes.test").error("not written")
    assert logger.handlers == before and not (hermes_home / "logs").exists()


def test_warnings_still_reach_stderr_from_the_cli(tmp_path: Path) -> None:
    # The log handler must not swallow what Python's last-resort handler printed before.
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text("memory:\n  provider: nonexistent-provider\n", encoding="utf-8")
    code = ("import hermes; from hermes.runtime.memory_manager import MemoryManager; "
            "k = hermes.Kernel(autoload=False, check_selection=False, strict=True); MemoryManager(k); "
            "k.close()")  # strict: no built-in fallback, so the manager logs the failure
    env = {**os.environ, "HERMES_HOME": str(home)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "nonexistent-provider" in result.stderr, result.stderr
    assert "nonexistent-provider" in (home / "logs" / "hermes.log").read_text()


def test_no_code_changes_the_process_umask() -> None:
    root = Path(hermes.__file__).parent
    offenders = [str(p) for p in root.rglob("*.py") if "os.umask(" in p.read_text(encoding="utf-8")]
    assert offenders == []
