"""The plugin manager: default, entry-point and local plugins, the switches, guarded
loading with rollback, recorded failures, name clashes, tracing and event isolation.

Entry points are real: each test writes an installed distribution (dist-info with
``entry_points.txt``) into a directory on ``sys.path``, which importlib.metadata scans
exactly as it scans site-packages.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pytest

import hermes
from hermes.manager import HermesPluginManager, LoadSwitches
from hermes.testing import make_distribution

ENGINE = """
import hermes

class {cls}(hermes.ContextEngine):
    name = "{engine}"
    def update_from_response(self, usage): pass
    def should_compress(self, prompt_tokens=None): return False
    def compress(self, messages, **kw): return list(messages)
"""


def engine_plugin(engine: str, *, extra: str = "", cls: str = "Engine") -> str:
    """Source of a plugin module registering one context engine."""
    return ENGINE.format(engine=engine, cls=cls) + f"""
@hermes.hookimpl
def hermes_register_context_engines(register):
    register("{engine}", {cls}, description="test engine {engine}")
""" + extra


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A directory on sys.path for fake installed distributions; modules imported from
    it are forgotten afterwards so that tests cannot see each other's plugins."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "") or "").startswith(str(site)):
            del sys.modules[name]


@pytest.fixture
def boot(hermes_home: Path, kernel_factory):
    """A kernel with entry points and local plugins loaded (autoload on), selection
    unchecked. Only plugins in this test's ``site`` carry the prefix ``t-``."""

    def make(**kwargs):
        kwargs.setdefault("autoload", True)
        return kernel_factory(**kwargs)

    return make


def ours(kernel) -> dict[str, hermes.PluginRecord]:
    return {r.name: r for r in kernel.plugins if r.name.startswith("t-")}


# -- default plugins ---------------------------------------------------------------


def test_default_plugins_register_through_the_plugin_path(kernel):
    records = {r.name: r for r in kernel.plugins}
    assert records, "the package lists default plugins"
    for record in records.values():
        assert record.source == "default"
        assert record.status == "active", record.failure
        assert record.module.startswith("hermes.plugins")
    assert kernel.failures == []


def test_default_plugin_can_be_blocked_by_env_and_by_config(hermes_home, kernel_factory, monkeypatch):
    name = next(r.name for r in kernel_factory().plugins)
    monkeypatch.setenv("HERMES_DISABLE_PLUGINS", f"nothing, {name}")
    record = {r.name: r for r in kernel_factory().plugins}[name]
    assert record.status == "blocked"
    assert "HERMES_DISABLE_PLUGINS" in record.blocked_by
    monkeypatch.delenv("HERMES_DISABLE_PLUGINS")

    record = {r.name: r for r in kernel_factory(config={"plugins": {"disabled": [name]}}).plugins}[name]
    assert record.status == "blocked"
    assert "plugins.disabled" in record.blocked_by
    assert record.hooks == [] and record.registered == {}


def test_blocked_default_is_never_imported(tmp_path, monkeypatch):
    (tmp_path / "t_sentinel_default.py").write_text("raise RuntimeError('imported!')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = HermesPluginManager(LoadSwitches(disabled={"t-sentinel"}))
    pm.load_defaults([("t-sentinel", "t_sentinel_default")])
    assert pm.records["t-sentinel"].status == "blocked"
    assert "t_sentinel_default" not in sys.modules


def test_broken_default_is_recorded_not_raised(tmp_path, monkeypatch, capsys):
    (tmp_path / "t_broken_default.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = HermesPluginManager(LoadSwitches())
    pm.load_defaults([("t-broken", "t_broken_default")])
    record = pm.records["t-broken"]
    assert record.status == "failed" and record.failure.stage == "load"
    assert "RuntimeError: boom at import" in record.failure.error
    assert "boom at import" in record.failure.traceback
    err = capsys.readouterr().err
    assert "plugin t-broken failed to load" in err


# -- entry points ------------------------------------------------------------------


def test_entry_point_plugin_loads_with_distribution_and_version(site, boot):
    make_distribution(site, "hermes-t-good", version="2.3", plugins={"t-good": "t_good"},
                      modules={"t_good.py": engine_plugin("t-engine")})
    kernel = boot()
    record = ours(kernel)["t-good"]
    assert (record.source, record.status, record.dist, record.version) == (
        "entrypoint", "active", "hermes-t-good", "2.3")
    assert record.hooks == ["hermes_register_context_engines"]
    assert record.registered == {"context-engine": ["t-engine"]}
    entry = kernel.registries.context_engines.get("t-engine")
    assert entry.plugin == "t-good" and entry.description == "test engine t-engine"
    assert record.as_dict()["distribution"] == "hermes-t-good"


def test_entry_point_with_attribute_target(site, boot):
    source = """
import hermes

class Plugin:
    @hermes.hookimpl
    def hermes_register_tools(self, register):
        register(hermes.Tool(name="t_echo", schema={"description": "echo"},
                             handler=lambda args, ctx: "ok"))

plugin = Plugin()
"""
    make_distribution(site, "hermes-t-attr", plugins={"t-attr": "t_attr:plugin"},
                      modules={"t_attr.py": source})
    kernel = boot()
    assert ours(kernel)["t-attr"].status == "active"
    assert kernel.registries.tools.get("t_echo").plugin == "t-attr"


def test_plugin_raising_at_import_is_reported_in_one_line(site, boot, capsys):
    make_distribution(site, "hermes-t-broken", version="0.1", plugins={"t-broken": "t_broken"},
                      modules={"t_broken.py": "import hermes\nraise ImportError('needs libfoo\\nreally')\n"})
    make_distribution(site, "hermes-t-good", plugins={"t-good": "t_good"},
                      modules={"t_good.py": engine_plugin("t-engine")})
    kernel = boot()
    records = ours(kernel)
    assert records["t-good"].status == "active", "one broken plugin never stops the others"
    broken = records["t-broken"]
    assert broken.status == "failed" and broken.failure.stage == "load"
    assert broken.failure.error == "ImportError: needs libfoo really"
    assert "t_broken.py" in broken.failure.traceback
    lines = [line for line in capsys.readouterr().err.splitlines() if "t-broken" in line]
    assert len(lines) == 1
    assert "plugin t-broken (hermes-t-broken 0.1) failed to load: ImportError" in lines[0]
    assert "hermes plugins disable t-broken" in lines[0]
    assert [f for f in kernel.failures if f.name.startswith("t-")] == [broken.failure]


def test_misspelled_hook_is_a_load_failure_with_a_hint(site, boot):
    source = engine_plugin("t-typo-engine", extra="""
@hermes.hookimpl
def hermes_register_context_engine(register):
    pass
""")
    make_distribution(site, "hermes-t-typo", plugins={"t-typo": "t_typo"}, modules={"t_typo.py": source})
    kernel = boot()
    record = ours(kernel)["t-typo"]
    assert record.status == "failed"
    assert "hermes_register_context_engine (did you mean hermes_register_context_engines?)" in record.failure.error
    # Rolled back: its correctly named hook registered nothing.
    assert "t-typo-engine" not in kernel.registries.context_engines
    assert kernel.pm.get_plugin("t-typo") is None


def test_optionalhook_for_an_unknown_hook_is_allowed(register_plugin, kernel):
    class Plugin:
        @hermes.hookimpl(optionalhook=True)
        def hermes_some_future_hook(self, thing):
            pass

    assert register_plugin(Plugin(), "t-future").status == "active"


def test_hook_wrappers_are_refused(register_plugin):
    class Plugin:
        @hermes.hookimpl(wrapper=True)
        def hermes_turn_end(self, session, turn):
            return (yield)

    record = register_plugin(Plugin(), "t-wrapper")
    assert record.status == "failed"
    assert "hook wrappers are not supported" in record.failure.error


def test_wrong_argument_name_is_a_load_failure(kernel, register_plugin):
    class Plugin:
        @hermes.hookimpl
        def hermes_register_context_engines(self, register):
            register("t-never", object)

        @hermes.hookimpl
        def hermes_turn_end(self, session, turns):  # `turns` is no argument of the spec
            pass

    record = register_plugin(Plugin(), "t-args")
    assert record.status == "failed"
    assert "turns" in record.failure.error and "\n" not in record.failure.error
    assert "t-never" not in kernel.registries.context_engines


def test_plugin_raising_at_registration_is_rolled_back(site, boot, capsys):
    source = engine_plugin("t-half", extra="""
@hermes.hookimpl
def hermes_register_tools(register):
    raise RuntimeError("tool registry exploded")
""")
    make_distribution(site, "hermes-t-half", plugins={"t-half": "t_half"}, modules={"t_half.py": source})
    kernel = boot()
    record = ours(kernel)["t-half"]
    assert record.status == "failed" and record.failure.stage == "register"
    assert record.failure.error == "RuntimeError: tool registry exploded"
    # Engines are registered before tools: the engine it did register is gone again.
    assert "t-half" not in kernel.registries.context_engines
    assert kernel.pm.get_plugin("t-half") is None
    assert "plugin t-half (hermes-t-half 1.0) failed to register" in capsys.readouterr().err


def test_two_plugins_claiming_one_engine_name(site, boot, capsys):
    make_distribution(site, "hermes-t-first", plugins={"t-first": "t_first"},
                      modules={"t_first.py": engine_plugin("t-shared", cls="A")})
    make_distribution(site, "hermes-t-second", plugins={"t-second": "t_second"},
                      modules={"t_second.py": engine_plugin("t-shared", cls="B")})
    kernel = boot()
    records = ours(kernel)
    statuses = sorted((r.status, r.name) for r in records.values())
    assert [s for s, _ in statuses] == ["active", "failed"], "the kernel keeps going"
    winner = next(r for r in records.values() if r.status == "active")
    loser = next(r for r in records.values() if r.status == "failed")
    assert kernel.registries.context_engines.get("t-shared").plugin == winner.name
    assert loser.failure.stage == "register (name conflict)"
    assert "ConflictError" in loser.failure.error
    assert f"'{winner.name}' and '{loser.name}'" in loser.failure.error
    assert f"hermes plugins disable {loser.name}" in loser.failure.error
    assert loser.failure.line() in capsys.readouterr().err


def test_default_keeps_a_name_a_later_plugin_claims(kernel_factory):
    """Registration runs in registration order: the established (default) plugin keeps
    its name and the newcomer is the one in conflict."""
    k = kernel_factory()
    taken = next((e for reg in k.registries.all() for e in reg), None)
    if taken is None:
        pytest.skip("no default plugin registers anything yet")
    name, kind = taken.name, taken.kind

    class Newcomer:
        @hermes.hookimpl
        def hermes_register_tools(self, register):
            register(hermes.Tool(name=name, schema={}, handler=lambda a, c: ""))

        @hermes.hookimpl
        def hermes_register_context_engines(self, register):
            register(name, lambda: None)

        @hermes.hookimpl
        def hermes_register_memory_providers(self, register):
            register(name, lambda: None)

        @hermes.hookimpl
        def hermes_register_session_stores(self, register):
            register(name, lambda: None)

        @hermes.hookimpl
        def hermes_register_llm_clients(self, register):
            register(name, lambda: None)

        @hermes.hookimpl
        def hermes_register_prompt_layers(self, register):
            register(name, lambda: None)

    k2 = kernel_factory(plugins=[Newcomer()])
    assert k2.registries.by_kind(kind).get(name).plugin == taken.plugin
    failed = [r for r in k2.plugins if r.status == "failed"]
    assert len(failed) == 1 and failed[0].failure.stage == "register (name conflict)"


def test_tryfirst_and_trylast_order_registration(kernel_factory):
    order: list[str] = []

    def plugin(tag: str, **opts):
        class P:
            @hermes.hookimpl(**opts)
            def hermes_register_tools(self, register):
                order.append(tag)

        P.__name__ = tag
        return P()

    kernel_factory(defaults=False, plugins=[plugin("late", trylast=True), plugin("a"),
                                            plugin("first", tryfirst=True), plugin("b")])
    assert order == ["first", "a", "b", "late"]


# -- switches ----------------------------------------------------------------------


@pytest.fixture
def three(site):
    """Three good entry-point plugins, each writing a marker when imported."""
    for tag in ("a", "b", "c"):
        make_distribution(site, f"hermes-t-{tag}", plugins={f"t-{tag}": f"t_{tag}"}, modules={
            f"t_{tag}.py": engine_plugin(f"t-engine-{tag}")
            + "\nimport pathlib\npathlib.Path(__file__).with_suffix('.imported').touch()\n"})
    return site


def imported(site: Path) -> set[str]:
    return {p.stem.removeprefix("t_") for p in site.glob("*.imported")}


def test_load_plugins_env_loads_only_those(three, boot, monkeypatch):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "t-a, t-c")
    records = ours(boot())
    assert {n: r.status for n, r in records.items()} == {
        "t-a": "active", "t-b": "blocked", "t-c": "active"}
    assert "HERMES_LOAD_PLUGINS" in records["t-b"].blocked_by
    assert imported(three) == {"a", "c"}, "a blocked plugin is filtered before import"


def test_load_plugins_empty_means_none(three, boot, monkeypatch, kernel):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "")
    k = boot()
    assert {r.status for r in ours(k).values()} == {"blocked"}
    assert imported(three) == set()
    defaults = [r for r in k.plugins if r.source == "default"]
    assert defaults and all(r.status == "active" for r in defaults), "defaults are not entry points"


def test_load_plugins_keyword_overrides_env(three, boot, monkeypatch):
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "t-a")
    records = ours(boot(load_plugins=["t-b"]))
    assert [n for n, r in records.items() if r.status == "active"] == ["t-b"]


def test_disable_plugins_env_blocks_entry_points(three, boot, monkeypatch):
    monkeypatch.setenv("HERMES_DISABLE_PLUGINS", "t-b")
    records = ours(boot())
    assert records["t-b"].status == "blocked" and records["t-a"].status == "active"
    assert "b" not in imported(three)


def test_config_disabled_blocks_persistently(three, boot, hermes_home):
    (hermes_home / "config.yaml").write_text("plugins:\n  disabled: [t-c]\n")
    records = ours(boot())
    assert records["t-c"].status == "blocked"
    assert records["t-c"].blocked_by == "disabled in config (plugins.disabled)"
    assert imported(three) == {"a", "b"}


def test_safe_mode_loads_no_entry_point_or_local_plugin(three, boot, monkeypatch, hermes_home):
    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / "t_local.py").write_text("raise SystemExit('must not run')\n")
    monkeypatch.setenv("HERMES_NO_PLUGINS", "1")
    k = boot()
    records = ours(k)
    assert {r.status for r in records.values()} == {"blocked"}
    assert all("safe mode" in r.blocked_by for r in records.values())
    assert {r.name: r.status for r in k.plugins}["t_local"] == "blocked"
    assert imported(three) == set()
    assert all(r.status == "active" for r in k.plugins if r.source == "default")


def test_strict_mode_raises_naming_the_plugin(site, boot, monkeypatch):
    make_distribution(site, "hermes-t-broken", plugins={"t-broken": "t_broken"},
                      modules={"t_broken.py": "raise ValueError('bad plugin')\n"})
    monkeypatch.setenv("HERMES_STRICT_PLUGINS", "1")
    with pytest.raises(hermes.PluginError, match="plugin t-broken .* failed to load: ValueError: bad plugin"):
        boot()
    monkeypatch.setenv("HERMES_STRICT_PLUGINS", "0")
    assert ours(boot())["t-broken"].status == "failed"


def test_strict_keyword_overrides_env(site, boot, monkeypatch):
    make_distribution(site, "hermes-t-broken", plugins={"t-broken": "t_broken"},
                      modules={"t_broken.py": "raise ValueError('bad plugin')\n"})
    monkeypatch.setenv("HERMES_STRICT_PLUGINS", "1")
    assert ours(boot(strict=False))["t-broken"].status == "failed"


def test_trace_logs_every_hook_call(kernel_factory, monkeypatch, capsys):
    monkeypatch.setenv("HERMES_TRACE_PLUGINS", "1")

    class Observer:
        @hermes.hookimpl
        def hermes_session_end(self, session, reason):
            raise RuntimeError("observer broke")

    k = kernel_factory(plugins=[Observer()])
    k.emit("hermes_session_end", session=hermes.SessionInfo(id="s1"), reason="user_exit")
    err = capsys.readouterr().err
    assert "hermes trace: hermes_register_tools() -> [" in err
    assert "hermes trace: hermes_session_end(session=SessionInfo(id='s1'" in err
    assert "Observer" in err
    assert re.search(r"hermes_session_end in Observer-\w+ raised RuntimeError: observer broke", err)


def test_switches_from_env_parsing():
    s = LoadSwitches.from_env({"HERMES_LOAD_PLUGINS": " a,,b ", "HERMES_DISABLE_PLUGINS": "c",
                               "HERMES_NO_PLUGINS": "yes", "HERMES_STRICT_PLUGINS": "off",
                               "HERMES_TRACE_PLUGINS": "TRUE"})
    assert (s.only, s.disabled, s.safe_mode, s.strict, s.trace) == ({"a", "b"}, {"c"}, True, False, True)
    assert LoadSwitches.from_env({}).only is None
    assert LoadSwitches.from_env({"HERMES_LOAD_PLUGINS": ""}).only == set()
    assert s.block_reason("c", "default").startswith("disabled")
    assert s.block_reason("x", "default") is None, "safe mode and --load never block defaults"


# -- local plugins -----------------------------------------------------------------


def test_local_plugins_load_from_home(boot, hermes_home, capsys):
    plugins = hermes_home / "plugins"
    plugins.mkdir()
    (plugins / "t_mine.py").write_text(engine_plugin("t-local-engine"))
    (plugins / "_helper.py").write_text("raise SystemExit('skipped: starts with _')\n")
    (plugins / "t_bad.py").write_text("def broken(:\n")
    (plugins / "notes.txt").write_text("ignored")
    k = boot()
    records = {r.name: r for r in k.plugins if r.source == "local"}
    assert set(records) == {"t_mine", "t_bad"}
    mine = records["t_mine"]
    assert (mine.status, mine.path, mine.dist) == ("active", str(plugins / "t_mine.py"), None)
    assert k.registries.context_engines.get("t-local-engine").plugin == "t_mine"
    assert records["t_bad"].status == "failed"
    assert "SyntaxError" in records["t_bad"].failure.error
    assert "plugin t_bad failed to load: SyntaxError" in capsys.readouterr().err


def test_local_plugins_obey_load_and_disable(boot, hermes_home, monkeypatch):
    plugins = hermes_home / "plugins"
    plugins.mkdir()
    (plugins / "t_one.py").write_text(engine_plugin("t-one"))
    (plugins / "t_two.py").write_text(engine_plugin("t-two"))
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", "t_one")
    statuses = {r.name: r.status for r in boot().plugins if r.source == "local"}
    assert statuses == {"t_one": "active", "t_two": "blocked"}
    monkeypatch.delenv("HERMES_LOAD_PLUGINS")
    statuses = {r.name: r.status for r in boot(disable_plugins=["t_one"]).plugins if r.source == "local"}
    assert statuses == {"t_one": "blocked", "t_two": "active"}


def test_local_plugin_with_a_taken_name_does_not_displace_the_first(boot, hermes_home, kernel):
    default = next(r.name for r in kernel.plugins)
    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / f"{default}.py").write_text(engine_plugin("t-impostor"))
    k = boot()
    records = {r.name: r for r in k.plugins}
    assert records[default].status == "active" and records[default].source == "default"
    clash = records[f"{default}@local"]
    assert clash.status == "failed"
    assert f"the plugin name '{default}' is already taken by a default plugin" in clash.failure.error
    assert "t-impostor" not in k.registries.context_engines


def test_two_distributions_with_one_entry_point_name(site, boot):
    make_distribution(site, "hermes-t-one", plugins={"t-same": "t_one"},
                      modules={"t_one.py": engine_plugin("t-one")})
    make_distribution(site, "hermes-t-two", plugins={"t-same": "t_two"},
                      modules={"t_two.py": engine_plugin("t-two")})
    k = boot()
    records = ours(k)
    assert records["t-same"].status == "active"
    clash = next(r for n, r in records.items() if n.startswith("t-same@"))
    assert clash.status == "failed" and "already taken" in clash.failure.error
    assert clash.dist in ("hermes-t-one", "hermes-t-two") and clash.dist != records["t-same"].dist


# -- registered by code, events ----------------------------------------------------


def test_register_plugin_refuses_a_taken_name(kernel, register_plugin):
    class P:
        pass

    register_plugin(P(), "t-p")
    with pytest.raises(hermes.PluginError, match="already registered"):
        kernel.register_plugin(P(), "t-p")


def test_unregister_plugin_removes_what_it_registered(kernel):
    kernel.register_plugin(_engine_plugin_object("t-gone"), "t-gone-plugin")
    assert "t-gone" in kernel.registries.context_engines
    kernel.unregister_plugin("t-gone-plugin")
    assert "t-gone" not in kernel.registries.context_engines
    assert "t-gone-plugin" not in {r.name for r in kernel.plugins}


def _engine_plugin_object(engine: str):
    class Plugin:
        @hermes.hookimpl
        def hermes_register_context_engines(self, register):
            register(engine, lambda: None)

    return Plugin()


def test_event_hook_errors_are_isolated_and_logged_once(kernel, register_plugin, caplog):
    seen: list[str] = []

    class Broken:
        @hermes.hookimpl
        def hermes_turn_end(self, session, turn):
            raise ValueError("observer bug")

    class Fine:
        @hermes.hookimpl
        def hermes_turn_end(self, turn):  # any subset of the arguments
            seen.append(turn.answer)

    register_plugin(Fine(), "t-fine")
    register_plugin(Broken(), "t-broken")
    caplog.set_level(logging.WARNING, logger="hermes.plugins")
    for i in range(3):
        kernel.emit("hermes_turn_end", session=hermes.SessionInfo(id="s"),
                    turn=hermes.TurnEvent(user_message="q", answer=f"a{i}"))
    assert seen == ["a0", "a1", "a2"], "a broken observer never stops the others"
    warnings = [r for r in caplog.records if "t-broken raised in hermes_turn_end" in r.getMessage()]
    assert len(warnings) == 1, "logged once per (plugin, hook), not once per call"
    assert kernel.pm.hook_errors[("t-broken", "hermes_turn_end")] == "ValueError: observer bug"


def test_emit_refuses_registration_hooks(kernel):
    with pytest.raises(ValueError, match="not an event hook"):
        kernel.emit("hermes_register_tools", register=print)


def test_hook_recorder_sees_events_and_later_registrations(kernel, hook_recorder, register_plugin):
    register_plugin(_engine_plugin_object("t-rec"), "t-rec-plugin")
    kernel.emit("hermes_session_start", session=hermes.SessionInfo(id="s9"))
    assert "hermes_register_context_engines" in hook_recorder.names()
    assert hook_recorder.of("hermes_session_start") == [{"session": hermes.SessionInfo(id="s9")}]
    hook_recorder.close()
    kernel.emit("hermes_session_start", session=hermes.SessionInfo(id="s10"))
    assert len(hook_recorder.of("hermes_session_start")) == 1


def test_kernels_share_nothing(kernel_factory):
    a, b = kernel_factory(), kernel_factory()
    a.register_plugin(_engine_plugin_object("t-only-a"), "t-a")
    assert "t-only-a" in a.registries.context_engines
    assert "t-only-a" not in b.registries.context_engines
    assert a.pm is not b.pm


def test_distribution_name_from_egg_info_metadata(site, boot):
    """A develop-style ``.egg-info`` (no version in its name) is read from its metadata."""
    info = site / "Hermes_T_Egg.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: Hermes_T_Egg\nVersion: 3.1\n")
    (info / "entry_points.txt").write_text("[hermes.plugins]\nt-egg = t_egg\n")
    (site / "t_egg.py").write_text(engine_plugin("t-egg-engine"))
    record = ours(boot())["t-egg"]
    assert (record.status, record.dist, record.version) == ("active", "Hermes_T_Egg", "3.1")


def _ours_and_theirs() -> tuple[set, set]:
    import importlib_metadata

    from hermes.manager import find_entry_points

    ours = {(ep.name, ep.value, ep.dist, ep.version) for ep in find_entry_points("hermes.plugins")}
    theirs = {(ep.name, ep.value, ep.dist.name, ep.dist.version)
              for ep in importlib_metadata.entry_points(group="hermes.plugins")}
    return ours, theirs


def test_entry_point_discovery_matches_importlib_metadata(tmp_path, monkeypatch):
    """Discovery finds exactly what importlib_metadata finds: this environment's
    distributions plus awkward layouts (shadowing, comments, a stray file)."""
    first, second = tmp_path / "first", tmp_path / "second"
    make_distribution(first, "hermes-t-one", version="1.0", plugins={"t-one": "t_one:plugin.attr [extra]"})
    make_distribution(second, "hermes_t_one", version="2.0", plugins={"t-one-old": "t_one_old"})  # shadowed
    make_distribution(second, "hermes-t-two", plugins={})
    (second / "hermes_t_two-1.0.dist-info" / "entry_points.txt").write_text(
        "# comment\n; another\n[console_scripts]\nx = y:z\n\n[hermes.plugins]\n  t-two = t_two  \n")
    egg = second / "Hermes_T_Egg.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.2\nName: Hermes_T_Egg\nVersion: 0.5\n\nbody: x\n")
    (egg / "entry_points.txt").write_text("[hermes.plugins]\nt-egg = t_egg\n")
    (second / "not-a-dir.dist-info").write_text("")  # a stray file, ignored
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))

    ours, theirs = _ours_and_theirs()
    assert ours == theirs
    assert ("t-one", "t_one:plugin.attr [extra]", "hermes-t-one", "1.0") in ours
    assert not [e for e in ours if e[0] == "t-one-old"], "the first distribution of a name wins"
    assert ("t-egg", "t_egg", "Hermes_T_Egg", "0.5") in ours


_METADATA = "Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
_ENTRY = "[hermes.plugins]\n{ep} = t_mod\n"


def _layout_egg_directory(tmp: Path, monkeypatch) -> str:
    egg = tmp / "hermes_t_layout-1.0-py3.11.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text(_METADATA.format(name="hermes-t-layout"))
    (egg / "EGG-INFO" / "entry_points.txt").write_text(_ENTRY.format(ep="t-layout"))
    monkeypatch.syspath_prepend(str(egg))
    return "t-layout"


def _write_zip(path: Path, extra: dict[str, str]) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hermes_t_layout-1.0.dist-info/METADATA", _METADATA.format(name="hermes-t-layout"))
        zf.writestr("hermes_t_layout-1.0.dist-info/entry_points.txt", _ENTRY.format(ep="t-layout"))
        for name, text in extra.items():
            zf.writestr(name, text)


def _layout_zip(tmp: Path, monkeypatch) -> str:
    _write_zip(tmp / "plugins.zip", {"t_mod.py": ""})
    monkeypatch.syspath_prepend(str(tmp / "plugins.zip"))
    return "t-layout"


def _layout_zipapp(tmp: Path, monkeypatch) -> str:
    _write_zip(tmp / "app.pyz", {"__main__.py": "print('hi')\n"})
    monkeypatch.syspath_prepend(str(tmp / "app.pyz"))
    return "t-layout"


def _layout_zipped_egg(tmp: Path, monkeypatch) -> str:
    import zipfile

    egg = tmp / "hermes_t_layout-1.0-py3.11.egg"
    with zipfile.ZipFile(egg, "w") as zf:
        zf.writestr("EGG-INFO/PKG-INFO", _METADATA.format(name="hermes-t-layout"))
        zf.writestr("EGG-INFO/entry_points.txt", _ENTRY.format(ep="t-layout"))
        zf.writestr("t_mod.py", "")
    monkeypatch.syspath_prepend(str(egg))
    return "t-layout"


def _layout_develop_egg_info(tmp: Path, monkeypatch) -> str:
    """A develop install's ``.egg-info`` directory in a source checkout, lower-case name
    with no version (as ``setup.py develop`` leaves it)."""
    info = tmp / "hermes_t_layout.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text(_METADATA.format(name="hermes-t-layout"))
    (info / "entry_points.txt").write_text(_ENTRY.format(ep="t-layout"))
    monkeypatch.syspath_prepend(str(tmp))
    return "t-layout"


def _layout_upper_case_dist_info(tmp: Path, monkeypatch) -> str:
    info = tmp / "HERMES_T_LAYOUT-1.0.DIST-INFO"
    info.mkdir()
    (info / "METADATA").write_text(_METADATA.format(name="HERMES-T-LAYOUT"))
    (info / "entry_points.txt").write_text(_ENTRY.format(ep="t-layout"))
    monkeypatch.syspath_prepend(str(tmp))
    return "t-layout"


def _layout_meta_path_finder(tmp: Path, monkeypatch) -> str:
    import importlib_metadata

    info = tmp / "elsewhere" / "hermes_t_layout-1.0.dist-info"  # not on sys.path
    info.mkdir(parents=True)
    (info / "METADATA").write_text(_METADATA.format(name="hermes-t-layout"))
    (info / "entry_points.txt").write_text(_ENTRY.format(ep="t-layout"))

    class Finder:  # e.g. an import hook serving an application bundle
        def find_spec(self, *args):
            return None

        def find_distributions(self, context=None):
            return iter([importlib_metadata.PathDistribution(info)])

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    return "t-layout"


@pytest.mark.parametrize("layout", [
    _layout_egg_directory, _layout_zipped_egg, _layout_develop_egg_info, _layout_zip, _layout_zipapp,
    _layout_upper_case_dist_info, _layout_meta_path_finder,
], ids=lambda f: f.__name__.removeprefix("_layout_"))
def test_entry_point_discovery_finds_every_layout(layout, tmp_path, monkeypatch):
    """Installs the hand-written dist-info scan missed: each is found, and the whole
    answer equals importlib_metadata's."""
    name = layout(tmp_path, monkeypatch)
    ours, theirs = _ours_and_theirs()
    assert name in {ep[0] for ep in theirs}, "the layout is a real install importlib_metadata sees"
    assert ours == theirs


_DISCOVER = """
import sys, json
from pathlib import Path
from hermes.manager import find_entry_points
eps = find_entry_points("hermes.plugins", cache=Path(sys.argv[1]))
print(json.dumps([[e.name for e in eps], "importlib_metadata" in sys.modules]))
"""


def _discover(cache: Path, site: Path) -> tuple[list[str], bool]:
    import json
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(site)}
    # The working directory is on sys.path (''): an aged, empty one, so that nothing
    # written elsewhere during the test makes the key "racy".
    cwd = site.parent / "cwd"
    if not cwd.exists():
        cwd.mkdir()
        _age(cwd)
    out = subprocess.run([sys.executable, "-c", _DISCOVER, str(cache)], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True).stdout
    names, imported = json.loads(out)
    return sorted(names), imported


def _age(*paths: Path) -> None:
    """Back-date ``paths`` so that they are older than the racy-change window."""
    import os
    import time

    old = time.time() - 60
    for path in paths:
        os.utime(path, (old, old))


@pytest.mark.slow  # installs distributions; the other discovery tests stay fast
def test_entry_point_cache_is_used_and_sees_installs_and_removals(tmp_path):
    """A second start with nothing changed answers from the cache (importlib_metadata is
    not even imported); installing or removing a distribution is seen at once."""
    import shutil

    site, cache = tmp_path / "site", tmp_path / "cache" / "entry-points.json"
    info = make_distribution(site, "hermes-t-cached", plugins={"t-cached": "t_cached"})
    _age(info / "entry_points.txt", info / "METADATA", info / "top_level.txt", info, site)

    names, imported = _discover(cache, site)
    assert "t-cached" in names and imported, "first start asks importlib_metadata"
    assert cache.is_file()
    names, imported = _discover(cache, site)
    assert "t-cached" in names and not imported, "second start answers from the cache"
    (site / "unrelated.py").write_text("")  # a busy directory on the path (cwd, /tmp)
    names, imported = _discover(cache, site)
    assert "t-cached" in names and not imported, "files that are no distribution do not matter"

    new = make_distribution(site, "hermes-t-new", plugins={"t-new": "t_new"})
    _age(*new.iterdir(), new, site)
    _age(site.parent / "cwd")
    assert "t-new" in _discover(cache, site)[0]
    shutil.rmtree(new)
    _age(site)
    assert "t-new" not in _discover(cache, site)[0]

    (info / "entry_points.txt").write_text("[hermes.plugins]\nt-renamed = t_cached\n")
    _age(info / "entry_points.txt")  # an in-place edit, still older than the window
    assert "t-renamed" in _discover(cache, site)[0]


def test_entry_point_cache_skipped_for_custom_distribution_finders(tmp_path, monkeypatch):
    """A finder the mtimes cannot see makes every discovery ask importlib_metadata."""
    from hermes.manager import _discovery_key

    _layout_meta_path_finder(tmp_path, monkeypatch)
    assert _discovery_key("hermes.plugins") is None


def test_entry_point_load(tmp_path, monkeypatch):
    from hermes.manager import EntryPoint

    (tmp_path / "t_ep_mod.py").write_text("class A:\n    class B:\n        x = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert EntryPoint("a", "t_ep_mod:A.B [extra]").load().x == 42
    assert EntryPoint("b", " t_ep_mod ").load().__name__ == "t_ep_mod"
    with pytest.raises(ValueError, match="malformed entry point c"):
        EntryPoint("c", "not a module!").load()
    sys.modules.pop("t_ep_mod", None)


# -- plugins cannot take the host down; one call order ------------------------------


def _tool_plugin(tool_name: str, **opts):
    class Newcomer:
        @hermes.hookimpl(**opts)
        def hermes_register_tools(self, register):
            register(hermes.Tool(name=tool_name, schema={"description": "mine"},
                                 handler=lambda args, ctx: "hijacked"))

    return Newcomer()


@pytest.mark.parametrize("tool_name, owner", [("memory", "builtin-memory"),
                                              ("session_search", "session-search")])
@pytest.mark.parametrize("opts", [{}, {"tryfirst": True}], ids=["plain", "tryfirst"])
def test_a_tool_named_like_a_core_tool_is_a_conflict_blaming_the_newcomer(
        kernel_factory, tool_name, owner, opts):
    k = kernel_factory(plugins=[_tool_plugin(tool_name, **opts)])
    newcomer = next(r for r in k.plugins if r.source == "registered")
    assert newcomer.status == "failed"
    assert newcomer.failure.stage == "register (name conflict)"
    assert f"tool {tool_name!r} is registered by two plugins: {owner!r} and {newcomer.name!r}" \
        in newcomer.failure.error
    assert f"hermes plugins disable {newcomer.name}" in newcomer.failure.error
    assert k.pm.records[owner].status == "active", "the default is never the one blamed"
    assert [t.plugin for t in k.registries.tools if t.name == tool_name] in ([], [owner])


def test_a_default_name_cannot_be_taken_by_tryfirst(kernel_factory):
    class Grabber:
        @hermes.hookimpl(tryfirst=True)
        def hermes_register_context_engines(self, register):
            register("compressor", lambda: None)

    k = kernel_factory(plugins=[Grabber()])
    assert k.registries.context_engines.get("compressor").plugin == "compressor"
    assert k.pm.records["compressor"].status == "active"
    grabber = next(r for r in k.plugins if r.source == "registered")
    assert grabber.status == "failed" and "'compressor' and " in grabber.failure.error


def test_one_call_order_for_every_hook_kind(kernel_factory):
    """Registration, command and event hooks all run in ordered_impls order: source
    first, then tryfirst/trylast, then load order."""
    calls: dict[str, list[str]] = {}

    def plugin(tag: str, **opts):
        class P:
            @hermes.hookimpl(**opts)
            def hermes_register_tools(self, register):
                calls.setdefault("registration", []).append(tag)

            @hermes.hookimpl(**opts)
            def hermes_session_start(self, session):
                calls.setdefault("event", []).append(tag)

        P.__name__ = tag
        return P()

    k = kernel_factory(defaults=False, plugins=[plugin("late", trylast=True), plugin("a"),
                                                plugin("first", tryfirst=True), plugin("b")])
    k.emit("hermes_session_start", session=hermes.SessionInfo(id="s"))
    expected = ["first", "a", "b", "late"]
    assert calls == {"registration": expected, "event": expected}
    names = [i.plugin_name.rpartition("-")[0] for i in k.pm.ordered_impls("hermes_session_start")]
    assert names == expected


def test_event_hook_failure_is_one_line_and_traced_only_with_trace(kernel_factory, caplog, capsys):
    class Broken:
        @hermes.hookimpl
        def hermes_session_start(self, session):
            raise ValueError("observer bug\nsecond line")

    caplog.set_level(logging.WARNING, logger="hermes.plugins")
    quiet = kernel_factory(plugins=[Broken()])
    for _ in range(3):
        quiet.emit("hermes_session_start", session=hermes.SessionInfo(id="s"))
    records = [r for r in caplog.records if "raised in hermes_session_start" in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info is None
    assert "\n" not in records[0].getMessage() and "--trace" in records[0].getMessage()
    assert "Traceback" not in capsys.readouterr().err

    loud = kernel_factory(plugins=[Broken()], trace=True)
    loud.emit("hermes_session_start", session=hermes.SessionInfo(id="s"))
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ValueError: observer bug" in err


def test_sys_exit_in_an_event_hook_is_isolated(kernel_factory):
    seen: list[str] = []

    class Quitter:
        @hermes.hookimpl
        def hermes_session_start(self, session):
            sys.exit(2)

    class Fine:
        @hermes.hookimpl
        def hermes_session_start(self, session):
            seen.append(session.id)

    k = kernel_factory(plugins=[Quitter(), Fine()])
    k.emit("hermes_session_start", session=hermes.SessionInfo(id="s1"))  # no SystemExit
    assert seen == ["s1"]
    quitter = next(r.name for r in k.plugins if r.module and "Quitter" in r.module)
    assert "called sys.exit(2)" in k.pm.hook_errors[(quitter, "hermes_session_start")]


def test_printing_in_an_event_hook_stays_off_stdout(kernel_factory, capsys):
    class Chatty:
        @hermes.hookimpl
        def hermes_session_start(self, session):
            print("chatty output")

    k = kernel_factory(plugins=[Chatty()])
    k.emit("hermes_session_start", session=hermes.SessionInfo(id="s1"))
    out, err = capsys.readouterr()
    assert "chatty output" not in out
    assert "printed to stdout while handling hermes_session_start" in err and "chatty output" in err


def test_enable_tracing_returns_pluggy_undo(kernel_factory, capsys):
    k = kernel_factory()
    undo = k.pm.enable_tracing()
    assert callable(undo)
    k.emit("hermes_session_start", session=hermes.SessionInfo(id="s1"))
    k.pm.hook.hermes_session_end(session=hermes.SessionInfo(id="s1"), reason="x")
    assert capsys.readouterr().err.count("hermes trace:") == 2
    undo()
    k.emit("hermes_session_start", session=hermes.SessionInfo(id="s2"))
    k.pm.hook.hermes_session_end(session=hermes.SessionInfo(id="s2"), reason="x")
    assert "hermes trace:" not in capsys.readouterr().err


def test_a_plugin_registered_after_boot_is_the_newcomer(site, boot):
    """A tool claimed by an entry-point provider loaded at boot stays its owner's when a
    plugin added later by code (register_plugin) registers the same name."""
    make_distribution(site, "hermes-t-claims", plugins={"t-claims": "t_claims"}, modules={
        "t_claims.py": "import hermes\n\n@hermes.hookimpl\n"
                       "def hermes_register_memory_providers(register):\n"
                       "    register('t-claims', lambda: None, tools=('t_recall',))\n"})
    k = boot()
    assert ours(k)["t-claims"].status == "active"
    late = k.register_plugin(_tool_plugin("t_recall"), "t-late")
    assert late.status == "failed" and "'t-claims' and 't-late'" in late.failure.error
    assert k.pm.records["t-claims"].status == "active"
    assert "t-claims" in k.registries.memory_providers
