"""Secret redaction: coverage, false positives and speed of ``hermes.redact_secrets``.

Printed, one JSON line each: the machine; coverage of the secret formats in
``tests/safety/secret_corpus.py`` (how many have their secret removed, and which not);
the ordinary texts of that corpus changed (should be none); false positives on real
text — every finding in this project's docs and sources (tests excluded: they hold
fake secrets on purpose), with the line; and speed in ms per KB on three inputs,
with a plain baseline in the same run (``str.lower`` plus one substring test per
rule hint, the cheapest pass any redactor must make) so the ratio means something on
a shared machine.

Run: ``.venv/bin/python benchmarks/redaction.py``
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import hermes
from hermes.redaction import SECRET_RULES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "safety"))
from secret_corpus import FORMATS, ORDINARY  # noqa: E402


def emit(**data: object) -> None:
    print(json.dumps(data, ensure_ascii=False))


def per_kb(fn, text: str, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - start)
    return round(best * 1000 / (len(text) / 1024), 4)


def baseline(text: str) -> bool:
    lowered = text.lower()
    return any(h in lowered for rule in SECRET_RULES for h in rule.hints)


def main() -> None:
    emit(machine=platform.machine(), python=platform.python_version(), cpus=os.cpu_count(),
         note="shared machine: other processes may run")
    missed = [f.id for f in FORMATS if f.secret in hermes.redact_secrets(f.text)]
    emit(coverage=f"{len(FORMATS) - len(missed)}/{len(FORMATS)}", missed=missed,
         formats=[f.id for f in FORMATS])
    changed = [t for t in ORDINARY if hermes.redact_secrets(t) != t]
    emit(ordinary_changed=f"{len(changed)}/{len(ORDINARY)}", texts=changed)

    files = [p for pattern in ("docs/*.md", "README.md", "kernel/**/*.py", "plugins/**/*.py",
                               "contrib/**/*.py", "contrib/**/*.md")
             for p in ROOT.glob(pattern) if "tests" not in p.parts and p.name != "redaction.py"]
    findings, size = [], 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        size += len(text)
        for match in hermes.find_secrets(text):
            start = text.rfind("\n", 0, match.start) + 1
            end = text.find("\n", match.end)
            findings.append({"rule": match.rule, "file": str(path.relative_to(ROOT)),
                             "line": text[start:end if end >= 0 else None][:160]})
    emit(false_positive_scan={"files": len(files), "kb": size // 1024, "findings": len(findings)},
         findings=findings)

    mixed = ("\n".join(f.text for f in FORMATS) + "\n" + "\n".join(ORDINARY)) * 20
    prose = (ROOT / "docs" / "memory.md").read_text(encoding="utf-8") * 5
    code = (ROOT / "kernel" / "cli.py").read_text(encoding="utf-8") * 3
    for name, text in (("secrets_and_ordinary", mixed), ("docs", prose), ("code", code)):
        redact = per_kb(hermes.redact_secrets, text)
        base = per_kb(baseline, text)
        emit(input=name, kb=len(text) // 1024, redact_ms_per_kb=redact, baseline_ms_per_kb=base,
             ratio=round(redact / base, 1) if base else None)


if __name__ == "__main__":
    main()
