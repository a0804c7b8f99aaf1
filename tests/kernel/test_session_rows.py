"""The row helpers every session store shares (hermes.session_rows)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hermes
from hermes.plugins.sessions import store as sqlite_store


def test_titles_lose_invisible_and_control_characters_and_are_bounded() -> None:
    assert hermes.sanitize_title("  a\u200b\tb \x07 c ") == "a b c"
    assert hermes.sanitize_title("\u200b \x00") is None and hermes.sanitize_title(None) is None
    assert hermes.sanitize_title("x" * hermes.MAX_TITLE_LENGTH) == "x" * hermes.MAX_TITLE_LENGTH
    with pytest.raises(ValueError, match="limit is 100"):
        hermes.sanitize_title("x" * (hermes.MAX_TITLE_LENGTH + 1))


def test_session_ids_sort_by_creation_time() -> None:
    early, late = hermes.new_session_id(1_700_000_000), hermes.new_session_id(1_800_000_000)
    assert re.fullmatch(r"\d{8}_\d{6}_[0-9a-f]{6}", early) and early < late


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=10))
def test_json_columns_round_trip(value: object) -> None:
    if isinstance(value, str):
        assert hermes.encode_json(value) == value  # text is stored as it is
    else:
        assert hermes.decode_json(hermes.encode_json(value)) == value


def test_stored_content_keeps_every_part() -> None:
    parts = [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {"url": "u"}}]
    stored = hermes.stored_content(parts)
    assert stored is not None and stored.startswith("hello\n") and '"image_url"' in stored
    assert hermes.stored_content("plain") == "plain" and hermes.stored_content(None) is None


def test_the_sqlite_store_uses_the_shared_helpers_not_copies() -> None:
    assert sqlite_store.sanitize_title is hermes.sanitize_title
    assert sqlite_store._content_text is hermes.stored_content
    assert sqlite_store.MAX_TITLE_LENGTH == hermes.MAX_TITLE_LENGTH
