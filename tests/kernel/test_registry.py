"""Registries: attribution, conflicts, unknown names, factories."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hermes
from hermes.registry import KINDS, SELECTION_KEYS, Entry, Registries, Registry, make_register


def test_entries_remember_their_plugin_and_description():
    reg = Registry("context-engine")

    class Engine:
        """Keeps every message.

        More text that is not the summary."""

    entry = reg.add("keep", Engine, "plugin-a")
    assert (entry.kind, entry.name, entry.factory, entry.plugin) == ("context-engine", "keep", Engine, "plugin-a")
    assert entry.description == "Keeps every message."
    assert reg.add("other", Engine, "plugin-a", "explicit").description == "explicit"
    assert reg.names() == ["keep", "other"] and len(reg) == 2 and "keep" in reg


def test_conflict_names_both_plugins_and_the_fix():
    reg = Registry("memory-provider")
    reg.add("mem", lambda: 1, "first-plugin")
    with pytest.raises(hermes.ConflictError) as info:
        reg.add("mem", lambda: 2, "second-plugin")
    err = info.value
    assert (err.kind, err.name, err.first, err.second) == ("memory-provider", "mem", "first-plugin", "second-plugin")
    assert str(err) == ("memory-provider 'mem' is registered by two plugins: 'first-plugin' and "
                        "'second-plugin'. Disable one of them with `hermes plugins disable second-plugin`.")
    assert reg.get("mem").plugin == "first-plugin", "the first registration is kept"


def test_identical_factory_twice_is_a_no_op():
    reg = Registry("tool")

    def factory():
        return None

    first = reg.add("x", factory, "a")
    assert reg.add("x", factory, "b") is first


def test_one_plugin_registering_a_name_twice_is_told_so():
    reg = Registry("llm")
    reg.add("x", lambda: 1, "a")
    with pytest.raises(ValueError, match="plugin 'a' registered the llm 'x' twice"):
        reg.add("x", lambda: 2, "a")


def test_bad_names_are_refused():
    reg = Registry("llm")
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="non-empty strings"):
            reg.add(bad, lambda: 1, "p")


def test_unknown_name_lists_the_registered_ones():
    reg = Registry("context-engine")
    reg.add("zeta", lambda: 1, "p")
    reg.add("alpha", lambda: 1, "p")
    with pytest.raises(hermes.UnknownPluginError) as info:
        reg.get("nope", setting="context.engine")
    err = info.value
    assert err.available == ["alpha", "zeta"] and err.setting == "context.engine"
    assert str(err).startswith("unknown context-engine 'nope' (config `context.engine`). "
                               "Choose one of: alpha, zeta.")
    assert "(none registered)" in str(hermes.UnknownPluginError("llm", "x", []))


def test_remove_plugin_and_registered_by():
    regs = Registries()
    regs.context_engines.add("e", lambda: 1, "p")
    regs.tools.add("t", object(), "p")
    regs.tools.add("u", object(), "q")
    assert regs.registered_by("p") == {"context-engine": ["e"], "tool": ["t"]}
    regs.remove_plugin("p")
    assert regs.registered_by("p") == {}
    assert regs.tools.names() == ["u"]


def test_by_kind_accepts_cli_names_and_attributes_and_refuses_others():
    regs = Registries()
    for kind, attr in KINDS.items():
        assert regs.by_kind(kind) is getattr(regs, attr) is regs.by_kind(attr)
    with pytest.raises(ValueError, match="choose one of: llm, session-store, memory-provider, context-engine"):
        regs.by_kind("engines")
    assert set(SELECTION_KEYS) <= set(KINDS)


def test_entry_build_passes_the_kernel_only_when_accepted():
    kernel = object()

    class WithKernel:
        def __init__(self, kernel):
            self.kernel = kernel

    class Without:
        pass

    def keyword_only(*, option=1):
        return option

    assert Entry("k", "a", WithKernel, "p").build(kernel).kernel is kernel
    assert isinstance(Entry("k", "b", Without, "p").build(kernel), Without)
    assert Entry("k", "c", keyword_only, "p").build(kernel) == 1
    assert Entry("k", "d", lambda *args: args, "p").build(kernel) == (kernel,)
    # Builtins without a signature are called with the kernel.
    assert Entry("k", "e", dict.fromkeys, "p").build(["x"]) == {"x": None}


def test_register_callable_checks_what_it_is_given():
    reg = Registry("context-engine")
    register = make_register(reg, "plug")
    with pytest.raises(TypeError, match="expects a class or callable, got 42 from 'plug'"):
        register("x", 42)
    register("ok", dict, description="d")
    assert reg.get("ok").plugin == "plug"

    tools = Registry("tool")
    register_tool = make_register(tools, "plug", tools=True)
    with pytest.raises(TypeError, match="expects a hermes.Tool"):
        register_tool("not a tool")
    with pytest.raises(TypeError, match="expects a hermes.Tool"):
        register_tool(hermes.Tool(name="t", schema="nope", handler=lambda a, c: ""))  # type: ignore[arg-type]
    tool = hermes.Tool(name="t", schema={"description": "does t"}, handler=lambda a, c: "")
    register_tool(tool)
    assert tools.get("t").factory is tool and tools.get("t").description == "does t"


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from(["p1", "p2", "p3"])), max_size=30))
def test_first_registration_of_a_name_wins(registrations):
    """Whatever the sequence, each name belongs to the first plugin that registered it,
    and every later claim by another plugin is a ConflictError naming both."""
    reg = Registry("tool")
    owner: dict[str, str] = {}
    for name, plugin in registrations:
        def factory():
            return None

        if name in owner and owner[name] != plugin:
            with pytest.raises(hermes.ConflictError) as info:
                reg.add(name, factory, plugin)
            assert (info.value.first, info.value.second) == (owner[name], plugin)
        elif name in owner:
            with pytest.raises(ValueError):
                reg.add(name, factory, plugin)
        else:
            reg.add(name, factory, plugin)
            owner[name] = plugin
    assert {e.name: e.plugin for e in reg} == owner
