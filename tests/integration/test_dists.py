"""Real plugin distributions in a fresh virtual environment.

The fixture builds this project and the four distributions of ``tests/fixtures/dists/``
(one good, one whose import raises, one with a misspelled hook, one that registers the
engine name ``compressor`` a default plugin already has) into wheels, creates a virtual
environment *without* system site-packages, installs Hermes and three of them with pip,
and installs the good one with ``hermes plugins install``. The tests then run the real
``hermes`` console script of that environment.

Offline-friendly: Hermes' runtime dependencies are not downloaded but re-packed as wheels
from the distributions installed in the environment running the tests (their RECORD
lists their files), so pip resolves everything from a local wheelhouse with
``--no-index``. Only the build backend (setuptools, wheel) comes from PyPI's cache or
PyPI, once.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "dists"
FAILING = {"broken-import", "typo-hook", "dupe-engine"}


# -- building the environment -------------------------------------------------------


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions that ``requirements`` need, recursively."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonical(req.name)
        if name in seen:
            continue
        dist = metadata.distribution(req.name)
        seen[name] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return list(seen.values())


def repack(dist: metadata.Distribution, wheelhouse: Path) -> Path:
    """Write an installed distribution back into a wheel, from the files its RECORD lists
    (scripts are left out: pip writes them again from entry_points.txt)."""
    info = Path(dist._path)  # type: ignore[attr-defined]  # the .dist-info directory
    site = info.parent
    wheel_meta = (info / "WHEEL").read_text()
    tags = [line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")]
    parts = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
    tag = "-".join(".".join(p) for p in parts)
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    target = wheelhouse / f"{name}-{dist.version}-{tag}.whl"
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    rows = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for file in dist.files or []:
            rel = file.as_posix()
            path = (site / file).resolve()
            if rel.startswith("..") or "__pycache__" in rel or (
                    rel.startswith(info.name + "/") and file.name in skip) or not path.is_file():
                continue
            data = path.read_bytes()
            zf.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((rel, f"sha256={digest}", str(len(data))))
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows(rows + [(f"{info.name}/RECORD", "", "")])
        zf.writestr(f"{info.name}/RECORD", record.getvalue())
    return target


def pip(python: Path, *args: str, timeout: int = 300) -> str:
    done = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A fresh venv with Hermes and the fixture plugins installed; returns its bin dir."""
    base = tmp_path_factory.mktemp("dists")
    wheelhouse, src = base / "wheels", base / "src"
    wheelhouse.mkdir()

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dist in requirement_closure(project["dependencies"]):
        repack(dist, wheelhouse)

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # The build backend, for building this project and the fixtures without isolation.
    pip(python, "install", "-q", "setuptools>=68", "wheel")

    # Build from copies, so that nothing is written into the source tree.
    shutil.copytree(ROOT, src / "hermes-kernel", ignore=shutil.ignore_patterns(
        ".*", "__pycache__", "build", "*.egg-info", "tests", "contrib", "docs", "benchmarks"))
    for fixture in FIXTURES.iterdir():
        shutil.copytree(fixture, src / fixture.name, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    pip(python, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheelhouse),
        *(str(p) for p in sorted(src.iterdir())))

    pip(python, "install", "-q", "--no-compile", "--no-index", "--find-links", str(wheelhouse),
        "hermes-kernel", "hermes-broken-import", "hermes-typo-hook", "hermes-dupe-engine")
    bindir = venv / "bin"
    good = next(wheelhouse.glob("hermes_good_plugin-*.whl"))
    install = run(bindir, "plugins", "install", str(good), home=base / "install-home",
                  extra={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)})
    assert install.returncode == 0, install.stderr
    assert "Installed plugin(s): good." in install.stdout
    assert f"-m pip install {good}" in install.stderr, "pip's command and progress are shown"
    return bindir


def run(bindir: Path, *args: str, home: Path, extra: dict | None = None) -> subprocess.CompletedProcess:
    """The venv's `hermes`, in a clean environment (no HERMES_* switch, no PYTHONPATH)."""
    environ = {"PATH": f"{bindir}{os.pathsep}/usr/bin:/bin", "HOME": str(home.parent),
               "HERMES_HOME": str(home), "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(extra or {})}
    return subprocess.run([str(bindir / "hermes"), *args], capture_output=True, text=True,
                          env=environ, timeout=300)


@pytest.fixture
def hermes(env, tmp_path):
    home = tmp_path / "home"

    def call(*args: str, **switches: str) -> subprocess.CompletedProcess:
        return run(env, *args, home=home, extra=switches)

    call.home = home  # type: ignore[attr-defined]
    return call


def plugins(result: subprocess.CompletedProcess) -> dict[str, dict]:
    assert result.returncode == 0, result.stderr
    return {p["name"]: p for p in json.loads(result.stdout)}


# -- the tests -----------------------------------------------------------------------


def test_the_environment_is_isolated(env):
    done = subprocess.run([str(env / "python"), "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "True"
    cfg = (env.parent / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg


def test_list_json(hermes):
    result = hermes("plugins", "list", "--json")
    listed = plugins(result)
    assert set(listed) == {"good"} | FAILING, "only third-party plugins without --all"
    good = listed["good"]
    assert (good["distribution"], good["version"], good["source"], good["status"]) == (
        "hermes-good-plugin", "1.0.0", "entrypoint", "active")
    assert good["registered"] == {"context-engine": ["good-engine"], "tool": ["good_echo"]}
    assert good["hooks"] == ["hermes_register_commands", "hermes_register_context_engines",
                             "hermes_register_tools"]
    assert listed["broken-import"]["status"] == "failed"
    assert listed["broken-import"]["error"] == "ImportError: hermes-broken-import needs the 'libnothing' library"
    assert listed["typo-hook"]["status"] == "failed"
    assert "hermes_register_context_engine (did you mean hermes_register_context_engines?)" in (
        listed["typo-hook"]["error"])
    assert listed["dupe-engine"]["status"] == "failed"
    assert "context-engine 'compressor' is registered by two plugins: 'compressor' and 'dupe-engine'" in (
        listed["dupe-engine"]["error"])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("hermes: plugin ") for line in lines), lines
    assert "Traceback" not in result.stderr

    everything = plugins(hermes("plugins", "list", "--json", "--all"))
    assert everything["compressor"]["source"] == "default"
    assert everything["compressor"]["status"] == "active", "the default keeps its engine name"


def test_plugin_command_and_help(hermes):
    result = hermes("good-hello", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["hello"] == "good" and "good-engine" in data["engines"] and "compressor" in data["engines"]
    help_text = hermes("--help")
    assert help_text.returncode == 0 and "good-hello" in help_text.stdout


def test_info_shows_the_traceback(hermes):
    result = hermes("plugins", "info", "broken-import")
    assert result.returncode == 0
    assert "distribution: hermes-broken-import" in result.stdout
    assert "Traceback (most recent call last):" in result.stdout
    assert "hermes_broken_import/__init__.py" in result.stdout


def test_switches(hermes):
    only_good = plugins(hermes("plugins", "list", "--json", HERMES_LOAD_PLUGINS="good"))
    assert {n: p["status"] for n, p in only_good.items()} == {
        "good": "active", **{n: "blocked" for n in FAILING}}
    assert {p["status"] for p in plugins(hermes("plugins", "list", "--json", HERMES_LOAD_PLUGINS="")).values()} == {"blocked"}
    disabled = plugins(hermes("plugins", "list", "--json", HERMES_DISABLE_PLUGINS="broken-import,good"))
    assert disabled["broken-import"]["status"] == disabled["good"]["status"] == "blocked"
    defaults_off = plugins(hermes("plugins", "list", "--json", "--all", HERMES_DISABLE_PLUGINS="compressor"))
    assert defaults_off["compressor"]["status"] == "blocked"
    assert defaults_off["dupe-engine"]["status"] == "active", "with the default blocked, the name is free"
    traced = hermes("plugins", "list", "--json", HERMES_TRACE_PLUGINS="1", HERMES_LOAD_PLUGINS="good")
    assert "hermes trace: hermes_register_context_engines() -> [" in traced.stderr


def test_safe_mode(hermes):
    for result in (hermes("plugins", "list", "--json", HERMES_NO_PLUGINS="1"),
                   hermes("--no-plugins", "plugins", "list", "--json")):
        listed = plugins(result)
        assert {p["status"] for p in listed.values()} == {"blocked"}
        assert result.stderr == "", "nothing third-party was imported"
    doctor = hermes("--no-plugins", "doctor", "--json")
    assert json.loads(doctor.stdout)["plugins"]["failed"] == []


def test_strict_mode(hermes):
    listed = hermes("plugins", "list", "--json", HERMES_STRICT_PLUGINS="1")
    assert listed.returncode == 0, "listing always works"
    chat = hermes("chat", "-q", "hi", HERMES_STRICT_PLUGINS="1")
    assert chat.returncode == 1
    last = chat.stderr.strip().splitlines()[-1]
    assert last.startswith("hermes: error: plugin ") and "failed to" in last
    assert "Traceback" not in chat.stderr


def test_config_disable_and_enable(hermes):
    assert hermes("plugins", "disable", "typo-hook").returncode == 0
    assert plugins(hermes("plugins", "list", "--json"))["typo-hook"]["status"] == "blocked"
    assert hermes("plugins", "enable", "typo-hook").returncode == 0
    assert plugins(hermes("plugins", "list", "--json"))["typo-hook"]["status"] == "failed"


def test_select(hermes):
    config = hermes.home / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("# picked by hand\ncontext:\n  engine: compressor  # default\n")
    result = hermes("plugins", "select", "context-engine", "good-engine")
    assert result.returncode == 0, result.stderr
    assert "Selected context-engine 'good-engine' (from plugin good)" in result.stdout
    assert config.read_text() == "# picked by hand\ncontext:\n  engine: good-engine  # default\n"
    before = config.read_bytes()
    refused = hermes("plugins", "select", "context-engine", "never-registered")
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("hermes: error: unknown context-engine 'never-registered'. Choose one of: ")
    assert "compressor" in last and "good-engine" in last
    assert config.read_bytes() == before
    doctor = json.loads(hermes("doctor", "--json").stdout)
    assert doctor["selected"]["context-engine"] == {"name": "good-engine", "plugin": "good"}


def test_uninstall_the_broken_plugin(hermes, env):
    """Last: it changes the environment. Works although the plugin cannot be imported."""
    result = hermes("plugins", "uninstall", "broken-import", "-y")
    assert result.returncode == 0, result.stderr
    assert "Successfully uninstalled hermes-broken-import" in result.stdout
    listed = plugins(hermes("plugins", "list", "--json"))
    assert "broken-import" not in listed and listed["good"]["status"] == "active"
    also_safe = hermes("--no-plugins", "plugins", "uninstall", "typo-hook", "-y")
    assert also_safe.returncode == 0 and "Successfully uninstalled hermes-typo-hook" in also_safe.stdout
