"""One code style: the tree is `ruff format`-clean and passes `ruff check` (rules in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).parent / "ruff"


@pytest.mark.parametrize("command", [["format", "--check", "."], ["check", "."]], ids=["format", "lint"])
def test_the_tree_keeps_one_code_style(command):
    done = subprocess.run([RUFF, *command], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (
        f"run `ruff {' '.join(command)}` (with --fix / without --check):\n{done.stdout[-3000:]}"
    )
