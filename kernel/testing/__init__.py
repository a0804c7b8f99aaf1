"""Test helpers for Hermes and its plugins.

The pytest plugin (:mod:`hermes.testing.pytest_plugin`, loaded automatically through the
``pytest11`` entry point) provides fixtures; :mod:`hermes.testing.conformance` holds the
conformance suites a plugin author subclasses; :mod:`hermes.testing.fakellm` is a
loopback server speaking the OpenAI and Anthropic wire protocols.
"""

from __future__ import annotations

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


__all__ = ["HookRecorder"]
