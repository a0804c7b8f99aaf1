"""`hermes plugins new NAME`: the scaffolded distribution passes its own tests as
generated — through a dist-info on PYTHONPATH (fast), and installed with
`pip install -e` in a fresh virtual environment (slow)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner

import hermes
from hermes.cli import cli


def new(tmp_path: Path, name: str):
    return CliRunner().invoke(cli, ["plugins", "new", name, "--dir", str(tmp_path)])


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_") and k != "PYTHONPATH"}
    env.update(HERMES_STRICT_PLUGINS="1", **extra)
    return env


def test_scaffold_layout_and_refusals(tmp_path: Path) -> None:
    result = new(tmp_path, "weather-notes")
    assert result.exit_code == 0, result.output
    root = tmp_path / "hermes-weather-notes"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "README.md", "hermes_weather_notes/__init__.py", "pyproject.toml",
        "tests/test_weather_notes.py"]
    pyproject = (root / "pyproject.toml").read_text()
    assert '[project.entry-points."hermes.plugins"]\nweather-notes = "hermes_weather_notes"' in pyproject
    assert "MemoryProviderConformance" in (root / "tests/test_weather_notes.py").read_text()
    # nothing is overwritten; a bad name is a usage error
    before = (root / "pyproject.toml").read_text()
    again = new(tmp_path, "weather-notes")
    assert again.exit_code == 1 and "already exists" in again.output
    assert (root / "pyproject.toml").read_text() == before
    bad = new(tmp_path, "Weather Notes!")
    assert bad.exit_code == 2 and "not a usable plugin name" in bad.output


@pytest.mark.slow  # runs a pytest session of its own
def test_generated_tests_pass_through_a_dist_info(tmp_path: Path) -> None:
    assert new(tmp_path, "recallx").exit_code == 0
    root = tmp_path / "hermes-recallx"
    site = tmp_path / "site"
    hermes.testing.make_distribution(site, "hermes-recallx", plugins={"recallx": "hermes_recallx"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root)],
                          capture_output=True, text=True, cwd=root, timeout=300,
                          env=clean_env(PYTHONPATH=f"{site}{os.pathsep}{root}"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "skipped" not in done.stdout


@pytest.mark.slow
def test_generated_distribution_installs_with_pip_and_passes_its_tests(tmp_path: Path) -> None:
    assert new(tmp_path, "notes").exit_code == 0
    root = tmp_path / "hermes-notes"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"

    def pip(*args: str) -> None:
        done = subprocess.run([str(python), "-m", "pip", "-q", *args], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr

    pip("install", "setuptools>=68", "wheel")  # the build backend (local wheelhouse, offline)
    # Hermes and pytest come from the environment running this test: its site-packages are
    # added (with their .pth files, for the editable Hermes) instead of installing again.
    venv_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
    here = sysconfig.get_paths()["purelib"]
    Path(venv_site, "outer-site.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(root))
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root,
                          capture_output=True, text=True, timeout=300, env=clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "skipped" not in done.stdout
    listed = subprocess.run([str(python), "-m", "hermes.cli", "plugins", "list"], capture_output=True,
                            text=True, timeout=120, env=clean_env(HERMES_HOME=str(tmp_path / "home")))
    assert "notes  [hermes-notes 0.1.0]  entrypoint  active" in listed.stdout, listed.stdout + listed.stderr
