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
import functools
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


@functools.cache
def parsed(path: Path) -> tuple[ast.Module, tuple[ast.AST, ...]]:
    """The tree of ``path`` and all its nodes (``ast.walk`` order), parsed once per run:
    the rules below read the same files again and again, and parsing and walking them per
    rule was most of this file's time. The trees are only read, never changed."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return tree, tuple(ast.walk(tree))


def imports(path: Path, source: str | None = None) -> Iterator[tuple[int, str, list[str], bool]]:
    """``(line, absolute module, imported names, at module level)`` for each import."""
    if source is None:
        tree, nodes = parsed(path)
    else:
        tree = ast.parse(source, str(path))
        nodes = tuple(ast.walk(tree))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    for node in nodes:
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
        for node in parsed(path)[1]:
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


# -- rules of issue 19 ----------------------------------------------------------------


def _sources(*dirs: Path) -> list[Path]:
    return [p for d in dirs for p in python_files(d)]


def _calls(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, dotted callee)`` of every call in ``path`` (``os.environ.setdefault``)."""
    for node in parsed(path)[1]:
        if isinstance(node, ast.Call):
            parts, func = [], node.func
            while isinstance(func, ast.Attribute):
                parts.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name):
                parts.append(func.id)
            yield node.lineno, ".".join(reversed(parts))


def test_no_module_level_fcntl():
    """``import hermes`` and every module it may import work on Windows: file locks go
    through filelock (hermes.file_lock), never a module-level ``import fcntl``."""
    problems = [f"{rel(p)}:{line}" for p in _sources(KERNEL, PLUGINS)
                for line, module, _, top in imports(p) if top and module == "fcntl"]
    assert not problems, f"module-level fcntl (use hermes.file_lock): {problems}"


def test_kernel_and_default_plugins_never_write_os_environ():
    """Each kernel keeps its own environment (kernel.env, $HERMES_HOME/.env): writing
    os.environ would leak one home's secrets into every other kernel of the process."""
    writers = {"os.environ.setdefault", "os.environ.update", "os.environ.__setitem__", "os.putenv",
               "os.environ.pop", "os.unsetenv"}
    problems = [f"{rel(p)}:{line} {callee}" for p in _sources(KERNEL, PLUGINS)
                if "testing" not in p.relative_to(ROOT).parts
                for line, callee in _calls(p) if callee in writers]
    for path in _sources(KERNEL, PLUGINS):
        for node in parsed(path)[1]:
            targets = getattr(node, "targets", None) or ([node.target] if isinstance(node, ast.AugAssign) else [])
            for target in targets:
                if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ":
                    problems.append(f"{rel(path)}:{node.lineno} assigns os.environ[...]")
    assert not problems, problems


def _top_modules(path: Path) -> set[str]:
    found = set()
    for node in parsed(path)[1]:
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_dotenv_is_parsed_in_one_place():
    problems = [rel(p) for p in _sources(KERNEL, PLUGINS, CONTRIB)
                if "dotenv" in _top_modules(p) and p != KERNEL / "config.py"]
    assert not problems, f"parse .env through hermes.config.read_dotenv only: {problems}"


def test_entry_points_are_discovered_by_importlib_metadata_only():
    """No hand-written dist-info scan: discovery asks importlib_metadata (see
    find_entry_points), so every install layout it knows is found; no other module reads
    entry_points.txt."""
    callees = {callee for _, callee in _calls(KERNEL / "manager.py")}
    assert "importlib_metadata.entry_points" in callees
    readers = [rel(p) for p in _sources(KERNEL, PLUGINS)
               if "entry_points.txt" in p.read_text(encoding="utf-8")
               and p != KERNEL / "manager.py" and "testing" not in p.relative_to(KERNEL).parts]
    assert not readers, readers


def test_hook_order_and_records_stay_inside_the_manager():
    """One call order: kernel code gets implementations from ordered_impls (never
    get_hookimpls() in its own order), and nothing outside the manager touches its private
    record bookkeeping."""
    problems = []
    for path in _sources(KERNEL, PLUGINS, CONTRIB):
        if path == KERNEL / "manager.py" or "tests" in path.parts:
            continue
        for line, callee in _calls(path):
            if callee.endswith(".get_hookimpls") or callee.endswith("._new_record"):
                problems.append(f"{rel(path)}:{line} {callee}")
    assert not problems, problems


def test_one_copy_of_the_shared_helpers():
    """Helpers the kernel exports are not written again: message-content flattening
    (hermes.content_text), serial workers (hermes.SerialWorker), retry-after parsing and
    backoff (hermes.retry_after / backoff_delay), the background memory provider skeleton
    (hermes.BackgroundMemoryProvider)."""
    problems = []
    for path in _sources(KERNEL, PLUGINS, CONTRIB):
        if "tests" in path.parts or path.name == "fakellm.py":
            continue  # the fake server parses Anthropic blocks its own way, on purpose
        nodes = parsed(path)[1]
        for node in nodes:
            if (isinstance(node, ast.FunctionDef) and node.name in ("_text_of", "text_of", "message_text")
                    and "content_text" not in ast.unparse(node)):
                problems.append(f"{rel(path)}:{node.lineno} defines {node.name} (use hermes.content_text)")
        for line, callee in _calls(path):
            if callee == "queue.Queue" and path != KERNEL / "workers.py":
                problems.append(f"{rel(path)}:{line} a worker queue of its own (use hermes.SerialWorker)")
            if callee.endswith("headers.get") and path != KERNEL / "workers.py":
                source_line = path.read_text(encoding="utf-8").splitlines()[line - 1]
                if "retry-after" in source_line:
                    problems.append(f"{rel(path)}:{line} parses retry-after (use hermes.retry_after)")
        for cls in (n for n in nodes if isinstance(n, ast.ClassDef) and path != KERNEL / "workers.py"):
            bases = {ast.unparse(b) for b in cls.bases}
            if bases & {"hermes.MemoryProvider", "MemoryProvider"} and any(
                    isinstance(n, ast.Call) and ast.unparse(n.func).endswith("CircuitBreaker")
                    for n in ast.walk(cls)):
                problems.append(f"{rel(path)}:{cls.lineno} {cls.name} builds its own breaker "
                                "(subclass hermes.BackgroundMemoryProvider)")
    assert not problems, "\n".join(problems)


def test_component_kinds_come_from_the_table():
    """No second list of component kinds: registration hooks and selection keys are
    derived from hermes.registry.COMPONENT_KINDS."""
    problems = []
    for path in _sources(KERNEL, PLUGINS):
        if path in (KERNEL / "registry.py", KERNEL / "hookspecs.py"):
            continue
        source = path.read_text(encoding="utf-8")
        if '"hermes_register_llm_clients"' in source or '"context-engine", "memory-provider"' in source:
            problems.append(rel(path))
    assert not problems, f"derive from COMPONENT_KINDS instead: {problems}"


#: Functions over the limit that other work still has to split, with who owns them. The
#: list may only shrink: a listed function that got short fails the test until removed.
LONG_FUNCTIONS_TO_SPLIT = {
    "kernel/runtime/agent.py:Agent.__init__": "runtime agent (being reworked alongside)",
    "kernel/runtime/chat.py:Chat.command": "chat front end (being reworked alongside)",
    "plugins/sessions/store.py:SQLiteSessionStore.list_sessions": "session store",
    "kernel/safety.py:scan": "threat scanner (grew past 60 lines today)",
}
MAX_FUNCTION_LINES = 60


def _long_functions() -> dict[str, int]:
    found = {}
    for path in _sources(KERNEL, PLUGINS):
        nodes = parsed(path)[1]
        parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
        for node in nodes:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1 if node.end_lineno else 0
            doc = ast.get_docstring(node) or ""
            if lines <= MAX_FUNCTION_LINES or "Long because" in doc:
                continue
            owner = parents.get(node)
            qual = f"{owner.name}.{node.name}" if isinstance(owner, ast.ClassDef) else node.name
            found[f"{rel(path)}:{qual}"] = lines
    return found


def test_no_function_over_sixty_lines_without_a_reason():
    """Long functions are split into named steps, or say ``Long because …`` in their
    docstring."""
    found = _long_functions()
    new = {k: v for k, v in found.items() if k not in LONG_FUNCTIONS_TO_SPLIT}
    assert not new, f"split these into named steps (or say 'Long because …'): {new}"
    done = sorted(set(LONG_FUNCTIONS_TO_SPLIT) - set(found))
    assert not done, f"now short: remove from LONG_FUNCTIONS_TO_SPLIT: {done}"


#: String literals in kernel/runtime/ that equal a default plugin's registry name but
#: are not a special case of that plugin, each with the reason. Keep it short.
RUNTIME_NAME_ALLOWED = {
    ("memory_manager.py", "builtin"): "the built-in memory provider's contract-level name "
                                      "(reserved by hermes.MemoryProvider.name, a documented "
                                      "memory.provider value); any plugin may register it",
}


def default_plugin_names(kernel: hermes.Kernel) -> set[str]:
    """Every name the default plugins register: the plugins', each registry entry's
    (components, prompt layers, tools) and the built-in memory provider's tools."""
    names: set[str] = set()
    for registry in kernel.registries.all():
        for entry in registry:
            names |= {entry.name, entry.plugin}
    if "builtin" in kernel.registries.memory_providers:
        provider = kernel.registries.memory_providers.get("builtin").factory(kernel)
        names |= {s["name"] for s in provider.get_tool_schemas()} | {provider.memory_tool}
    return names - {""}


def runtime_name_literals(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """``(line, literal)`` for each string constant in ``path`` that is one of ``names``
    (docstrings are prose, not code, and are left out)."""
    tree, nodes = parsed(path)
    docstrings = {id(n.body[0].value) for n in nodes
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in nodes
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names
            and id(n) not in docstrings]


def test_runtime_never_names_a_default_plugin(kernel_factory):
    """The runtime treats a default plugin like a third-party one: what it does for
    ``delegate_task`` or the ``memory`` tool comes from the contracts (``Tool.subagents``,
    ``MemoryProvider.memory_tool``), never from a registry name in kernel/runtime/."""
    names = default_plugin_names(kernel_factory())
    assert {"delegate_task", "session_search", "memory", "builtin"} <= names  # the check sees them
    problems = [f"{rel(path)}:{line} {value!r}"
                for path in python_files(KERNEL / "runtime")
                for line, value in runtime_name_literals(path, names)
                if (path.name, value) not in RUNTIME_NAME_ALLOWED]
    assert not problems, "special case of a default plugin by name (use a contract attribute " \
                         "or a hook):\n" + "\n".join(problems)


def test_the_runtime_name_rule_catches_a_special_case(tmp_path):
    bad = tmp_path / "agent.py"
    bad.write_text('"""memory"""\nif name == "delegate_task":\n    pass\n', encoding="utf-8")
    assert runtime_name_literals(bad, {"delegate_task", "memory"}) == [(2, "delegate_task")]
