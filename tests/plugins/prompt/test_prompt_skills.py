"""The skills plugin: discovery, frontmatter robustness, ``skills_list`` and ``skill_view``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hermes
from hermes.plugins.prompt.skills import discover_skills, parse_frontmatter


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def skill(home: Path, rel: str, name: str | None = None, description: str | None = None, body: str = "Steps.") -> Path:
    meta = "".join(f"{k}: {v}\n" for k, v in (("name", name), ("description", description)) if v is not None)
    return write(home / "skills" / rel / "SKILL.md", f"---\n{meta}---\n{body}\n")


@pytest.fixture
def tools(kernel):
    by_name = {t.name: t for t in kernel.tools()}
    ctx = hermes.ToolContext(kernel=kernel)

    def call(tool: str, /, **args) -> dict:
        return json.loads(by_name[tool].handler(args, ctx))

    return call


def test_tools_are_registered_parallel_safe_in_the_skills_toolset(kernel):
    by_name = {t.name: t for t in kernel.tools()}
    for name in ("skills_list", "skill_view"):
        assert by_name[name].toolset == "skills" and by_name[name].parallel_safe
    assert kernel.registries.tools.get("skill_view").plugin == "skills"


def test_the_skills_plugin_can_be_disabled_alone(kernel_factory):
    kernel = kernel_factory(disable_plugins=["skills"])
    names = {t.name for t in kernel.tools()}
    assert "skill_view" not in names and "skills_list" not in names
    assert "identity" in kernel.registries.prompt_layers


def test_discovery_layout(hermes_home):
    skill(hermes_home, "dev/code-review", "code-review", "Review code")
    skill(hermes_home, "dev/tdd", "tdd", "TDD")
    skill(hermes_home, "loose", "loose", "At the top level")
    skill(hermes_home, "a/b/nested", "nested", "Two levels of category")
    write(hermes_home / "skills" / "dev" / "code-review" / "references" / "SKILL.md", "not a separate skill")
    write(hermes_home / "skills" / ".hidden" / "x" / "SKILL.md", "---\nname: hidden\n---\n")
    found = discover_skills(hermes_home)
    assert [(s.category, s.name) for s in found] == [
        ("a/b", "nested"), ("dev", "code-review"), ("dev", "tdd"), ("general", "loose")]


def test_no_skills_directory(tmp_path):
    assert discover_skills(tmp_path) == []


def test_first_skill_of_a_name_wins(hermes_home, caplog):
    skill(hermes_home, "a/one", "dup", "first")
    skill(hermes_home, "b/two", "dup", "second")
    found = discover_skills(hermes_home)
    assert [s.description for s in found] == ["first"]
    assert "dup" in caplog.text


@pytest.mark.parametrize("text, name, description, has_error", [
    ("---\nname: ok\ndescription: fine\n---\nbody", "ok", "fine", False),
    ("no frontmatter at all\nsecond line", "dirname", "no frontmatter at all", False),
    ("---\nname: [broken\n---\n# Title line\n", "dirname", "Title line", True),
    ("---\n- just\n- a list\n---\nbody", "dirname", "body", True),
    ("---\nname: unclosed\nbody", "dirname", "name: unclosed", True),
    ("---\nname: 42\ndescription: 7\n---\nbody", "dirname", "body", True),
    ("---\n---\n", "dirname", "", False),
    ("", "dirname", "", False),
])
def test_broken_frontmatter_never_breaks_discovery(hermes_home, text, name, description, has_error):
    write(hermes_home / "skills" / "cat" / "dirname" / "SKILL.md", text)
    [found] = discover_skills(hermes_home)
    assert (found.name, found.description, bool(found.error)) == (name, description, has_error)


def test_undecodable_skill_file(hermes_home):
    path = hermes_home / "skills" / "cat" / "bin" / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"---\nname: bin\ndescription: \xff\xfe bytes\n---\n")
    [found] = discover_skills(hermes_home)
    assert found.name == "bin"


def test_parse_frontmatter_returns_errors_not_exceptions():
    assert parse_frontmatter("---\na: [\n---\nbody")[2].startswith("frontmatter is not valid YAML")
    assert parse_frontmatter("---\na: 1\n---\nbody") == ({"a": 1}, "body", None)


def test_disabled_skills_are_hidden(kernel_factory, hermes_home):
    skill(hermes_home, "c/a", "a", "A")
    skill(hermes_home, "c/b", "b", "B")
    kernel = kernel_factory(config={"plugins": {"skills": {"disabled": ["b"]}}})
    tool = {t.name: t for t in kernel.tools()}["skills_list"]
    listed = json.loads(tool.handler({}, hermes.ToolContext(kernel=kernel)))
    assert [s["name"] for s in listed["skills"]] == ["a"]


# -- skills_list -------------------------------------------------------------------------------


def test_skills_list(tools, hermes_home):
    assert tools("skills_list")["count"] == 0 and "no skills installed" in tools("skills_list")["hint"]
    skill(hermes_home, "dev/tdd", "tdd", "Test-driven development")
    skill(hermes_home, "research/arxiv", "arxiv", "Search arXiv")
    write(hermes_home / "skills" / "dev" / "broken" / "SKILL.md", "---\nname: [x\n---\n# Broken one")
    out = tools("skills_list")
    assert out["count"] == 3
    by_name = {s["name"]: s for s in out["skills"]}
    assert by_name["tdd"] == {"name": "tdd", "category": "dev", "description": "Test-driven development"}
    assert "frontmatter_error" in by_name["broken"]
    assert [s["name"] for s in tools("skills_list", category="research")["skills"]] == ["arxiv"]
    assert tools("skills_list", category="nope")["count"] == 0


# -- skill_view --------------------------------------------------------------------------------


def test_skill_view_returns_the_instructions_and_files(tools, hermes_home):
    path = skill(hermes_home, "dev/tdd", "tdd", "TDD", body="# TDD\n1. Write a failing test.")
    write(path.parent / "references" / "example.md", "an example")
    write(path.parent / "scripts" / "run.sh", "echo hi")
    write(path.parent / ".secret", "hidden file")
    out = tools("skill_view", name="tdd")
    assert out["name"] == "tdd" and out["category"] == "dev"
    assert "1. Write a failing test." in out["content"]
    assert out["files"] == ["references/example.md", "scripts/run.sh"]
    assert tools("skill_view", name="dev/tdd")["name"] == "tdd"


def test_skill_view_supporting_file_and_traversal(tools, hermes_home):
    path = skill(hermes_home, "dev/tdd", "tdd", "TDD")
    write(path.parent / "references" / "example.md", "an example")
    write(hermes_home / "secret.txt", "top secret")
    assert tools("skill_view", name="tdd", file="references/example.md")["content"] == "an example"
    assert "outside" in tools("skill_view", name="tdd", file="../../../secret.txt")["error"]
    assert "cannot read" in tools("skill_view", name="tdd", file="missing.md")["error"]


def test_skill_view_unknown_and_empty_names(tools, hermes_home):
    skill(hermes_home, "dev/code-review", "code-review", "Review")
    assert "code-review" in tools("skill_view", name="code-reveiw")["error"]
    assert "skills_list" in tools("skill_view", name="")["error"]
    assert "skills_list" in tools("skill_view", name="zzz")["error"]


def test_skill_view_by_directory_name_when_frontmatter_renames(tools, hermes_home):
    skill(hermes_home, "dev/folder", "pretty-name", "Renamed")
    assert tools("skill_view", name="pretty-name")["name"] == "pretty-name"
    assert tools("skill_view", name="folder")["name"] == "pretty-name"


def test_skill_view_caps_huge_files(tools, hermes_home):
    skill(hermes_home, "big/huge", "huge", "Huge", body="z" * 150_000)
    content = tools("skill_view", name="huge")["content"]
    assert len(content) < 100_500 and "truncated" in content


def test_edited_skills_are_read_again(hermes_home):
    """Parsing is memoised per file version; an edit (even of the same size) is seen."""
    import os

    path = skill(hermes_home, "c/s", "s", "first version")
    assert discover_skills(hermes_home)[0].description == "first version"
    skill(hermes_home, "c/s", "s", "other version")  # same size
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert discover_skills(hermes_home)[0].description == "other version"
    skill(hermes_home, "c/s", "s", "a much longer third version")
    assert discover_skills(hermes_home)[0].description == "a much longer third version"
    # moved to another category: same file name, new category
    (hermes_home / "skills" / "d").mkdir()
    path.parent.rename(hermes_home / "skills" / "d" / "s")
    assert discover_skills(hermes_home)[0].category == "d"
