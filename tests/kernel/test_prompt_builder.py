"""PromptBuilder: layer collection, order, disabling, isolation of broken layers,
byte-stable builds and per-call ephemeral additions that never touch the cached prefix."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hermes
from hermes import PromptBuilder, PromptContext, PromptLayer


class Text(PromptLayer):
    """A layer that renders fixed text."""

    def __init__(self, name: str, order: int, text: str | None, *, cached: bool = True,
                 placement: str = "system"):
        self.name, self.order, self.text, self.cached, self.placement = name, order, text, cached, placement

    def render(self, ctx: PromptContext) -> str | None:
        return self.text


class Boom(PromptLayer):
    name, order = "boom", 150

    def render(self, ctx: PromptContext) -> str:
        raise RuntimeError("layer exploded")


class Prefill(PromptLayer):
    name, order, cached, placement = "test_prefill", 10, False, "messages"

    def render(self, ctx: PromptContext) -> None:
        return None

    def messages(self, ctx: PromptContext) -> list[dict]:
        return [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}]


def plugin(**layers):
    """A plugin object registering ``name -> factory``."""

    class P:
        @staticmethod
        @hermes.hookimpl
        def hermes_register_prompt_layers(register):
            for name, factory in layers.items():
                register(name, factory)

    return P()


@pytest.fixture
def bare(kernel_factory):
    """A kernel without default plugins: only the layers a test registers."""
    return kernel_factory(defaults=False)


def ctx_for(kernel, **kw) -> PromptContext:
    kw.setdefault("now", 1_700_000_000.0)
    return PromptContext(kernel=kernel, home=kernel.home, **kw)


def test_layers_render_in_order_then_name(bare):
    bare.register_plugin(plugin(
        c=lambda k: Text("c", 200, "C"), b=lambda k: Text("b", 100, "B"),
        a=lambda k: Text("a", 200, "A"), z=lambda k: Text("z", 50, "Z"),
    ), "layers")
    builder = PromptBuilder(bare)
    assert builder.layer_names == ["z", "b", "a", "c"]
    built = builder.build(ctx_for(bare))
    assert built.text == "Z\n\nB\n\nA\n\nC"
    assert built.hash == hashlib.sha256(built.text.encode()).hexdigest() == hermes.prompt_hash(built.text)
    assert [(r.name, r.plugin, r.cached) for r in built.layers] == [
        ("z", "layers", True), ("b", "layers", True), ("a", "layers", True), ("c", "layers", True)]


def test_empty_layers_add_nothing_and_text_is_stripped(bare):
    bare.register_plugin(plugin(
        a=lambda k: Text("a", 1, "  A \n"), b=lambda k: Text("b", 2, None),
        c=lambda k: Text("c", 3, ""), d=lambda k: Text("d", 4, "D"),
    ))
    built = PromptBuilder(bare).build(ctx_for(bare))
    assert built.text == "A\n\nD"
    assert [r.empty for r in built.layers] == [False, True, True, False]


def test_disabled_layers_from_config(kernel_factory, caplog):
    kernel = kernel_factory(defaults=False, config={"prompt": {"disabled_layers": ["b", "nope"]}})
    kernel.register_plugin(plugin(a=lambda k: Text("a", 1, "A"), b=lambda k: Text("b", 2, "B")))
    with caplog.at_level(logging.WARNING, logger="hermes.prompt"):
        builder = PromptBuilder(kernel)
    assert builder.layer_names == ["a"]
    assert builder.disabled == ("b",)
    assert "nope" in caplog.text  # an unknown name is reported, not fatal
    assert builder.build(ctx_for(kernel)).text == "A"
    # an explicit list overrides the config
    assert PromptBuilder(kernel, disabled=[]).layer_names == ["a", "b"]


def test_disabled_layers_must_be_names(kernel_factory):
    with pytest.raises(hermes.ConfigError, match="prompt.disabled_layers"):
        kernel_factory(config={"prompt": {"disabled_layers": [3]}})


def test_a_raising_layer_is_skipped_with_a_warning(bare, caplog):
    bare.register_plugin(plugin(a=lambda k: Text("a", 100, "A"), boom=Boom, c=lambda k: Text("c", 200, "C")))
    with caplog.at_level(logging.WARNING, logger="hermes.prompt"):
        built = PromptBuilder(bare).build(ctx_for(bare))
    assert built.text == "A\n\nC"
    report = {r.name: r for r in built.layers}["boom"]
    assert report.error == "RuntimeError: layer exploded" and report.text == ""
    assert "boom" in caplog.text and "layer exploded" in caplog.text


def test_a_layer_returning_a_non_string_is_skipped(bare):
    bare.register_plugin(plugin(a=lambda k: Text("a", 1, 42), b=lambda k: Text("b", 2, "B")))  # type: ignore[arg-type]
    built = PromptBuilder(bare).build(ctx_for(bare))
    assert built.text == "B"
    assert "not str" in built.layers[0].error


def test_broken_factories_are_skipped(bare, caplog):
    def explode(kernel):
        raise ValueError("no factory today")

    bare.register_plugin(plugin(
        x=explode, y=lambda k: object(), w=lambda k: Text("w", "soon", "W"),  # type: ignore[arg-type]
        v=lambda k: Text("v", 1, "V", cached=False, placement="sideways"), ok=lambda k: Text("ok", 1, "OK"),
    ))
    with caplog.at_level(logging.WARNING, logger="hermes.prompt"):
        builder = PromptBuilder(bare)
    assert builder.layer_names == ["ok"]
    assert set(builder.failures) == {"x", "y", "w", "v"}
    assert "no factory today" in builder.failures["x"]
    assert builder.build(ctx_for(bare)).text == "OK"


def test_build_is_deterministic_and_excludes_ephemeral_layers(bare):
    bare.register_plugin(plugin(
        a=lambda k: Text("a", 1, "cached text"),
        e=lambda k: Text("e", 2, "per call", cached=False),
        test_prefill=Prefill,
    ))
    builder = PromptBuilder(bare)
    one, two = builder.build(ctx_for(bare)), PromptBuilder(bare).build(ctx_for(bare))
    assert one.text == two.text == "cached text" and one.hash == two.hash
    assert [r.name for r in one.layers] == ["a"]
    full = builder.build(ctx_for(bare), include_ephemeral=True)
    assert full.text == "cached text" and full.hash == one.hash
    reports = {r.name: r for r in full.layers}
    assert not reports["e"].cached and reports["e"].placement == "system" and reports["e"].text == "per call"
    assert reports["test_prefill"].placement == "messages" and len(reports["test_prefill"].messages) == 2
    assert reports["test_prefill"].chars == len("hi") + len("hello!")
    json.dumps(full.as_dict())  # JSON-ready for `prompt show --json`
    assert full.as_dict()["layers"][1]["kind"] == "ephemeral"


def test_token_estimates_in_reports(bare):
    bare.register_plugin(plugin(a=lambda k: Text("a", 1, "word " * 100)))
    built = PromptBuilder(bare).build(ctx_for(bare))
    assert built.layers[0].tokens == hermes.estimate_tokens(("word " * 100).strip()) > 0
    assert built.tokens == hermes.estimate_tokens(built.text)


# -- apply_ephemeral -----------------------------------------------------------------------


def ephemeral_kernel(bare, **texts):
    layers = {}
    if "system" in texts:
        layers["eph"] = lambda k: Text("eph", 10, texts["system"], cached=False)
    if "user" in texts:
        layers["rec"] = lambda k: Text("rec", 20, texts["user"], cached=False, placement="user")
    if texts.get("prefill"):
        layers["test_prefill"] = Prefill
    bare.register_plugin(plugin(**layers))
    return PromptBuilder(bare)


TRANSCRIPT = [
    {"role": "system", "content": "CACHED SYSTEM"},
    {"role": "user", "content": "first"},
    {"role": "assistant", "content": "answer"},
    {"role": "user", "content": "second"},
]


def test_no_ephemeral_layers_returns_an_equal_new_list(bare):
    builder = PromptBuilder(bare)
    out = builder.apply_ephemeral(TRANSCRIPT, ctx_for(bare))
    assert out == TRANSCRIPT and out is not TRANSCRIPT
    assert out[0]["content"] == "CACHED SYSTEM"  # stays a plain string, byte-identical


def test_ephemeral_system_text_goes_into_a_second_block(bare):
    builder = ephemeral_kernel(bare, system="EPHEMERAL")
    before = copy.deepcopy(TRANSCRIPT)
    out = builder.apply_ephemeral(TRANSCRIPT, ctx_for(bare))
    assert TRANSCRIPT == before  # input untouched
    assert out[0] == {"role": "system", "content": [
        {"type": "text", "text": "CACHED SYSTEM"}, {"type": "text", "text": "EPHEMERAL"}]}
    assert out[1:] == TRANSCRIPT[1:]
    assert out[1] is TRANSCRIPT[1]  # unchanged messages are shared, not copied


def test_ephemeral_system_without_a_system_message(bare):
    builder = ephemeral_kernel(bare, system="EPHEMERAL")
    out = builder.apply_ephemeral(TRANSCRIPT[1:], ctx_for(bare))
    assert out[0] == {"role": "system", "content": "EPHEMERAL"}
    assert out[1:] == TRANSCRIPT[1:]


def test_prefill_follows_the_system_message(bare):
    builder = ephemeral_kernel(bare, prefill=True)
    out = builder.apply_ephemeral(TRANSCRIPT, ctx_for(bare))
    assert [m["content"] for m in out] == ["CACHED SYSTEM", "hi", "hello!", "first", "answer", "second"]
    assert len(TRANSCRIPT) == 4


def test_recalled_text_is_appended_to_the_last_user_message_only(bare):
    builder = ephemeral_kernel(bare, user="<memory-context>likes tea</memory-context>")
    out = builder.apply_ephemeral(TRANSCRIPT, ctx_for(bare))
    assert out[3]["content"] == "second\n\n<memory-context>likes tea</memory-context>"
    assert out[1]["content"] == "first"
    assert TRANSCRIPT[3]["content"] == "second"
    # multimodal content: a text part is appended
    multi = [*TRANSCRIPT[:3], {"role": "user", "content": [{"type": "text", "text": "look"}]}]
    out = builder.apply_ephemeral(multi, ctx_for(bare))
    assert out[3]["content"] == [{"type": "text", "text": "look"},
                                 {"type": "text", "text": "<memory-context>likes tea</memory-context>"}]
    assert multi[3]["content"] == [{"type": "text", "text": "look"}]
    # no user message: nothing to append to, nothing breaks
    assert builder.apply_ephemeral(TRANSCRIPT[:1], ctx_for(bare)) == TRANSCRIPT[:1]


def test_a_raising_ephemeral_layer_never_breaks_the_call(bare, caplog):
    class Bad(PromptLayer):
        name, order, cached = "bad", 5, False

        def render(self, ctx):
            raise KeyError("nope")

    bare.register_plugin(plugin(bad=Bad, rec=lambda k: Text("rec", 20, "R", cached=False, placement="user")))
    builder = PromptBuilder(bare)
    with caplog.at_level(logging.WARNING, logger="hermes.prompt"):
        for _ in range(5):
            out = builder.apply_ephemeral(TRANSCRIPT, ctx_for(bare))
    assert out[0] == TRANSCRIPT[0] and out[3]["content"] == "second\n\nR"
    # rendered on every call, reported once
    assert sum("bad" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING) == 1


def test_bad_prefill_messages_are_rejected_as_a_layer_error(bare):
    class BadPrefill(Prefill):
        name = "bad_prefill"

        def messages(self, ctx):
            return [{"role": "tool", "content": "x"}]

    bare.register_plugin(plugin(bad_prefill=BadPrefill))
    builder = PromptBuilder(bare)
    assert builder.apply_ephemeral(TRANSCRIPT, ctx_for(bare)) == TRANSCRIPT
    assert "role" in builder.render_ephemeral(ctx_for(bare)).layers[0].error


message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "tool"]),
    "content": st.one_of(st.text(max_size=20), st.none(),
                         st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)}),
                                  max_size=2)),
})


class FromExtra(PromptLayer):
    """An ephemeral layer rendering ``ctx.extra[key]`` (system or user placement)."""

    cached = False

    def __init__(self, key: str, placement: str):
        self.name, self.order, self.key, self.placement = key, 10, key, placement

    def render(self, ctx):
        return ctx.extra.get(self.key)

    def messages(self, ctx):
        return Prefill().messages(ctx) if ctx.extra.get("prefill") else []


@pytest.fixture
def extra_builder(kernel_factory):
    kernel = kernel_factory(defaults=False)
    kernel.register_plugin(plugin(eph=lambda k: FromExtra("eph", "system"),
                                  rec=lambda k: FromExtra("rec", "user")))
    return kernel, PromptBuilder(kernel)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(system=st.text(max_size=40), transcript=st.lists(message, max_size=8),
       eph=st.text(max_size=20), rec=st.text(max_size=20), prefill=st.booleans())
def test_property_cached_prefix_is_intact_and_input_never_mutated(
        extra_builder, system, transcript, eph, rec, prefill):
    kernel, builder = extra_builder  # stateless between examples: the context carries the inputs
    messages = [{"role": "system", "content": system}, *transcript]
    before = copy.deepcopy(messages)
    out = builder.apply_ephemeral(messages, ctx_for(kernel, extra={"eph": eph, "rec": rec, "prefill": prefill}))
    assert messages == before
    first = out[0]
    assert first["role"] == "system"
    # The stored prompt is always sent byte for byte: the plain string, or block 0.
    if eph.strip():
        expected = [{"type": "text", "text": system}] if system else []
        assert first["content"] == [*expected, {"type": "text", "text": eph.strip()}]
    else:
        assert first["content"] == system
    # Prefill (twice: one per layer) right after the system message.
    n_prefill = 4 if prefill else 0
    assert [m["content"] for m in out[1:1 + n_prefill]] == ["hi", "hello!"] * (n_prefill // 2)
    # Every original message survives, in order; only the last user message may grow.
    tail = out[1 + n_prefill:]
    assert len(tail) == len(transcript)
    users = [i for i, m in enumerate(transcript) if m["role"] == "user"]
    for i, (orig, sent) in enumerate(zip(transcript, tail, strict=True)):
        if rec.strip() and users and i == users[-1]:
            text = sent["content"] if isinstance(sent["content"], str) else sent["content"][-1]["text"]
            assert text.endswith(rec.strip())
            assert sent["content"] != orig["content"]
        else:
            assert sent == orig


def test_prompt_context_config_property(kernel):
    assert PromptContext(kernel=kernel).config is kernel.config
    assert PromptContext(kernel=None).config is None


def test_default_plugin_layers_are_registered_in_order(kernel):
    builder = PromptBuilder(kernel)
    assert builder.layer_names == [
        "identity", "tool_guidance", "tool_use_enforcement", "memory_provider", "system_message",
        "memory_snapshot",
        "user_snapshot", "skills_index", "context_files", "timestamp", "platform_hint",
        "ephemeral_system_prompt", "prefill", "recalled_memory",
    ]
    orders = [s.order for s in builder._slots]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


def test_preview_prompt_renders_every_layer(kernel, tmp_path: Path):
    (tmp_path / "AGENTS.md").write_text("Run make lint first.")
    built = hermes.preview_prompt(kernel, cwd=tmp_path, platform="cli")
    names = [r.name for r in built.layers]
    assert "recalled_memory" in names and "identity" in names
    assert "Run make lint first." in built.text
    assert built.hash == hermes.prompt_hash(built.text)
