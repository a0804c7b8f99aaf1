"""pytest fixtures for Hermes and its plugins (entry point ``pytest11``).

Import-light on purpose: every pytest run in an environment with Hermes installed loads
this module, so Hermes itself is imported only inside the fixtures.

Fixtures:

* ``hermes_home`` — a fresh, empty Hermes home in a temporary directory.
* ``kernel`` — a :class:`hermes.Kernel` on that home with the default plugins and
  autoload off (no entry points, no local plugins).
* ``kernel_factory`` — builds more kernels on the same home: ``kernel_factory(config={...})``.
* ``register_plugin`` — ``register_plugin(obj, name=None, kernel=None)`` adds a plugin to
  the kernel and removes it at teardown.
* ``hook_recorder`` — a :class:`hermes.testing.HookRecorder` on the ``kernel`` fixture.
* ``fake_llm`` — a started :class:`hermes.testing.fakellm.FakeLLMServer` (loopback), stopped
  at teardown; ``fake_llm.config(provider=...)`` points a kernel's main model at it.
* ``agent_factory`` — ``agent_factory(config=None, provider="openai", *, plugins=(),
  **agent_kwargs)`` builds an agent (:class:`hermes.runtime.agent.Agent`) on a new kernel
  whose main model is ``fake_llm`` (``provider`` is the wire protocol), with the memory
  nudge off; ``config`` sections are merged over that, ``plugins`` are registered before
  the selection is checked. Every agent is closed at teardown.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    for var in ("HERMES_LOAD_PLUGINS", "HERMES_DISABLE_PLUGINS", "HERMES_NO_PLUGINS",
                "HERMES_STRICT_PLUGINS", "HERMES_TRACE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def kernel_factory(hermes_home: Path) -> Iterator[Any]:
    from hermes import Kernel

    kernels: list[Any] = []

    def make(config: dict | None = None, **kwargs: Any) -> Any:
        kwargs.setdefault("autoload", False)
        kwargs.setdefault("check_selection", False)
        k = Kernel(config=config, home=kwargs.pop("home", hermes_home), **kwargs)
        kernels.append(k)
        return k

    yield make
    for k in kernels:
        k.close()


@pytest.fixture
def kernel(kernel_factory: Any) -> Any:
    return kernel_factory()


@pytest.fixture
def register_plugin(kernel: Any) -> Iterator[Any]:
    added: list[tuple[Any, str]] = []

    def register(plugin: Any, name: str | None = None, kernel: Any = kernel) -> Any:
        record = kernel.register_plugin(plugin, name)
        added.append((kernel, record.name))
        return record

    yield register
    for k, name in reversed(added):
        k.unregister_plugin(name)


@pytest.fixture
def hook_recorder(kernel: Any) -> Iterator[Any]:
    from hermes.testing import HookRecorder

    recorder = HookRecorder(kernel)
    yield recorder
    recorder.close()


@pytest.fixture
def fake_llm() -> Iterator[Any]:
    from hermes.testing.fakellm import FakeLLMServer

    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def agent_factory(kernel_factory: Any, fake_llm: Any) -> Iterator[Any]:
    from hermes.runtime.agent import Agent

    agents: list[Any] = []

    def make(config: dict | None = None, provider: str = "openai", *, plugins: Any = (),
             **kwargs: Any) -> Any:
        cfg = fake_llm.config(provider=provider)
        cfg.setdefault("memory", {})["nudge_interval"] = 0
        for key, value in (config or {}).items():
            cfg.setdefault(key, {}).update(value)
        kernel = kernel_factory(config=cfg, plugins=plugins, check_selection=True)
        agent = Agent(kernel, **kwargs)
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()
