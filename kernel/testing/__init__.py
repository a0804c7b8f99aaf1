"""Test helpers for Hermes and its plugins.

The pytest plugin (:mod:`hermes.testing.pytest_plugin`, loaded automatically through the
``pytest11`` entry point) provides fixtures; :mod:`hermes.testing.conformance` holds the
conformance suites a plugin author subclasses; :mod:`hermes.testing.fakellm` is a
loopback server speaking the OpenAI and Anthropic wire protocols.
"""

from __future__ import annotations

from typing import Any


class HookRecorder:
    """Records every hook call of a kernel's plugin manager: ``calls`` is a list of
    ``(hook_name, kwargs)``; :meth:`names` lists hook names in call order. Event hooks
    emitted through :meth:`hermes.Kernel.emit` are recorded too."""

    def __init__(self, kernel: Any):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._kernel = kernel
        self._undo = kernel.pm.add_hookcall_monitoring(self._before, lambda *a: None)
        self._orig_emit = kernel.pm.emit

        def emit(hook_name: str, **kwargs: Any) -> None:
            self.calls.append((hook_name, kwargs))
            self._orig_emit(hook_name, **kwargs)

        kernel.pm.emit = emit

    def _before(self, hook_name: str, impls: list, kwargs: dict) -> None:
        self.calls.append((hook_name, dict(kwargs)))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def of(self, hook_name: str) -> list[dict[str, Any]]:
        """The keyword arguments of every call of ``hook_name``."""
        return [kw for name, kw in self.calls if name == hook_name]

    def close(self) -> None:
        self._undo()
        self._kernel.pm.emit = self._orig_emit


__all__ = ["HookRecorder"]
