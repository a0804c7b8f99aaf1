"""The ``hermes`` command line.

The root group boots a kernel lazily: ``hermes --version`` loads no plugin, and the
kernel that collects plugin commands (``hermes_register_commands``) is built without
strict mode and without checking selections, so that a broken plugin or a config naming a
missing one can never lock a user out of ``plugins list``, ``uninstall`` or ``doctor``.

Plugins add commands with ``@hermes.hookimpl def hermes_register_commands(cli)`` and use
:func:`pass_state` (the :class:`CLIState` of the invocation: ``state.kernel()``,
``state.strict_kernel()``) and :func:`echo_json` from here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import HermesError
from .registry import COMPONENT_KINDS, SELECTION_KEYS


class CLIState:
    """Options of the root group and the kernel built from them (once per invocation)."""

    def __init__(self, home: str | None, no_plugins: bool, disable: tuple[str, ...],
                 load: tuple[str, ...] | None, strict: bool, trace: bool):
        from .manager import truthy

        self.home = home
        self.no_plugins = no_plugins
        self.disable = disable
        self.load = load
        self.strict = strict or truthy(os.environ.get("HERMES_STRICT_PLUGINS"))
        self.trace = trace
        self._kernel: Any = None
        self._fallback: Any = None
        #: The error that kept config.yaml or .env from loading, once :meth:`kernel` met it.
        self.config_error: HermesError | None = None

    def kernel(self) -> Any:
        """The kernel of this invocation (lenient: failures recorded, selection unchecked,
        strict mode ignored), so that listing, inspecting and removing plugins always
        works."""
        if self._kernel is None:
            self._kernel = self._build()
        return self._kernel

    def _build(self, **kwargs: Any) -> Any:
        from .core import Kernel

        return Kernel(
            home=self.home,
            safe_mode=True if self.no_plugins else None,
            disable_plugins=self.disable,
            load_plugins=self.load,
            strict=False,
            trace=self.trace or None,
            check_selection=False,
            **kwargs,
        )

    def listing_kernel(self) -> Any:
        """:meth:`kernel`, or, when config.yaml or .env is broken, a kernel that ignores
        them (defaults only; :attr:`config_error` says why), so that ``--help``,
        ``plugins list`` and the plugin commands are still there to fix things with."""
        from .errors import ConfigError

        try:
            return self.kernel()
        except ConfigError as exc:
            self.config_error = exc
            if self._fallback is None:
                self._fallback = self._build(read_config=False)
            return self._fallback

    def strict_kernel(self) -> Any:
        """The kernel, refusing to go on when strict mode is asked for and a plugin failed,
        or when config selects something no plugin registered."""
        kernel = self.kernel()
        if self.strict and kernel.failures:
            raise HermesError(f"strict mode: {kernel.failures[0].line()}")
        problems = kernel.config_problems if self.strict else kernel.start_problems
        if problems:
            raise problems[0]
        return kernel


class HermesCLIError(click.ClickException):
    """A :class:`HermesError` on its way out: one line on stderr, exit status 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"hermes: error: {self.message}", err=True)

    @classmethod
    def of(cls, exc: BaseException) -> HermesCLIError:
        """The CLI error for ``exc``, with its :func:`exit_code` (click reads the exit
        status from the class, so each status gets a subclass)."""
        code = exit_code(exc)
        if code == cls.exit_code:
            return cls(str(exc))
        status = type(f"HermesCLIError{code}", (cls,), {"exit_code": code})
        return status(str(exc))


class HermesGroup(click.Group):
    """The root group. Plugin commands are collected per invocation (never added to this
    module-level group), the first time a command is looked up that is not built in or
    the commands are listed; a plugin may neither replace a built-in command nor another
    plugin's command."""

    def _plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        root = ctx.find_root()
        commands: dict[str, click.Command] | None = root.meta.get("hermes.plugin_commands")
        if commands is not None:
            return commands
        commands = root.meta["hermes.plugin_commands"] = {}
        owners: dict[str, str] = {name: "hermes" for name in self.commands}
        try:
            # A broken config.yaml or .env still lists (and dispatches to) the plugin
            # commands; running one then reports the config error.
            kernel = _state(ctx).listing_kernel()
        except HermesError as exc:
            # A broken home must still leave the built-in commands usable; a plugin
            # command asked for then reports this error (get_command), not "No such command".
            root.meta["hermes.load_error"] = exc
            return commands
        for impl in kernel.pm.ordered_impls("hermes_register_commands"):
            if kernel.pm.get_plugin(impl.plugin_name) is None:
                continue
            scratch = click.Group(self.name, commands={**self.commands, **commands})
            kernel.pm.notify("hermes_register_commands", [impl], {"cli": scratch})
            try:
                with kernel.pm.guard(impl.plugin_name, "registering commands"):
                    impl.function(**{k: scratch for k in impl.argnames if k == "cli"})
            except Exception as exc:
                record = kernel.pm.records.get(impl.plugin_name)
                if record is not None:
                    kernel.pm.record_failure(record, exc, "register commands")
                continue
            for name, command in scratch.commands.items():
                known = self.commands.get(name) or commands.get(name)
                if known is command:
                    continue
                if known is not None:
                    click.echo(f"hermes: plugin {impl.plugin_name} tried to replace the command "
                               f"{name!r} of {owners[name]}; ignored. Rename the plugin's "
                               f"command.", err=True)
                    continue
                commands[name] = command
                owners[name] = impl.plugin_name
        return commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = sorted(set(self.commands) | set(self._plugin_commands(ctx)))
        error = ctx.find_root().meta.get("hermes.load_error")
        if error is not None:
            click.echo(f"hermes: {error} (plugin commands are not listed)", err=True)
        return names

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name) or self._plugin_commands(ctx).get(cmd_name)
        error = ctx.find_root().meta.get("hermes.load_error")
        if command is None and error is not None:
            raise HermesCLIError.of(error)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HermesError as exc:
            raise HermesCLIError.of(exc) from exc


def exit_code(exc: BaseException) -> int:
    """The exit status of a :class:`HermesError`: 2 for a configuration or usage error
    (:class:`ConfigError`, :class:`HomeError`, or an error carrying ``exit_code = 2``),
    1 for a failure."""
    from .errors import ConfigError, HomeError

    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and code:
        return code
    return 2 if isinstance(exc, (ConfigError, HomeError)) else 1


def _state(ctx: click.Context) -> CLIState:
    root = ctx.find_root()
    if root.obj is None:
        p = root.params
        root.obj = CLIState(p.get("home"), bool(p.get("no_plugins")), _names(p.get("disable")) or (),
                            _names(p.get("load")), bool(p.get("strict")), bool(p.get("trace")))
    return root.obj


def _names(values: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Repeatable, comma-separated names; ``None`` when the option was not given (an
    empty ``--load ''`` is ``()``: load no third-party plugin)."""
    if not values:
        return None
    names: list[str] = []
    for value in values:
        names.extend(part.strip() for part in value.split(",") if part.strip())
    return tuple(names)


def pass_state(f: Any) -> Any:
    """Decorator: give a command the :class:`CLIState` as its first argument."""
    import functools

    @click.pass_context
    @functools.wraps(f)
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        return ctx.invoke(f, _state(ctx), *args, **kwargs)

    return wrapper


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON (the ``--json`` output of every command)."""
    import json

    click.echo(json.dumps(data, indent=2, default=str, ensure_ascii=False))


@click.group(cls=HermesGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="hermes",
                      message="%(prog)s %(version)s")
@click.option("--home", envvar="HERMES_HOME", type=click.Path(file_okay=False),
              help="Hermes home directory (default ~/.hermes; env HERMES_HOME).")
@click.option("--no-plugins", is_flag=True,
              help="Safe mode: load no third-party or local plugin (env HERMES_NO_PLUGINS=1).")
@click.option("--disable", "-p", multiple=True, metavar="NAME",
              help="Block a plugin, defaults included, for this run (env HERMES_DISABLE_PLUGINS). "
                   "Repeatable or comma-separated.")
@click.option("--load", multiple=True, metavar="NAMES",
              help="Load only these third-party plugins (env HERMES_LOAD_PLUGINS); '' loads none.")
@click.option("--strict", is_flag=True,
              help="Fail when a plugin fails to load (env HERMES_STRICT_PLUGINS=1).")
@click.option("--trace", is_flag=True, help="Log every hook call to stderr (env HERMES_TRACE_PLUGINS=1).")
@click.pass_context
def cli(ctx: click.Context, **_: Any) -> None:
    """Hermes: memory and context management for LLM agents, built from plugins."""
    _state(ctx)


# --------------------------------------------------------------------------------------
# hermes plugins
# --------------------------------------------------------------------------------------


@cli.group()
def plugins() -> None:
    """List, install, enable, disable and select plugins."""


@plugins.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include the default plugins.")
@click.option("--hook", metavar="NAME", help="Only plugins implementing this hook.")
@pass_state
def plugins_list(state: CLIState, as_json: bool, show_all: bool, hook: str | None) -> None:
    """List plugins and what each registered.

    Shows name, distribution and version, source (default, entrypoint, local,
    registered), status (active, blocked, failed), hooks and registrations. Works with
    broken plugins and in safe mode, and with a broken config.yaml (listed as if it were
    empty, with a warning)."""
    kernel = state.listing_kernel()
    if state.config_error is not None:
        click.echo(f"hermes: warning: {state.config_error} Plugins are listed as if "
                   "config.yaml were empty.", err=True)
    records = [r for r in kernel.plugins if show_all or r.source != "default"]
    if hook:
        records = [r for r in records if hook in r.hooks]
    if as_json:
        echo_json([r.as_dict() for r in records])
        return
    if not records:
        click.echo("No third-party plugins installed. `hermes plugins list --all` shows the defaults.")
        return
    for r in records:
        ver = f" {r.version}" if r.version else ""
        dist = f"  [{r.dist}{ver}]" if r.dist else ""
        click.echo(f"{r.name}{dist}  {r.source}  {r.status}")
        if r.status == "failed" and r.failure:
            click.echo(f"  error: {r.failure.error}")
        if r.status == "blocked":
            click.echo(f"  blocked: {r.blocked_by}")
        if r.source == "local" and r.path:
            click.echo(f"  path: {r.path}")
        if r.hooks:
            click.echo(f"  hooks: {', '.join(r.hooks)}")
        for kind, names in r.registered.items():
            click.echo(f"  {kind}: {', '.join(names)}")


def _find_record(kernel: Any, name: str) -> Any:
    for record in kernel.plugins:
        if record.name == name or (record.dist and _canonical(record.dist) == _canonical(name)):
            return record
    known = ", ".join(sorted(r.name for r in kernel.plugins))
    raise HermesError(f"no plugin named {name!r}. Installed plugins: {known or '(none)'}")


@plugins.command("info")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def plugins_info(state: CLIState, name: str, as_json: bool) -> None:
    """Show one plugin, with its failure's traceback.

    NAME is a plugin name or a distribution name."""
    record = _find_record(state.kernel(), name)
    data = record.as_dict()
    data["path"] = record.path
    data["traceback"] = record.failure.traceback if record.failure else None
    if as_json:
        echo_json(data)
        return
    for key in ("name", "distribution", "version", "source", "status", "module", "path", "blocked_by"):
        if data.get(key):
            click.echo(f"{key}: {data[key]}")
    if record.hooks:
        click.echo(f"hooks: {', '.join(record.hooks)}")
    for kind, names in record.registered.items():
        click.echo(f"{kind}: {', '.join(names)}")
    if record.failure:
        click.echo(f"error: {record.failure.error}")
        click.echo(record.failure.traceback.rstrip())


def _pip(args: list[str]) -> int:
    """Run pip for the interpreter running Hermes, streaming its output (progress). An
    environment without pip (made by uv) gets ``uv pip --python <interpreter>``."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("pip") is not None:
        cmd = [sys.executable, "-m", "pip", *args]
    elif shutil.which("uv"):
        # uv never prompts, and has no -y.
        cmd = ["uv", "pip", args[0], "--python", sys.executable, *[a for a in args[1:] if a != "-y"]]
    else:
        raise HermesError(f"pip is not installed in Hermes' environment ({sys.executable}). "
                          f"Run `{sys.executable} -m ensurepip` and try again.")
    click.echo("$ " + " ".join(cmd), err=True)
    import subprocess  # only here: `hermes --version` and `--help` never need it

    return subprocess.call(cmd)


@plugins.command("install")
@click.argument("specs", nargs=-1, required=True)
@click.option("-e", "--editable", is_flag=True, help="Install a local path in editable mode.")
@click.option("-U", "--upgrade", is_flag=True, help="Upgrade if already installed.")
@pass_state
def plugins_install(state: CLIState, specs: tuple[str, ...], editable: bool, upgrade: bool) -> None:
    """Install plugins with pip (path, wheel, requirement), or copy a plugin directory.

    Runs pip for the interpreter running Hermes and shows its progress; reports the
    plugins (entry points of group `hermes.plugins`) that appeared. A directory in
    Hermes Agent's layout (an `__init__.py`, no pyproject.toml) is copied into
    $HERMES_HOME/plugins/ (a context engine into plugins/context_engine/) instead."""
    from .config import resolve_home
    from .hermes_compat import install_plugin_dir, is_plugin_dir
    from .manager import ENTRY_POINT_GROUP, find_entry_points

    dirs = [Path(spec) for spec in specs if not editable and is_plugin_dir(Path(spec))]
    for path in dirs:
        name, kind, target = install_plugin_dir(path, resolve_home(state.home) / "plugins", upgrade=upgrade)
        hint = f" Select it with `hermes plugins select {kind} {name}`." if kind != "plugin" else ""
        click.echo(f"Installed local plugin {name} ({kind}) at {target}.{hint}")
    specs = tuple(spec for spec in specs if Path(spec) not in dirs)
    if not specs:
        return
    before = {ep.name for ep in find_entry_points(ENTRY_POINT_GROUP)}
    args = ["install"] + (["--upgrade"] if upgrade else [])
    for spec in specs:
        args += ["-e", spec] if editable else [spec]
    code = _pip(args)
    if code:
        raise HermesError(f"pip install failed (exit {code}); nothing was changed by Hermes.")
    new = sorted({ep.name for ep in find_entry_points(ENTRY_POINT_GROUP)} - before)
    if new:
        click.echo(f"Installed plugin(s): {', '.join(new)}. See `hermes plugins list`.")
    else:
        click.echo("Installed. No new `hermes.plugins` entry point appeared; "
                   "is this distribution a Hermes plugin?")


@plugins.command("uninstall")
@click.argument("names", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def plugins_uninstall(state: CLIState, names: tuple[str, ...], yes: bool) -> None:
    """Uninstall plugins by plugin or distribution name.

    Works with broken plugins and in safe mode; with a broken config.yaml the names are
    taken as distribution names."""
    try:
        records = state.kernel().plugins
    except HermesError as exc:
        click.echo(f"hermes: {exc} (taking the names as distribution names)", err=True)
        records = []
    dists: list[str] = []
    for name in names:
        record = next((r for r in records if r.name == name), None) or next(
            (r for r in records if r.dist and _canonical(r.dist) == _canonical(name)), None)
        if record is not None and record.source == "default":
            raise HermesError(f"{name!r} is a default plugin and ships with Hermes; "
                              f"use `hermes plugins disable {name}` instead.")
        if record is not None and record.source == "local" and record.path and Path(record.path).is_dir():
            # a Hermes-layout directory `hermes plugins install` copied: removed here
            if not yes:
                click.confirm(f"Remove {record.path}?", abort=True)
            import shutil

            shutil.rmtree(record.path)
            click.echo(f"Removed local plugin {record.name} ({record.path}).")
            continue
        if record is not None and record.source == "local":
            raise HermesError(f"{name!r} is a local plugin: delete {record.path} to remove it, "
                              f"or `hermes plugins disable {name}`.")
        dist = record.dist if record is not None and record.dist else name
        if _canonical(dist) == "hermes-kernel":
            raise HermesError("refusing to uninstall Hermes itself.")
        if dist not in dists:
            dists.append(dist)
    if not dists:
        return
    code = _pip(["uninstall", *(["-y"] if yes else []), *dists])
    if code:
        raise HermesError(f"pip uninstall failed (exit {code}).")
    gone = {r.name for r in records if r.dist and _canonical(r.dist) in {_canonical(d) for d in dists}}
    if gone:
        _warn_selected_by(state.kernel(), gone)


def _canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


@plugins.command("enable")
@click.argument("name")
@pass_state
def plugins_enable(state: CLIState, name: str) -> None:
    """Remove NAME from plugins.disabled in config.yaml."""
    from .config import CONFIG_FILE, update_config

    kernel = state.kernel()
    if name not in (kernel.config.raw("plugins.disabled") or []):
        record = kernel.pm.records.get(name)
        why = f" It is blocked by: {record.blocked_by}." if record and record.blocked_by else ""
        click.echo(f"{name} is not disabled in config.{why}")
        return
    update_config(kernel.home, "plugins.disabled", lambda old: [n for n in old or [] if n != name])
    click.echo(f"Enabled {name} ({kernel.home / CONFIG_FILE}).")


@plugins.command("disable")
@click.argument("name")
@pass_state
def plugins_disable(state: CLIState, name: str) -> None:
    """Add NAME to plugins.disabled (defaults too)."""
    from .config import CONFIG_FILE, update_config

    kernel = state.kernel()
    if name in (kernel.config.raw("plugins.disabled") or []):
        click.echo(f"{name} is already disabled.")
        return
    if name not in kernel.pm.records:
        click.echo(f"note: no plugin named {name!r} is installed; disabling it anyway.", err=True)
    update_config(kernel.home, "plugins.disabled",
                  lambda old: list(old or []) + ([] if name in (old or []) else [name]))
    click.echo(f"Disabled {name} ({kernel.home / CONFIG_FILE}).")
    _warn_selected_by(kernel, {name})


def _warn_selected_by(kernel: Any, plugin_names: set[str]) -> None:
    """Say which configured selections the plugins about to go away provide, and what
    Hermes will use instead (the kernel's fallback, or nothing: then it refuses to start)."""
    from .core import SELECTION_FALLBACKS

    for kind, key in SELECTION_KEYS.items():
        name = str(kernel.config.get(key) or "")
        registry = kernel.registries.by_kind(kind)
        if not name or name not in registry or registry.get(name).plugin not in plugin_names:
            continue
        fallback = SELECTION_FALLBACKS.get(kind)
        if fallback and (fallback not in registry or registry.get(fallback).plugin in plugin_names):
            fallback = None  # the built-in goes away too
        instead = (f"Hermes will use the built-in {fallback!r} instead" if fallback else
                   "Hermes will refuse to start until another is selected")
        click.echo(f"warning: {registry.get(name).plugin} provides the selected {kind} {name!r} "
                   f"({key}); {instead}. Choose one with `hermes plugins select {kind} NAME`.",
                   err=True)


@plugins.command("select")
@click.argument("kind", type=click.Choice([k.name for k in COMPONENT_KINDS if k.setting]))
@click.argument("name")
@pass_state
def plugins_select(state: CLIState, kind: str, name: str) -> None:
    """Choose the KIND component that config selects.

    Writes context.engine, memory.provider, sessions.store or model.provider in
    config.yaml, keeping comments; refuses a name no plugin registered."""
    from .config import set_config_value
    from .errors import UnknownPluginError
    from .registry import SELECTION_KEYS

    kernel = state.kernel()
    registry = kernel.registries.by_kind(kind)
    if name not in registry:
        # Refused before anything is written: config.yaml stays byte-identical.
        raise UnknownPluginError(kind, name, registry.names())
    key = SELECTION_KEYS[kind]
    path = set_config_value(kernel.home, key, name)
    entry = registry.get(name)
    click.echo(f"Selected {kind} {name!r} (from plugin {entry.plugin}); wrote {key} in {path}.")


@plugins.command("new")
@click.argument("name")
@click.option("--dir", "parent", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Where to create the hermes-NAME directory.")
def plugins_new(name: str, parent: str) -> None:
    """Create a plugin distribution to start from: hermes-NAME/ with a pyproject (the
    entry point), a memory provider (one hook), tests (pytest fixtures and the
    conformance suite) and a README. It installs and passes its tests as generated."""
    from .scaffold import plugin_names, scaffold

    try:
        plugin_names(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    root = scaffold(name, parent)
    click.echo(f"Created {root}. Next: hermes plugins install -e {root}  (then `pytest {root}`)")


# --------------------------------------------------------------------------------------
# hermes config, hermes doctor
# --------------------------------------------------------------------------------------


@cli.group()
def config() -> None:
    """Show and validate config.yaml."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def config_show(state: CLIState, as_json: bool) -> None:
    """Print the effective configuration.

    The defaults merged with config.yaml; $env/$file references are shown, not resolved,
    and secret-looking values are masked."""
    import yaml

    from .config import Config, resolve_home
    from .redaction import mask_secrets

    home = resolve_home(state.home)
    # Secret-looking values are masked; $env/$file references are shown as written.
    data = mask_secrets(Config.load(home).as_dict())
    if as_json:
        echo_json(data)
    else:
        click.echo(f"# {home / 'config.yaml'}")
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())


@config.command("validate")
@pass_state
def config_validate(state: CLIState) -> None:
    """Check config.yaml, references and selections.

    Exit status 0 when everything is usable, 1 otherwise; warnings (unknown top-level
    sections, usually typos) do not fail."""
    from .config import read_yaml, resolve_home, unknown_sections
    from .settings import declared_sections

    home = resolve_home(state.home)
    kernel = state.kernel()  # raises ConfigError with the file, line or key path
    # A section a loaded plugin reads (hermes-mcp's mcp_servers) is not unknown.
    known = [s for r in kernel.pm.records.values() if r.status == "active"
             for s in declared_sections(kernel.pm.get_plugin(r.name))]
    for section in unknown_sections(read_yaml(home / "config.yaml"), known):
        click.echo(f"warning: unknown top-level section {section}; Hermes ignores it.", err=True)
    problems = [str(e) for e in kernel.config_problems]
    try:
        kernel.config.as_dict(resolve=True)
    except HermesError as exc:
        problems.append(str(exc))
    for problem in problems:
        click.echo(f"error: {problem}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"{home / 'config.yaml'}: OK")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def doctor(state: CLIState, as_json: bool) -> None:
    """Check home, config, plugins and selections.

    Says what is missing (credentials, a selected component no plugin registered) and
    which plugins failed; exit status 1 when there is a problem."""
    report: dict[str, Any] = {"version": __version__, "python": sys.version.split()[0]}
    problems: list[str] = []
    kernel = _doctor_home(state, report, problems)
    if kernel is not None:
        _doctor_kernel(kernel, report, problems)
    report["problems"] = problems
    from .redaction import mask_secrets

    report = mask_secrets(report)  # doctor output is pasted into bug reports: no secrets
    if as_json:
        echo_json(report)
    else:
        _print_doctor_report(report, with_kernel=kernel is not None)
    sys.exit(1 if problems else 0)


def _doctor_home(state: CLIState, report: dict[str, Any], problems: list[str]) -> Any:
    """Step 1: the home, its config file, file permissions and the kernel built on it
    (``None`` when the home or the config cannot be used; the reason is a problem)."""
    from .config import CONFIG_FILE, resolve_home

    try:
        home = resolve_home(state.home)
    except HermesError as exc:
        report["home"] = None
        problems.append(str(exc))
        return None
    report["home"] = str(home)
    report["config_file"] = str(home / CONFIG_FILE)
    report["warnings"] = _privacy_warnings(home)
    try:
        return state.kernel()
    except HermesError as exc:
        problems.append(str(exc))
        return None


def _doctor_kernel(kernel: Any, report: dict[str, Any], problems: list[str]) -> None:
    """Step 2: plugins (active, blocked, failed), configuration problems (the same
    :attr:`Kernel.config_problems` a start refuses), the selected component of each
    selectable kind, event-hook errors and the checks of the selected components."""
    report["plugins"] = {
        "active": sorted(r.name for r in kernel.plugins if r.status == "active"),
        "blocked": sorted(r.name for r in kernel.plugins if r.status == "blocked"),
        "failed": [f.line() for f in kernel.failures],
    }
    problems.extend(f.line() for f in kernel.failures)
    problems.extend(str(e) for e in kernel.config_problems)
    selected = {}
    for kind in COMPONENT_KINDS:
        if not kind.setting:
            continue
        name = kernel.selected(kind.name)
        registry = kernel.registries.by_kind(kind.name)
        selected[kind.name] = {
            "name": name or None,
            "plugin": registry.get(name).plugin if name and name in registry else None,
        }
    report["selected"] = selected
    report["hook_errors"] = [f"{p} in {h}: {e}" for (p, h), e in kernel.pm.hook_errors.items()]
    report["checks"] = _doctor_checks(kernel, problems)


def _print_doctor_report(report: dict[str, Any], *, with_kernel: bool) -> None:
    """Step 3: the report as text, one finding per line."""
    click.echo(f"hermes {report['version']} (Python {report['python']})")
    click.echo(f"home: {report.get('home')}")
    if with_kernel:
        click.echo(f"plugins: {len(report['plugins']['active'])} active, "
                   f"{len(report['plugins']['blocked'])} blocked, "
                   f"{len(report['plugins']['failed'])} failed")
        for kind, sel in report["selected"].items():
            click.echo(f"{kind}: {sel['name'] or '(none)'}" + (f" [{sel['plugin']}]" if sel["plugin"] else ""))
        for line in report["checks"]:
            click.echo(f"check: {line}")
    for warning in report.get("warnings", []):
        click.echo(f"warning: {warning}")
    for problem in report["problems"]:
        click.echo(f"problem: {problem}")
    if not report["problems"]:
        click.echo("No problems found.")


def _privacy_warnings(home: Any) -> list[str]:
    """Files of ``home`` that other users can read or enter, each with the chmod that
    fixes it (a warning, not a problem: the home still works)."""
    import shlex
    import stat

    wanted = [(home, 0o700), (home / "memories", 0o700), (home / ".env", 0o600),
              (home / "state.db", 0o600), (home / "logs" / "hermes.log", 0o600)]
    warnings = []
    for path, mode in wanted:
        try:
            current = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue
        if current & 0o077:
            who = "other users" if current & 0o007 else "its group"
            warnings.append(f"{path} can be read by {who} (mode {current:04o}); "
                            f"fix with: chmod {mode:o} {shlex.quote(str(path))}")
    return warnings


def _doctor_checks(kernel: Any, problems: list[str]) -> list[str]:
    """Checks of the selected components that cost no network, one kind at a time in
    :data:`COMPONENT_KINDS` order: the kernel's own check of the kind (the LLM client's
    credentials, the external memory provider's availability, the context engine's
    window, threshold and any blocked state), then the selected component's own
    ``factory.doctor(kernel) -> (lines, problems)`` when its factory has one (a session
    store on a server checks its connection that way)."""
    lines: list[str] = []
    for kind in COMPONENT_KINDS:
        if not kind.setting:
            continue
        check = _KIND_CHECKS.get(kind.name)
        if check is not None:
            check(kernel, lines, problems)
        _component_doctor(kernel, kind.name, lines, problems)
    return lines


def _component_doctor(kernel: Any, kind: str, lines: list[str], problems: list[str]) -> None:
    """The selected ``kind`` component's own check, ``factory.doctor(kernel)``."""
    name = kernel.selected(kind)
    registry = kernel.registries.by_kind(kind)
    check = getattr(registry.get(name).factory, "doctor", None) if name in registry else None
    if check is None:
        return
    try:
        found_lines, found_problems = check(kernel)
        lines.extend(found_lines)
        problems.extend(found_problems)
    except Exception as exc:  # a broken check is itself the finding
        problems.append(f"{kind} {name}: {type(exc).__name__}: {exc}")


def _check_llm(kernel: Any, lines: list[str], problems: list[str]) -> None:
    provider = kernel.selected("llm")
    try:
        problem = kernel.llm_client().credentials_problem()
    except Exception as exc:  # a broken client is itself the finding
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        problems.append(f"{provider}: {problem.splitlines()[0]}")
    else:
        lines.append(f"credentials for {provider}: present")


def _check_context_engine(kernel: Any, lines: list[str], problems: list[str]) -> None:
    try:
        engine = kernel.create("context-engine")
        model = str(kernel.config.get("model.name"))
        window = kernel.config.get("model.context_length") or kernel.llm_client().context_length(model)
        if window:
            engine.model_thresholds = dict(kernel.config.get("compression.model_thresholds") or {})
            engine.update_model(model, int(window), provider=kernel.selected("llm"))
        status = engine.get_status()
        should, reason = engine.should_compress_info(0)
        line = (f"context engine {engine.name}: window {status.get('context_length') or 'unknown'}, "
                f"compacts at {status.get('threshold_tokens') or '?'} tokens")
        if not should and reason:
            line += f" (blocked: {reason})"
        lines.append(line)
    except Exception as exc:
        problems.append(f"context engine: {type(exc).__name__}: {exc}")


def _check_memory_provider(kernel: Any, lines: list[str], problems: list[str]) -> None:
    try:
        from .runtime.memory_manager import MemoryManager

        memory = MemoryManager(kernel).status()
        external = memory.get("external") or {}
        if external.get("name"):
            if external.get("available"):
                lines.append(f"memory provider {external['name']}: available")
            else:
                problems.append(f"memory provider {external['name']} unavailable: "
                                f"{external.get('reason') or 'no reason given'}")
    except Exception as exc:
        problems.append(f"memory: {type(exc).__name__}: {exc}")


#: The kernel's own doctor check of each selectable kind (a kind without one is checked
#: only by its component's ``factory.doctor``).
_KIND_CHECKS: dict[str, Callable[[Any, list[str], list[str]], None]] = {
    "llm": _check_llm,
    "memory-provider": _check_memory_provider,
    "context-engine": _check_context_engine,
}


@cli.command()
@click.option("-c", "--continue", "resume", is_flag=True, help="Continue the latest session.")
@click.option("-r", "--resume", "resume_ref", metavar="ID|TITLE",
              help="Continue this session (an id, a unique id prefix or a title).")
@click.option("-q", "--query", metavar="TEXT",
              help="Answer one message and exit (scriptable; exit status 3 when the answer was "
                   "cut off part way); '-' reads it from stdin.")
@click.option("--json", "json_out", is_flag=True,
              help="With -q: print the answer, usage and session id as one JSON object.")
@click.option("--plain", is_flag=True, help="Raw text: no markdown rendering, no colours.")
@click.option("--model", help="Model name (overrides model.name).")
@click.option("--provider", help="LLM client (overrides model.provider): anthropic, openai, …")
@click.option("--base-url", help="API base URL, e.g. a local OpenAI-compatible server.")
@pass_state
def chat(state: CLIState, resume: bool, resume_ref: str | None, query: str | None, json_out: bool,
         plain: bool, model: str | None, provider: str | None, base_url: str | None) -> None:
    """Chat with the agent in the terminal (or answer one message with -q, or piped stdin).

    In the chat: Enter sends, Esc-Enter or Ctrl-J starts a new line, /help lists the
    commands, Ctrl-C stops an answer (at an empty prompt it leaves)."""
    from .errors import LLMAuthError
    from .runtime.chat import main_error, run_chat

    try:
        run_chat(state, resume=resume, resume_ref=resume_ref, query=query, json_out=json_out,
                 plain=plain, model=model, provider=provider, base_url=base_url)
    except LLMAuthError as exc:
        main_error(exc)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``hermes`` console script: user errors are one line on stderr
    and exit status 1; a traceback means a bug."""
    args = sys.argv[1:] if argv is None else argv
    for n, arg in enumerate(args, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as lone surrogates
            shown = os.fsencode(arg).decode("utf-8", "backslashreplace")
            click.echo(f"hermes: error: argument {n} ({shown}) is not valid UTF-8. "
                       "Pass text and paths as UTF-8.", err=True)
            sys.exit(2)
    try:
        code = cli.main(args=args, prog_name="hermes", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except HermesError as exc:
        click.echo(f"hermes: error: {exc}", err=True)
        sys.exit(exit_code(exc))
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:
        import errno

        # A full disk or a failing device under the output (`> /dev/full`, a full
        # filesystem): one line, and the unflushed output is dropped, not re-raised at exit.
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG):
            raise
        where = exc.filename or "the output"
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        click.echo(f"hermes: error: cannot write {where}: {exc.strerror}. Free some space or "
                   "write somewhere else, then try again.", err=True)
        sys.exit(1)
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)  # ctx.exit(N) in standalone_mode=False comes back as a return value


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["CLIState", "cli", "echo_json", "main", "pass_state"]
