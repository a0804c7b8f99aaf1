"""hermes-honcho: user modelling for Hermes on Honcho (plastic-labs).

Install with ``hermes plugins install ./contrib/hermes-honcho`` and select it with
``memory.provider: honcho``; settings live under ``plugins.honcho``. Importing this module
is cheap: the ``honcho`` SDK is imported only when the provider first talks to the server.
"""

from __future__ import annotations

from typing import Any

import hermes

from .provider import DEFAULTS, HonchoPaused, HonchoProvider, honcho_id

__version__ = "0.1.0"
__all__ = ["DEFAULTS", "HonchoPaused", "HonchoProvider", "hermes_register_memory_providers",
           "honcho_id"]


@hermes.hookimpl
def hermes_register_memory_providers(register: Any) -> None:
    """Register the ``honcho`` memory provider."""
    register("honcho", HonchoProvider,
             tools=("honcho_profile", "honcho_search", "honcho_context", "honcho_conclude"),
             description="Honcho user modelling: peer context recall, message sync, honcho_* tools")
