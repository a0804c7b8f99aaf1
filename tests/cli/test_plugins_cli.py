"""`hermes plugins …` and `hermes doctor`, driven through the real click group (CliRunner)
and, where the process matters (exit status, stderr, concurrency), through the installed
``hermes`` console script. Plugins are real installed distributions (dist-info with entry
points) in a directory on the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes.cli import CLIState, cli
from hermes.testing import make_distribution

HERMES = Path(sys.executable).with_name("hermes")

GOOD = """
import hermes

class Engine(hermes.ContextEngine):
    \"\"\"Keeps every message.\"\"\"
    name = "t-good-engine"
    def update_from_response(self, usage): pass
    def should_compress(self, prompt_tokens=None): return False
    def compress(self, messages, **kw): return list(messages)

@hermes.hookimpl
def hermes_register_context_engines(register):
    register("t-good-engine", Engine)

@hermes.hookimpl
def hermes_register_tools(register):
    register(hermes.Tool(name="t_good_tool", schema={"description": "a tool"},
                         handler=lambda args, ctx: "ok"))
"""

BROKEN = "import hermes\nraise ImportError('t-broken needs libmissing')\n"

TYPO = """
import hermes

@hermes.hookimpl
def hermes_register_tool(register):
    pass
"""

# Claims the engine name of the default `compressor` plugin, which registers first: the
# order of two third-party plugins is undefined, the defaults always come first.
DUPE = """
import hermes

@hermes.hookimpl
def hermes_register_context_engines(register):
    register("compressor", lambda: None)
"""

OURS = "t-good,t-broken,t-typo,t-dupe"


@pytest.fixture
def site(hermes_home, tmp_path, monkeypatch):
    """Four installed plugin distributions, visible in-process and to subprocesses; only
    they load (HERMES_LOAD_PLUGINS), whatever else is installed in this environment."""
    site = tmp_path / "site"
    make_distribution(site, "hermes-t-good", version="1.2", plugins={"t-good": "t_good"},
                      modules={"t_good.py": GOOD})
    make_distribution(site, "hermes-t-broken", version="0.1", plugins={"t-broken": "t_broken"},
                      modules={"t_broken.py": BROKEN})
    make_distribution(site, "hermes-t-typo", plugins={"t-typo": "t_typo"}, modules={"t_typo.py": TYPO})
    make_distribution(site, "hermes-t-dupe", plugins={"t-dupe": "t_dupe"}, modules={"t_dupe.py": DUPE})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", OURS)
    yield site
    for name in ("t_good", "t_broken", "t_typo", "t_dupe"):
        sys.modules.pop(name, None)


def run(*args: str, **env: str):
    """Run the click group in-process; stdout and stderr are kept apart."""
    for key, value in env.items():
        os.environ[key] = value
    try:
        return CliRunner().invoke(cli, list(args))
    finally:
        for key in env:
            os.environ.pop(key, None)


def hermes(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run the real console script."""
    return subprocess.run([str(HERMES), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def listed(result, *, everything: bool = False) -> dict[str, dict]:
    """The plugins of a `list --json`: this test's (``t-*``), or with ``everything`` all
    of them (defaults and whatever else is installed in this environment)."""
    assert result.exit_code == 0, result.output
    return {p["name"]: p for p in json.loads(result.stdout) if everything or p["name"].startswith("t-")}


# -- list ----------------------------------------------------------------------------


def test_list_json_reports_every_state(site, hermes_home):
    result = run("plugins", "list", "--json")
    plugins = listed(result)
    good = plugins["t-good"]
    assert good == {
        "name": "t-good", "distribution": "hermes-t-good", "version": "1.2", "source": "entrypoint",
        "status": "active", "module": "t_good", "path": None,
        "hooks": ["hermes_register_context_engines", "hermes_register_tools"],
        "registered": {"context-engine": ["t-good-engine"], "tool": ["t_good_tool"]},
        "blocked_by": None, "error": None}
    assert plugins["t-broken"]["status"] == "failed"
    assert plugins["t-broken"]["error"] == "ImportError: t-broken needs libmissing"
    assert plugins["t-typo"]["status"] == "failed"
    assert "hermes_register_tool (did you mean hermes_register_tools?)" in plugins["t-typo"]["error"]
    assert plugins["t-dupe"]["status"] == "failed"
    assert "context-engine 'compressor' is registered by two plugins: 'compressor' and 't-dupe'" in (
        plugins["t-dupe"]["error"])
    assert all(p["source"] != "default" for p in plugins.values()), "defaults only with --all"
    # One line per failure on stderr, naming the plugin and the fix.
    failures = [line for line in result.stderr.splitlines() if line.startswith("hermes: plugin t-")]
    assert len(failures) == 3
    assert any(line.startswith("hermes: plugin t-broken (hermes-t-broken 0.1) failed to load: ImportError")
               and line.endswith("`hermes plugins disable t-broken` to skip it.") for line in failures)


def test_list_all_and_hook_filter(site, hermes_home):
    everything = listed(run("plugins", "list", "--json", "--all"), everything=True)
    assert {p["source"] for p in everything.values()} >= {"default", "entrypoint"}
    tools = listed(run("plugins", "list", "--json", "--all", "--hook", "hermes_register_tools"))
    assert "t-good" in tools and all("hermes_register_tools" in p["hooks"] for p in tools.values())


def test_list_human_output(site, hermes_home):
    result = run("plugins", "list")
    assert result.exit_code == 0
    out = result.stdout
    assert "t-good  [hermes-t-good 1.2]  entrypoint  active" in out
    assert "  context-engine: t-good-engine" in out and "  tool: t_good_tool" in out
    assert "t-broken  [hermes-t-broken 0.1]  entrypoint  failed\n  error: ImportError: t-broken needs libmissing" in out


def test_list_with_nothing_third_party(hermes_home, monkeypatch):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "")
    result = run("plugins", "list")
    assert result.exit_code == 0
    assert "No third-party plugins installed" in result.stdout or "blocked" in result.stdout


# -- switches from the command line ---------------------------------------------------


def test_safe_mode_flag_and_env(site, hermes_home):
    for args, env in ((["--no-plugins"], {}), ([], {"HERMES_NO_PLUGINS": "1"})):
        plugins = listed(run(*args, "plugins", "list", "--json", **env))
        assert {p["status"] for p in plugins.values()} == {"blocked"}
        assert all(p["blocked_by"].startswith("safe mode") for p in plugins.values())


def test_disable_and_load_flags(site, hermes_home):
    plugins = listed(run("-p", "t-good", "--disable", "t-typo,t-dupe", "plugins", "list", "--json"))
    assert {n: p["status"] for n, p in plugins.items()} == {
        "t-good": "blocked", "t-broken": "failed", "t-typo": "blocked", "t-dupe": "blocked"}
    plugins = listed(run("--load", "t-good", "plugins", "list", "--json"))
    assert {n: p["status"] for n, p in plugins.items()}["t-good"] == "active"
    assert {p["status"] for n, p in plugins.items() if n != "t-good"} == {"blocked"}
    plugins = listed(run("--load", "", "plugins", "list", "--json"))
    assert {p["status"] for p in plugins.values()} == {"blocked"}, "--load '' loads none"


def test_strict_mode_never_locks_out_list_but_refuses_a_strict_kernel(site, hermes_home):
    result = run("--strict", "plugins", "list", "--json")
    assert listed(result)["t-broken"]["status"] == "failed"
    state = CLIState(str(hermes_home), False, (), None, True, False)
    with pytest.raises(Exception, match=r"^strict mode: plugin .* failed to"):
        state.strict_kernel()


def test_trace_flag(site, hermes_home):
    result = run("--trace", "--load", "t-good", "plugins", "list", "--json")
    assert "hermes trace: hermes_register_context_engines() -> [" in result.stderr
    assert "t-good" in result.stderr


# -- info ----------------------------------------------------------------------------


def test_info_shows_the_traceback_of_a_failure(site, hermes_home):
    result = run("plugins", "info", "t-broken")
    assert result.exit_code == 0, result.output
    assert "status: failed" in result.stdout and "distribution: hermes-t-broken" in result.stdout
    assert "Traceback (most recent call last):" in result.stdout
    assert "t_broken.py" in result.stdout and "ImportError: t-broken needs libmissing" in result.stdout
    data = json.loads(run("plugins", "info", "hermes-t-broken", "--json").stdout)
    assert data["name"] == "t-broken" and "Traceback" in data["traceback"]


def test_info_of_an_unknown_plugin(site, hermes_home):
    result = run("plugins", "info", "t-nope")
    assert result.exit_code == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("hermes: error: no plugin named 't-nope'. Installed plugins: ")
    assert "t-good" in line


def test_info_in_safe_mode(site, hermes_home):
    result = run("--no-plugins", "plugins", "info", "t-good")
    assert result.exit_code == 0 and "status: blocked" in result.stdout


# -- enable / disable / select --------------------------------------------------------

CONFIG = """\
# my Hermes config
context:
  engine: compressor   # the default

plugins:
  disabled: []   # nothing off yet
"""


def test_disable_then_enable_keep_comments(site, hermes_home):
    path = hermes_home / "config.yaml"
    path.write_text(CONFIG)
    result = run("plugins", "disable", "t-good")
    assert result.exit_code == 0 and f"Disabled t-good ({path})" in result.stdout
    assert path.read_text() == CONFIG.replace("disabled: []", "disabled: [t-good]")
    assert listed(run("plugins", "list", "--json"))["t-good"]["blocked_by"] == (
        "disabled in config (plugins.disabled)")
    assert "already disabled" in run("plugins", "disable", "t-good").stdout
    result = run("plugins", "enable", "t-good")
    assert result.exit_code == 0 and path.read_text() == CONFIG
    assert "t-good is not disabled in config." in run("plugins", "enable", "t-good").stdout


def test_disable_a_default_plugin_and_an_unknown_name(site, hermes_home):
    default = next(p for p in listed(run("plugins", "list", "--json", "--all"), everything=True).values()
                   if p["source"] == "default")["name"]
    assert run("plugins", "disable", default).exit_code == 0
    assert listed(run("plugins", "list", "--json", "--all"), everything=True)[default]["status"] == "blocked"
    result = run("plugins", "disable", "t-ghost")
    assert result.exit_code == 0 and "no plugin named 't-ghost' is installed" in result.stderr


def test_enable_explains_a_block_from_the_environment(site, hermes_home):
    result = run("-p", "t-good", "plugins", "enable", "t-good")
    assert "t-good is not disabled in config. It is blocked by: disabled by HERMES_DISABLE_PLUGINS" in result.stdout


def test_select_writes_config_keeping_comments(site, hermes_home):
    path = hermes_home / "config.yaml"
    path.write_text(CONFIG)
    result = run("plugins", "select", "context-engine", "t-good-engine")
    assert result.exit_code == 0, result.output
    assert "Selected context-engine 't-good-engine' (from plugin t-good)" in result.stdout
    assert path.read_text() == CONFIG.replace("engine: compressor   # the default",
                                              "engine: t-good-engine   # the default")


def test_select_refuses_unknown_names_and_leaves_the_file_alone(site, hermes_home):
    path = hermes_home / "config.yaml"
    path.write_text(CONFIG)
    before = path.read_bytes()
    result = run("plugins", "select", "context-engine", "t-missing")
    assert result.exit_code == 1
    line = result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.output
    assert line.startswith("hermes: error: unknown context-engine 't-missing'. Choose one of: ")
    assert "t-good-engine" in line
    assert path.read_bytes() == before
    result = run("plugins", "select", "engine", "x")
    assert result.exit_code == 2 and "'engine' is not one of 'llm', 'session-store', 'memory-provider', 'context-engine'" in result.stderr
    assert path.read_bytes() == before


def test_writes_refused_on_malformed_config(site, hermes_home):
    path = hermes_home / "config.yaml"
    path.write_text("plugins:\n  disabled: [a\n")
    before = path.read_bytes()
    for args in (("plugins", "disable", "t-good"), ("plugins", "select", "context-engine", "t-good-engine"),
                 ("plugins", "enable", "a")):
        result = run(*args)
        assert result.exit_code == 2
        assert f"hermes: error: {path}, line " in result.stderr and "malformed YAML" in result.stderr
        assert path.read_bytes() == before


@pytest.mark.slow  # many hermes processes; the other plugins CLI tests stay fast
def test_concurrent_disables_lose_nothing(site, hermes_home):
    """Real `hermes` processes racing to edit plugins.disabled."""
    (hermes_home / "config.yaml").write_text(CONFIG)
    procs = [subprocess.Popen([str(HERMES), "--load", "", "plugins", "disable", f"t-p{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    text = (hermes_home / "config.yaml").read_text()
    import yaml

    assert sorted(yaml.safe_load(text)["plugins"]["disabled"]) == [f"t-p{i}" for i in range(4)]
    assert text.startswith("# my Hermes config\n")


# -- install / uninstall --------------------------------------------------------------


def test_uninstall_refuses_defaults_locals_and_hermes(site, hermes_home):
    default = next(p for p in listed(run("plugins", "list", "--json", "--all"), everything=True).values()
                   if p["source"] == "default")["name"]
    result = run("plugins", "uninstall", default, "-y")
    assert result.exit_code == 1
    assert f"'{default}' is a default plugin and ships with Hermes; use `hermes plugins disable {default}`" in result.stderr
    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / "t_local.py").write_text("x = 1\n")
    result = run("--load", "t_local", "plugins", "uninstall", "t_local")
    assert result.exit_code == 1 and "is a local plugin: delete" in result.stderr
    result = run("plugins", "uninstall", "hermes-kernel", "-y")
    assert result.exit_code == 1 and "refusing to uninstall Hermes itself" in result.stderr


def test_uninstall_maps_a_broken_plugin_to_its_distribution(site, hermes_home):
    """Runs the real pip; the fixture's distribution lies outside this environment, so
    pip declines — after being asked for the right distribution."""
    result = hermes("plugins", "uninstall", "t-broken", "-y")
    assert "-m pip uninstall -y hermes-t-broken" in result.stderr
    assert "hermes-t-broken" in result.stdout + result.stderr


def test_install_failure_is_one_line(hermes_home, tmp_path):
    result = hermes("plugins", "install", str(tmp_path / "no-such-dir"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "hermes: error: pip install failed (exit 1); nothing was changed by Hermes.")


# -- doctor --------------------------------------------------------------------------


def test_doctor_reports_failures_and_selection(site, hermes_home):
    (hermes_home / "config.yaml").write_text("context:\n  engine: t-nowhere\n")
    result = run("doctor", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["home"] == str(hermes_home.resolve())
    assert "t-good" in report["plugins"]["active"]
    assert any(line.startswith("plugin t-broken") for line in report["plugins"]["failed"])
    assert any("unknown context-engine 't-nowhere'" in p for p in report["problems"])
    assert report["selected"]["context-engine"] == {"name": "t-nowhere", "plugin": None}


def test_doctor_in_safe_mode(site, hermes_home):
    report = json.loads(run("--no-plugins", "doctor", "--json").stdout)
    assert set(OURS.split(",")) <= set(report["plugins"]["blocked"])
    assert not [f for f in report["plugins"]["failed"] if f.startswith("plugin t-")]
    human = run("--no-plugins", "doctor")
    assert human.stdout.startswith("hermes ") and f"home: {hermes_home.resolve()}" in human.stdout
    assert human.exit_code == (1 if report["problems"] else 0)


# -- the process: exit status, stderr, no traceback ------------------------------------


def test_subprocess_list_with_broken_plugins(site, hermes_home):
    result = hermes("plugins", "list", "--json")
    assert result.returncode == 0, result.stderr
    assert {p["name"] for p in json.loads(result.stdout) if p["name"].startswith("t-")} == set(OURS.split(","))
    assert "Traceback" not in result.stderr


def test_subprocess_version_and_safe_mode(site, hermes_home):
    result = hermes("--version")
    assert result.returncode == 0 and result.stdout.startswith("hermes ")
    result = hermes("plugins", "list", "--json", env={"HERMES_NO_PLUGINS": "1"})
    assert result.returncode == 0 and "failed to" not in result.stderr


def test_subprocess_strict_env_still_lists(site, hermes_home):
    result = hermes("plugins", "list", "--json", env={"HERMES_STRICT_PLUGINS": "1"})
    assert result.returncode == 0
    assert json.loads(result.stdout)


def test_subprocess_unwritable_home_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = hermes("plugins", "list", env={"HERMES_HOME": str(blocker / "home")})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"hermes: error: cannot create HERMES_HOME '{blocker / 'home'}': Not a directory. "
        "Set HERMES_HOME to a writable directory."]


def test_missing_home_is_created_by_the_cli(tmp_path):
    home = tmp_path / "new" / "home"
    result = hermes("plugins", "list", "--json", env={"HERMES_HOME": str(home), "HERMES_LOAD_PLUGINS": ""})
    assert result.returncode == 0 and home.is_dir()


def test_disabling_the_plugin_of_a_selection_says_what_is_used_instead(site, hermes_home):
    (hermes_home / "config.yaml").write_text("context:\n  engine: t-good-engine\n")
    result = run("plugins", "disable", "t-good")
    assert result.exit_code == 0
    assert ("t-good provides the selected context-engine 't-good-engine' (context.engine); "
            "Hermes will use the built-in 'compressor' instead") in result.stderr
    # a default whose own kind has no other built-in: the user is told it will not start
    result = run("plugins", "disable", "sqlite-sessions")
    assert "Hermes will refuse to start until another is selected" in result.stderr
    # nothing selected from the plugin: nothing to say
    assert "warning" not in run("plugins", "disable", "t-typo").stderr


def test_no_plugins_falls_back_to_the_built_ins_with_one_line_each(site, hermes_home):
    """--no-plugins (or an uninstalled plugin) no longer refuses to start: each selection
    that a plugin provided falls back to its built-in with one warning line; --strict keeps
    the refusal."""
    (hermes_home / "config.yaml").write_text(
        "context:\n  engine: t-good-engine\nmemory:\n  provider: t-gone\nsessions:\n  store: t-gone\n")
    env = {**os.environ, "HERMES_HOME": str(hermes_home)}

    def hermes_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(HERMES), *args], capture_output=True, text=True, env=env, timeout=60)

    def warnings(proc: subprocess.CompletedProcess) -> list[str]:
        return [line for line in proc.stderr.splitlines() if line.startswith("hermes: warning:")]

    proc = hermes_cli("--no-plugins", "memory", "status")  # exit 1: the configured provider is not there
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert [w for w in warnings(proc) if "memory.provider 't-gone'" in w and "'builtin'" in w], proc.stderr
    assert "built-in memory only" in proc.stdout + proc.stderr
    proc = hermes_cli("--no-plugins", "sessions", "list")
    assert proc.returncode == 0, proc.stderr
    [warning] = warnings(proc)
    assert "sessions.store 't-gone'" in warning and "'sqlite'" in warning
    proc = hermes_cli("--no-plugins", "--strict", "sessions", "list")
    assert proc.returncode != 0 and "unknown session-store 't-gone'" in proc.stderr
