"""The default prompt layers.

Cached layers (rendered once per session into the byte-stable system prompt), by order:

====  ======================  =====================================================
order name                    renders
====  ======================  =====================================================
100   identity                ``$HERMES_HOME/SOUL.md``, else the default identity
200   tool_guidance           guidance for the memory, session_search, skills tools
250   tool_use_enforcement    GPT/Codex-family models: act with tools, do not narrate
300   memory_provider         the external memory provider's static block
400   system_message          config ``prompt.system_message``
500   memory_snapshot         the frozen MEMORY snapshot
600   user_snapshot           the frozen USER profile snapshot
700   skills_index            installed skills by category
800   context_files           the project's context file (AGENTS.md …)
900   timestamp               session start time, session id, model
1000  platform_hint           how to format for the surface (cli, telegram …)
====  ======================  =====================================================

Ephemeral layers (every API call, never stored): 1100 ``ephemeral_system_prompt``
(second system block), 1200 ``prefill`` (messages after the system message), 1300
``recalled_memory`` (appended to the last user message).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import hermes

from .skills import discover_skills, render_skills_index

log = logging.getLogger("hermes.prompt")

PLUGIN_NAME = "prompt-layers"

DEFAULT_IDENTITY = (
    "You are Hermes Agent, an AI assistant built by Nous Research. You help with a wide "
    "range of work: answering questions, writing and changing code, research and analysis, "
    "and carrying out tasks with your tools.\n"
    "Fit the length of a reply to the question. When you finish a piece of work, report "
    "briefly what changed, how you checked it and what is left. Skip filler and do not "
    "restate the request or narrate tool calls the user can already see. State things "
    "plainly, say when you are unsure, and agree only when the user is right."
)

MEMORY_GUIDANCE = (
    "You have persistent memory that carries across sessions; use the memory tool to keep "
    "it. Task-specific know-how (procedures, pitfalls, preferences for one kind of work) "
    "belongs in skills; memory is for the few facts that matter in every session: who the "
    "user is, their preferences, their environment, stable conventions. Memory has a hard "
    "size budget, so merge and tighten entries instead of piling them up, and write "
    "declarative facts rather than instructions. What happened a week ago belongs to "
    "session history, not memory."
)

USER_PROFILE_GUIDANCE = (
    "You keep a profile of the user across sessions with the memory tool (target 'user'): "
    "their name, role, preferences and how they like to work. Keep it short and factual."
)

SESSION_SEARCH_GUIDANCE = (
    "When the user refers to an earlier conversation, or context from a past session would "
    "likely help, search past sessions with session_search before asking them to repeat it."
)

SKILLS_GUIDANCE = (
    "Skills hold saved procedures for recurring work. When a task matches a skill, load it "
    "with skill_view(name) before you start and follow it; skills_list shows what exists. "
    "If a skill's content was dropped from the conversation by a compaction, load it again "
    "before relying on it."
)

PLATFORM_HINTS: dict[str, str] = {
    "cli": (
        "You are running in a terminal (command-line interface). Write plain text that reads "
        "well in a terminal; keep markdown light and avoid tables unless asked."
    ),
    "tui": "You are running in a terminal UI that renders markdown; keep tables narrow.",
    "telegram": (
        "You are chatting on Telegram. Keep messages short; simple markdown (bold, italics, "
        "code) renders, tables do not."
    ),
    "discord": "You are chatting on Discord. Markdown renders; keep each message under 2000 characters.",
    "slack": "You are chatting on Slack. Use Slack-style formatting sparingly; tables do not render.",
    "whatsapp": "You are chatting on WhatsApp. Use plain text with light emphasis; no tables or headings.",
    "signal": "You are chatting on Signal. Use plain text only.",
    "sms": "You are replying by SMS. Plain text only, as short as the answer allows.",
    "email": "You are replying by email. Write complete, well-structured paragraphs; plain text.",
    "cron": (
        "You are running as a scheduled job with no user watching. Do the task and report "
        "the result concisely; do not ask questions."
    ),
    "api": "You are serving an API client. Answer in well-formed markdown unless told otherwise.",
}


def _config(ctx: hermes.PromptContext, path: str, default: Any = None) -> Any:
    config = ctx.config
    return config.get(path, default) if config is not None else default


def _max_chars(ctx: hermes.PromptContext) -> int | None:
    return _config(ctx, "prompt.context_file_max_chars")


def _plugin_config(ctx: hermes.PromptContext) -> dict[str, Any]:
    kernel = ctx.kernel
    return kernel.plugin_config(PLUGIN_NAME) if hasattr(kernel, "plugin_config") else {}


# --------------------------------------------------------------------------------------
# Cached layers
# --------------------------------------------------------------------------------------


class IdentityLayer(hermes.PromptLayer):
    """``$HERMES_HOME/SOUL.md`` (scanned, capped), else the default identity. Delegated
    sub-agents (``skip_context_files``) always get the default identity."""

    name, order = "identity", 100

    def render(self, ctx: hermes.PromptContext) -> str:
        if ctx.skip_context_files or ctx.home is None:
            return DEFAULT_IDENTITY
        soul = hermes.load_soul_md(ctx.home, max_chars=_max_chars(ctx))
        if soul is None:
            return DEFAULT_IDENTITY
        if soul.blocked:
            # Keep an identity and say why SOUL.md is missing (visible in `prompt show`).
            return f"{DEFAULT_IDENTITY}\n\n{soul.text}"
        return soul.text


class ToolGuidanceLayer(hermes.PromptLayer):
    """Guidance for the memory, session_search and skills tools — only for those that
    are enabled this session."""

    name, order = "tool_guidance", 200

    def render(self, ctx: hermes.PromptContext) -> str:
        tools = ctx.tool_names
        parts: list[str] = []
        if "memory" in tools:
            memory_on = _config(ctx, "memory.memory_enabled", True)
            profile_on = _config(ctx, "memory.user_profile_enabled", True)
            if memory_on:
                parts.append(MEMORY_GUIDANCE)
            elif profile_on:
                parts.append(USER_PROFILE_GUIDANCE)
        if "session_search" in tools:
            parts.append(SESSION_SEARCH_GUIDANCE)
        if "skill_view" in tools or "skills_list" in tools:
            parts.append(SKILLS_GUIDANCE)
        return "\n\n".join(parts)


TOOL_USE_ENFORCEMENT = (
    "# Tool use\n"
    "When a step needs a tool, call the tool in this reply. Do not describe the call you "
    "would make, announce that you are about to act, or end your turn with a plan: act, "
    "then report what the tool returned. Keep going until the task is done or you need "
    "something only the user can give; if a tool fails, say so and try another way. Never "
    "claim a result you did not get from a tool."
)

#: Model-name fragments of the families that need :data:`TOOL_USE_ENFORCEMENT` (they
#: tend to narrate a tool call instead of making it).
ENFORCED_MODEL_FAMILIES = ("gpt", "codex")


class ToolUseEnforcementLayer(hermes.PromptLayer):
    """Tool-use enforcement for GPT/Codex-family models (model name contains ``gpt`` or
    ``codex``), when the session has tools: act with the tools instead of describing
    what you would do."""

    name, order = "tool_use_enforcement", 250

    def render(self, ctx: hermes.PromptContext) -> str:
        model = (ctx.model or "").lower()
        if not ctx.tool_names or not any(f in model for f in ENFORCED_MODEL_FAMILIES):
            return ""
        return TOOL_USE_ENFORCEMENT


class MemoryProviderLayer(hermes.PromptLayer):
    """The external memory provider's static block (Honcho, mem0 …), if one is active."""

    name, order = "memory_provider", 300

    def render(self, ctx: hermes.PromptContext) -> str | None:
        if ctx.memory is None:
            return None
        return ctx.memory.external_system_prompt_block()


class SystemMessageLayer(hermes.PromptLayer):
    """The optional configured system message (``prompt.system_message``)."""

    name, order = "system_message", 400

    def render(self, ctx: hermes.PromptContext) -> str | None:
        return _config(ctx, "prompt.system_message")


class MemorySnapshotLayer(hermes.PromptLayer):
    """The MEMORY.md snapshot, frozen when the session's memory was loaded."""

    name, order = "memory_snapshot", 500
    target = "memory"

    def render(self, ctx: hermes.PromptContext) -> str | None:
        if ctx.memory is None:
            return None
        return ctx.memory.builtin_block(self.target)


class UserSnapshotLayer(MemorySnapshotLayer):
    """The USER.md profile snapshot, frozen when the session's memory was loaded."""

    name, order = "user_snapshot", 600
    target = "user"


class SkillsIndexLayer(hermes.PromptLayer):
    """Installed skills by category — only when the skill tools are enabled."""

    name, order = "skills_index", 700

    def render(self, ctx: hermes.PromptContext) -> str | None:
        if ctx.home is None or not ({"skill_view", "skills_list"} & ctx.tool_names):
            return None
        kernel = ctx.kernel
        disabled = kernel.plugin_config("skills").get("disabled") if hasattr(kernel, "plugin_config") else []
        return render_skills_index(discover_skills(ctx.home, disabled=disabled or ()))


class ContextFilesLayer(hermes.PromptLayer):
    """The project's context file(s) from the working directory (first kind found wins);
    nothing for delegated sub-agents."""

    name, order = "context_files", 800

    def render(self, ctx: hermes.PromptContext) -> str | None:
        if ctx.skip_context_files or ctx.cwd is None:
            return None
        # SOUL.md is the identity layer's; never load it twice.
        return hermes.build_context_files_prompt(ctx.cwd, home=ctx.home, include_soul=False,
                                                 max_chars=_max_chars(ctx))


class TimestampLayer(hermes.PromptLayer):
    """When the session started (``ctx.now`` — never the current clock, which would
    change the prompt's bytes), the session id and the model."""

    name, order = "timestamp", 900

    def render(self, ctx: hermes.PromptContext) -> str:
        started = dt.datetime.fromtimestamp(ctx.now).astimezone()
        lines = [f"Conversation started: {started:%A}, {started.isoformat(timespec='minutes')}"]
        if ctx.session_id:
            lines.append(f"Session: {ctx.session_id}")
        if ctx.model:
            lines.append(f"Model: {ctx.model}")
        return "\n".join(lines)


class PlatformHintLayer(hermes.PromptLayer):
    """How to format for the surface the agent talks through. ``plugins.prompt-layers.
    platform_hints`` (``{platform: text}``) replaces or adds hints; ``""`` silences one."""

    name, order = "platform_hint", 1000

    def render(self, ctx: hermes.PromptContext) -> str | None:
        overrides = _plugin_config(ctx).get("platform_hints") or {}
        if isinstance(overrides, dict) and ctx.platform in overrides:
            return str(overrides[ctx.platform] or "")
        return PLATFORM_HINTS.get(ctx.platform)


# --------------------------------------------------------------------------------------
# Ephemeral layers
# --------------------------------------------------------------------------------------


class EphemeralSystemPromptLayer(hermes.PromptLayer):
    """Per-call system text: ``ctx.extra["ephemeral_system_prompt"]``, else config
    ``prompt.ephemeral_system_prompt``. Sent after the cached prompt, never stored."""

    name, order, cached, placement = "ephemeral_system_prompt", 1100, False, "system"

    def render(self, ctx: hermes.PromptContext) -> str | None:
        value = ctx.extra.get("ephemeral_system_prompt")
        return value if value is not None else _config(ctx, "prompt.ephemeral_system_prompt")


class PrefillLayer(hermes.PromptLayer):
    """Prefill messages after the system message: ``ctx.extra["prefill"]``, else config
    ``prompt.prefill_messages``, else the JSON list in ``prompt.prefill_messages_file``
    (relative to ``$HERMES_HOME``)."""

    name, order, cached, placement = "prefill", 1200, False, "messages"

    def render(self, ctx: hermes.PromptContext) -> None:
        return None

    def messages(self, ctx: hermes.PromptContext) -> list[dict[str, Any]]:
        value = ctx.extra.get("prefill")
        if value is None:
            value = _config(ctx, "prompt.prefill_messages") or []
        if not value:
            path = _config(ctx, "prompt.prefill_messages_file")
            if path:
                value = _read_prefill_file(Path(path) if Path(path).is_absolute() else (ctx.home or Path()) / path)
        return [{"role": m["role"], "content": m["content"]} for m in value or ()]


def _read_prefill_file(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise hermes.HermesError(
            f"cannot read prefill messages from {path}: {exc}. "
            "Fix prompt.prefill_messages_file (a JSON list of {role, content})."
        ) from exc
    if not isinstance(data, list):
        raise hermes.HermesError(f"{path} must hold a JSON list of {{role, content}} messages")
    return data


class RecalledMemoryLayer(hermes.PromptLayer):
    """This turn's recalled memory (``ctx.extra["recalled"]``, already fenced by the
    memory manager), appended to the last user message of the call."""

    name, order, cached, placement = "recalled_memory", 1300, False, "user"

    def render(self, ctx: hermes.PromptContext) -> str | None:
        return ctx.extra.get("recalled") or None


#: Every default layer class, in order.
DEFAULT_LAYERS: tuple[type[hermes.PromptLayer], ...] = (
    IdentityLayer, ToolGuidanceLayer, ToolUseEnforcementLayer, MemoryProviderLayer, SystemMessageLayer,
    MemorySnapshotLayer, UserSnapshotLayer, SkillsIndexLayer, ContextFilesLayer,
    TimestampLayer, PlatformHintLayer,
    EphemeralSystemPromptLayer, PrefillLayer, RecalledMemoryLayer,
)
