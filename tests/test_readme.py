"""Every Python snippet in the README runs as written: in order, in one fresh interpreter, offline.

Hosted models are the real `openai`/`anthropic` SDKs pointed at the loopback provider (their base-URL
variables, as a user would set them); the default model is `sim`, so nothing waits on the embedded one.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from pivotal.testing.loopback_provider import loopback

ROOT = Path(__file__).resolve().parents[1]


def snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", (ROOT / "README.md").read_text(), re.MULTILINE | re.DOTALL)


def test_the_readme_python_snippets_run_as_written(tmp_path):
    blocks = snippets()
    assert len(blocks) >= 5
    program = "\n\n".join(blocks)
    with loopback() as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "readme", "ANTHROPIC_API_KEY": "readme",
               "OPENAI_BASE_URL": server.base_url_openai, "ANTHROPIC_BASE_URL": server.base_url_anthropic,
               "PIVOTAL_MODEL": "sim", "PIVOTAL_STORE_PATH": str(tmp_path / "lessons"),
               "PIVOTAL_CHECKPOINT_PATH": str(tmp_path / "checkpoints.sqlite"),
               "SUPPORT_LEDGER": str(tmp_path / "ledger.jsonl")}  # fmt: skip
        done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert {"Proposal", "Verdict"} <= {r.schema_name for r in server.requests}  # the hosted-model snippets ran
