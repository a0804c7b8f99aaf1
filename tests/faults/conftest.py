"""Fixtures of the fault-injection suite and its closing summary line.

Each test module sets ``SEEDS = (default, long)`` (a test may override it with
``@pytest.mark.faults(seeds=(default, long))``): how many seeds it runs by default (a
small sample, fast enough for CI) and with ``--faults-long`` (the soak run). Every seed
is a separate test, so a failure names the seed that reproduces it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import SlowFakeLLM, Stats

STATS = pytest.StashKey[Stats]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[STATS] = Stats()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every fault test kills real hermes processes (seconds each): the whole suite is
    # `slow`, so the contributors' fast target (-m "not slow") skips it while the full run
    # and CI still run its default seeded sample.
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.slow)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("faults")
        seeds = marker.kwargs.get("seeds") if marker is not None else None
        default, long = seeds or getattr(metafunc.module, "SEEDS", (2, 20))
        count = long if metafunc.config.getoption("faults_long", False) else default
        metafunc.parametrize("seed", range(count))


@pytest.fixture
def stats(request: pytest.FixtureRequest) -> Stats:
    return request.config.stash[STATS]


@pytest.fixture
def fake() -> Iterator[SlowFakeLLM]:
    with SlowFakeLLM(validate=True) as server:
        yield server


@pytest.fixture
def home(tmp_path: Any) -> Any:
    path = tmp_path / "hermes-home"
    path.mkdir()
    return path


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    stats = config.stash.get(STATS, None)
    if stats is None or not (stats.kills or stats.invariants):
        return
    terminalreporter.write_sep("=", "fault injection")
    terminalreporter.write_line(
        f"fault injection: {stats.kills} kills injected ({stats.completed} runs finished "
        f"before their kill), {stats.invariants} invariants checked, "
        f"{len(stats.failures)} failures")
    if stats.points:
        landed = ", ".join(f"{k} {v}" for k, v in sorted(stats.points.items()))
        terminalreporter.write_line(f"fault injection: kills at fault points: {landed}")
    for line in stats.failures[:40]:
        terminalreporter.write_line(f"  FAILED INVARIANT {line}")
