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


# -- the lineage, title and message helpers both stores use --------------------------------


def test_next_numbered_title() -> None:
    assert hermes.next_numbered_title("Plans", []) == "Plans"
    assert hermes.next_numbered_title("Plans", ["Plans"]) == "Plans #2"
    assert hermes.next_numbered_title("Plans", ["Plans", "Plans #3", "Plans #x", "Plans #2 #9"]) == "Plans #4"
    assert hermes.next_numbered_title("Plans", ["Plans #7"]) == "Plans #8"
    assert hermes.title_base("Plans #12") == "Plans" and hermes.title_base("Plans") == "Plans"


def test_pick_titled_session() -> None:
    rows = [("a", "Garden", 1.0), ("b", "Garden #2", 2.0), ("c", "Garden #3", 0.5), ("d", "Garden #x", 9.0)]
    assert hermes.pick_titled_session("Garden", rows) == "c"  # the highest continuation
    assert hermes.pick_titled_session("Garden #2", rows) == "b"  # an explicit number: only itself
    assert hermes.pick_titled_session("Garden #4", rows) is None
    assert hermes.pick_titled_session("Garden", [("a", "Garden", 1.0), ("z", "Garden", 2.0)]) == "z"


@given(st.dictionaries(st.integers(0, 12), st.integers(0, 14), max_size=13), st.integers(0, 12))
def test_follow_parents_ends_at_a_root_or_a_cycle(parents: dict[int, int], start: int) -> None:
    known = set(parents) | {start}

    def parent_of(sid: str) -> str | None:
        p = parents.get(int(sid))
        return str(p) if p is not None and p in known else None

    end = hermes.follow_parents(str(start), parent_of)
    path = [start]
    while parent_of(str(path[-1])) is not None and int(parent_of(str(path[-1]))) not in path:
        path.append(int(parent_of(str(path[-1]))))
    assert end == str(path[-1])


def test_follow_continuations() -> None:
    ends = {"a": ("compression", 10.0), "b": ("undo", 20.0), "c": ("user_exit", 30.0), "loop": ("undo", 1.0)}
    children = {"a": "b", "b": "c", "c": "d", "loop": "loop"}

    def ending(sid: str) -> tuple[str | None, float | None] | None:
        return ends.get(sid, (None, None))

    def child(sid: str, ended_at: float) -> str | None:
        return children.get(sid)

    assert hermes.follow_continuations("a", ending, child) == "c"  # user_exit is not continued
    assert hermes.follow_continuations("loop", ending, child) == "loop"
    assert hermes.follow_continuations("x", lambda s: None, child) == "x"


def test_message_numbers_and_preview() -> None:
    assert hermes.message_time(float("nan"), 5.0) == 5.0 and hermes.message_time("inf", 5.0) == 5.0
    assert hermes.message_time("12.5", 5.0) == 12.5 and hermes.message_time(None, 5.0) == 5.0
    assert hermes.message_tokens("7") == 7 and hermes.message_tokens(float("inf")) is None
    assert hermes.message_tokens("many") is None
    assert hermes.tool_call_count("assistant", '[{"id": 1}, {"id": 2}]') == 2
    assert hermes.tool_call_count("tool", [{"id": 1}]) == 0 and hermes.tool_call_count("assistant", {"x": 1}) == 1
    assert hermes.session_preview("line one\r\nline two") == "line one  line two"
    assert hermes.session_preview("x" * 70) == "x" * 60 + "..." and hermes.session_preview(None) == ""


def test_stored_text_filters_snippet_and_page() -> None:
    assert hermes.stored_text("a\ud800b") == "a\ufffdb" and hermes.stored_text(7) == "7"
    assert hermes.stored_text("a\x00b") == "a\x00b" and hermes.stored_text("a\x00b", keep_nul=False) == "ab"
    assert hermes.stored_text(None) is None
    assert hermes.filter_values(" cli, telegram ,,") == ["cli", "telegram"]
    assert hermes.filter_values(("cli", 3)) == ["cli", "3"] and hermes.filter_values(None) == []
    text = "x" * 100 + "Needle" + "y" * 200
    assert hermes.substring_snippet(text, ["absent", "needle"]) == (
        "..." + "x" * 40 + ">>>Needle<<<" + "y" * 74 + "...")
    assert hermes.substring_snippet("short", ["absent"]) == "short"
    assert hermes.search_page("3", 2.0) == (3, 2) and hermes.search_page(-1, -5) == (0, 0)
    assert hermes.search_page(float("inf"), 0) == (20, 0) and hermes.search_page(5, None) == (20, 0)
    # too large for SQL's 64-bit LIMIT/OFFSET (SQLite raised OverflowError): the largest it takes
    assert hermes.search_page(10**30, 2**64) == (2**63 - 1, 2**63 - 1)


def test_rows_decode_their_json_columns() -> None:
    row = hermes.session_row({"id": "s", "model_config": '{"t": 1}'})
    assert row == {"id": "s", "model_config": {"t": 1}} and hermes.session_row(None) is None
    assert hermes.message_row({"id": 1, "tool_calls": "[]"}) == {"id": 1, "tool_calls": []}
    for fields in (hermes.SESSION_FIELDS, hermes.MESSAGE_FIELDS):  # every key the contract names, once
        assert len(set(fields)) == len(fields)
        assert all(f"``{key}``" in hermes.SessionStore.__doc__ for key in fields)
