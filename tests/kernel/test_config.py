"""Config: HERMES_HOME, config.yaml over defaults, validation messages, $env/$file
references, per-plugin sections, and writes that keep comments and are atomic."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hermes
from hermes.config import (
    DEFAULTS,
    Config,
    deep_merge,
    read_dotenv,
    read_yaml,
    resolve_home,
    set_config_value,
    unknown_sections,
    update_config,
    validate,
)

# -- HERMES_HOME -------------------------------------------------------------------


def test_home_resolution_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("HERMES_HOME", raising=False)
    assert resolve_home() == (tmp_path / "user" / ".hermes").resolve()
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "env-home"))
    assert resolve_home() == (tmp_path / "env-home").resolve()
    assert resolve_home(tmp_path / "arg-home") == (tmp_path / "arg-home").resolve()
    monkeypatch.setenv("HERMES_HOME", "")
    assert resolve_home() == (tmp_path / "user" / ".hermes").resolve(), "empty means unset"


def test_missing_home_is_created(tmp_path):
    home = tmp_path / "a" / "b" / "home"
    kernel = hermes.Kernel(home=home, autoload=False, check_selection=False)
    assert home.is_dir() and kernel.home == home.resolve()
    assert not (home / "config.yaml").exists(), "no config is written just by starting"


def test_home_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(hermes.HomeError) as info:
        resolve_home(blocker / "home")
    message = str(info.value)
    assert "\n" not in message
    assert f"cannot create HERMES_HOME '{blocker / 'home'}'" in message
    assert "Set HERMES_HOME to a writable directory" in message


def test_home_that_is_a_file(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(hermes.HomeError, match="is a file, not a directory. Set HERMES_HOME"):
        resolve_home(blocker)


@pytest.fixture
def unwritable_dir(tmp_path):
    """An existing directory this process cannot write, also when running as root
    (root ignores permission bits, not the immutable attribute)."""
    path = tmp_path / "locked"
    path.mkdir()
    if os.geteuid() == 0:
        if not shutil.which("chattr"):
            pytest.skip("running as root without chattr: no way to make a directory unwritable")
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
        if done.returncode:
            pytest.skip(f"running as root and chattr +i failed: {done.stderr.decode().strip()}")
        yield path
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o500)
        yield path
        path.chmod(0o700)


def test_unwritable_home_is_a_clear_error(unwritable_dir):
    with pytest.raises(hermes.HomeError) as info:
        hermes.Kernel(home=unwritable_dir, autoload=False)
    assert str(info.value) == (
        f"HERMES_HOME '{unwritable_dir}' is not writable. "
        "Fix its permissions or set HERMES_HOME to a writable directory.")


# -- loading and validation --------------------------------------------------------


def write(home: Path, text: str) -> Path:
    path = home / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_config_yaml_overlays_defaults(hermes_home):
    write(hermes_home, "compression:\n  threshold: 0.7\nmemory:\n")
    config = Config.load(hermes_home)
    assert config.get("compression.threshold") == 0.7
    assert config.get("compression.target_ratio") == DEFAULTS["compression"]["target_ratio"]
    assert config.get("memory.memory_char_limit") == DEFAULTS["memory"]["memory_char_limit"], (
        "an empty section keeps its defaults")
    assert config.get("no.such.key", "fallback") == "fallback"
    assert config.section("compression")["threshold"] == 0.7
    assert config.section("context.engine") == {}, "not a mapping"


def test_overrides_win_and_are_validated(hermes_home):
    write(hermes_home, "context:\n  engine: from-file\n")
    config = Config.load(hermes_home, {"context": {"engine": "from-code"}})
    assert config.get("context.engine") == "from-code"
    with pytest.raises(hermes.ConfigError, match=r"^\(overrides\): compression.threshold"):
        Config.load(hermes_home, {"compression": {"threshold": "high"}})


def test_malformed_yaml_names_file_and_line(hermes_home):
    path = write(hermes_home, "model:\n  name: x\n  provider: [unclosed\nmemory: {}\n")
    with pytest.raises(hermes.ConfigError) as info:
        hermes.Kernel(home=hermes_home, autoload=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}, line ")
    assert "malformed YAML" in message and "Fix the file" in message
    assert info.value.file == str(path)


def test_malformed_yaml_tab_indentation(hermes_home):
    write(hermes_home, "model:\n\tname: x\n")
    with pytest.raises(hermes.ConfigError, match=r"config.yaml, line 2, column 1: malformed YAML"):
        read_yaml(hermes_home / "config.yaml")


def test_top_level_must_be_a_mapping(hermes_home):
    write(hermes_home, "- a\n- b\n")
    with pytest.raises(hermes.ConfigError, match="the top level must be a mapping of sections"):
        Config.load(hermes_home)


@pytest.mark.parametrize("text, path, fragment", [
    ("compression:\n  threshold: high\n", "compression.threshold",
     "expected a number, got 'high' (str)."),
    ("compression:\n  enabled: 'yes'\n", "compression.enabled",
     "expected true/false, got 'yes' (str)."),
    ("memory:\n  memory_char_limit: 12.5\n", "memory.memory_char_limit",
     "expected a whole number, got 12.5 (float)."),
    ("memory:\n  nudge_interval: true\n", "memory.nudge_interval",
     "expected a whole number, got True (bool)."),
    ("model:\n  context_length: lots\n", "model.context_length",
     "expected a whole number, got 'lots' (str)."),
    ("compression: 5\n", "compression", "expected a mapping of settings, got 5."),
    ("compression:\n  threshold: 1.5\n", "compression.threshold",
     "expected a fraction between 0 and 1, e.g. 0.5, got 1.5."),
    ("prompt_caching:\n  cache_ttl: 2h\n", "prompt_caching.cache_ttl", "'2h' is not one of 5m, 1h."),
    ("compression:\n  treshold: 0.5\n", "compression.treshold", "unknown key. Did you mean 'threshold'?"),
    ("prompt:\n  disabled_layers: [1, 2]\n", "prompt.disabled_layers",
     "expected a list of names (strings), got [1, 2]."),
    ("plugins:\n  disabled: lcm\n", "plugins.disabled",
     "expected a list of plugin names, e.g. [lcm, mem0], got 'lcm'."),
    ("plugins:\n  lcm: 3\n", "plugins.lcm", "expected a mapping of the plugin's settings"),
    ("compression: {$env: X}\n", "compression", "a $env reference can stand only for a single value"),
    ("model:\n  api_key: {$env: 3}\n", "model.api_key", "$env expects an environment variable name"),
    ("model:\n  api_key: {$file: ''}\n", "model.api_key", "$file expects a file path"),
])
def test_bad_values_name_key_value_and_expectation(hermes_home, text, path, fragment):
    before = write(hermes_home, text).read_bytes()
    with pytest.raises(hermes.ConfigError) as info:
        hermes.Kernel(home=hermes_home, autoload=False)
    message = str(info.value)
    assert message.startswith(f"{hermes_home / 'config.yaml'}: {path}: ")
    assert fragment in message and "\n" not in message
    assert info.value.path == path
    assert (hermes_home / "config.yaml").read_bytes() == before, "validation never writes"


def test_unknown_top_level_sections_are_kept_and_reported(hermes_home):
    write(hermes_home, "memroy:\n  provider: x\nother_tool:\n  a: 1\n")
    config = Config.load(hermes_home)
    assert config.get("other_tool.a") == 1
    assert unknown_sections(read_yaml(hermes_home / "config.yaml")) == [
        "'memroy' (did you mean 'memory'?)", "'other_tool'"]


def test_none_is_allowed_for_nullable_keys_and_ints_for_floats(hermes_home):
    validate({"model": {"base_url": None, "context_length": None, "timeout": 30}})
    validate({"compression": {"threshold": 1}})


def test_every_default_validates():
    validate(DEFAULTS)


# -- references --------------------------------------------------------------------


def test_env_and_file_references(hermes_home, monkeypatch):
    (hermes_home / "secret.txt").write_text("from-file\n")
    abs_secret = hermes_home / "abs.txt"
    abs_secret.write_text("absolute")
    write(hermes_home, (
        "model:\n  api_key: {$env: T_HERMES_KEY}\n  base_url: {$file: secret.txt}\n"
        f"plugins:\n  lcm:\n    token: {{$file: {abs_secret}}}\n    nested: {{deep: {{$env: T_HERMES_KEY}}}}\n"))
    monkeypatch.setenv("T_HERMES_KEY", "sk-123")
    kernel = hermes.Kernel(home=hermes_home, autoload=False, check_selection=False)
    assert kernel.config.get("model.api_key") == "sk-123"
    assert kernel.config.get("model.base_url") == "from-file"
    assert kernel.plugin_config("lcm") == {"token": "absolute", "nested": {"deep": "sk-123"}}
    assert kernel.config.raw("model.api_key") == {"$env": "T_HERMES_KEY"}, "raw keeps references"
    assert kernel.config.as_dict()["model"]["api_key"] == {"$env": "T_HERMES_KEY"}
    assert kernel.config.as_dict(resolve=True)["model"]["api_key"] == "sk-123"


def test_missing_env_and_file_name_the_key_and_the_fix(hermes_home, monkeypatch):
    monkeypatch.delenv("T_HERMES_MISSING", raising=False)
    write(hermes_home, "model:\n  api_key: {$env: T_HERMES_MISSING}\n  base_url: {$file: nope.txt}\n")
    config = Config.load(hermes_home)
    with pytest.raises(hermes.ConfigError) as info:
        config.get("model.api_key")
    assert str(info.value) == (f"model.api_key: environment variable 'T_HERMES_MISSING' is not set. "
                               f"Export it or add it to {hermes_home / '.env'}.")
    with pytest.raises(hermes.ConfigError, match=r"model.base_url: cannot read .*nope.txt"):
        config.get("model.base_url")


def test_dotenv_is_read_into_a_mapping_never_into_os_environ(hermes_home, monkeypatch):
    monkeypatch.delenv("T_HERMES_NEW", raising=False)
    monkeypatch.delenv("T_HERMES_QUOTED", raising=False)
    (hermes_home / ".env").write_text(
        "# secrets\nT_HERMES_SET=from-file\nexport T_HERMES_NEW=new # note\n"
        "T_HERMES_QUOTED='a b'\nnot a pair\n")
    values = read_dotenv(hermes_home / ".env")
    assert values == {"T_HERMES_SET": "from-file", "T_HERMES_NEW": "new", "T_HERMES_QUOTED": "a b"}
    assert "T_HERMES_NEW" not in os.environ and "T_HERMES_QUOTED" not in os.environ
    assert read_dotenv(hermes_home / "missing.env") == {}


def test_dotenv_fifo_is_refused_not_waited_on(tmp_path):
    """A ``.env`` that is a FIFO with no writer used to hang every ``hermes`` start (it
    was opened blocking); it is one ConfigError line now. Run in a child so a hang fails."""
    fifo = tmp_path / ".env"
    os.mkfifo(fifo)
    code = ("import sys\nfrom hermes.config import read_dotenv\nfrom hermes import ConfigError\n"
            "try:\n    read_dotenv(__import__('pathlib').Path(sys.argv[1]))\n"
            "except ConfigError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True,
                         timeout=30)
    assert out.stdout.strip() == f"{fifo} is a FIFO, not a regular file. Replace it with a KEY=value " \
                                 "file or move it aside."


def test_plugin_sections_belong_to_their_plugin(kernel_factory):
    kernel = kernel_factory(config={"plugins": {"lcm": {"depth": 3}, "disabled": []}})
    assert kernel.plugin_config("lcm") == {"depth": 3}
    assert kernel.plugin_config("absent") == {}


def test_deep_merge_does_not_touch_its_inputs():
    base = {"a": {"b": 1, "c": [1]}}
    over = {"a": {"b": 2}, "d": None}
    merged = deep_merge(base, over)
    assert merged == {"a": {"b": 2, "c": [1]}, "d": None}
    merged["a"]["c"].append(2)
    assert base == {"a": {"b": 1, "c": [1]}} and over == {"a": {"b": 2}, "d": None}


# -- writing config.yaml -----------------------------------------------------------

COMMENTED = """\
# Hermes configuration — hand-written, with comments.
model:
  name: claude-sonnet-4-5   # the main model
  provider: anthropic

# How the conversation is compacted.
context:
  engine: compressor  # default engine

plugins:
  # Disabled plugins are not even imported.
  disabled: [honcho]  # keep this comment
  lcm:
    depth: 2
"""


def test_writes_keep_comments_and_order(hermes_home):
    path = write(hermes_home, COMMENTED)
    set_config_value(hermes_home, "context.engine", "lcm")
    set_config_value(hermes_home, "plugins.disabled", ["honcho", "mem0"])
    set_config_value(hermes_home, "memory.provider", "mem0")
    assert path.read_text() == COMMENTED.replace(
        "engine: compressor  # default engine", "engine: lcm  # default engine").replace(
        "disabled: [honcho]  # keep this comment", "disabled: [honcho, mem0]  # keep this comment"
    ) + "memory:\n  provider: mem0\n"


def test_write_into_an_existing_section_without_the_key(hermes_home):
    path = write(hermes_home, "context:\n  # engine: lcm\n\nmodel:\n  name: x\n")
    set_config_value(hermes_home, "context.engine", "lcm")
    assert path.read_text() == "context:\n  # engine: lcm\n  engine: lcm\n\nmodel:\n  name: x\n"


def test_write_replaces_a_block_list(hermes_home):
    path = write(hermes_home, "plugins:\n  disabled:\n    - a  # first\n    # between\n    - b\n  lcm:\n    depth: 1\n# end\n")
    set_config_value(hermes_home, "plugins.disabled", ["a"])
    assert path.read_text() == "plugins:\n  disabled: [a]\n    # between\n  lcm:\n    depth: 1\n# end\n"


def test_write_keeps_a_hash_inside_a_quoted_value(hermes_home):
    path = write(hermes_home, 'prompt:\n  system_message: "be # terse"  # note\n')
    set_config_value(hermes_home, "prompt.system_message", "be kind")
    assert path.read_text() == "prompt:\n  system_message: be kind  # note\n"


def test_write_to_a_flow_mapping_falls_back_to_a_correct_rewrite(hermes_home):
    path = write(hermes_home, "context: {engine: compressor}\n")
    set_config_value(hermes_home, "context.engine", "lcm")
    assert yaml.safe_load(path.read_text()) == {"context": {"engine": "lcm"}}


def test_write_creates_the_file(hermes_home):
    set_config_value(hermes_home, "sessions.store", "postgres")
    assert read_yaml(hermes_home / "config.yaml") == {"sessions": {"store": "postgres"}}


def test_refused_write_leaves_the_file_byte_identical(hermes_home):
    path = write(hermes_home, COMMENTED)
    before = path.read_bytes()
    with pytest.raises(hermes.ConfigError, match="compression.threshold: expected a number"):
        set_config_value(hermes_home, "compression.threshold", "high")
    assert path.read_bytes() == before
    write(hermes_home, "model: [broken\n")
    before = path.read_bytes()
    with pytest.raises(hermes.ConfigError, match="malformed YAML"):
        set_config_value(hermes_home, "context.engine", "lcm")
    assert path.read_bytes() == before
    assert sorted(p.name for p in hermes_home.iterdir()) == ["config.yaml", "config.yaml.lock"], (
        "no temporary file is left behind")


def test_write_is_atomic_keeps_mode_and_symlink(hermes_home, tmp_path):
    real = tmp_path / "dotfiles" / "hermes.yaml"
    real.parent.mkdir()
    real.write_text(COMMENTED)
    real.chmod(0o640)
    (hermes_home / "config.yaml").symlink_to(real)
    set_config_value(hermes_home, "context.engine", "lcm")
    assert (hermes_home / "config.yaml").is_symlink(), "the symlink survives; its target is replaced"
    assert "engine: lcm  # default engine" in real.read_text()
    assert real.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in real.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_update_config_reads_modifies_and_writes(hermes_home):
    write(hermes_home, "plugins:\n  disabled: [a]\n")
    assert update_config(hermes_home, "plugins.disabled", lambda old: old + ["b"]) == ["a", "b"]
    assert update_config(hermes_home, "context.engine", lambda old: f"was-{old}") == "was-None"
    assert read_yaml(hermes_home / "config.yaml") == {"plugins": {"disabled": ["a", "b"]},
                                                      "context": {"engine": "was-None"}}


WRITER = """
import sys
from pathlib import Path
from hermes.config import update_config
home, tag = Path(sys.argv[1]), sys.argv[2]
for i in range(5):
    update_config(home, "plugins.disabled", lambda old: list(old or []) + [f"{tag}{i}"])
"""


def test_concurrent_writers_lose_no_update(hermes_home):
    """Real processes racing on read-modify-write: the lock serializes them."""
    write(hermes_home, "# mine\nplugins:\n  disabled: []\n")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(hermes_home), tag])
             for tag in ("a", "b", "c")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    disabled = read_yaml(hermes_home / "config.yaml")["plugins"]["disabled"]
    assert sorted(disabled) == sorted(f"{t}{i}" for t in "abc" for i in range(5))
    assert (hermes_home / "config.yaml").read_text().startswith("# mine\n")


# A property: for any block-style config with comments between its lines, setting a
# known key keeps every comment line and yields exactly the expected data.

SCALARS = {
    "context.engine": st.sampled_from(["lcm", "compressor", "x-y"]),
    "memory.provider": st.sampled_from(["", "mem0", "honcho"]),
    "compression.threshold": st.floats(min_value=0.05, max_value=1.0),
    "compression.protect_last_n": st.integers(min_value=1, max_value=500),
    "model.name": st.text(alphabet="abcxyz-. :#'", min_size=1, max_size=12),
    "plugins.disabled": st.lists(st.sampled_from(["a", "b-c", "d_e"]), max_size=3),
}


@st.composite
def configs(draw):
    keys = draw(st.lists(st.sampled_from(sorted(SCALARS)), unique=True, max_size=5))
    data: dict = {}
    for key in keys:
        section, name = key.split(".")
        data.setdefault(section, {})[name] = draw(SCALARS[key])
    target = draw(st.sampled_from(sorted(SCALARS)))
    return data, target, draw(SCALARS[target])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=configs())
def test_property_writes_keep_comments_and_data(tmp_path_factory, case):
    data, target, value = case
    home = tmp_path_factory.mktemp("prop")
    lines = yaml.safe_dump(data, sort_keys=False).splitlines() if data else []
    commented: list[str] = []
    for i, line in enumerate(lines):
        commented.append(f"{' ' * (len(line) - len(line.lstrip()))}# comment {i}")
        commented.append(line)
    (home / "config.yaml").write_text("\n".join(commented) + "\n" if commented else "")
    set_config_value(home, target, value)
    text = (home / "config.yaml").read_text()
    expected = {k: dict(v) for k, v in data.items()}
    section, name = target.split(".")
    expected.setdefault(section, {})[name] = value
    assert yaml.safe_load(text) == expected
    for i in range(len(lines)):
        assert f"# comment {i}" in text


def test_plugin_lenient_keeps_what_resolves_and_reports_the_rest(tmp_path, monkeypatch):
    from hermes.config import Config

    monkeypatch.delenv("HERMES_TEST_UNSET_KEY", raising=False)
    config = Config({"plugins": {"demo": {"api_key": {"$env": "HERMES_TEST_UNSET_KEY"},
                                          "base_url": "http://x"}}}, home=tmp_path)
    settings, error = config.plugin_lenient("demo")
    assert settings == {"base_url": "http://x"}
    assert "HERMES_TEST_UNSET_KEY" in error and "plugins.demo.api_key" in error
    monkeypatch.setenv("HERMES_TEST_UNSET_KEY", "k")
    assert config.plugin_lenient("demo") == ({"api_key": "k", "base_url": "http://x"}, "")
