"""Test helpers for Hermes and its plugins.

The pytest plugin (:mod:`hermes.testing.pytest_plugin`, loaded automatically through the
``pytest11`` entry point) provides fixtures; :mod:`hermes.testing.conformance` holds the
conformance suites a plugin author subclasses; :mod:`hermes.testing.fakellm` is a
loopback server speaking the OpenAI and Anthropic wire protocols.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any


class HookRecorder:
    """Records every hook call a kernel makes from now on: ``calls`` is a list of
    ``(hook_name, kwargs)`` in call order — event hooks (:meth:`hermes.Kernel.emit`),
    registration hooks (for plugins registered later with
    :meth:`hermes.Kernel.register_plugin`) and direct ``kernel.pm.hook.<name>(...)``
    calls. Registration calls are recorded with empty kwargs (each plugin gets its own
    ``register``). :meth:`close` stops recording."""

    def __init__(self, kernel: Any):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._undo = [
            kernel.pm.add_monitor(self._record),
            kernel.pm.add_hookcall_monitoring(
                lambda name, impls, kwargs: self._record(name, [], kwargs), lambda *_: None),
        ]

    def _record(self, hook_name: str, plugins: list[str], kwargs: dict[str, Any]) -> None:
        self.calls.append((hook_name, dict(kwargs)))

    def names(self) -> list[str]:
        """Hook names, in call order."""
        return [name for name, _ in self.calls]

    def of(self, hook_name: str) -> list[dict[str, Any]]:
        """The keyword arguments of every call of ``hook_name``."""
        return [kw for name, kw in self.calls if name == hook_name]

    def close(self) -> None:
        """Stop recording."""
        for undo in self._undo:
            undo()
        self._undo = []


def make_distribution(
    site: str | os.PathLike[str],
    name: str,
    *,
    version: str = "1.0",
    plugins: dict[str, str] | None = None,
    modules: dict[str, str] | None = None,
) -> Path:
    """Write a minimal *installed* distribution into the directory ``site``, as pip would
    leave it in site-packages: the ``modules`` (``{"my_plugin.py": source}``, paths
    relative to ``site``) and ``<name>-<version>.dist-info`` with ``METADATA`` and the
    ``hermes.plugins`` entry points ``plugins`` (``{"plugin-name": "module[:attr]"}``).

    Put ``site`` on ``sys.path`` (``monkeypatch.syspath_prepend``) or ``PYTHONPATH`` and
    Hermes discovers the plugins exactly as it discovers real ones. Returns the
    dist-info directory.
    """
    site = Path(site)
    for rel, source in (modules or {}).items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    lines = ["[hermes.plugins]", *(f"{k} = {v}" for k, v in (plugins or {}).items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (info / "top_level.txt").write_text(
        "\n".join(sorted({Path(rel).parts[0].removesuffix(".py") for rel in modules or {}})) + "\n",
        encoding="utf-8")
    return info


__all__ = ["HookRecorder", "make_distribution"]
