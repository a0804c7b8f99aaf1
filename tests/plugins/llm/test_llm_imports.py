"""Importing the LLM plugins (and building their clients) never imports an SDK."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys, tempfile
import hermes.plugins.llm
import hermes.plugins.llm.anthropic_plugin
import hermes.plugins.llm.openai_plugin
import hermes.plugins.llm.common
import hermes.plugins.llm.caching
import hermes
before = sorted(m for m in ("anthropic", "openai") if m in sys.modules)
kernel = hermes.Kernel(home=tempfile.mkdtemp(), autoload=False, check_selection=False)
names = kernel.registries.llm_clients.names()
kernel.llm_client("anthropic"); kernel.llm_client("openai")  # factories stay lazy too
after = sorted(m for m in ("anthropic", "openai") if m in sys.modules)
print(json.dumps({"before": before, "after": after, "names": sorted(names)}))
"""


def test_plugin_modules_do_not_import_the_sdks():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["before"] == [] and result["after"] == []
    assert {"anthropic", "openai"} <= set(result["names"])
