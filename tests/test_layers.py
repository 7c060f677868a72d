"""Folders are layers: the import-linter contract in pyproject.toml holds, and it names every module."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GROUND = ROOT / "core"


@pytest.mark.slow
def test_no_import_goes_back_up_a_layer(unpacked):
    done = subprocess.run(
        [Path(sys.executable).parent / "lint-imports", "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=unpacked,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout


def _named_layers() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {
        module.strip()
        for contract in config["contracts"]
        for layer in contract["layers"]
        for module in layer.replace("|", ":").split(":")
    }


def _parts(folder: Path, package: str) -> set[str]:
    return {
        f"{package}.{path.stem}"
        for path in folder.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()
    }


def test_every_part_of_the_ground_and_the_roof_has_its_layer():
    """A new module in core/ or pivotal/ must be placed: somewhere in the ground's order, or the roof."""
    parts = _parts(GROUND, "pivotal.core") | _parts(ROOT / "pivotal", "pivotal")
    assert parts <= _named_layers(), sorted(parts - _named_layers())


def test_the_wheel_installs_one_top_level_name(wheel, unpacked):
    """An application's own `memory.py`, `prompts/` or `graphs.py` never meets ours."""
    top = {path.name for path in unpacked.iterdir() if not path.name.endswith(".dist-info")}
    assert top == {"pivotal"}
    assert {"graphs", "nodes", "memory", "prompts", "core", "py.typed"} <= {
        p.name for p in (unpacked / "pivotal").iterdir()
    }
    assert (unpacked / "pivotal" / "prompts" / "actor.md").exists()
