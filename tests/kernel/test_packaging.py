"""Packaging: every package is listed in pyproject.toml, the entry points are declared,
and the CLI stays light (no LLM SDK imported by ``hermes --help``)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def packages_on_disk() -> set[str]:
    found = set()
    for base, prefix in ((ROOT / "kernel", ("hermes",)), (ROOT / "plugins", ("hermes", "plugins"))):
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            found.add(".".join(prefix + init.parent.relative_to(base).parts))
    return found


def test_every_package_is_listed_in_pyproject():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    missing = sorted(packages_on_disk() - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    stale = sorted(listed - packages_on_disk())
    assert not stale, f"listed in pyproject.toml but not on disk: {stale}"


def test_package_dirs_and_entry_points():
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"hermes": "kernel", "hermes.plugins": "plugins"}
    project = PYPROJECT["project"]
    assert project["scripts"]["hermes"] == "hermes.cli:main"
    assert project["entry-points"]["pytest11"]["hermes"] == "hermes.testing.pytest_plugin"
    assert project["requires-python"] == ">=3.11"
    assert {"pytest", "hypothesis", "ruff"} <= {d.split(">")[0].split("=")[0] for d in
                                                project["optional-dependencies"]["dev"]}


#: Import name of each declared runtime dependency (where it differs from the name).
IMPORT_NAMES = {"pyyaml": "yaml", "importlib-metadata": "importlib_metadata",
                "python-dotenv": "dotenv", "pyahocorasick": "ahocorasick"}


def test_every_declared_dependency_is_used_and_every_used_one_declared():
    """A dependency is declared because the kernel or a default plugin imports it, and
    every third-party import of kernel/ and plugins/ is declared."""
    import ast
    import re

    declared = {re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0].strip().lower(): d
                for d in PYPROJECT["project"]["dependencies"]}
    imported: set[str] = set()
    for base in (ROOT / "kernel", ROOT / "plugins"):
        for path in base.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    imported |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    imported.add(node.module.split(".")[0])
    unused = sorted(d for d in declared if IMPORT_NAMES.get(d, d.replace("-", "_")) not in imported)
    assert not unused, f"declared in pyproject but imported nowhere: {unused}"
    third_party = imported - set(sys.stdlib_module_names) - {"hermes", "__future__", "pytest", "_pytest"}
    undeclared = sorted(m for m in third_party
                        if m not in {IMPORT_NAMES.get(d, d.replace("-", "_")) for d in declared})
    assert not undeclared, f"imported but not declared in pyproject dependencies: {undeclared}"


PROBE = """
import json, sys
from hermes.cli import main
sys.argv = ["hermes", *sys.argv[1:]]
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("anthropic", "openai", "mem0", "honcho", "torch"))
print("\\nPROBE " + json.dumps({"heavy": heavy, "plugins_loaded": "hermes.plugins" in sys.modules}))
"""


def probe(*args: str, home: Path) -> dict:
    env = {"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env=env, timeout=120)
    line = [x for x in done.stdout.splitlines() if x.startswith("PROBE ")]
    assert line, done.stdout + done.stderr
    return json.loads(line[-1].removeprefix("PROBE "))


def test_help_imports_no_llm_sdk(tmp_path):
    """`hermes --help` loads every plugin (to list their commands) but must not import
    anthropic or openai: plugins import SDKs inside their factories."""
    result = probe("--help", home=tmp_path)
    assert result["plugins_loaded"], "--help lists plugin commands, so plugins are loaded"
    assert result["heavy"] == [], f"imported by `hermes --help`: {result['heavy']}"


def test_plugins_list_imports_no_llm_sdk(tmp_path):
    assert probe("plugins", "list", "--json", "--all", home=tmp_path)["heavy"] == []


def test_version_loads_no_plugin(tmp_path):
    result = probe("--version", home=tmp_path)
    assert result == {"heavy": [], "plugins_loaded": False}


def test_pytest_plugin_is_import_light():
    """Every pytest run where Hermes is installed imports the pytest11 plugin."""
    code = ("import sys, hermes.testing.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m == 'hermes.core' or m.startswith('hermes.plugins')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_public_api_is_complete_and_lazy():
    """Every name of ``hermes.__all__`` resolves, every lazily exported name is in
    ``__all__``, and ``import hermes`` itself imports no submodule (so plugins, the CLI
    and the pytest plugin pay only for what they use)."""
    import hermes

    assert [n for n in hermes.__all__ if not hasattr(hermes, n)] == []
    assert set(hermes._WHERE) <= set(hermes.__all__)
    assert len(hermes.__all__) == len(set(hermes.__all__))
    code = "import sys, hermes; print(sorted(m for m in sys.modules if m.startswith('hermes.')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", (
        "`import hermes` imported submodules eagerly; export names through _EXPORTS in "
        f"kernel/__init__.py instead of `from .x import y`: {done.stdout}{done.stderr}")
    with __import__("pytest").raises(AttributeError, match="has no attribute 'nope'"):
        hermes.nope  # noqa: B018


# -- helpers the kernel exports so that plugins do not copy them ---------------------


def test_content_text_flattens_every_message_shape():
    from hermes import content_text

    assert content_text(None) == "" and content_text("plain") == "plain"
    parts = [{"type": "text", "text": "a"}, "b", {"type": "input_text", "text": "c"},
             {"type": "image_url", "image_url": {"url": "data:"}}, {"type": "text", "text": ""},
             {"type": "tool_result", "content": [{"type": "text", "text": "nested"}]},
             {"type": "document"}, {"text": "untyped"}, 7]
    assert content_text(parts) == "a\nb\nc\n[image]\nnested\n[document]\nuntyped"
    assert content_text({"type": "text", "text": "one part"}) == "one part"
    assert content_text(42) == "42"


def test_background_memory_provider_skeleton(kernel_factory, monkeypatch):
    """What mem0 and Honcho share, exported: settings over defaults with an unset
    {$env} as the reason, the kernel's env, breaker, serial writes, bounded prefetch."""
    import threading

    import hermes

    monkeypatch.delenv("T_HERMES_UNSET", raising=False)

    class Backend(hermes.BackgroundMemoryProvider):
        settings_key = "t-backend"
        defaults = {"prefetch_timeout": 2.0, "sync_timeout": 2.0, "breaker_threshold": 2,
                    "breaker_cooldown": 60.0, "nested": {"a": 1, "b": 2}, "token": None}
        paused_error = type("Paused", (hermes.HermesError,), {})
        name = "t-backend"

        def __init__(self, kernel=None, **kw):
            super().__init__(kernel, **kw)
            self.stored: list[str] = []
            self.fail = False
            self.closed = threading.Event()

        def unavailable_reason(self):
            return self.config_error

        def get_tool_schemas(self):
            return []

        def recall(self, query):
            return self.call(lambda: f"recalled {query} after {len(self.stored)} writes")

        def sync_turn(self, user_content, assistant_content, *, session_id=""):
            if self.writes_allowed():
                self.submit(self.stored.append, user_content)

        def close_backend(self):
            self.closed.set()

    kernel = kernel_factory(config={"plugins": {"t-backend": {"nested": {"b": 3}, "token": {"$env": "T_HERMES_UNSET"}}}})
    p = Backend(kernel, settings={"prefetch_timeout": None})
    assert p.settings["nested"] == {"a": 1, "b": 3} and p.settings["prefetch_timeout"] == 2.0
    assert "T_HERMES_UNSET" in p.unavailable_reason() and not p.is_available()
    assert p.env is kernel.env

    p.initialize("s1", hermes_home=str(kernel.home), agent_context="primary", platform="cli")
    p.sync_turn("first fact", "ok")
    p.queue_prefetch("what do you know")
    assert p.prefetch("what do you know") == "recalled what do you know after 1 writes"
    assert p.prefetch("hi") == "", "trivial prompts are skipped"

    def boom():
        raise OSError("down")

    for _ in range(2):
        with pytest.raises(OSError):
            p.call(boom)
    with pytest.raises(p.paused_error, match="t-backend is paused for 60s after 2 consecutive failures"):
        p.call(lambda: "never runs")
    assert p.breaker_status()["breaker"]["open"] is True

    sub = Backend(kernel)
    sub.initialize("s2", agent_context="subagent")
    sub.sync_turn("not stored", "")
    assert sub.flush(2) and sub.stored == []

    p.sync_turn("second fact", "ok")
    p.shutdown()
    assert p.stored == ["first fact", "second fact"] and p.closed.is_set()
    p.sync_turn("after shutdown", "")
    assert p.stored == ["first fact", "second fact"]
    sub.shutdown()


def test_retry_after_reads_every_header_form():
    import email.utils
    import time

    from hermes import backoff_delay, retry_after

    assert retry_after(None) is None and retry_after({}) is None
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({"retry-after": "soon"}) is None
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after({"retry-after": date}) <= 30
    assert backoff_delay(0, 0.01, retry_after=2.0) == 2.0
    assert backoff_delay(30, 1.0) == 60.0 and backoff_delay(0, 1.0, cap=0.5) == 0.5


def test_content_text_never_fails_and_keeps_every_text_part():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from hermes import content_text

    scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    json_like = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                             | st.dictionaries(st.sampled_from(["type", "text", "content", "x"]),
                                               inner, max_size=4), max_leaves=20)
    text_part = st.builds(lambda t: {"type": "text", "text": t}, st.text(min_size=1, max_size=20))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(text_part | json_like, max_size=6))
    def check(parts):
        out = content_text(parts)
        assert isinstance(out, str)
        for part in parts:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                assert part["text"] in out

    check()
