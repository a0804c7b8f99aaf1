"""Hermes' default plugins.

Each is an ordinary module of ``@hermes.hookimpl`` functions that imports only the public
names of :mod:`hermes`, exactly as a third-party plugin would. The kernel registers the
modules listed in :data:`DEFAULT_PLUGINS` through the same path as entry-point plugins,
so any of them can be blocked (``hermes plugins disable NAME``).
"""

#: ``(plugin name, module)`` pairs, in registration order.
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("agent-tools", "hermes.plugins.agent_tools"),
    ("compressor", "hermes.plugins.compressor"),
    ("builtin-memory", "hermes.plugins.memory"),
    ("prompt-layers", "hermes.plugins.prompt"),
    ("skills", "hermes.plugins.prompt.skills"),
    ("anthropic", "hermes.plugins.llm.anthropic_plugin"),
    ("openai", "hermes.plugins.llm.openai_plugin"),
    ("sqlite-sessions", "hermes.plugins.sessions"),
    ("session-search", "hermes.plugins.session_search"),
    ("backup", "hermes.plugins.backup"),
    ("forget", "hermes.plugins.forget"),
)
