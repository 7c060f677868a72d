"""Folders are layers: the import-linter contract in pyproject.toml holds, and it names every module."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_import_goes_back_up_a_layer():
    done = subprocess.run(
        [Path(sys.executable).parent / "lint-imports", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_every_part_of_pivotal_has_its_layer():
    """A new module in pivotal/ must be placed: ground, or the command-line and bench wing."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = {
        module.strip()
        for contract in config["contracts"]
        for layer in contract["layers"]
        for module in layer.replace("|", ":").split(":")
    }
    parts = {
        f"pivotal.{path.stem}"
        for path in (ROOT / "pivotal").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()
    }
    assert parts <= named, sorted(parts - named)
