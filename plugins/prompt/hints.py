"""Subdirectory hints: project instructions discovered as the agent moves around.

The system prompt holds the working directory's context file only. When a tool call
touches a directory *below* the working directory that has its own ``AGENTS.md``,
``CLAUDE.md`` or ``.cursorrules``, that file is appended to the tool's result — once per
directory per session, never to the system prompt (which would break its prompt cache).

Safety: only directories inside the working-directory tree are considered (symlinks are
resolved first), vendored and cache directories (``node_modules``, ``.venv`` …) are
skipped, a home-like working directory (``/``, ``$HOME``, ``/home``, ``/root``) turns
discovery off, every file goes through the same frontmatter strip, cap and threat scan as
startup context files, and identical content (symlinks, copies, the working directory's
own file) is shown once.

The prompt plugin offers them through the ``hermes_tool_result`` hook (one
:class:`SubdirectoryHints` per agent, kept in ``ToolContext.agent.plugin_state``), so a
third party's ``hermes_tool_result`` can add notes of its own, and disabling
``prompt-layers`` turns these off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import threading
from pathlib import Path
from typing import Any

import hermes

log = logging.getLogger("hermes.prompt")

#: Hint files in priority order; the first one present in a directory wins.
HINT_FILES = ("AGENTS.md", "agents.md", "CLAUDE.md", "claude.md", ".cursorrules")
#: Per-file cap when none is given.
MAX_HINT_CHARS = 32_000
#: How many ancestors of a touched path are checked (stopping at the working directory).
MAX_LEVELS = 5
#: Tool arguments that name a path.
PATH_ARGS = ("path", "file_path", "filepath", "file", "workdir", "cwd", "directory", "dir")
#: Argument holding a shell command line (terminal-like tools).
COMMAND_ARGS = ("command", "cmd")
#: Directory names whose contents are copies or caches, never project instructions.
PRUNED_DIRS = frozenset({
    ".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", "site-packages",
    "vendor", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".cache",
    "dist", "build", ".next", "target",
})

__all__ = ["HINT_FILES", "SubdirectoryHints"]


class SubdirectoryHints:
    """Tracks which directories' hint files the agent has seen this session.

    ``SubdirectoryHints(cwd, max_chars=..., enabled=True)``; call :meth:`check` after
    every tool call and append a non-empty result to that tool's output. ``enabled=False``
    (delegated sub-agents, ``skip_context_files``) never returns anything. Thread-safe:
    parallel tool calls may check at once.
    """

    def __init__(self, cwd: str | os.PathLike[str], *, max_chars: int | None = None, enabled: bool = True):
        self.max_chars = int(max_chars or MAX_HINT_CHARS)
        self.enabled = enabled
        self._lock = threading.Lock()
        self.rebind(cwd)

    def rebind(self, cwd: str | os.PathLike[str]) -> None:
        """Re-anchor at a new working directory and forget what was loaded."""
        with self._lock:
            try:
                self.cwd = Path(cwd).resolve()
            except OSError:
                self.cwd = Path(cwd).absolute()
            self._loaded: set[Path] = {self.cwd}
            self._digests: set[str] = set()
            # The working directory's own file is in the system prompt already.
            own = self._hint_file(self.cwd)
            if own is not None:
                self._digests.add(_digest(own[1]))
            self._active = self.enabled and not _home_like(self.cwd)

    @property
    def loaded(self) -> set[Path]:
        """Directories already checked (the working directory included)."""
        return set(self._loaded)

    def check(self, tool_name: str, args: dict[str, Any]) -> str:
        """Hint text for the directories this call touched that have not been seen yet,
        ``""`` when there is nothing new. Each hint reads
        ``[Subdirectory context discovered: <rel path>]`` followed by the file's text."""
        if not self._active or not isinstance(args, dict):
            return ""
        try:
            candidates = self._directories(tool_name, args)
        except Exception as exc:  # odd arguments must never fail a tool result
            log.debug("subdirectory hints: cannot read paths of %s: %s", tool_name, exc)
            return ""
        hints: list[str] = []
        with self._lock:
            for directory in candidates:
                if directory in self._loaded:
                    continue
                self._loaded.add(directory)
                hint = self._load(directory)
                if hint:
                    hints.append(hint)
        return "\n\n".join(hints)

    # -- internals --------------------------------------------------------------------------

    def _directories(self, tool_name: str, args: dict[str, Any]) -> list[Path]:
        raw: list[str] = [str(args[k]) for k in PATH_ARGS if isinstance(args.get(k), str) and args[k]]
        for key in COMMAND_ARGS:
            if isinstance(args.get(key), str):
                raw.extend(_command_paths(args[key]))
        base = self.cwd
        workdir = args.get("workdir") or args.get("cwd")
        if isinstance(workdir, str) and workdir:
            base = self._resolve(workdir, self.cwd) or self.cwd
        out: list[Path] = []
        for item in raw:
            path = self._resolve(item, base)
            if path is None:
                continue
            directory = path if path.is_dir() else path.parent
            for _ in range(MAX_LEVELS):
                if directory == self.cwd or not _inside(directory, self.cwd):
                    break
                if directory in self._loaded:
                    break  # its ancestors were looked at when it was
                if not _pruned(directory, self.cwd) and directory not in out:
                    out.append(directory)
                directory = directory.parent
        # Outermost first, so a parent's instructions read before a child's.
        return sorted(out, key=lambda p: len(p.parts))

    def _resolve(self, raw: str, base: Path) -> Path | None:
        try:
            path = Path(os.path.expanduser(raw))
            if not path.is_absolute():
                path = base / path
            path = path.resolve()
        except (OSError, RuntimeError, ValueError):
            return None
        return path if _inside(path, self.cwd) else None

    def _hint_file(self, directory: Path) -> tuple[Path, str] | None:
        for name in HINT_FILES:
            path = directory / name
            try:
                if not path.is_file():
                    continue
                real = path.resolve()
                if not _inside(real, self.cwd):
                    log.warning("hint file %s points outside the working directory; ignored", path)
                    return None
                return path, path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                log.debug("cannot read hint file %s: %s", path, exc)
        return None

    def _load(self, directory: Path) -> str:
        found = self._hint_file(directory)
        if found is None:
            return ""
        path, raw = found
        digest = _digest(raw)
        if digest in self._digests:
            return ""
        self._digests.add(digest)
        label = os.path.relpath(path, self.cwd)
        text, _threats, _truncated = hermes.prepare_context_text(raw, label, self.max_chars)
        if not text:
            return ""
        return f"[Subdirectory context discovered: {label}]\n{text}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _pruned(directory: Path, root: Path) -> bool:
    return any(part in PRUNED_DIRS for part in directory.relative_to(root).parts)


def _home_like(cwd: Path) -> bool:
    """Discovery below these would wander through unrelated projects."""
    homes = {Path("/"), Path("/home"), Path("/root"), Path("/Users")}
    try:
        homes.add(Path.home().resolve())
    except (OSError, RuntimeError):
        pass
    return cwd in homes


def _command_paths(command: str) -> list[str]:
    """Path-like tokens of a shell command: tokens containing ``/`` or ``.`` (not URLs or
    ``git@`` remotes; for ``--opt=value`` and ``VAR=value`` the value), and operands of
    ``cd``/``pushd`` at the start of a shell segment (``echo cd x`` is not navigation)."""
    try:
        tokens = shlex.split(command, posix=True)
    except ValueError:
        tokens = command.split()
    out: list[str] = []
    segment_start, navigate = True, False
    for token in tokens:
        if token in ("&&", "||", ";", "|", "&"):
            segment_start, navigate = True, False
            continue
        ends_segment = token.endswith(";")
        token = token.rstrip(";")
        if segment_start and token in ("cd", "pushd"):
            segment_start, navigate = False, True
            continue
        if navigate and token.startswith("-"):
            continue  # cd -P dir
        if navigate:
            if token:
                out.append(token)
            navigate = False
        else:
            value = token.split("=", 1)[1] if "=" in token else token
            if value and not value.startswith("-") and "://" not in value \
                    and not value.startswith("git@") and ("/" in value or "." in value):
                out.append(value)
        segment_start = ends_segment
    return out
