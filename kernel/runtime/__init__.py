"""The runtime: the agent turn loop and the parts it drives (prompt builder, memory
manager, context fencing, the chat command).

``from hermes.runtime import Agent`` is the entry point for embedding Hermes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Agent", "IterationBudget", "TurnResult"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `import hermes` (which imports runtime submodules) stays cheap.
    if name in __all__:
        from . import agent

        return getattr(agent, name)
    raise AttributeError(name)
