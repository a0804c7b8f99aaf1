"""Skills: reusable procedures the model loads on demand (default plugin ``skills``).

A skill is a directory ``$HERMES_HOME/skills/<category>/<name>/`` holding a ``SKILL.md``
with YAML frontmatter (``name``, ``description``) and a markdown body; supporting files
may sit beside it. A skill directly under ``skills/<name>/`` is in category ``general``.

The ``skills_index`` prompt layer lists the skills compactly by category (only when the
skill tools are enabled); the tools ``skills_list`` and ``skill_view(name)`` read them.
A broken frontmatter never breaks anything: the skill is listed under its directory
name and the problem is reported by ``skills_list``.

Config (``plugins.skills``): ``disabled: [names]`` hides skills from the index and tools.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import hermes

log = logging.getLogger("hermes.skills")

SKILL_FILE = "SKILL.md"
#: Default category of a skill that sits directly under ``skills/``.
DEFAULT_CATEGORY = "general"
#: Descriptions in the prompt index are cut to this many characters.
INDEX_DESCRIPTION_CHARS = 60
#: ``skill_view`` returns at most this much of a file.
VIEW_MAX_CHARS = 100_000
#: How deep categories may nest below ``skills/``.
MAX_DEPTH = 4


@dataclass(frozen=True)
class Skill:
    """One installed skill. ``error`` says what was wrong with its frontmatter, if
    anything (the skill is still listed, under its directory name)."""

    name: str
    category: str
    description: str
    path: Path
    error: str | None = None
    #: Threat ids found in the skill's index line (then it is left out of the prompt).
    threats: tuple[str, ...] = ()

    @property
    def directory(self) -> Path:
        """The skill's directory (``SKILL.md`` and its supporting files)."""
        return self.path.parent

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        out: dict[str, Any] = {"name": self.name, "category": self.category, "description": self.description}
        if self.error:
            out["frontmatter_error"] = self.error
        if self.threats:
            out["blocked"] = list(self.threats)
        return out


def skills_dir(home: str | os.PathLike[str]) -> Path:
    """``$HERMES_HOME/skills``."""
    return Path(home) / "skills"


def parse_frontmatter(text: str) -> tuple[dict[str, Any], str, str | None]:
    """``(metadata, body, error)`` of a ``SKILL.md``. Never raises: bad YAML, a
    non-mapping or an unclosed block give ``({}, body, "what was wrong")``."""
    text = text.removeprefix("\ufeff")
    if not (text.startswith("---\n") or text.startswith("---\r\n")):
        return {}, text, None
    lines = text.splitlines(keepends=True)
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            header, body = "".join(lines[1:i]), "".join(lines[i + 1:])
            break
    else:
        return {}, "".join(lines[1:]), "frontmatter is not closed by a '---' line"
    import yaml  # only needed when skills exist

    try:
        # libyaml's loader is ~10x faster than the pure-Python one when it is built in.
        data = yaml.load(header, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return {}, body, f"frontmatter is not valid YAML ({problem})"
    if data is None:
        return {}, body, None
    if not isinstance(data, dict):
        return {}, body, f"frontmatter must be a mapping, got {type(data).__name__}"
    return data, body, None


def _first_line(body: str) -> str:
    for line in body.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line
    return ""


#: ``path -> ((mtime_ns, size), skill)``: a skill is parsed (and scanned) again only when
#: its file changed, so listing a large skills tree on every tool call stays cheap.
_PARSED: dict[str, tuple[tuple[int, int], Skill]] = {}
_PARSED_MAX = 4096


def load_skill(path: Path, root: Path) -> Skill:
    """Read one ``SKILL.md`` below ``root`` (memoised on its path, mtime and size);
    problems are recorded on the skill, never raised."""
    directory = path.parent
    rel = os.path.relpath(directory.parent, root)
    category = DEFAULT_CATEGORY if rel == "." else rel.replace(os.sep, "/")
    key = f"{category}\0{path}"
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError as exc:
        return Skill(directory.name, category, "", path, f"cannot read: {exc.strerror or exc}")
    cached = _PARSED.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    skill = _parse_skill(path, category)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[key] = (stamp, skill)
    return skill


def _parse_skill(path: Path, category: str) -> Skill:
    directory = path.parent
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return Skill(directory.name, category, "", path, f"cannot read: {exc.strerror or exc}")
    meta, body, error = parse_frontmatter(text)
    name = meta.get("name")
    if not isinstance(name, str) or not name.strip() or "\n" in name.strip():
        if meta and name is not None:
            error = error or "frontmatter 'name' must be a one-line string"
        name = directory.name
    description = meta.get("description")
    if not isinstance(description, str):
        if description is not None:
            error = error or "frontmatter 'description' must be a string"
        description = _first_line(body)
    skill = Skill(name.strip(), category, " ".join(description.split()), path, error)
    # Scanned once per file version: the index line is what reaches the system prompt.
    _, threats = hermes.scan_context_content(index_line(skill), f"skill {skill.name}")
    return replace(skill, threats=tuple(threats)) if threats else skill


def discover_skills(home: str | os.PathLike[str], *, disabled: Any = ()) -> list[Skill]:
    """Every skill under ``$HERMES_HOME/skills``, sorted by category then name; the first
    skill of a name wins (a duplicate is logged). Hidden directories are skipped, and a
    skill's own subdirectories are not searched for more skills."""
    root = skills_dir(home)
    if not root.is_dir():
        return []
    off = set(disabled or ())
    found: list[Skill] = []
    base = str(root)
    for directory, subdirs, files in os.walk(base, onerror=lambda exc: log.debug("skills: %s", exc)):
        rel = directory[len(base):].strip(os.sep)
        depth = rel.count(os.sep) + 1 if rel else 0
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".")) if depth < MAX_DEPTH else []
        if SKILL_FILE in files and rel:
            found.append(load_skill(Path(directory, SKILL_FILE), root))
            subdirs[:] = []  # references/, scripts/ … belong to this skill
    seen: dict[str, Skill] = {}
    for skill in sorted(found, key=lambda s: (s.category, s.name, str(s.path))):
        if skill.name in off:
            continue
        if skill.name in seen:
            log.warning("skill %r at %s ignored: %s has the same name", skill.name, skill.path, seen[skill.name].path)
            continue
        seen[skill.name] = skill
    return list(seen.values())


def _short(text: str, limit: int = INDEX_DESCRIPTION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def index_line(skill: Skill) -> str:
    """The skill's line in the prompt index (description cut at 60 characters)."""
    return f"- {skill.name}: {_short(skill.description)}" if skill.description else f"- {skill.name}"


def render_skills_index(skills: list[Skill]) -> str:
    """The compact skills index for the system prompt (``""`` with no skills).

    Entries whose line trips the threat scanner are left out (logged when the skill was
    read): the index sits in the highest-authority part of the prompt."""
    by_category: dict[str, list[str]] = {}
    for skill in skills:
        if not skill.threats:
            by_category.setdefault(skill.category, []).append(index_line(skill))
    if not by_category:
        return ""
    body = "\n".join(
        f"{category}:\n" + "\n".join(f"  {line}" for line in entries)
        for category, entries in sorted(by_category.items())
    )
    return (
        "## Skills\n"
        "Skills are saved procedures for recurring kinds of work. Before you start a task, "
        "look through this list; if a skill matches even partly, load it with "
        "skill_view(name) and follow it.\n"
        f"<available_skills>\n{body}\n</available_skills>"
    )


def _disabled(kernel: Any) -> list[str]:
    value = kernel.plugin_config("skills").get("disabled") or []
    return [str(v) for v in value] if isinstance(value, list) else []


def find_skill(skills: list[Skill], name: str) -> Skill | None:
    """A skill by name, by ``category/name`` or by directory name."""
    name = name.strip().strip("/")
    for skill in skills:
        if name in (skill.name, f"{skill.category}/{skill.name}", skill.directory.name,
                    f"{skill.category}/{skill.directory.name}"):
            return skill
    return None


# --------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------

LIST_SCHEMA = {
    "name": "skills_list",
    "description": "List the installed skills (name, category, one-line description).",
    "parameters": {
        "type": "object",
        "properties": {"category": {"type": "string", "description": "Only this category."}},
    },
}

VIEW_SCHEMA = {
    "name": "skill_view",
    "description": (
        "Load a skill's instructions (its SKILL.md) before doing the kind of work it covers. "
        "Pass 'file' to read one of the skill's supporting files instead."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The skill's name (or category/name)."},
            "file": {"type": "string", "description": "A supporting file, relative to the skill's directory."},
        },
        "required": ["name"],
    },
}


def skills_list(args: dict[str, Any], ctx: hermes.ToolContext) -> str:
    """Handler of ``skills_list``."""
    skills = discover_skills(ctx.kernel.home, disabled=_disabled(ctx.kernel))
    category = str(args.get("category") or "").strip()
    if category:
        skills = [s for s in skills if s.category == category]
    out: dict[str, Any] = {"count": len(skills), "skills": [s.as_dict() for s in skills]}
    if not skills:
        out["hint"] = (f"no skills in category {category!r}" if category else
                       f"no skills installed; add {skills_dir(ctx.kernel.home)}/<category>/<name>/SKILL.md")
    return json.dumps(out, ensure_ascii=False)


def _supporting_files(skill: Skill) -> list[str]:
    files: list[str] = []
    for directory, subdirs, names in os.walk(skill.directory):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(names):
            rel = (Path(directory) / name).relative_to(skill.directory).as_posix()
            if rel != SKILL_FILE and not name.startswith("."):
                files.append(rel)
        if len(files) > 200:
            break
    return files[:200]


def skill_view(args: dict[str, Any], ctx: hermes.ToolContext) -> str:
    """Handler of ``skill_view``."""
    name = str(args.get("name") or "").strip()
    if not name:
        return json.dumps({"error": "skill_view needs a skill 'name'; call skills_list to see them"})
    skills = discover_skills(ctx.kernel.home, disabled=_disabled(ctx.kernel))
    skill = find_skill(skills, name)
    if skill is None:
        close = difflib.get_close_matches(name, [s.name for s in skills], n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "call skills_list to see the installed skills"
        return json.dumps({"error": f"no skill named {name!r}; {hint}"}, ensure_ascii=False)
    target = skill.path
    rel_file = str(args.get("file") or "").strip()
    if rel_file:
        target = (skill.directory / rel_file).resolve()
        if skill.directory.resolve() not in target.parents:
            return json.dumps({"error": f"{rel_file!r} is outside the skill's directory"})
    try:
        text = target.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return json.dumps({"error": f"cannot read {rel_file or SKILL_FILE} of skill {skill.name!r}: "
                                    f"{exc.strerror or exc}"}, ensure_ascii=False)
    out: dict[str, Any] = {
        "name": skill.name, "category": skill.category, "description": skill.description,
        "path": str(target),
        "content": hermes.truncate_content(text, f"{skill.name}/{rel_file or SKILL_FILE}", VIEW_MAX_CHARS),
    }
    if not rel_file:
        out["files"] = _supporting_files(skill)
    if skill.error:
        out["frontmatter_error"] = skill.error
    return json.dumps(out, ensure_ascii=False)


@hermes.hookimpl
def hermes_register_tools(register: Any) -> None:
    """Register ``skills_list`` and ``skill_view``."""
    register(hermes.Tool(name="skills_list", schema=LIST_SCHEMA, handler=skills_list,
                         parallel_safe=True, toolset="skills"))
    register(hermes.Tool(name="skill_view", schema=VIEW_SCHEMA, handler=skill_view,
                         parallel_safe=True, toolset="skills"))
