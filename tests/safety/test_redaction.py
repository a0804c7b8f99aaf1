"""The one redaction table (hermes.redaction): every known format is redacted, ordinary
text is left alone, and the helpers built on it (config masking, the log filter) use it."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from secret_corpus import FORMATS, ORDINARY

import hermes
from hermes import compaction, redaction


@pytest.mark.parametrize("fmt", FORMATS, ids=[f.id for f in FORMATS])
def test_each_format_is_redacted(fmt) -> None:
    out = hermes.redact_secrets(fmt.text)
    assert fmt.secret not in out
    assert redaction.REDACTED in out
    assert hermes.find_secrets(fmt.text), "find_secrets must report what redact_secrets hides"


@pytest.mark.parametrize("text", ORDINARY, ids=[t[:30] for t in ORDINARY])
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert hermes.redact_secrets(text) == text
    assert hermes.find_secrets(text) == []


def test_there_is_one_table() -> None:
    # compaction re-exports the same function; no second list of patterns anywhere.
    assert compaction.redact_secrets is redaction.redact_secrets is hermes.redact_secrets
    assert not hasattr(compaction, "_SECRET_PATTERNS")
    ids = [rule.id for rule in hermes.SECRET_RULES]
    assert len(ids) == len(set(ids))
    assert all(rule.description for rule in hermes.SECRET_RULES)


def test_what_is_kept_says_what_was_there() -> None:
    fmt = {f.id: f for f in FORMATS}
    assert hermes.redact_secrets(fmt["github-ghp"].text).endswith("ghp_[REDACTED]")
    assert '"api_key": "[REDACTED]"' in hermes.redact_secrets(fmt["json-api-key"].text)
    assert "postgres://app:[REDACTED]@db.internal" in hermes.redact_secrets(fmt["postgres-url"].text)


def test_several_secrets_in_one_text() -> None:
    text = "\n".join(f.text for f in FORMATS)
    out = hermes.redact_secrets(text)
    leaked = [f.id for f in FORMATS if f.secret in out]
    assert leaked == []


def test_weak_names_need_a_random_value() -> None:
    assert hermes.redact_secrets("key: value") == "key: value"
    assert hermes.redact_secrets("token: 4096") == "token: 4096"
    assert hermes.redact_secrets("token: aB3dE5fG7hJ9kL1mN3pQ") == "token: [REDACTED]"


@pytest.mark.parametrize("name, secret", [
    ("api_key", True), ("OPENAI_API_KEY", True), ("clientSecret", True), ("db-password", True),
    ("x-api-key", True), ("_authToken", True), ("aws_secret_access_key", True), ("token", True),
    ("max_tokens", False), ("aws_access_key_id", False), ("model", False), ("prompt_tokens", False),
    ("secret_name", False), ("keys", False), ("bypass", False),
])
def test_is_secret_key(name: str, secret: bool) -> None:
    assert hermes.is_secret_key(name) is secret


def test_mask_secrets_masks_values_of_secret_keys_but_not_references() -> None:
    config = {
        "model": {"name": "gpt", "api_key": "plain-text-key-123", "max_tokens": 4096},
        "plugins": {"mem0": {"api_key": {"$env": "MEM0_API_KEY"}, "note": "token ghp_" + "a" * 36}},
        "memory": {"password": ""},
    }
    masked = hermes.mask_secrets(config)
    assert masked["model"] == {"name": "gpt", "api_key": "[REDACTED]", "max_tokens": 4096}
    assert masked["plugins"]["mem0"]["api_key"] == {"$env": "MEM0_API_KEY"}
    assert masked["plugins"]["mem0"]["note"] == "token ghp_[REDACTED]"
    assert masked["memory"]["password"] == ""
    assert config["model"]["api_key"] == "plain-text-key-123"  # a copy, never in place


def test_log_filter_redacts_message_arguments_and_tracebacks() -> None:
    secret = "sk-proj-" + "Z" * 40
    record = logging.LogRecord("hermes.x", logging.WARNING, __file__, 1, "calling with %s", (secret,), None)
    try:
        raise RuntimeError(f"auth failed for {secret}")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    assert hermes.RedactingFilter().filter(record) is True
    text = logging.Formatter().format(record)
    assert secret not in text and "sk-proj-[REDACTED]" in text


_SECRETS = st.sampled_from(FORMATS)
_FILLER = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80)


@settings(max_examples=150, deadline=None)
@given(prefix=_FILLER, fmt=_SECRETS, suffix=_FILLER)
def test_redaction_is_idempotent_and_never_keeps_a_known_secret(prefix: str, fmt, suffix: str) -> None:
    text = f"{prefix}\n{fmt.text}\n{suffix}"
    once = hermes.redact_secrets(text)
    assert fmt.secret not in once
    assert hermes.redact_secrets(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises_and_redaction_only_shrinks_secrets(text: str) -> None:
    out = hermes.redact_secrets(text)
    assert isinstance(out, str)
    assert hermes.redact_secrets(out) == out


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_private_key_cut_anywhere_leaks_no_key_line(data) -> None:
    # Summarisers redact a head window and a tail window of a long body; the head may
    # end inside a PEM block (no END line), the tail may start inside it (no BEGIN).
    fmt = next(f for f in FORMATS if f.id == "private-key-rsa")
    text = "notes before\n" + fmt.text + "\nnotes after"
    cut = data.draw(st.integers(1, len(text) - 1))
    window = text[:cut] if data.draw(st.booleans()) else text[cut:]
    # ...and the text may be a JSON string (tool-call arguments): escaped line breaks
    out = hermes.redact_secrets(window) + hermes.redact_secrets(json.dumps(window))
    for line in fmt.secret.splitlines():
        for i in range(0, len(line) - 20):
            assert line[i:i + 21] not in out
