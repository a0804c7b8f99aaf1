"""Tool sources (``hermes.Tool`` with ``expand``): tools found at run time, expanded lazily
by ``Kernel.tools()`` and closed by ``Kernel.close()``."""

from __future__ import annotations

import json
from typing import Any

import hermes


def _tool(name: str) -> hermes.Tool:
    return hermes.Tool(name=name, schema={"name": name, "description": name},
                       handler=lambda args, ctx: json.dumps({"tool": name}))


class Source(hermes.Tool):
    def __init__(self, names: list[str], *, broken: bool = False) -> None:
        super().__init__(name="src", schema={"name": "src"}, handler=lambda a, c: "{}", expand=self.found)
        self.names, self.broken, self.calls, self.closed = names, broken, 0, 0

    def found(self, kernel: Any) -> list[hermes.Tool]:
        self.calls += 1
        if self.broken:
            raise RuntimeError("server gone")
        return [_tool(n) for n in self.names]

    def close(self) -> None:
        self.closed += 1


def _kernel(kernel_factory: Any, *tools: hermes.Tool) -> Any:
    class Plugin:
        @hermes.hookimpl
        def hermes_register_tools(self, register: Any) -> None:
            for tool in tools:
                register(tool)

    kernel = kernel_factory()
    kernel.register_plugin(Plugin(), "t-source")
    return kernel


def test_a_source_is_expanded_only_when_tools_are_asked_for(kernel_factory: Any) -> None:
    source = Source(["remote_a", "remote_b"])
    kernel = _kernel(kernel_factory, source, _tool("local"))
    assert source.calls == 0  # nothing started at boot
    names = [t.name for t in kernel.tools()]
    assert "src" not in names and {"local", "remote_a", "remote_b"} <= set(names)
    assert names.index("local") < names.index("remote_a")
    assert source.calls == 1
    assert "remote_a" not in {t.name for t in kernel.tools(expand=False)} and source.calls == 1


def test_withdrawn_taken_and_broken_tools(kernel_factory: Any) -> None:
    source, broken = Source(["local", "remote"]), Source([], broken=True)
    broken.name = "broken-src"
    kernel = _kernel(kernel_factory, source, broken, _tool("local"))
    tools = kernel.tools()
    assert [t.name for t in tools].count("local") == 1  # a registered tool keeps its name
    assert next(t for t in tools if t.name == "local").handler({}, None) == '{"tool": "local"}'
    source.names = []  # the source withdraws its tool
    assert "remote" not in {t.name for t in kernel.tools()}


def test_kernel_close_closes_sources(kernel_factory: Any) -> None:
    source = Source([])
    kernel = _kernel(kernel_factory, source)
    kernel.close()
    assert source.closed == 1
