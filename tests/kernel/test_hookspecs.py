"""Meta-tests that keep the hook contract honest: every hookspec has a full docstring,
is documented in docs/hooks.md with its exact signature and a runnable example (run
here, as a plugin), and has a ``test_hook_<name>`` in tests/kernel/test_hooks.py."""

from __future__ import annotations

import ast
import inspect
import json
import logging
import re
import tomllib
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import hermes
from hermes import hookspecs
from hermes.manager import HermesPluginManager
from hermes.registry import COMPONENT_KINDS, Registries

ROOT = Path(__file__).resolve().parents[2]
HOOKS_MD = ROOT / "docs" / "hooks.md"
HOOK_TESTS = ROOT / "tests" / "kernel" / "test_hooks.py"

SPECS = {
    name: fn for name, fn in vars(hookspecs).items()
    if name.startswith("hermes_") and callable(fn) and hasattr(fn, "hermes_spec")
}


def signature(name: str) -> str:
    params = inspect.signature(SPECS[name]).parameters
    return f"{name}({', '.join(params)})"


def documented() -> dict[str, tuple[str, str]]:
    """``{hook name: (signature in the heading, first python example of the section)}``."""
    text = HOOKS_MD.read_text(encoding="utf-8")
    sections = re.split(r"(?m)^### ", text)[1:]
    out = {}
    for section in sections:
        heading = section.splitlines()[0].strip()
        match = re.fullmatch(r"`((hermes_\w+)\(.*\))`", heading)
        assert match, f"hooks.md heading {heading!r} is not `hermes_name(args)`"
        example = re.search(r"```python\n(.*?)```", section, re.S)
        assert match.group(2) not in out, f"{match.group(2)} documented twice"
        out[match.group(2)] = (match.group(1), example.group(1) if example else "")
    return out


def test_hook_names_are_complete_and_classified():
    assert SPECS, "no hookspecs found"
    assert set(SPECS) == set(hookspecs.REGISTRATION_HOOKS) | set(hookspecs.EVENT_HOOKS) | {
        "hermes_register_commands"}
    assert set(HermesPluginManager().spec_names()) == set(SPECS)


def test_every_component_kind_is_one_row_of_the_table():
    """Registries, registration hooks, selection and the contracts all come from
    COMPONENT_KINDS; each row names a real hookspec, contract and registry."""
    assert hookspecs.REGISTRATION_HOOKS == tuple(k.hook for k in COMPONENT_KINDS)
    registries = Registries()
    assert [r.kind for r in registries.all()] == [k.name for k in COMPONENT_KINDS]
    assert set(Registries.__annotations__) == {k.attr for k in COMPONENT_KINDS}
    for kind in COMPONENT_KINDS:
        assert kind.hook in SPECS and isinstance(getattr(hermes, kind.contract), type)
        assert registries.by_kind(kind.hook) is registries.by_kind(kind.name)
        if kind.setting:
            assert hermes.Config({}, home=ROOT).raw(kind.setting) is not None, kind.setting
    text = HOOKS_MD.read_text(encoding="utf-8")
    assert all(f"`{k.hook}(register)`" in text for k in COMPONENT_KINDS), "docs/hooks.md documents each kind"
    rows = [line for line in text.splitlines() if line.startswith("| `") and "| `hermes_register_" in line]
    expected = [f"| `{k.name}` | `{k.hook}` | `hermes.{k.contract}` | "
                f"{'`' + k.setting + '`' if k.setting else 'all are used'} | {k.description} |"
                for k in COMPONENT_KINDS]
    assert rows == expected, "the kinds table in docs/hooks.md is COMPONENT_KINDS, row by row"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hookspec_docstring_states_when_returns_and_errors(name):
    doc = inspect.getdoc(SPECS[name]) or ""
    for part in ("**When:**", "**Returns:**", "**Errors:**"):
        assert part in doc, f"{name}'s docstring lacks {part}"
    assert all(p.default is inspect.Parameter.empty for p in inspect.signature(SPECS[name]).parameters.values()), (
        "hook arguments must not have defaults (pluggy never passes them)")


def test_every_hook_is_documented_with_its_exact_signature():
    docs = documented()
    missing = sorted(set(SPECS) - set(docs))
    assert not missing, f"undocumented hooks in docs/hooks.md: {missing}"
    unknown = sorted(set(docs) - set(SPECS))
    assert not unknown, f"docs/hooks.md documents hooks that do not exist: {unknown}"
    for name, (sig, _) in docs.items():
        assert sig == signature(name), f"docs/hooks.md says {sig}, the hookspec is {signature(name)}"


def test_every_hook_has_an_example_implementing_it():
    for name, (_, example) in documented().items():
        assert example, f"docs/hooks.md has no python example for {name}"
        tree = ast.parse(example)
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in defined, f"the example of {name} does not implement it"


def test_every_hook_has_a_test():
    tree = ast.parse(HOOK_TESTS.read_text(encoding="utf-8"))
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = sorted(f"test_hook_{name}" for name in SPECS if f"test_hook_{name}" not in tests)
    assert not missing, f"tests/kernel/test_hooks.py lacks {missing}"


# -- the examples run ----------------------------------------------------------------


def load_example(name: str) -> types.ModuleType:
    module = types.ModuleType(f"hooks_md_example_{name}")
    exec(compile(documented()[name][1], f"docs/hooks.md:{name}", "exec"), module.__dict__)
    return module


@pytest.fixture
def example(kernel, register_plugin):
    """Load a hook's example from docs/hooks.md and register it as a plugin."""

    def load(name: str) -> types.ModuleType:
        module = load_example(name)
        record = register_plugin(module, f"example-{name}")
        assert record.status == "active", record.failure
        assert name in record.hooks
        return module

    return load


def test_example_context_engine(kernel, example):
    example("hermes_register_context_engines")
    engine = kernel.create("context-engine", "keep-everything")
    messages = [{"role": "user", "content": "hi"}]
    out = engine.compress(messages, force=True)
    assert out == messages and out is not messages and not engine.should_compress(10**9)


def test_example_memory_provider(kernel_factory, register_plugin):
    kernel = kernel_factory(config={"plugins": {"scratchpad": {"limit": 2}}})
    register_plugin(load_example("hermes_register_memory_providers"), "example", kernel=kernel)
    provider = kernel.create("memory-provider", "scratchpad")
    provider.initialize("s1", hermes_home=str(kernel.home), platform="cli")
    for text in ("a", "b", "c"):
        provider.sync_turn(text, "ok", session_id="s1")
    assert provider.is_available() and provider.prefetch("?") == "user said: b\nuser said: c"


def test_example_prompt_layer(kernel_factory, register_plugin):
    kernel = kernel_factory(config={"plugins": {"team-conventions": {"rules": ["tabs", "tests"]}}})
    register_plugin(load_example("hermes_register_prompt_layers"), "example", kernel=kernel)
    layer = kernel.create("prompt-layer", "team-conventions")
    assert layer.render(hermes.PromptContext(kernel=kernel)) == "Team conventions:\n- tabs\n- tests"
    assert layer.cached and layer.order == 650


def test_example_tool(kernel, example):
    example("hermes_register_tools")
    tool = next(t for t in kernel.tools() if t.name == "roll_dice")
    rolls = json.loads(tool.handler({"count": 3, "sides": 6}, hermes.ToolContext(kernel=kernel)))["rolls"]
    assert len(rolls) == 3 and all(1 <= r <= 6 for r in rolls)


def test_example_session_store(kernel, example):
    example("hermes_register_session_stores")
    entry = kernel.registries.session_stores.get("postgres")
    assert entry.description == "sessions in PostgreSQL"
    with pytest.raises(ModuleNotFoundError, match="my_pg_store"):
        entry.build(kernel)  # registering imported nothing heavy; building needs the driver


def test_example_llm_client(kernel, example):
    example("hermes_register_llm_clients")
    client = kernel.llm_client("echo")
    response = client.complete(hermes.LLMRequest(model="m", messages=[{"role": "user", "content": "hi"}]))
    assert response.content == "echo: hi"


def test_example_commands(kernel, example):
    module = example("hermes_register_commands")
    group = click.Group("hermes")
    module.hermes_register_commands(cli=group)

    class State:
        def kernel(self):
            return kernel

    result = CliRunner().invoke(group, ["engines", "--json"], obj=State())
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == kernel.registries.context_engines.names()


SESSION = hermes.SessionInfo(id="s2", source="cli", parent_session_id="s1")


def test_example_session_start(kernel, example, caplog):
    example("hermes_session_start")
    with caplog.at_level(logging.INFO, logger="audit"):
        kernel.emit("hermes_session_start", session=SESSION)
    assert "session s2 started from cli (continues s1)" in caplog.text
    assert not kernel.pm.hook_errors


def test_example_turn_end(kernel, example):
    module = example("hermes_turn_end")
    usage = hermes.Usage(input_tokens=10, output_tokens=5)
    kernel.emit("hermes_turn_end", session=SESSION, turn=hermes.TurnEvent("q", "a", usage=usage))
    kernel.emit("hermes_turn_end", session=SESSION, turn=hermes.TurnEvent("q", "", status="failed"))
    assert module.TOKENS == {"s2": 15, "failed turns": 1}
    assert not kernel.pm.hook_errors


def test_example_compaction(kernel, example, caplog):
    example("hermes_compaction")
    event = hermes.CompactionEvent("s1", "s2", 40, 8, 90_000, 12_000, fallback_summary=True)
    with caplog.at_level(logging.INFO, logger="audit"):
        kernel.emit("hermes_compaction", session=SESSION, event=event)
    assert "compacted s1 -> s2: 40 messages -> 8, 78000 tokens saved (fallback summary)" in caplog.text


def test_example_memory_write(kernel, example):
    module = example("hermes_memory_write")
    kernel.emit("hermes_memory_write", session=None,
                event=hermes.MemoryWriteEvent(action="add", target="user", content="likes tea"))
    assert [(a["session"], a["action"], a["content"]) for a in module.AUDIT] == [(None, "add", "likes tea")]
    assert not kernel.pm.hook_errors


def test_example_session_end(kernel, example, caplog):
    example("hermes_session_end")
    with caplog.at_level(logging.INFO, logger="audit"):
        kernel.emit("hermes_session_end", session=SESSION, reason="user_exit")
    assert "session s2 ended: user_exit" in caplog.text


def test_example_tool_result(kernel, example):
    example("hermes_tool_result")

    class Agent:
        plugin_state: dict = {}

    ctx = hermes.ToolContext(kernel=kernel, session_id="s1", agent=Agent())
    notes = [kernel.emit("hermes_tool_result", context=ctx, tool_name="read_file", args={}, result=r)
             for r in ("see README", "see README", "other")]
    assert notes == [["Note: this project documents its build in README."], [], []]


def test_every_example_has_a_runner_here():
    here = {n for n in globals() if n.startswith("test_example_")}
    for name in SPECS:
        short = name.removeprefix("hermes_register_").removeprefix("hermes_")
        assert any(short.rstrip("s").replace("_", "") in t.replace("_", "") for t in here), (
            f"no test_example_* runs the docs/hooks.md example of {name}")


def test_hookspec_arguments_are_typed_and_the_package_says_so():
    """Every hook argument names its real type (resolvable, not Any), and py.typed ships
    so that type checkers use these annotations in plugins."""
    import typing

    import click

    from hermes import registry

    namespace = {**vars(hermes), "click": click, "Register": registry.Register,
                 "RegisterTool": registry.RegisterTool}
    for name, fn in SPECS.items():
        hints = typing.get_type_hints(fn, globalns=namespace)
        for arg in inspect.signature(fn).parameters:
            assert arg in hints and hints[arg] is not typing.Any, f"{name}({arg}) is untyped"
    assert (ROOT / "kernel" / "py.typed").is_file()
    assert "py.typed" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["*"]
