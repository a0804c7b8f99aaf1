"""Hermes-style provider plugins: ``$HERMES_HOME/plugins/<name>/`` directories written
for the Hermes agent (``from agent.memory_provider import MemoryProvider``, ``register(ctx)``,
``plugin.yaml``) load as memory providers with source ``local``."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import hermes
from hermes.testing.conformance import MemoryProviderConformance

# A provider exactly as one is written for Hermes: the Hermes import path for the base
# class, no hermes-kernel import, a file under hermes_home, keyword recall.
NOTES_PROVIDER = '''
"""Notes: a small file-backed memory provider written for the Hermes agent."""

import json
from pathlib import Path

from agent.memory_provider import MemoryProvider

from .words import words


class NotesProvider(MemoryProvider):
    def __init__(self):
        self._path = None

    @property
    def name(self):
        return "notes"

    def is_available(self):
        return True

    def initialize(self, session_id, **kwargs):
        self._path = Path(kwargs["hermes_home"]) / "notes.jsonl"

    def _notes(self):
        if self._path is None or not self._path.exists():
            return []
        return [json.loads(line) for line in self._path.read_text().splitlines()]

    def _add(self, text):
        with self._path.open("a") as fh:
            fh.write(json.dumps(text) + "\\n")

    def system_prompt_block(self):
        return "Notes memory is active: use notes_add to keep a note."

    def prefetch(self, query, *, session_id=""):
        want = words(query)
        return "\\n".join(f"- {n}" for n in self._notes() if want & words(n))

    def sync_turn(self, user_content, assistant_content, *, session_id=""):
        if user_content.strip():
            self._add(user_content)

    def get_tool_schemas(self):
        return [{"name": "notes_add", "description": "Keep a note.",
                 "parameters": {"type": "object",
                                "properties": {"text": {"type": "string"}},
                                "required": ["text"]}}]

    def handle_tool_call(self, tool_name, args, **kwargs):
        if tool_name == "notes_add" and args.get("text"):
            self._add(args["text"])
            return json.dumps({"success": True})
        return json.dumps({"error": "notes_add needs text"})

    def on_memory_write(self, action, target, content, metadata=None):
        if action == "add" and content:
            self._add(content)
'''

WORDS = '''
def words(text):
    return {w.strip("?.!,:;").lower() for w in text.split() if len(w.strip("?.!,:;")) > 3}
'''

MANIFEST = """
name: notes
description: Notes kept in a JSON-lines file
version: 1.2.0
"""

REGISTER_STYLE = '''
from agent.memory_provider import MemoryProvider

CALLS = []


class Counter(MemoryProvider):
    name = "counter"

    def is_available(self):
        return True

    def initialize(self, session_id, **kwargs):
        pass

    def get_tool_schemas(self):
        return []


def register(ctx):
    CALLS.append(1)
    ctx.register_memory_provider(Counter())
    ctx.register_tool("ignored", {}, lambda *a: "")  # other registrations are ignored
    ctx.register_hook("on_session_start", print)
'''


def write_plugin(home: Path, name: str, files: dict[str, str]) -> Path:
    directory = home / "plugins" / name
    directory.mkdir(parents=True, exist_ok=True)
    for filename, text in files.items():
        (directory / filename).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return directory


def notes_plugin(home: Path) -> Path:
    return write_plugin(home, "notes", {"__init__.py": NOTES_PROVIDER, "words.py": WORDS,
                                        "plugin.yaml": MANIFEST})


def boot(home: Path, *only: str, **kwargs: Any) -> hermes.Kernel:
    kwargs.setdefault("check_selection", False)
    return hermes.Kernel(home=home, load_plugins=list(only), **kwargs)


def test_a_subclass_style_plugin_loads_as_a_local_memory_provider(hermes_home: Path) -> None:
    notes_plugin(hermes_home)
    with boot(hermes_home, "notes") as kernel:
        record = next(r for r in kernel.plugins if r.name == "notes")
        assert (record.status, record.source, record.version) == ("active", "local", "1.2.0")
        assert record.path == str(hermes_home / "plugins" / "notes")
        assert record.registered == {"memory-provider": ["notes"]}
        entry = kernel.registries.memory_providers.get("notes")
        assert entry.description == "Notes kept in a JSON-lines file"

        provider = kernel.create("memory-provider", "notes")
        assert isinstance(provider, hermes.MemoryProvider) and provider.name == "notes"
        assert type(provider).__name__ == "NotesProvider"
        assert kernel.create("memory-provider", "notes") is not provider  # a fresh one each time


def test_the_agent_shim_does_not_outlive_loading(hermes_home: Path) -> None:
    notes_plugin(hermes_home)
    before = sys.modules.get("agent")
    with boot(hermes_home, "notes") as kernel:
        kernel.create("memory-provider", "notes")
    assert sys.modules.get("agent") is before
    assert "agent.memory_provider" not in sys.modules or before is not None


def test_a_real_agent_package_is_put_back(hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = ModuleType("agent")
    monkeypatch.setitem(sys.modules, "agent", real)
    monkeypatch.delitem(sys.modules, "agent.memory_provider", raising=False)
    notes_plugin(hermes_home)
    with boot(hermes_home, "notes") as kernel:
        assert isinstance(kernel.create("memory-provider", "notes"), hermes.MemoryProvider)
    assert sys.modules["agent"] is real and "agent.memory_provider" not in sys.modules


def test_selected_by_memory_provider_and_run_by_the_memory_manager(hermes_home: Path) -> None:
    notes_plugin(hermes_home)
    with boot(hermes_home, "notes", config={"memory": {"provider": "notes"}}) as kernel:
        manager = hermes.MemoryManager(kernel)
        try:
            assert manager.external is not None and manager.external.name == "notes"
            manager.initialize("s1")
            assert manager.has_tool("notes_add")
            out = json.loads(manager.handle_tool_call("notes_add", {"text": "The deploy key rotates monthly"}))
            assert out == {"success": True}
            manager.sync_turn("Remember that staging runs Postgres 16", "Noted.")
            assert manager.flush(10)
            recalled = manager.prefetch("Which Postgres does staging run?")
            assert "staging runs Postgres 16" in recalled and "deploy key" not in recalled
            assert "Notes memory is active" in manager.external_system_prompt_block()
        finally:
            manager.shutdown()
    lines = (hermes_home / "notes.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == ["The deploy key rotates monthly",
                                              "Remember that staging runs Postgres 16"]


def test_a_register_ctx_plugin_loads_and_registers_fresh_providers(hermes_home: Path) -> None:
    directory = write_plugin(hermes_home, "counter", {"__init__.py": REGISTER_STYLE})
    with boot(hermes_home, "counter") as kernel:
        record = next(r for r in kernel.plugins if r.name == "counter")
        assert (record.status, record.source, record.version) == ("active", "local", None)
        first = kernel.create("memory-provider", "counter")
        second = kernel.create("memory-provider", "counter")
        assert first.name == "counter" and first is not second
        module = sys.modules[record.module]
        assert Path(module.__file__).parent == directory
        # register(ctx) ran once at load (the check) and once more for the second build.
        assert module.CALLS == [1, 1]


@pytest.mark.parametrize("files, error", [
    ({"__init__.py": "raise RuntimeError('broken on import')"}, "broken on import"),
    ({"__init__.py": "X = 1\n"}, "no MemoryProvider subclass, no register(ctx)"),
    ({"__init__.py": "def register(ctx):\n    pass\n"}, "did not call ctx.register_memory_provider"),
    ({"__init__.py": "def register(ctx):\n    ctx.register_memory_provider(object())\n"},
     "got a object, not a MemoryProvider"),
    ({"__init__.py": "", "plugin.yaml": "- just\n- a list\n"}, "must be a YAML mapping"),
])
def test_a_broken_directory_is_a_recorded_failure(hermes_home: Path, files: dict[str, str],
                                                   error: str, capsys: pytest.CaptureFixture) -> None:
    write_plugin(hermes_home, "broken", files)
    notes_plugin(hermes_home)
    with boot(hermes_home, "broken", "notes") as kernel:
        records = {r.name: r for r in kernel.plugins}
        assert records["broken"].status == "failed" and records["broken"].source == "local"
        assert error in records["broken"].failure.error
        assert records["notes"].status == "active"  # one broken plugin stops nothing
    assert "plugin broken" in capsys.readouterr().err


def test_an_unreadable_manifest_is_one_line_naming_it(hermes_home: Path) -> None:
    """plugin.yaml goes through hermes.read_bounded: bad bytes or a huge file are one
    PluginError line naming it (not a UnicodeDecodeError traceback, not a read of it all)."""
    from hermes.hermes_compat import MANIFEST_MAX_BYTES, read_manifest

    directory = write_plugin(hermes_home, "bad", {"__init__.py": ""})
    (directory / "plugin.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(hermes.PluginError, match=r"plugin.yaml is not UTF-8 text"):
        read_manifest(directory)
    (directory / "plugin.yaml").write_bytes(b"#" * (MANIFEST_MAX_BYTES + 1))
    with pytest.raises(hermes.PluginError, match=r"plugin.yaml cannot be read \(larger than"):
        read_manifest(directory)
    (directory / "plugin.yaml").unlink()
    (directory / "plugin.yaml").mkdir()
    assert read_manifest(directory) == {}  # not a file: no manifest, as before


def test_strict_mode_raises_for_a_broken_directory(hermes_home: Path) -> None:
    write_plugin(hermes_home, "broken", {"__init__.py": "raise RuntimeError('nope')"})
    with pytest.raises(hermes.PluginError, match="nope"):
        boot(hermes_home, "broken", strict=True)


def test_blocked_directories_are_never_imported(hermes_home: Path) -> None:
    marker = hermes_home / "imported"
    write_plugin(hermes_home, "noisy", {"__init__.py": f"open({str(marker)!r}, 'w').close()\n"})
    with hermes.Kernel(home=hermes_home, disable_plugins=["noisy"], check_selection=False) as kernel:
        record = next(r for r in kernel.plugins if r.name == "noisy")
        assert record.status == "blocked"
    with boot(hermes_home, "something-else"):
        pass  # not in HERMES_LOAD_PLUGINS
    assert not marker.exists()


def test_private_and_non_package_directories_are_skipped(hermes_home: Path) -> None:
    write_plugin(hermes_home, "_draft", {"__init__.py": "raise RuntimeError('never')"})
    write_plugin(hermes_home, "assets", {"readme.txt": "not a plugin"})
    with hermes.Kernel(home=hermes_home, check_selection=False, safe_mode=False,
                       load_plugins=["_draft", "assets"]) as kernel:
        assert not {"_draft", "assets"} & {r.name for r in kernel.plugins}


def test_a_package_of_hookimpls_is_a_plain_kernel_plugin(hermes_home: Path) -> None:
    write_plugin(hermes_home, "greeter", {"__init__.py": '''
        import hermes

        @hermes.hookimpl
        def hermes_register_tools(register):
            register(hermes.Tool("greet", {"description": "Say hi."}, lambda args, ctx: "hi"))
        '''})
    with boot(hermes_home, "greeter") as kernel:
        record = next(r for r in kernel.plugins if r.name == "greeter")
        assert record.status == "active" and record.hooks == ["hermes_register_tools"]
        assert "greet" in [t.name for t in kernel.tools()]


def test_same_named_plugins_in_two_homes_do_not_share_code(tmp_path: Path) -> None:
    for label in ("one", "two"):
        write_plugin(tmp_path / label, "notes", {
            "__init__.py": NOTES_PROVIDER.replace('return "notes"', f'return "notes-{label}"'),
            "words.py": WORDS + f"\nLABEL = {label!r}\n"})
    with boot(tmp_path / "one", "notes") as one, boot(tmp_path / "two", "notes") as two:
        assert one.create("memory-provider", "notes").name == "notes-one"
        assert two.create("memory-provider", "notes").name == "notes-two"
        labels = {sys.modules[r.module + ".words"].LABEL for k in (one, two)
                  for r in k.plugins if r.name == "notes"}
        assert labels == {"one", "two"}


class TestHermesStyleConformance(MemoryProviderConformance):
    """A provider written for Hermes, loaded by the directory loader, passes the same
    contract as every other provider."""

    recalls_synced_turns = True

    @pytest.fixture
    def provider(self, tmp_path: Path) -> Any:
        home = tmp_path / "style-home"
        notes_plugin(home)
        with boot(home, "notes") as kernel:
            yield kernel.create("memory-provider", "notes")
