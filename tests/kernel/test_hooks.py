"""One ``test_hook_<name>`` per hookspec (tests/kernel/test_hookspecs.py checks that none
is missing): each drives the hook through the kernel the way Hermes calls it —
registration hooks at boot or through ``register_plugin``, commands through the real
``hermes`` CLI, event hooks through ``kernel.emit``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import hermes
from hermes.cli import cli


def build_counter():
    """A factory that counts its calls: registering must not build anything."""
    calls: list[object] = []

    def factory(kernel):
        calls.append(kernel)
        return {"built-by": "factory", "n": len(calls)}

    return factory, calls


# -- registration hooks ------------------------------------------------------------


def test_hook_hermes_register_context_engines(kernel_factory):
    factory, calls = build_counter()

    class Plugin:
        @hermes.hookimpl
        def hermes_register_context_engines(self, register):
            register("t-engine", factory, description="counts")

    kernel = kernel_factory(config={"context": {"engine": "t-engine"}}, plugins=[Plugin()])
    entry = kernel.registries.context_engines.get("t-engine")
    assert (entry.description, calls) == ("counts", []), "factories are built on use, not at boot"
    assert entry.plugin == next(r.name for r in kernel.plugins if r.source == "registered")
    assert kernel.create("context-engine") == {"built-by": "factory", "n": 1}
    assert calls == [kernel]
    assert not [e for e in kernel.selection_errors if e.kind == "context-engine"]


def test_hook_hermes_register_memory_providers(kernel_factory):
    factory, calls = build_counter()

    class Plugin:
        @hermes.hookimpl
        def hermes_register_memory_providers(self, register):
            register("t-mem", factory)

    kernel = kernel_factory(config={"memory": {"provider": "t-mem"}}, plugins=[Plugin()])
    assert "t-mem" in kernel.registries.memory_providers and calls == []
    assert kernel.create("memory-provider")["n"] == 1
    assert not [e for e in kernel.selection_errors if e.kind == "memory-provider"]


def test_hook_hermes_register_prompt_layers(kernel, register_plugin):
    class Layer(hermes.PromptLayer):
        name, order, cached = "t-layer", 123, False

        def render(self, ctx):
            return f"session {ctx.session_id}"

    class Plugin:
        @hermes.hookimpl
        def hermes_register_prompt_layers(self, register):
            register("t-layer", Layer)

    register_plugin(Plugin(), "t-layers")
    layer = kernel.create("prompt-layer", "t-layer")
    assert (layer.order, layer.cached) == (123, False)
    assert layer.render(hermes.PromptContext(kernel=kernel, session_id="s7")) == "session s7"
    assert kernel.registries.prompt_layers.get("t-layer").plugin == "t-layers"


def test_hook_hermes_register_tools(kernel, register_plugin):
    tool = hermes.Tool(name="t_tool", schema={"description": "does it"}, handler=lambda a, c: "done")

    class Plugin:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(tool)

    class Clash:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(name="t_tool", schema={}, handler=lambda a, c: "other"))

    register_plugin(Plugin(), "t-tools")
    assert tool in kernel.tools()
    assert kernel.registries.tools.get("t_tool").description == "does it"
    record = register_plugin(Clash(), "t-clash")
    assert record.status == "failed" and "'t-tools' and 't-clash'" in record.failure.error
    assert kernel.registries.tools.get("t_tool").factory is tool


def test_hook_hermes_register_session_stores(kernel_factory):
    class Store:
        def __init__(self, kernel):
            self.kernel = kernel

        def close(self):
            self.closed = True

    class Plugin:
        @hermes.hookimpl
        def hermes_register_session_stores(self, register):
            register("t-store", Store)

    kernel = kernel_factory(config={"sessions": {"store": "t-store"}}, plugins=[Plugin()])
    store = kernel.session_store
    assert isinstance(store, Store) and store.kernel is kernel and kernel.session_store is store
    kernel.close()
    assert store.closed


def test_hook_hermes_register_llm_clients(kernel_factory):
    seen: list[tuple] = []

    def factory(kernel, base_url=None, api_key=None):
        seen.append((base_url, api_key))
        return object()

    class Plugin:
        @hermes.hookimpl
        def hermes_register_llm_clients(self, register):
            register("t-llm", factory)

    kernel = kernel_factory(config={"model": {"provider": "t-llm"}}, plugins=[Plugin()])
    assert kernel.llm_client() is kernel.llm_client("t-llm")
    kernel.llm_client(base_url="http://127.0.0.1:9/v1", api_key="k")
    assert seen == [(None, None), ("http://127.0.0.1:9/v1", "k")]


COMMAND_PLUGIN = '''
import click
import hermes
from hermes.cli import echo_json, pass_state

@hermes.hookimpl
def hermes_register_commands(cli):
    @cli.command("t-hello")
    @click.argument("who")
    @click.option("--json", "as_json", is_flag=True)
    @pass_state
    def hello(state, who, as_json):
        """Say hello."""
        kernel = state.kernel()
        if as_json:
            echo_json({"hello": who, "home": str(kernel.home)})
        else:
            click.echo(f"hello {who}")

    @cli.command("plugins")
    def hijack():
        """Tries to replace a built-in command."""
        click.echo("hijacked")
'''


def test_hook_hermes_register_commands(hermes_home: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "t_cmds")
    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / "t_cmds.py").write_text(COMMAND_PLUGIN)
    runner = CliRunner()
    result = runner.invoke(cli, ["t-hello", "world", "--json"])
    assert result.exit_code == 0, result.output
    assert '"hello": "world"' in result.stdout and str(hermes_home.resolve()) in result.stdout
    assert "tried to replace the command 'plugins' of hermes; ignored" in result.stderr

    help_text = runner.invoke(cli, ["--help"]).stdout
    assert "t-hello" in help_text and "Say hello." in help_text

    # A plugin's command belongs to the invocation, not to the module-level group.
    assert "t-hello" not in cli.commands
    other = tmp_path / "other-home"
    result = runner.invoke(cli, ["--home", str(other), "t-hello", "x"])
    assert result.exit_code == 2 and "No such command 't-hello'" in result.stderr

    # The built-in `plugins` command was not replaced.
    result = runner.invoke(cli, ["plugins", "list", "--json"])
    assert result.exit_code == 0 and "hijacked" not in result.stdout


def test_hook_hermes_register_commands_failure_is_isolated(hermes_home, monkeypatch):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "t_badcmd")
    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / "t_badcmd.py").write_text(
        "import hermes\n@hermes.hookimpl\ndef hermes_register_commands(cli):\n"
        "    @cli.command('t-half')\n    def half():\n        pass\n    raise RuntimeError('cmd boom')\n")
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "t-half" not in result.stdout, "a failing plugin's half-added commands are dropped"
    assert "plugin t_badcmd failed to register commands: RuntimeError: cmd boom." in result.stderr


# -- event hooks -------------------------------------------------------------------


class Recorder:
    """Implements every event hook, each with a different subset of its arguments."""

    def __init__(self):
        self.events: list[tuple] = []

    @hermes.hookimpl
    def hermes_session_start(self, session):
        self.events.append(("start", session.id))

    @hermes.hookimpl
    def hermes_turn_end(self, turn, session):
        self.events.append(("turn", session.id, turn.answer, turn.usage.total_tokens))

    @hermes.hookimpl
    def hermes_compaction(self, event):
        self.events.append(("compaction", event.parent_session_id, event.child_session_id))

    @hermes.hookimpl
    def hermes_memory_write(self, session, event):
        self.events.append(("memory", session, event.action, event.content))

    @hermes.hookimpl
    def hermes_session_end(self, reason):
        self.events.append(("end", reason))


class Exploder:
    """Raises in every event hook: must never break the caller or the Recorder."""

    @hermes.hookimpl
    def hermes_session_start(self, session):
        raise RuntimeError("start")

    @hermes.hookimpl
    def hermes_turn_end(self, session, turn):
        raise RuntimeError("turn")

    @hermes.hookimpl
    def hermes_compaction(self, session, event):
        raise RuntimeError("compaction")

    @hermes.hookimpl
    def hermes_memory_write(self, session, event):
        raise RuntimeError("memory")

    @hermes.hookimpl
    def hermes_session_end(self, session, reason):
        raise RuntimeError("end")


@pytest.fixture
def observers(kernel, register_plugin):
    recorder = Recorder()
    register_plugin(Exploder(), "t-exploder")
    register_plugin(recorder, "t-recorder")
    return recorder


SESSION = hermes.SessionInfo(id="s1", source="cli", model="m")


def emitted(kernel, hook, **kwargs):
    kernel.emit(hook, **kwargs)
    assert kernel.pm.hook_errors[("t-exploder", hook)].startswith("RuntimeError")


def test_hook_hermes_session_start(kernel, observers, hook_recorder):
    emitted(kernel, "hermes_session_start", session=SESSION)
    assert observers.events == [("start", "s1")]
    assert hook_recorder.of("hermes_session_start") == [{"session": SESSION}]


def test_hook_hermes_turn_end(kernel, observers):
    turn = hermes.TurnEvent(user_message="q", answer="a", usage=hermes.Usage(3, 4, 5, 6))
    emitted(kernel, "hermes_turn_end", session=SESSION, turn=turn)
    emitted(kernel, "hermes_turn_end", session=SESSION, turn=hermes.TurnEvent("q", "", status="failed"))
    assert observers.events == [("turn", "s1", "a", 18), ("turn", "s1", "", 0)]


def test_hook_hermes_compaction(kernel, observers):
    child = hermes.SessionInfo(id="s2", parent_session_id="s1")
    event = hermes.CompactionEvent("s1", "s2", 50, 10, 100_000, 20_000, focus_topic="db")
    emitted(kernel, "hermes_compaction", session=child, event=event)
    assert observers.events == [("compaction", "s1", "s2")]


def test_hook_hermes_memory_write(kernel, observers):
    event = hermes.MemoryWriteEvent(action="replace", target="memory", content="new", old_text="old")
    emitted(kernel, "hermes_memory_write", session=None, event=event)
    assert observers.events == [("memory", None, "replace", "new")]


def test_hook_hermes_session_end(kernel, observers):
    for reason in ("compression", "user_exit"):
        emitted(kernel, "hermes_session_end", session=SESSION, reason=reason)
    assert observers.events == [("end", "compression"), ("end", "user_exit")]


def test_hook_hermes_tool_result(kernel, register_plugin):
    """The results that are not None come back in call order; a raising implementation
    is isolated and adds nothing."""
    class Note:
        def __init__(self, text):
            self.text = text

        @hermes.hookimpl
        def hermes_tool_result(self, context, tool_name, args, result):
            return None if self.text is None else f"{self.text}: {tool_name} {args['p']} {result}"

    class Broken:
        @hermes.hookimpl
        def hermes_tool_result(self, tool_name):
            raise RuntimeError("boom")

    register_plugin(Note("first"), "t-first")
    register_plugin(Broken(), "t-broken")
    register_plugin(Note(None), "t-silent")
    register_plugin(Note("second"), "t-second")
    ctx = hermes.ToolContext(kernel=kernel, session_id="s1")
    notes = kernel.emit("hermes_tool_result", context=ctx, tool_name="t", args={"p": 1}, result="r")
    assert notes == ["first: t 1 r", "second: t 1 r"]
    assert kernel.pm.hook_errors[("t-broken", "hermes_tool_result")].startswith("RuntimeError")


def test_event_hooks_with_no_implementation_are_fine(kernel):
    for hook in hermes.hookspecs.EVENT_HOOKS:
        kernel.emit(hook, session=SESSION)
    assert kernel.pm.hook_errors == {}


def test_click_is_what_commands_receive(hermes_home, monkeypatch):
    """The ``cli`` argument is the hermes command group: a command a plugin adds to it
    is listed by ``hermes --help`` and runs as ``hermes <command>``."""
    from click.testing import CliRunner

    from hermes.cli import cli

    monkeypatch.delenv("HERMES_LOAD_PLUGINS", raising=False)
    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / "t_greeter.py").write_text(
        "import click\nimport hermes\n\n"
        "@hermes.hookimpl\n"
        "def hermes_register_commands(cli):\n"
        "    @cli.command('t-greet')\n"
        "    @click.argument('who')\n"
        "    def greet(who):\n"
        "        'Say hello.'\n"
        "        click.echo(f'hello {who} from {type(cli).__name__} {cli.name}')\n")
    runner = CliRunner()
    assert "t-greet" in runner.invoke(cli, ["--help"]).stdout
    result = runner.invoke(cli, ["t-greet", "ada"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"hello ada from Group {cli.name}"
