"""Conformance suites: subclass one in your plugin's tests and point it at your component.

* :class:`SessionStoreConformance` (:mod:`.sessions`)
* :class:`MemoryProviderConformance` (:mod:`.memory`)
* :class:`ContextEngineConformance` (:mod:`.context`)

Each is a plain pytest test class (no ``Test`` prefix, so it is not collected by itself);
your subclass provides a fixture that builds the component under test. See each module.
"""

from __future__ import annotations

import importlib
from typing import Any

_SUITES = {
    "SessionStoreConformance": ".sessions",
    "MemoryProviderConformance": ".memory",
    "ContextEngineConformance": ".context",
}


def __getattr__(name: str) -> Any:
    if name in _SUITES:
        return getattr(importlib.import_module(_SUITES[name], __name__), name)
    raise AttributeError(name)


__all__ = list(_SUITES)
