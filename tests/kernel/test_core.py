"""The Kernel: boot, selection by config, factories and shared instances, LLM client
resolution, tools, plugin config, events, closing."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hermes


class Engine(hermes.ContextEngine):
    """A context engine that keeps everything."""

    name = "t-keep"

    def __init__(self, kernel=None):
        self.kernel = kernel

    def update_from_response(self, usage):
        pass

    def should_compress(self, prompt_tokens=None):
        return False

    def compress(self, messages, **kwargs):
        return list(messages)


class Client(hermes.LLMClient):
    name = "t-llm"
    closed = 0

    def __init__(self, kernel, base_url=None, api_key=None):
        self.kernel, self.base_url, self.api_key = kernel, base_url, api_key

    def complete(self, request):
        return hermes.LLMResponse(content=f"{request.model}:{self.base_url}")

    def close(self):
        Client.closed += 1
        raise RuntimeError("closing must never fail the caller")


class Store:
    """Stands in for a session store: the kernel only builds and shares it."""


class Plugin:
    @hermes.hookimpl
    def hermes_register_context_engines(self, register):
        register("t-keep", Engine)

    @hermes.hookimpl
    def hermes_register_llm_clients(self, register):
        register("t-llm", Client)

    @hermes.hookimpl
    def hermes_register_session_stores(self, register):
        register("t-store", Store)

    @hermes.hookimpl
    def hermes_register_tools(self, register):
        register(hermes.Tool(name="t_on", schema={}, handler=lambda a, c: "on"))
        register(hermes.Tool(name="t_off", schema={}, handler=lambda a, c: "off",
                             available=lambda: False))
        register(hermes.Tool(name="t_broken_check", schema={}, handler=lambda a, c: "x",
                             available=lambda: 1 / 0))


SELECT_OURS = {"context": {"engine": "t-keep"}, "model": {"provider": "t-llm", "name": "m1"},
               "sessions": {"store": "t-store"}}


@pytest.fixture
def ours(kernel_factory):
    def make(config=None, **kwargs):
        return kernel_factory(config={**SELECT_OURS, **(config or {})}, plugins=[Plugin()], **kwargs)

    return make


def test_unknown_engine_name_fails_at_start_listing_the_valid_ones(kernel_factory):
    # strict: without it a missing engine falls back to the compressor (test_engine_fallback)
    with pytest.raises(hermes.UnknownPluginError) as info:
        kernel_factory(config={"context": {"engine": "t-nope"}}, plugins=[Plugin()], check_selection=True,
                       strict=True)
    message = str(info.value)
    assert message.startswith("unknown context-engine 't-nope' (config `context.engine`). Choose one of: ")
    assert "t-keep" in message and "hermes plugins list" in message and "\n" not in message


def test_lenient_kernel_records_selection_errors(kernel_factory):
    kernel = kernel_factory(config={"sessions": {"store": "t-nope"}, "memory": {"provider": "t-mem"}})
    kinds = sorted(e.kind for e in kernel.selection_errors)
    assert "session-store" in kinds and "memory-provider" in kinds
    assert all(isinstance(e, hermes.UnknownPluginError) for e in kernel.selection_errors)


def test_empty_memory_provider_means_builtin_only(kernel_factory):
    kernel = kernel_factory(config={"memory": {"provider": ""}})
    assert not [e for e in kernel.selection_errors if e.kind == "memory-provider"]


def test_create_and_shared(ours):
    kernel = ours(check_selection=True)
    assert kernel.selected("context-engine") == "t-keep"
    a, b = kernel.create("context-engine"), kernel.create("context-engine")
    assert isinstance(a, Engine) and a is not b and a.kernel is kernel
    assert kernel.shared("context-engine") is kernel.shared("context-engine", "t-keep")
    with pytest.raises(hermes.UnknownPluginError, match="unknown context-engine 'x'. Choose one of"):
        kernel.create("context-engine", "x")
    assert isinstance(kernel.session_store, Store) and kernel.session_store is kernel.session_store


def test_llm_client_is_shared_per_route(ours):
    kernel = ours()
    main = kernel.llm_client()
    assert isinstance(main, Client) and main.kernel is kernel
    assert kernel.llm_client("t-llm") is main
    other = kernel.llm_client(base_url="http://127.0.0.1:1", api_key="k")
    assert other is not main and (other.base_url, other.api_key) == ("http://127.0.0.1:1", "k")
    with pytest.raises(hermes.UnknownPluginError, match="unknown llm 'x'"):
        kernel.llm_client("x")


def test_auxiliary_uses_its_section_else_the_main_model(ours):
    kernel = ours(config={"auxiliary": {"compression": {"model": "small", "base_url": "http://aux"}}})
    client, model = kernel.auxiliary("compression")
    assert (model, client.base_url) == ("small", "http://aux")
    client, model = kernel.auxiliary("session_search")
    assert model == "m1" and client is kernel.llm_client()


def test_auxiliary_is_none_when_no_client_can_be_built(ours, caplog):
    kernel = ours(config={"auxiliary": {"compression": {"provider": "t-missing"}}})
    assert kernel.auxiliary("compression") is None
    assert "no auxiliary model for compression" in caplog.text


def test_tools_hide_unavailable_and_broken_checks(ours, caplog):
    names = [t.name for t in ours().tools()]
    assert "t_on" in names and "t_off" not in names and "t_broken_check" not in names
    assert "tool t_broken_check availability check failed" in caplog.text


def test_close_closes_shared_instances_and_never_raises(ours):
    Client.closed = 0
    with ours() as kernel:
        kernel.llm_client()
        kernel.llm_client(base_url="http://x")
    assert Client.closed == 2
    kernel.close()  # idempotent
    assert Client.closed == 2


def test_repr_and_public_attributes(kernel):
    assert repr(kernel).startswith("<Kernel home=")
    assert kernel.home.is_dir() and isinstance(kernel.config, hermes.Config)


def test_register_plugin_after_boot_fills_registries(kernel, register_plugin):
    record = register_plugin(Plugin(), "t-late")
    assert record.status == "active" and record.source == "registered"
    assert kernel.registries.context_engines.get("t-keep").plugin == "t-late"
    assert {r.name: r for r in kernel.plugins}["t-late"].registered["tool"] == [
        "t_on", "t_off", "t_broken_check"]


def test_failed_registration_after_boot_is_recorded(kernel, register_plugin):
    class Bad:
        @hermes.hookimpl
        def hermes_register_memory_providers(self, register):
            register("t-mem", lambda: None)
            raise KeyError("oops")

    record = register_plugin(Bad(), "t-bad")
    assert record.status == "failed" and record.failure.stage == "register"
    assert "t-mem" not in kernel.registries.memory_providers
    assert record.failure in kernel.failures


def test_plugins_keyword_and_defaults_off(kernel_factory):
    kernel = kernel_factory(defaults=False, plugins=[Plugin()])
    assert [r.source for r in kernel.plugins] == ["registered"]


# -- the kernel's own environment ($HERMES_HOME/.env) ------------------------------


def _home(tmp_path, name: str, dotenv: str | bytes | None = None, config: str = ""):
    home = tmp_path / name
    home.mkdir()
    if dotenv is not None:
        data = dotenv.encode() if isinstance(dotenv, str) else dotenv
        (home / ".env").write_bytes(data)
    (home / "config.yaml").write_text(config)
    return home


def test_dotenv_stays_in_its_kernel(tmp_path, kernel_factory, fake_llm, monkeypatch):
    """Home A's .env secrets reach A's {$env: …} and A's SDK client, never os.environ,
    never a second kernel on home B (which reports the missing key instead)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("T_HERMES_TOKEN", raising=False)
    config = (f"model:\n  provider: anthropic\n  base_url: {fake_llm.url}\n"
              "plugins:\n  t-probe:\n    token: {$env: T_HERMES_TOKEN}\n")
    home_a = _home(tmp_path, "a", "ANTHROPIC_API_KEY=key-of-home-a  # inline comment\n"
                                  "T_HERMES_TOKEN=\"multi\nline\"\n", config)
    home_b = _home(tmp_path, "b", None, config)

    a = kernel_factory(home=home_a)
    assert a.plugin_config("t-probe") == {"token": "multi\nline"}
    fake_llm.queue("hello")
    a.llm_client().sdk().messages.create(model="claude-sonnet-4-6", max_tokens=10,
                                         messages=[{"role": "user", "content": "hi"}])
    assert fake_llm.requests[-1].headers["authorization"] == "Bearer key-of-home-a"
    assert "ANTHROPIC_API_KEY" not in os.environ and "T_HERMES_TOKEN" not in os.environ

    b = kernel_factory(home=home_b)
    with pytest.raises(hermes.ConfigError, match="T_HERMES_TOKEN"):
        b.plugin_config("t-probe")
    assert b.llm_client().api_key() is None
    assert "ANTHROPIC_API_KEY" in b.llm_client().credentials_problem()


def test_process_environment_wins_over_dotenv(tmp_path, kernel_factory, monkeypatch):
    monkeypatch.setenv("T_HERMES_SET", "from-process")
    home = _home(tmp_path, "a", "T_HERMES_SET=from-file\nT_HERMES_ONLY_FILE=file\n",
                 "plugins:\n  t:\n    a: {$env: T_HERMES_SET}\n    b: {$env: T_HERMES_ONLY_FILE}\n")
    kernel = kernel_factory(home=home)
    assert kernel.plugin_config("t") == {"a": "from-process", "b": "file"}
    assert kernel.env["T_HERMES_ONLY_FILE"] == "file"


@pytest.mark.parametrize("content, expected", [
    (b"GOOD=1\nBAD=caf\xe9\n", r"\.env, line 2: not valid UTF-8 \(byte 0xe9\)\. Save the file as UTF-8\."),
])
def test_undecodable_dotenv_is_one_line_naming_the_file(tmp_path, kernel_factory, content, expected):
    home = _home(tmp_path, "a", content)
    with pytest.raises(hermes.ConfigError, match=expected) as info:
        kernel_factory(home=home)
    assert str(home / ".env") in str(info.value) and "\n" not in str(info.value)


# -- plugin settings: one declaration, checked at start, by config validate and doctor ---


@pytest.mark.parametrize("settings, message", [
    ("write_timeout: -1", "plugins.sqlite-sessions.write_timeout: expected a positive number, got -1."),
    ("synchronous: fast", "plugins.sqlite-sessions.synchronous: 'fast' is not one of normal, full."),
    ("write_timout: 3", "plugins.sqlite-sessions.write_timout: unknown setting of plugin "
                        "sqlite-sessions. Valid settings: path, write_timeout, synchronous."),
])
def test_plugin_settings_are_checked_the_same_everywhere(hermes_home, kernel_factory, settings, message):
    from click.testing import CliRunner

    from hermes.cli import cli

    (hermes_home / "config.yaml").write_text(f"plugins:\n  sqlite-sessions:\n    {settings}\n")
    with pytest.raises(hermes.ConfigError) as info:
        kernel_factory(check_selection=True)  # a start (hermes chat) refuses it
    assert str(info.value) == message
    lenient = kernel_factory()
    assert [str(e) for e in lenient.config_problems] == [message]

    validate = CliRunner().invoke(cli, ["config", "validate"])
    assert validate.exit_code == 1 and f"error: {message}" in validate.stderr
    doctor = CliRunner().invoke(cli, ["doctor", "--json"])
    assert message in json.loads(doctor.stdout)["problems"]


def test_plugin_settings_fill_defaults_and_resolve_references(hermes_home, kernel_factory):
    (hermes_home / "t.txt").write_text("full\n")
    kernel = kernel_factory(config={"plugins": {"sqlite-sessions": {"synchronous": {"$file": "t.txt"}}}})
    assert kernel.plugin_settings("sqlite-sessions") == {
        "path": None, "write_timeout": 20.0, "synchronous": "full"}


@pytest.mark.parametrize("written", ["FULL", "Full", "full"])
def test_string_choices_accept_any_case_and_give_the_declared_spelling(hermes_home, kernel_factory, written):
    """SQLite takes PRAGMA synchronous in any case, so config.yaml may too; the plugin
    (and everything after it) sees the spelling the schema declares."""
    (hermes_home / "config.yaml").write_text(f"plugins:\n  sqlite-sessions:\n    synchronous: {written}\n")
    kernel = kernel_factory(check_selection=True)  # a start accepts it
    assert kernel.config_problems == []
    assert kernel.plugin_settings("sqlite-sessions")["synchronous"] == "full"
    assert kernel.session_store.synchronous == "FULL"  # the store opened from config.yaml
    kernel.session_store.close()


@given(choices=st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=4, unique=True),
       data=st.data())
def test_a_choice_in_another_case_normalises_to_a_declared_choice(choices, data):
    from hermes.settings import Setting

    setting = Setting(str, choices[0], choices=tuple(choices))
    chosen = data.draw(st.sampled_from(choices))
    written = data.draw(st.sampled_from([chosen, chosen.upper(), chosen.lower(), chosen.swapcase()]))
    if setting.problem(written) == "":
        # Accepted: the value handed on is one of the declared spellings, equal ignoring case.
        assert setting.normalise(written) in choices
        assert setting.normalise(written).casefold() == written.casefold()
    else:  # refused only when no declared choice matches, even ignoring case
        assert all(c.casefold() != written.casefold() for c in choices)
    assert setting.problem(chosen) == "" and setting.normalise(chosen) == chosen  # exact wins


def test_non_string_choices_and_bad_strings_are_still_refused():
    from hermes.settings import Setting

    assert Setting(str, "normal", choices=("normal", "full")).problem("fast") == (
        "'fast' is not one of normal, full")
    assert Setting(int, 1, choices=(1, 2)).problem(3) == "3 is not one of 1, 2"
    assert Setting(str, "a", choices=("a",)).normalise(7) == 7  # not a string: left alone


def test_doctor_asks_each_selected_component_of_every_kind(hermes_home):
    """doctor walks COMPONENT_KINDS: the selected component of any selectable kind may
    check itself (factory.doctor(kernel) -> (lines, problems))."""
    from click.testing import CliRunner

    from hermes.cli import cli

    (hermes_home / "plugins").mkdir()
    (hermes_home / "plugins" / "t_checked.py").write_text(
        "import hermes\n\n"
        "class Engine(hermes.ContextEngine):\n"
        "    name = 't-checked'\n"
        "    def update_from_response(self, usage): pass\n"
        "    def should_compress(self, prompt_tokens=None): return False\n"
        "    def compress(self, messages, **kw): return list(messages)\n\n"
        "def make(kernel):\n"
        "    return Engine()\n\n"
        "make.doctor = lambda kernel: (['t-checked engine: fine'], ['t-checked engine: one problem'])\n\n"
        "@hermes.hookimpl\n"
        "def hermes_register_context_engines(register):\n"
        "    register('t-checked', make)\n")
    (hermes_home / "config.yaml").write_text("context:\n  engine: t-checked\n")
    report = json.loads(CliRunner().invoke(cli, ["doctor", "--json"]).stdout)
    assert "t-checked engine: fine" in report["checks"]
    assert "t-checked engine: one problem" in report["problems"]
