"""Type-check kernel/ and plugins/ as the package ``hermes`` with mypy.

The import package ``hermes`` lives in kernel/ and ``hermes.plugins`` in plugins/ (a
package-dir mapping mypy cannot follow, and the editable install is an import hook mypy
does not run), so this links both into a temporary tree shaped like the installed package
and runs ``mypy -p hermes`` there with the ``[tool.mypy]`` settings of pyproject.toml.
Errors are reported with kernel/ and plugins/ paths. Exit status is mypy's.

    python tests/typecheck.py [extra mypy arguments]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="hermes-mypy-") as tmp:
        package = Path(tmp) / "hermes"
        package.mkdir()
        for entry in (ROOT / "kernel").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        (package / "plugins").symlink_to(ROOT / "plugins")
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
             "--cache-dir", os.devnull if os.name != "nt" else "nul", "-p", "hermes", *sys.argv[1:]],
            cwd=tmp, capture_output=True, text=True)
    out = done.stdout.replace("hermes/plugins/", "plugins/")
    out = "\n".join(line if not line.startswith("hermes/") else "kernel/" + line[len("hermes/"):]
                    for line in out.splitlines())
    print(out)
    if done.stderr:
        print(done.stderr, file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
