"""The built wheel, installed into a fresh virtualenv beside an application whose own modules are
called `memory`, `prompts`, `nodes` and `graphs`, runs that application's task.

The fresh venv takes Pivotal from the wheel and only its dependencies from the test's venv (a
`.pth` line, so nothing is downloaded); the editable install's import hook is not among them.
"""

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

APP = Path(__file__).parent / "app_with_clashing_names"


def _fresh_venv(folder: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return python


@pytest.mark.slow
def test_an_app_with_clashing_module_names_runs_a_task_from_the_installed_wheel(wheel, tmp_path):
    python = _fresh_venv(tmp_path / "venv", wheel)
    app = shutil.copytree(APP, tmp_path / "app")
    ledger = tmp_path / "ledger.jsonl"
    env = {**os.environ, "APP_LEDGER": str(ledger), "PIVOTAL_CHECKPOINT_PATH": str(tmp_path / "cp.sqlite")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([python, "app.py"], cwd=app, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pivotal"].startswith(str(tmp_path / "venv")), report["pivotal"]  # the wheel, not the checkout
    assert report["status"] == "success"
    refunds = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert len(refunds) == 1  # counted from the world's side: once
    assert report["notes"] == [f"refunded {refunds[0]['order_id']}"]  # the app's own memory module, via its tool
    assert report["agent"] == "PivotalGraph"  # the app built its agent through the face too
