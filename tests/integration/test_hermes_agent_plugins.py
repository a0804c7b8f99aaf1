"""Hermes Agent's own memory providers, from the ``hermes-agent==0.19.0`` wheel, run in
this kernel unchanged (issue 15).

The wheel is fetched with ``pip download --no-deps`` into a cache directory
(``$HERMES_TEST_CACHE``, default ``~/.cache/hermes-tests``) and reused between runs; the
tests skip, saying why, only when the package index cannot be reached. Nothing of
hermes-agent is kept in this repository: its ``plugins/memory/<name>/`` directories are
copied from the wheel into a temporary Hermes home, exactly as a user installs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

import hermes
from hermes.hermes_compat import load_plugin_dir
from hermes.testing.conformance import MemoryProviderConformance
from hermes.testing.fakellm import Reply

pytestmark = pytest.mark.slow

REQUIREMENT = "hermes-agent==0.19.0"
WHEEL = "hermes_agent-0.19.0-py3-none-any.whl"
PROVIDERS = ("byterover", "hindsight", "holographic", "honcho", "mem0", "openviking", "retaindb",
             "supermemory")
#: Names the project's own contrib plugins (installed as entry points) also use.
CONTRIB_NAMES = ("honcho", "mem0")
HERMES = [sys.executable, "-m", "hermes.cli"]
FACT = "The user's cat is called Miso"


def _cache() -> Path:
    return Path(os.environ.get("HERMES_TEST_CACHE") or Path.home() / ".cache" / "hermes-tests")


@pytest.fixture(scope="session")
def wheel() -> Path:
    """The cached hermes-agent wheel, downloaded on first use."""
    cache = _cache()
    path = cache / WHEEL
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
             "--retries", "1", "--timeout", "20", "-d", str(cache), REQUIREMENT],
            capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not path.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"the package index is unreachable, cannot download {REQUIREMENT}: {last}")
    return path


def install_providers(wheel: Path, home: Path, names: tuple[str, ...] = PROVIDERS) -> Path:
    """Copy the wheel's ``plugins/memory/<name>/`` directories into ``home/plugins``."""
    plugins = home / "plugins"
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            parts = member.split("/")
            if len(parts) > 3 and parts[:2] == ["plugins", "memory"] and parts[2] in names and parts[-1]:
                target = plugins.joinpath(*parts[2:])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
    return plugins


@pytest.fixture
def upstream_home(wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    install_providers(wheel, home)
    for var in ("HONCHO_API_KEY", "MEM0_API_KEY", "RETAINDB_API_KEY", "SUPERMEMORY_API_KEY",
                "HINDSIGHT_API_KEY", "OPENVIKING_ENDPOINT", "BRV_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    return home


def test_the_wheel_bundles_eight_providers(upstream_home: Path) -> None:
    found = sorted(p.name for p in (upstream_home / "plugins").iterdir() if (p / "__init__.py").is_file())
    assert found == sorted(PROVIDERS)


def test_all_eight_load_and_explain_themselves(upstream_home: Path, capsys: pytest.CaptureFixture) -> None:
    local = tuple(n for n in PROVIDERS if n not in CONTRIB_NAMES)
    # discovered from the home like any local plugin; the two names the contrib plugins
    # also take are registered under other names so they run beside them
    with hermes.Kernel(home=upstream_home, load_plugins=local, check_selection=False) as kernel:
        for name in CONTRIB_NAMES:
            kernel.register_plugin(load_plugin_dir(upstream_home / "plugins" / name, name=f"upstream-{name}"),
                                   f"upstream-{name}")
        records = {n: kernel.pm.records[n] for n in (*local, *(f"upstream-{n}" for n in CONTRIB_NAMES))}
        failed = {n: r.failure.line() for n, r in records.items() if r.status != "active"}
        assert not failed, failed
        report = {}
        for name in records:
            provider = kernel.create("memory-provider", name)
            assert isinstance(provider, hermes.MemoryProvider)
            available = provider.is_available()
            reason = "" if available else provider.unavailable_reason()
            report[name] = (available, reason)
            if not available:
                assert reason, name
        print(json.dumps(report, indent=1))
    assert report["holographic"] == (True, "")
    assert [n for n, (ok, _) in report.items() if ok] == ["holographic"]
    assert "RETAINDB_API_KEY" in report["retaindb"][1]
    assert "brv" in report["byterover"][1]
    assert "OPENVIKING_ENDPOINT" in report["openviking"][1]
    assert "HONCHO_API_KEY" in report["upstream-honcho"][1]
    assert "MEM0_API_KEY" in report["upstream-mem0"][1]
    assert "hindsight-client" in report["hindsight"][1]


def test_plugins_list_shows_them_with_their_source(upstream_home: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from hermes.cli import cli

    local = [n for n in PROVIDERS if n not in CONTRIB_NAMES]
    monkeypatch.setenv("HERMES_HOME", str(upstream_home))
    monkeypatch.setenv("HERMES_LOAD_PLUGINS", ",".join(local))
    listing = json.loads(CliRunner().invoke(cli, ["plugins", "list", "--json"]).stdout)
    rows = {r["name"]: r for r in listing if r["name"] in local}
    assert set(rows) == set(local)
    for name, row in rows.items():
        assert (row["source"], row["status"]) == ("local", "active"), row
        assert row["registered"] == {"memory-provider": [name]}
        assert row["version"]


class TestHolographicConformance(MemoryProviderConformance):
    """Upstream's local SQLite provider passes the kernel's memory-provider contract."""

    @pytest.fixture
    def provider(self, wheel: Path, tmp_path: Path) -> Any:
        home = tmp_path / "holo-home"
        install_providers(wheel, home, ("holographic",))
        with hermes.Kernel(home=home, load_plugins=["holographic"], check_selection=False) as kernel:
            yield kernel.create("memory-provider", "holographic")


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "HERMES_LOAD_PLUGINS")}
    env["HERMES_HOME"] = str(home)
    return subprocess.run(HERMES + args, capture_output=True, text=True, env=env, timeout=180)


def _tools(req: Any) -> list[str]:
    return [t.get("function", t).get("name") for t in req.body.get("tools") or []]


def test_holographic_in_two_hermes_chat_sessions(upstream_home: Path, fake_llm: Any) -> None:
    (upstream_home / "config.yaml").write_text("memory:\n  provider: holographic\n  nudge_interval: 0\n")
    flags = ["--provider", "openai", "--base-url", fake_llm.openai_url, "--model", "fake-model"]

    def first(req: Any) -> Reply:
        msgs = req.body["messages"]
        if msgs[-1]["role"] == "user" and "fact_store" in _tools(req):
            return Reply(tool_calls=[{"name": "fact_store", "arguments": {
                "action": "add", "content": FACT, "category": "user_pref"}}])
        return Reply(text="Noted: Miso.")

    fake_llm.handler = first
    one = _run(["chat", *flags, "-q", "Remember that my cat is called Miso."], upstream_home)
    assert one.returncode == 0, one.stderr
    assert "Traceback" not in one.stderr
    assert "fact_store" in _tools(fake_llm.requests[0])  # offered
    tool_results = [m for m in fake_llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert tool_results and "error" not in json.loads(tool_results[0]["content"])  # called
    assert (upstream_home / "memory_store.db").is_file()

    fake_llm.requests.clear()
    fake_llm.handler = lambda req: Reply(text="Your cat is Miso.")
    two = _run(["chat", *flags, "-q", "What is my cat called?"], upstream_home)
    assert two.returncode == 0, two.stderr
    sent = json.dumps(fake_llm.requests[0].body["messages"])
    assert "Miso" in sent  # recalled in the next session, from upstream's fact store
    assert "1 facts stored" in sent  # and its system-prompt block counts it


def test_shims_stay_out_of_sys_modules(upstream_home: Path) -> None:
    before = {n: sys.modules.get(n) for n in ("agent", "tools", "utils", "hermes_constants", "hermes_cli")}
    with hermes.Kernel(home=upstream_home, load_plugins=["holographic", "openviking"],
                       check_selection=False) as kernel:
        kernel.create("memory-provider", "openviking").is_available()
    assert {n: sys.modules.get(n) for n in before} == before


# -- upstream mem0 beside contrib/hermes-mem0, against the same fake LLM server ------------

def _extraction(request: Any) -> Reply:
    """mem0's fact-extraction prompt answered with one memory per user line; anything
    else (embeddings are answered by the server itself) gets a plain reply."""
    if "Memory Extractor" in (request.system or ""):
        section = request.last_user_text.split("## New Messages", 1)[-1].split("##", 1)[0]
        facts = [line[len("user: "):].strip() for line in section.splitlines() if line.startswith("user: ")]
        return Reply(text=json.dumps({"memory": [{"text": f} for f in facts if f]}))
    return Reply(text="ok")


@pytest.fixture
def mem0_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("mem0") is None:  # not imported: it reads MEM0_TELEMETRY once
        pytest.skip("mem0ai is not installed")
    for var in ("MEM0_API_KEY", "MEM0_HOST", "MEM0_USER_ID", "MEM0_MODE", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path / "mem0-dir"))


def test_upstream_mem0_beside_contrib(mem0_env: None, wheel: Path, tmp_path: Path, fake_llm: Any,
                                      kernel_factory: Any) -> None:
    import hermes_mem0

    fake_llm.handler = _extraction
    fact = "I drink green tea every morning"
    # upstream, self-hosted ("oss") mode: mem0.json in the home, the same local stack
    home = tmp_path / "up-home"
    install_providers(wheel, home, ("mem0",))
    llm = {"model": "fake-model", "api_key": "fake-key", "openai_base_url": fake_llm.openai_url}
    (home / "mem0.json").write_text(json.dumps({"mode": "oss", "user_id": "u1", "oss": {
        "vector_store": {"provider": "qdrant", "config": {
            "path": str(tmp_path / "up-qdrant"), "collection_name": "hermes", "on_disk": True}},
        "llm": {"provider": "openai", "config": {**llm, "temperature": 0.0}},
        "embedder": {"provider": "openai", "config": {**llm, "model": "fake-embed", "embedding_dims": 64}}}}))
    with hermes.Kernel(home=home, load_plugins=[], check_selection=False) as kernel:
        kernel.register_plugin(load_plugin_dir(home / "plugins" / "mem0", name="upstream-mem0"), "upstream-mem0")
        upstream = kernel.create("memory-provider", "upstream-mem0")
        assert upstream.is_available()
        upstream.initialize("s1", hermes_home=str(home), platform="cli", user_id="u1")
        upstream.sync_turn(fact, "Noted, green tea it is.")
        upstream._sync_thread.join(30)  # upstream syncs on its own thread
        found = json.loads(upstream.handle_tool_call("mem0_search", {"query": fact}))
        up_recall = upstream.prefetch(fact)
        upstream.shutdown()
    assert fact in json.dumps(found)

    # contrib/hermes-mem0 in local mode on the same fake server
    kernel = kernel_factory(config={"memory": {"provider": "mem0"}, "plugins": {"mem0": {
        "mode": "local", "llm": {"base_url": fake_llm.openai_url, "api_key": "fake-key", "model": "fake-model"},
        "embedder": {"model": "fake-embed", "dims": 64}, "prefetch_timeout": 10.0}}}, plugins=[hermes_mem0])
    ours = kernel.create("memory-provider")
    ours.initialize("s1", hermes_home=str(kernel.home), platform="cli", agent_context="primary")
    ours.sync_turn(fact, "Noted, green tea it is.")
    assert ours.flush(30)
    our_recall = ours.prefetch(fact)
    ours_found = json.loads(ours.handle_tool_call("mem0_search", {"query": fact}))
    ours.shutdown()
    assert f"- {fact}" in our_recall and fact in json.dumps(ours_found)
    print(json.dumps({"upstream_prefetch": up_recall, "contrib_prefetch": our_recall,
                      "upstream_search": found, "contrib_search": ours_found}, indent=1))


# -- upstream honcho beside contrib/hermes-honcho, against the same fake Honcho server -------

def test_upstream_honcho_beside_contrib(wheel: Path, tmp_path: Path, kernel_factory: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    if importlib.util.find_spec("honcho") is None:
        pytest.skip("honcho-ai is not installed")
    import hermes_honcho

    sys.path.insert(0, str(Path(hermes_honcho.__file__).parents[1] / "tests"))
    try:
        from fake_honcho import FakeHoncho
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))  # no ~/.hermes/honcho.json of the machine's
    for var in ("HONCHO_API_KEY", "HONCHO_BASE_URL", "HONCHO_URL", "HONCHO_WORKSPACE_ID"):
        monkeypatch.delenv(var, raising=False)
    turn = ("I am training for a marathon", "Great, how many weeks to go?")
    with FakeHoncho(api_key="hk-test") as server:
        home = tmp_path / "up-home"
        install_providers(wheel, home, ("honcho",))
        # upstream sends a loopback server the key only from the host block ("hermes")
        (home / "honcho.json").write_text(json.dumps({"baseUrl": server.url, "hosts": {"hermes": {
            "apiKey": "hk-test", "workspace": "upstream", "peerName": "ada"}}}))
        with hermes.Kernel(home=home, load_plugins=[], check_selection=False) as kernel:
            kernel.register_plugin(load_plugin_dir(home / "plugins" / "honcho", name="upstream-honcho"),
                                   "upstream-honcho")
            upstream = kernel.create("memory-provider", "upstream-honcho")
            assert upstream.is_available()
            upstream.initialize("20260101_120000_abc123", hermes_home=str(home), platform="cli")
            # upstream opens its session in the background and drops a turn synced before
            # that is done (contrib queues it): wait, as a real turn's model call would
            deadline = time.monotonic() + 15
            while not upstream._session_ready() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert upstream._session_ready()
            upstream.sync_turn(*turn)
            upstream._sync_thread.join(15)
            upstream.shutdown()
        up_said = [(m["peer_id"], m["content"]) for m in server.messages("upstream")]

        kernel = kernel_factory(config={"memory": {"provider": "honcho"}, "plugins": {"honcho": {
            "base_url": server.url, "api_key": "hk-test", "max_retries": 0, "workspace": "contrib"}}},
            plugins=[hermes_honcho])
        ours = kernel.create("memory-provider")
        ours.initialize("20260101_120000_abc123", hermes_home=str(kernel.home), platform="cli",
                        agent_context="primary")
        ours.sync_turn(*turn)
        assert ours.flush(10)
        ours.shutdown()
        our_said = [(m["peer_id"], m["content"]) for m in server.messages("contrib")]
    print(json.dumps({"upstream": up_said, "contrib": our_said}, indent=1))
    assert [c for _, c in up_said] == list(turn)
    assert [c for _, c in our_said] == list(turn)
