"""Architecture rules, checked on the source (AST), for every module present now and
every one added later:

* ``kernel/`` never imports ``hermes.plugins`` or a ``contrib/`` package;
* a default plugin (``plugins/``) imports from Hermes only what a third-party plugin
  could: the package ``hermes`` and its public names (``hermes.__all__``), the CLI helpers
  ``hermes.cli.pass_state`` / ``echo_json``, and modules of its *own* package;
* no module that ``hermes --help`` imports (``kernel/`` outside ``testing``, ``plugins/``)
  imports a heavy SDK at module level.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import hermes

ROOT = Path(__file__).resolve().parents[2]
KERNEL, PLUGINS, CONTRIB = ROOT / "kernel", ROOT / "plugins", ROOT / "contrib"

CLI_HELPERS = {"pass_state", "echo_json"}
HEAVY = {"anthropic", "openai", "mem0", "mem0ai", "honcho", "honcho_ai", "psycopg", "psycopg2",
         "torch", "tiktoken", "transformers", "numpy"}


def contrib_packages() -> set[str]:
    """Top-level import packages of the contrib/ distributions."""
    names = set()
    for dist in CONTRIB.glob("*/"):
        for base in (dist, dist / "src"):
            names |= {p.parent.name for p in base.glob("*/__init__.py")
                      if p.parent.name not in ("tests", "build")}
    return names


def module_name(path: Path) -> str:
    """The dotted name a file under kernel/ or plugins/ is imported as."""
    if path.is_relative_to(PLUGINS):
        parts = ["hermes", "plugins", *path.relative_to(PLUGINS).with_suffix("").parts]
    else:
        parts = ["hermes", *path.relative_to(KERNEL).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, source: str | None = None) -> Iterator[tuple[int, str, list[str], bool]]:
    """``(line, absolute module, imported names, at module level)`` for each import."""
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"), str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, [], id(node) in top_level
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module, [a.name for a in node.names], id(node) in top_level


def python_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_there_is_something_to_check():
    assert python_files(KERNEL) and python_files(PLUGINS)


def test_kernel_never_imports_plugins_or_contrib():
    contrib = contrib_packages()
    problems = []
    for path in python_files(KERNEL):
        for line, module, names, _ in imports(path):
            targets = [module] + [f"{module}.{n}" for n in names]
            if any(t == "hermes.plugins" or t.startswith("hermes.plugins.") for t in targets):
                problems.append(f"{rel(path)}:{line} imports {module}")
            if module.split(".")[0] in contrib:
                problems.append(f"{rel(path)}:{line} imports contrib package {module}")
        # Dynamic imports by name, too (only the default-plugin list is allowed).
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
                    in ("import_module", "__import__") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and (node.args[0].value.startswith("hermes.plugins")
                         or node.args[0].value.split(".")[0] in contrib)):
                problems.append(f"{rel(path)}:{node.lineno} imports {node.args[0].value} by name")
    assert not problems, "kernel/ must not depend on its plugins:\n" + "\n".join(problems)


def own_package(path: Path) -> str:
    """``hermes.plugins.<first part>``: the default plugin a file belongs to."""
    first = path.relative_to(PLUGINS).parts[0].removesuffix(".py")
    return f"hermes.plugins.{first}"


def plugin_import_problems(path: Path, source: str | None = None) -> list[str]:
    source = source if source is not None else path.read_text(encoding="utf-8")
    public = set(hermes.__all__)
    own = own_package(path)
    contrib = contrib_packages()
    problems = []
    for line, module, names, _ in imports(path, source):
        where = f"{rel(path)}:{line}"
        if module.split(".")[0] in contrib:
            problems.append(f"{where} imports contrib package {module}")
        if module != "hermes" and not module.startswith("hermes."):
            continue  # the standard library or a third-party package
        if module == "hermes":
            bad = [n for n in names if n not in public]
            if bad:
                problems.append(f"{where} imports non-public names {bad} from hermes "
                                f"(public: hermes.__all__)")
        elif module == "hermes.cli":
            if not names or set(names) - CLI_HELPERS:
                problems.append(f"{where} may import only {sorted(CLI_HELPERS)} from hermes.cli")
        elif module == "hermes.plugins" and path.relative_to(PLUGINS).parts != ("__init__.py",):
            bad = [n for n in names if f"hermes.plugins.{n}" != own]
            if bad:
                problems.append(f"{where} imports other default plugins {bad}")
        elif not (module == own or module.startswith(own + ".")):
            problems.append(f"{where} imports {module}, which is not public "
                            f"(use `from hermes import ...`; add the name to hermes.__all__ if needed)")
    # `import hermes` then `hermes.runtime.x`: attributes must be public names too.
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "hermes" and node.attr not in public):
            problems.append(f"{rel(path)}:{node.lineno} uses hermes.{node.attr}, which is not public")
    return problems


@pytest.mark.parametrize("path", python_files(PLUGINS), ids=rel)
def test_default_plugins_import_only_public_hermes(path):
    problems = plugin_import_problems(path)
    assert not problems, "a default plugin imports only what a third-party plugin could:\n" + "\n".join(problems)


def test_the_rule_catches_violations():
    """The checker itself: a plugin reaching into the kernel or a sibling is caught."""
    fake = PLUGINS / "t_arch_probe.py"
    source = ("import hermes\nfrom hermes import Kernel, NotPublic\nfrom hermes.config import DEFAULTS\n"
              "from hermes.cli import main\nfrom hermes.plugins import memory\nfrom . import llm\n"
              "import hermes.runtime\nx = hermes.core\nfrom hermes.cli import pass_state\n")
    problems = plugin_import_problems(fake, source)
    text = "\n".join(problems)
    for culprit in ("['NotPublic']", "hermes.config", "from hermes.cli", "other default plugins ['memory']",
                    "other default plugins ['llm']", "imports hermes.runtime", "hermes.core"):
        assert culprit in text, culprit
    flagged = {int(p.split(":")[1].split()[0]) for p in problems}
    assert flagged == {2, 3, 4, 5, 6, 7, 8}, "lines 1 (import hermes) and 9 (pass_state) are fine"


def test_no_heavy_sdk_at_module_level():
    problems = []
    files = [p for p in python_files(KERNEL) if "testing" not in p.relative_to(KERNEL).parts]
    for path in files + python_files(PLUGINS):
        for line, module, _, top in imports(path):
            if top and module.split(".")[0] in HEAVY:
                problems.append(f"{rel(path)}:{line} imports {module} at module level")
    assert not problems, ("heavy SDKs are imported inside factories, never at module top "
                          "(hermes --help imports these modules):\n" + "\n".join(problems))
