"""memory/ reads as three rooms (lesson, policy, storage) with no module cycle among its modules.

Imports are read from the source (every `import` anywhere in a module: at the top, inside a
function, under TYPE_CHECKING), as `pivotal.memory.*` names, the way the wheel installs them; the
layers between the rooms are the import-linter contract in pyproject.toml (tests/test_layers.py).
"""

import ast
import subprocess
import tarfile
from graphlib import CycleError, TopologicalSorter
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMORY = ROOT / "memory"
ROOMS = {"lesson", "policy", "storage"}


def _modules(folder: Path) -> dict[str, Path]:
    """Each module's installed name: memory/policy/store.py is pivotal.memory.policy.store."""
    found = {}
    for path in folder.rglob("*.py"):
        parts = ("pivotal", "memory", *path.relative_to(folder).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's own modules that `name` imports, at any depth of its code."""
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package this module is in
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            imported |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names}
    return {module for module in imported if module in modules and module != name}


def cycle(folder: Path) -> list[str]:
    """One module cycle among the modules under `folder`, or [] when there is none."""
    modules = _modules(folder)
    graph = {name: _imports(path, name, set(modules)) for name, path in modules.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as found:
        return list(found.args[1])
    return []


def test_memory_has_no_module_cycle():
    assert cycle(MEMORY) == []


def test_the_check_finds_the_cycle_memory_had(tmp_path):
    """Before the storage seam, memory/ledger.py and memory/langgraph_store.py imported each other."""
    before = "73cd543"
    archive = subprocess.run(["git", "archive", before, "memory"], cwd=ROOT, capture_output=True, check=False)
    if archive.returncode != 0:  # a copy without the history (an sdist): nothing to compare with
        return
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp_path, filter="data")
    found = cycle(tmp_path / "memory")
    assert {"pivotal.memory.ledger", "pivotal.memory.langgraph_store"} <= set(found), found


def test_every_module_of_memory_is_in_a_room():
    """lesson/ (the record, its screen, its ledger), storage/ (where it is kept), policy/ (what is kept)."""
    loose = [path.name for path in MEMORY.glob("*.py") if path.name != "__init__.py"]
    rooms = {path.name for path in MEMORY.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert loose == [] and rooms == ROOMS
