"""Project context files and ``SOUL.md``: discovery, clean-up, threat scan and capping.

Exactly one kind of project context is loaded per session, the first that has content:

1. ``.hermes.md`` / ``HERMES.md`` — the nearest one walking from the working directory up
   to the git root (only the working directory itself when there is no git root, so a
   file planted in ``/tmp`` or ``$HOME`` never gains authority);
2. ``AGENTS.md`` (then ``agents.md``) in the working directory;
3. ``CLAUDE.md`` (then ``claude.md``) in the working directory;
4. ``.cursorrules`` and ``.cursor/rules/*.mdc`` (sorted) in the working directory.

Every file goes through the same pipeline: a leading BOM and YAML frontmatter are
stripped, the text is capped at ``prompt.context_file_max_chars`` (70% head, 20% tail and
a marker that says how much was cut), and what would reach the prompt is scanned with the
shared threat scanner (:func:`hermes.scan_for_threats`, scope ``context``); a hit replaces
the file by a ``[BLOCKED: …]`` line naming the patterns. Unreadable files count as absent.

``SOUL.md`` (the identity, from ``$HERMES_HOME``) uses the same pipeline through
:func:`load_soul_md`; the identity layer owns it, so :func:`build_context_files_prompt`
adds it only when asked (``include_soul=True``) and never twice.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("hermes.prompt")

#: Default cap per context file, in characters (config ``prompt.context_file_max_chars``).
CONTEXT_FILE_MAX_CHARS = 20_000
#: Share of the cap kept from the start and from the end of an over-long file.
HEAD_RATIO = 0.7
TAIL_RATIO = 0.2

CONTEXT_HEADER = (
    "# Project Context\n\n"
    "The following project context files have been loaded and should be followed:"
)

_HERMES_NAMES = (".hermes.md", "HERMES.md")
_AGENTS_NAMES = ("AGENTS.md", "agents.md")
_CLAUDE_NAMES = ("CLAUDE.md", "claude.md")

__all__ = [
    "CONTEXT_FILE_MAX_CHARS",
    "ContextFile",
    "build_context_files_prompt",
    "discover_context_files",
    "find_git_root",
    "load_soul_md",
    "prepare_context_text",
    "scan_context_content",
    "strip_frontmatter",
    "truncate_content",
]


@dataclass
class ContextFile:
    """One file as it will appear in the prompt.

    ``label`` is its path relative to the working directory (or its name);
    ``text`` the cleaned, capped (or ``[BLOCKED: …]``) content; ``threats`` the ids that
    blocked it; ``original_chars`` the length before capping.
    """

    label: str
    path: Path
    text: str
    threats: list[str] = field(default_factory=list)
    truncated: bool = False
    original_chars: int = 0

    @property
    def blocked(self) -> bool:
        """Whether the scanner replaced the file by a ``[BLOCKED: …]`` line."""
        return bool(self.threats)

    def section(self) -> str:
        """``## <label>`` and the text, as rendered in the project-context block."""
        return f"## {self.label}\n\n{self.text}"


# --------------------------------------------------------------------------------------
# Text clean-up
# --------------------------------------------------------------------------------------


def strip_frontmatter(text: str) -> str:
    """``text`` without a leading BOM and a leading YAML frontmatter block
    (``---`` … ``---``). Text whose opening ``---`` is never closed is returned
    unchanged (minus the BOM): better to show it than to swallow the whole file."""
    text = text.removeprefix("\ufeff")
    if not (text.startswith("---\n") or text.startswith("---\r\n")):
        return text
    lines = text.splitlines(keepends=True)
    for i in range(1, len(lines)):
        if lines[i].rstrip("\r\n").rstrip() in ("---", "..."):
            return "".join(lines[i + 1:]).lstrip("\r\n")
    return text


def truncate_content(text: str, label: str, max_chars: int | None = None) -> str:
    """Cap ``text`` at ``max_chars``: keep the first 70% and the last 20% of the cap with
    a marker between them saying how many characters of ``label`` were cut. Text within
    the cap is returned unchanged."""
    cap = int(max_chars or CONTEXT_FILE_MAX_CHARS)
    if len(text) <= cap:
        return text
    head, tail = int(cap * HEAD_RATIO), int(cap * TAIL_RATIO)
    cut = len(text) - head - tail
    marker = (
        f"\n\n[... truncated {label}: {cut:,} of {len(text):,} characters cut from the middle; "
        f"kept the first {head:,} and the last {tail:,}. Read the file itself for the full text. ...]\n\n"
    )
    log.warning("context file %s truncated: %s of %s characters kept", label, head + tail, len(text))
    return text[:head] + marker + text[len(text) - tail:]


def scan_context_content(text: str, label: str) -> tuple[str, list[str]]:
    """Scan ``text`` with the shared threat scanner (scope ``context``).

    Returns ``(text, [])`` when clean, else ``("[BLOCKED: …]", ids)`` — the whole file is
    replaced, naming the patterns, so that nothing of an injection attempt reaches the
    model while the user can still see why the file is missing."""
    from ..safety import MAX_SCAN_CHARS, scan_for_threats

    # The caller capped the text already; scan all of it (the cap bounds the cost).
    threats = scan_for_threats(text, scope="context", max_chars=max(MAX_SCAN_CHARS, len(text)))
    if not threats:
        return text, []
    ids = list(dict.fromkeys(t.id for t in threats))
    log.warning("context file %s blocked: %s", label, ", ".join(ids))
    return f"[BLOCKED: {label} contained potential prompt injection ({', '.join(ids)}). Content not loaded.]", ids


def prepare_context_text(raw: str, label: str, max_chars: int | None = None) -> tuple[str, list[str], bool]:
    """The whole pipeline for one file: BOM and frontmatter stripped, whitespace trimmed,
    capped, scanned. Returns ``(text, threat_ids, truncated)``; ``text`` is ``""`` for a
    file with no content."""
    body = strip_frontmatter(raw).strip()
    if not body:
        if raw.removeprefix("\ufeff").strip():
            # Frontmatter never reaches the prompt; without a line here a user whose
            # instructions all sit inside it would never learn why the file is ignored.
            log.warning("context file %s holds only YAML frontmatter, so nothing of it is loaded; "
                        "put the instructions after the closing '---' line", label)
        return "", [], False
    capped = truncate_content(body, label, max_chars)
    text, threats = scan_context_content(capped, label)
    return text, threats, capped != body


# --------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------


def find_git_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``.git`` (a directory, or a
    file for worktrees and submodules); ``None`` when there is none or a parent cannot be
    read (then only ``start`` is trusted)."""
    try:
        current = start.resolve()
    except OSError:
        return None
    for directory in (current, *current.parents):
        try:
            if (directory / ".git").exists():
                return directory
        except OSError:
            return None
    return None


#: Bytes read from one context file at most: its head, and a quarter as much of its tail
#: (the prompt keeps the head and the tail of a long file anyway), so a generated
#: multi-megabyte AGENTS.md costs no more than this each turn.
CONTEXT_FILE_MAX_BYTES = 2 << 20


def _read(path: Path) -> str | None:
    """The file's text, or ``None`` when it is missing, not a file or unreadable."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            data = fh.read(CONTEXT_FILE_MAX_BYTES + 1)
            if len(data) > CONTEXT_FILE_MAX_BYTES:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(size - CONTEXT_FILE_MAX_BYTES // 4, CONTEXT_FILE_MAX_BYTES))
                data = data[:CONTEXT_FILE_MAX_BYTES] + b"\n[...]\n" + fh.read(CONTEXT_FILE_MAX_BYTES // 4)
        return data.decode("utf-8", errors="replace")
    except OSError as exc:
        log.warning("cannot read context file %s: %s", path, exc)
        return None


def _label(path: Path, cwd: Path) -> str:
    try:
        return os.path.relpath(path, cwd)
    except ValueError:
        return str(path)


def _load(path: Path, cwd: Path, max_chars: int | None) -> ContextFile | None:
    raw = _read(path)
    if raw is None:
        return None
    label = _label(path, cwd)
    text, threats, truncated = prepare_context_text(raw, label, max_chars)
    if not text:
        return None
    return ContextFile(label, path, text, threats, truncated, len(strip_frontmatter(raw).strip()))


def _first(cwd: Path, directory: Path, names: tuple[str, ...], max_chars: int | None) -> list[ContextFile]:
    for name in names:
        loaded = _load(directory / name, cwd, max_chars)
        if loaded is not None:
            return [loaded]
    return []


def _hermes_md(cwd: Path, max_chars: int | None) -> list[ContextFile]:
    root = find_git_root(cwd)
    directories = [cwd]
    if root is not None and root != cwd and root in cwd.parents:
        directories += [p for p in cwd.parents if p == root or root in p.parents]
    for directory in directories:
        found = _first(cwd, directory, _HERMES_NAMES, max_chars)
        if found:
            return found
    return []


def _cursor(cwd: Path, max_chars: int | None) -> list[ContextFile]:
    files = [cwd / ".cursorrules"]
    try:
        files += sorted((cwd / ".cursor" / "rules").glob("*.mdc"))
    except OSError:
        pass
    return [f for f in (_load(p, cwd, max_chars) for p in files) if f is not None]


def discover_context_files(cwd: str | os.PathLike[str], *, max_chars: int | None = None) -> list[ContextFile]:
    """The project context files for ``cwd`` — one kind only, first match wins (see the
    module docstring). ``[]`` when there are none."""
    try:
        base = Path(cwd).resolve()
    except OSError:
        return []
    for finder in (
        lambda: _hermes_md(base, max_chars),
        lambda: _first(base, base, _AGENTS_NAMES, max_chars),
        lambda: _first(base, base, _CLAUDE_NAMES, max_chars),
        lambda: _cursor(base, max_chars),
    ):
        found = finder()
        if found:
            return found
    return []


def load_soul_md(home: str | os.PathLike[str] | None, *, max_chars: int | None = None) -> ContextFile | None:
    """``$HERMES_HOME/SOUL.md`` through the context-file pipeline, or ``None`` when it is
    missing or empty. A blocked SOUL.md comes back with ``threats`` set and the
    ``[BLOCKED: …]`` line as its text."""
    if home is None:
        return None
    path = Path(home) / "SOUL.md"
    raw = _read(path)
    if raw is None:
        return None
    text, threats, truncated = prepare_context_text(raw, "SOUL.md", max_chars)
    if not text:
        return None
    return ContextFile("SOUL.md", path, text, threats, truncated, len(strip_frontmatter(raw).strip()))


def build_context_files_prompt(
    cwd: str | os.PathLike[str] | None,
    *,
    home: str | os.PathLike[str] | None = None,
    include_soul: bool = False,
    max_chars: int | None = None,
) -> str:
    """The project-context block for the system prompt (``""`` when nothing is found).

    ``include_soul`` appends ``$HERMES_HOME/SOUL.md`` after the project files. The
    default prompt leaves it off because the identity layer already holds SOUL.md; set
    it only for a prompt without that layer, so SOUL.md never appears twice."""
    files = discover_context_files(cwd, max_chars=max_chars) if cwd is not None else []
    if include_soul:
        soul = load_soul_md(home, max_chars=max_chars)
        if soul is not None:
            files.append(soul)
    if not files:
        return ""
    return CONTEXT_HEADER + "\n\n" + "\n\n".join(f.section() for f in files)
