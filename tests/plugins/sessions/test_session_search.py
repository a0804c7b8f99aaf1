"""The ``session_search`` tool: recent mode, lineage exclusion, grouping, windows,
summaries through the real SDK against the fake LLM server, bounded concurrency, one
deadline, raw-snippet fallback, never raising."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

import hermes
from hermes.plugins import session_search as ss
from hermes.testing.fakellm import Reply


@pytest.fixture
def kernel(kernel_factory: Any) -> Any:
    """A kernel whose model provider does not exist: no auxiliary model, so nothing here
    can reach a network; summaries fall back to snippets (the LLM tests below use the
    fake server)."""
    return kernel_factory(config={"model": {"provider": "no-such-provider"}})


def call(kernel: Any, session_id: str = "", **args: Any) -> dict[str, Any]:
    ctx = hermes.ToolContext(kernel=kernel, session_id=session_id)
    out = ss.session_search(args, ctx)
    assert isinstance(out, str)
    return json.loads(out)


def seed(store: Any) -> dict[str, str]:
    """Three conversations about volcanoes, one of them the live one (with a compressed
    part and a sub-agent), plus an unrelated one and a hidden 'tool' source one."""
    ids = {}
    ids["live"] = store.create_session("live-1", source="cli", started_at=1000)
    store.append_message("live-1", "user", "volcano eruption forecast for Etna", timestamp=1001)
    store.end_session("live-1", "compression", ended_at=1100)
    ids["live_tip"] = store.create_session("live-2", parent_session_id="live-1", started_at=1100)
    store.append_message("live-2", "user", "more volcano questions", timestamp=1101)
    ids["live_sub"] = store.create_session("live-sub", parent_session_id="live-2",
                                           source="subagent", started_at=1102)
    store.append_message("live-sub", "assistant", "volcano research notes", timestamp=1103)
    ids["past_a"] = store.create_session("past-a", source="telegram", started_at=500)
    store.set_title("past-a", "Iceland trip")
    store.append_message("past-a", "user", "Is the volcano near Reykjavik active?", timestamp=501)
    store.append_message("past-a", "assistant", "Fagradalsfjall volcano erupted in 2023.", timestamp=502)
    ids["past_b"] = store.create_session("past-b", source="cli", started_at=600)
    store.append_message("past-b", "user", "volcano documentary recommendations", timestamp=601)
    ids["other"] = store.create_session("other", source="cli", started_at=700)
    store.append_message("other", "user", "sourdough starter ratios", timestamp=701)
    ids["hidden"] = store.create_session("hidden", source="tool", started_at=800)
    store.append_message("hidden", "user", "volcano from an integration", timestamp=801)
    return ids


def test_registered_as_a_parallel_safe_tool(kernel: Any) -> None:
    tools = {t.name: t for t in kernel.tools()}
    tool = tools["session_search"]
    assert tool.parallel_safe and tool.toolset == "session_search"
    assert "past conversations" in tool.schema["description"]
    assert set(tool.schema["parameters"]["properties"]) == {
        "query", "session_id", "around_message_id", "window", "role_filter", "since", "until",
        "sort", "limit", "summarize"}
    assert "session_search" in ss.GUIDANCE and ss.GUIDANCE in tool.schema["description"]


def test_recent_mode_skips_the_live_conversation(kernel: Any) -> None:
    seed(kernel.session_store)
    out = call(kernel, "live-2")
    assert out["success"] and out["mode"] == "recent"
    ids = [r["session_id"] for r in out["results"]]
    assert "live-1" not in ids and "live-2" not in ids and "hidden" not in ids
    assert ids == ["other", "past-b", "past-a"]  # most recently active first
    assert call(kernel, "live-2", limit=5)["count"] == 3
    assert [r["session_id"] for r in call(kernel, "live-2", limit=1)["results"]] == ["other"]
    first = out["results"][0]
    assert first["preview"] == "sourdough starter ratios" and first["message_count"] == 1


def test_search_excludes_the_whole_live_lineage(kernel: Any) -> None:
    seed(kernel.session_store)
    for current in ("live-1", "live-2", "live-sub"):
        out = call(kernel, current, query="volcano")
        ids = [r["session_id"] for r in out["results"]]
        assert out["success"] and set(ids) == {"past-a", "past-b"}, current
        assert out["sessions_searched"] == 2
    # without a current session the live conversation is just another past one
    out = call(kernel, "", query="volcano", limit=5)
    assert {r["session_id"] for r in out["results"]} == {"live-1", "past-a", "past-b"}


def test_results_without_auxiliary_model_are_raw_snippets(kernel: Any) -> None:
    assert kernel.auxiliary("session_search") is None
    seed(kernel.session_store)
    out = call(kernel, "live-2", query="volcano Reykjavik")
    top = out["results"][0]
    assert top["session_id"] == "past-a" and top["summarized"] is False
    assert top["summary"].startswith(ss.RAW_PREFIX)
    assert ">>>volcano<<<" in top["summary"] and top["title"] == "Iceland trip"
    assert top["source"] == "telegram" and top["when"] != "unknown"


def test_no_matches(kernel: Any) -> None:
    seed(kernel.session_store)
    out = call(kernel, "live-2", query="xylophone")
    assert out == {"success": True, "query": "xylophone", "results": [], "count": 0,
                   "sessions_searched": 0, "message": "No matching sessions found."}


def test_limit_is_clamped_and_role_filter_applies(kernel: Any) -> None:
    store = kernel.session_store
    for i in range(8):
        store.create_session(f"s{i}", started_at=100 + i)
        store.append_message(f"s{i}", "user", f"lighthouse keeper {i}")
    store.append_message("s0", "assistant", "quartz lighthouse")
    assert call(kernel, query="lighthouse", limit=99)["count"] == 5
    assert call(kernel, query="lighthouse", limit=0)["count"] == 3
    assert call(kernel, query="lighthouse", limit="x")["count"] == 3
    only = call(kernel, query="lighthouse", role_filter="assistant")
    assert [r["session_id"] for r in only["results"]] == ["s0"]


def test_never_raises(kernel: Any) -> None:
    kernel.session_store.close()  # every store call now fails
    out = call(kernel, "x", query="anything")
    assert out["success"] is False and "Search failed" in out["error"]
    out = json.loads(ss.session_search("not a dict", hermes.ToolContext(kernel=kernel)))  # type: ignore[arg-type]
    assert out["success"] is False


# -- windows and transcripts ------------------------------------------------------------


def test_format_transcript() -> None:
    text = ss.format_transcript([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "a"}}, {"function": {"name": "b"}}]},
        {"role": "tool", "name": "a", "content": "x" * 300 + "y" * 300},
        {"role": "assistant", "content": "done"},
    ])
    blocks = text.split("\n\n")
    assert blocks[0] == "[USER]: hi" and blocks[1] == "[ASSISTANT]: [Called: a, b]"
    assert blocks[2].startswith("[TOOL:a]: " + "x" * 250 + "\n...[truncated]...\n")
    assert blocks[2].endswith("y" * 250) and blocks[3] == "[ASSISTANT]: done"
    assert ss.format_transcript([]) == ""


def test_truncate_around_matches() -> None:
    assert ss.truncate_around_matches("short text", "x", 100) == "short text"
    filler = "lorem ipsum " * 2000
    text = filler + "the KEYWORD is here" + filler
    out = ss.truncate_around_matches(text, "keyword", 1000)
    assert "KEYWORD" in out and len(out) <= 1000 + 100
    assert out.startswith("...[earlier conversation truncated]...")
    assert out.endswith("...[later conversation truncated]...")
    body = out.split("\n\n")[1]
    assert 200 <= body.find("KEYWORD") <= 300  # a quarter of the window before the match
    head = ss.truncate_around_matches(text, "absent", 1000)
    assert head.startswith("lorem") and head.endswith("...[later conversation truncated]...")


def test_truncate_prefers_phrase_then_proximity() -> None:
    pad = "z " * 3000
    text = pad + "alpha here" + pad + "alpha beta together" + pad + "beta there" + pad
    out = ss.truncate_around_matches(text, "alpha beta", 500)
    assert "alpha beta together" in out
    text2 = pad + "alpha" + pad + "alpha and then beta" + pad + "beta" + pad
    out2 = ss.truncate_around_matches(text2, "alpha beta", 500)
    assert "alpha and then beta" in out2


def test_format_when() -> None:
    assert ss.format_when(None) == "unknown" and ss.format_when("nope") == "unknown"
    assert ss.format_when(0).endswith(("AM", "PM")) and ss.format_when("1700000000")


# -- summaries through the real SDK and the fake server ------------------------------------


@pytest.fixture
def llm_kernel(kernel_factory: Any, fake_llm: Any) -> Any:
    def make(**plugin: Any) -> Any:
        config = fake_llm.config("openai")
        if plugin:
            config["plugins"] = {"session-search": plugin}
        return kernel_factory(config=config)
    return make


def test_summaries_from_the_auxiliary_model(llm_kernel: Any, fake_llm: Any) -> None:
    kernel = llm_kernel()
    seed(kernel.session_store)
    fake_llm.handler = lambda req: Reply(text=f"Summary of: {req.last_user_text.splitlines()[2]}")
    out = call(kernel, "live-2", query="volcano", summarize=True)
    assert out["success"] and out["count"] == 2
    assert all(r["summarized"] for r in out["results"])
    assert {r["summary"] for r in out["results"]} >= {"Summary of: Session date: " + ss.format_when(500)}
    bodies = [r.body for r in fake_llm.requests if r.api == "openai"]
    assert len(bodies) == 2
    prompt = bodies[0]["messages"][-1]["content"]
    assert "Search topic: volcano" in prompt and "[USER]:" in prompt
    assert prompt.rstrip().endswith("Summarize this conversation with focus on: volcano")
    assert bodies[0]["messages"][0]["role"] == "system"


def test_concurrency_is_bounded(llm_kernel: Any, fake_llm: Any) -> None:
    kernel = llm_kernel(max_concurrency=2)
    store = kernel.session_store
    for i in range(5):
        store.create_session(f"c{i}", started_at=10 + i)
        store.append_message(f"c{i}", "user", f"penguin colony {i}")
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def handler(req: Any) -> Reply:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return Reply(text="a summary")

    fake_llm.handler = handler
    out = call(kernel, query="penguin", limit=5, summarize=True)
    assert out["count"] == 5 and all(r["summarized"] for r in out["results"])
    assert state["peak"] == 2


def test_deadline_falls_back_to_snippets(llm_kernel: Any, fake_llm: Any) -> None:
    kernel = llm_kernel(timeout=1)
    seed(kernel.session_store)
    fake_llm.handler = lambda req: Reply(text="too late", delay=4.0)
    out = call(kernel, "live-2", query="volcano", summarize=True)
    assert out["success"] and out["count"] == 2
    assert not any(r["summarized"] for r in out["results"])
    assert all(r["summary"].startswith(ss.RAW_PREFIX) for r in out["results"])


def test_failed_summary_falls_back_per_session(llm_kernel: Any, fake_llm: Any) -> None:
    kernel = llm_kernel()
    seed(kernel.session_store)

    def handler(req: Any) -> Reply:
        return Reply(error=401) if "Iceland" in req.last_user_text or "Reykjavik" in req.last_user_text \
            else Reply(text="fine summary")

    fake_llm.handler = handler
    out = call(kernel, "live-2", query="volcano", summarize=True)
    by_id = {r["session_id"]: r for r in out["results"]}
    assert by_id["past-a"]["summarized"] is False and "Reykjavik" in by_id["past-a"]["summary"]
    assert by_id["past-b"]["summarized"] is True and by_id["past-b"]["summary"] == "fine summary"


def test_empty_summary_is_retried(llm_kernel: Any, fake_llm: Any) -> None:
    kernel = llm_kernel()
    store = kernel.session_store
    store.append_message("solo", "user", "narwhal tusk facts")
    fake_llm.queue(Reply(text=""), Reply(text="second try worked"))
    out = call(kernel, query="narwhal", summarize=True)
    assert out["results"][0]["summary"] == "second try worked"


# -- the shapes without a model: discover, scroll, read, browse ---------------------------


def read(kernel: Any, **args: Any) -> dict[str, Any]:
    """The tool called with ``args`` as given (``session_id`` is the tool's argument)."""
    return json.loads(ss.session_search(args, hermes.ToolContext(kernel=kernel, session_id="")))


def test_discover_gives_the_match_in_context_with_bookends(kernel: Any) -> None:
    store = kernel.session_store
    store.create_session("trip", source="cli", started_at=100)
    store.append_messages("trip", [
        {"role": "user", "content": f"filler {i}", "timestamp": 101 + i} for i in range(6)] + [
        {"role": "user", "content": "Where should we stay in Porto?", "timestamp": 110},
        {"role": "assistant", "content": "Pension Lumen, near the river.", "timestamp": 111},
        {"role": "user", "content": "thanks, booked", "timestamp": 112}])
    out = call(kernel, query="where did you suggest we stay in Porto", window=1)
    top = out["results"][0]
    assert top["session_id"] == "trip" and top["summarized"] is False
    anchor = [m for m in top["window"] if m.get("anchor")]
    assert len(anchor) == 1 and anchor[0]["id"] == top["match_message_id"] and len(top["window"]) == 3
    assert top["bookends"]["first"][0]["content"] == "filler 0"
    assert top["bookends"]["last"][-1]["content"] == "thanks, booked"

    scrolled = read(kernel, session_id="trip", around_message_id=top["match_message_id"], window=2)
    assert scrolled["mode"] == "scroll" and len(scrolled["messages"]) == 5
    whole = read(kernel, session_id="trip")
    assert whole["mode"] == "read" and len(whole["messages"]) == 9
    assert call(kernel)["mode"] == "recent"


def test_read_shows_head_and_tail_of_a_long_session(kernel: Any) -> None:
    store = kernel.session_store
    store.append_messages("long", [{"role": "user", "content": f"line {i}"} for i in range(ss.READ_MAX + 30)])
    out = read(kernel, session_id="long")
    assert len(out["messages"]) == ss.READ_EDGE and len(out["tail"]) == ss.READ_EDGE
    assert out["omitted"] == ss.READ_MAX + 30 - 2 * ss.READ_EDGE
    assert out["tail"][-1]["content"] == f"line {ss.READ_MAX + 29}"


def test_sort_and_date_filters(kernel: Any) -> None:
    store = kernel.session_store
    for sid, day in (("jan", "2025-01-10"), ("mar", "2025-03-10"), ("may", "2025-05-10")):
        ts = time.mktime(time.strptime(day, "%Y-%m-%d")) + 3600
        store.create_session(sid, source="cli", started_at=ts)
        store.append_message(sid, "user", "marmalade recipe notes", timestamp=ts)
    assert [r["session_id"] for r in call(kernel, query="marmalade", sort="newest")["results"]] == ["may", "mar", "jan"]
    assert [r["session_id"] for r in call(kernel, query="marmalade", sort="oldest")["results"]] == ["jan", "mar", "may"]
    only = call(kernel, query="marmalade", since="2025-02-01", until="2025-03-10")
    assert [r["session_id"] for r in only["results"]] == ["mar"]
    bad = call(kernel, query="marmalade", since="last week")
    assert bad["success"] is False and "2025-03-14" in bad["error"]
    assert read(kernel, session_id="nope")["success"] is False


def test_summaries_only_when_asked(llm_kernel: Any, fake_llm: Any) -> None:
    kernel = llm_kernel()
    seed(kernel.session_store)
    out = call(kernel, "live-2", query="volcano")
    assert not any(r["summarized"] for r in out["results"]) and fake_llm.requests == []


def test_summary_requests_carry_no_secrets(llm_kernel: Any, fake_llm: Any) -> None:
    """The transcript window sent to the auxiliary summariser goes through the project's
    one redaction table, like every other text that leaves the machine."""
    kernel = llm_kernel()
    store = kernel.session_store
    store.create_session("keys", source="cli", started_at=900)
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    store.append_message("keys", "user", f"the volcano bot uses token {secret}", timestamp=901)
    fake_llm.handler = lambda req: Reply(text="a summary")
    out = call(kernel, query="volcano", summarize=True)
    assert out["success"] and any(r["session_id"] == "keys" for r in out["results"])
    bodies = [str(r.body) for r in fake_llm.requests]
    assert bodies and any("volcano" in b for b in bodies)
    assert not any(secret in b for b in bodies)
