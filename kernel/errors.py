"""Exceptions raised by the kernel. Each message names the culprit and the fix."""

from __future__ import annotations


class HermesError(Exception):
    """Base class of every error the kernel raises on purpose."""


class ConfigError(HermesError):
    """``config.yaml`` (or a value in it) is malformed or invalid.

    ``path`` is the dotted key path (``compression.threshold``) or ``None`` when the file
    as a whole is broken.
    """

    def __init__(self, message: str, *, path: str | None = None, file: str | None = None):
        super().__init__(message)
        self.path = path
        self.file = file


class HomeError(HermesError):
    """``HERMES_HOME`` cannot be created or written."""


class PluginError(HermesError):
    """A plugin could not be loaded or used."""


class ConflictError(PluginError):
    """Two plugins registered the same name for one kind of component."""

    def __init__(self, kind: str, name: str, first: str, second: str):
        super().__init__(
            f"{kind} {name!r} is registered by two plugins: {first!r} and {second!r}. "
            f"Disable one of them with `hermes plugins disable {second}`."
        )
        self.kind, self.name, self.first, self.second = kind, name, first, second


class UnknownPluginError(PluginError):
    """A configured name matches nothing that any plugin registered."""

    def __init__(self, kind: str, name: str, available: list[str], *, setting: str = ""):
        choices = ", ".join(sorted(available)) or "(none registered)"
        where = f" (config `{setting}`)" if setting else ""
        super().__init__(
            f"unknown {kind} {name!r}{where}. Choose one of: {choices}. "
            f"Is the plugin that provides it installed and enabled? See `hermes plugins list`."
        )
        self.kind, self.name, self.available, self.setting = kind, name, sorted(available), setting


class LLMError(HermesError):
    """An LLM call failed. ``retryable`` says whether trying again may help."""

    retryable = False

    def __init__(self, message: str, *, status: int | None = None, provider: str = ""):
        super().__init__(message)
        self.status = status
        self.provider = provider


class LLMAuthError(LLMError):
    """The provider refused the credentials (401/403)."""


class LLMRateLimitError(LLMError):
    """The provider is rate limiting (429)."""

    retryable = True


class LLMUnavailableError(LLMError):
    """A server error, timeout or connection failure (5xx, network)."""

    retryable = True


class ContextLengthError(LLMError):
    """The request did not fit the model's context window; the runtime compacts and retries."""


class StoreError(HermesError):
    """A session store could not be opened or written (corrupt, locked, not a database)."""
