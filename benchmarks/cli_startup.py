"""CLI cold start: wall time of `hermes --version`, `hermes --help` (with the entry-point
discovery cache warm, and cold as right after an install) and `hermes plugins list --json`
beside a bare `python -c pass` in the same run.

Prints one JSON line per figure (median and min of N runs, interleaved round-robin so that
machine load hits every command alike) and a last line comparing `hermes --help` with the
bare interpreter against the target (within 150 ms). Uses a fresh, empty HERMES_HOME,
byte-code caching on (as in a normal install), and whatever plugins are installed in the
environment (run it where you run Hermes).

    python benchmarks/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 150.0


def commands(python: str, hermes: str) -> dict[str, list[str]]:
    return {
        "python -c pass": [python, "-c", "pass"],
        "python -c 'import hermes'": [python, "-c", "import hermes"],
        "hermes --version": [hermes, "--version"],
        "hermes --help": [hermes, "--help"],
        # The same with the entry-point cache removed before each run: what a start costs
        # right after a plugin was installed or removed (importlib_metadata is asked).
        "hermes --help (entry-point cache cold)": [hermes, "--help"],
        "hermes plugins list --json": [hermes, "plugins", "list", "--json"],
    }


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in load] if load else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per command (at least 10)")
    args = parser.parse_args()
    runs = max(10, args.runs)
    hermes = str(Path(sys.executable).with_name("hermes"))
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as pycache:
        # As installed: byte-code cached (into a private prefix, so the tree stays clean),
        # whatever PYTHONDONTWRITEBYTECODE says here; the warm-up run fills the cache.
        env = {**os.environ, "HERMES_HOME": home, "PYTHONPYCACHEPREFIX": pycache}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for var in ("HERMES_LOAD_PLUGINS", "HERMES_DISABLE_PLUGINS", "HERMES_NO_PLUGINS",
                    "HERMES_STRICT_PLUGINS", "HERMES_TRACE_PLUGINS"):
            env.pop(var, None)
        cmds = commands(sys.executable, hermes)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for cmd in cmds.values():  # warm the file cache and the .pyc files once
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        cache = Path(home) / "cache" / "entry-points.json"
        for _ in range(runs):
            for name, cmd in cmds.items():
                if "cache cold" in name:
                    cache.unlink(missing_ok=True)
                start = time.perf_counter()
                subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                times[name].append((time.perf_counter() - start) * 1000)
    info = machine()
    base = statistics.median(times["python -c pass"])
    for name, values in times.items():
        median = statistics.median(values)
        print(json.dumps({
            "benchmark": "cli_startup", "command": name, "runs": runs,
            "median_ms": round(median, 1), "min_ms": round(min(values), 1),
            "over_baseline_ms": round(median - base, 1), "baseline": "python -c pass",
            "machine": info,
        }))
    over = statistics.median(times["hermes --help"]) - base
    print(json.dumps({"benchmark": "cli_startup", "figure": "hermes --help over python -c pass",
                      "median_over_ms": round(over, 1), "target_ms": TARGET_MS,
                      "within_target": over <= TARGET_MS, "machine": info}))


if __name__ == "__main__":
    main()
