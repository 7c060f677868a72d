"""memory/ reads as three rooms (lesson, policy, storage) with no module cycle among its modules.

Imports are read from the source (every `import` anywhere in a module: at the top, inside a
function, under TYPE_CHECKING), as `pivotal.memory.*` names, the way the wheel installs them; the
layers between the rooms are the import-linter contract in pyproject.toml (tests/test_layers.py).
"""

import ast
from graphlib import CycleError, TopologicalSorter
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


def test_the_check_finds_a_cycle_made_of_imports_inside_functions(tmp_path):
    """The cycle memory/ had before its rooms: ledger.py and langgraph_store.py imported each other, each
    inside a function, so importing either worked and only a reading of every import finds it.
    """
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "ledger.py").write_text("def read():\n    from pivotal.memory.langgraph_store import _all\n")
    (tmp_path / "langgraph_store.py").write_text("def open():\n    from pivotal.memory.ledger import StoreLedger\n")
    (tmp_path / "lesson.py").write_text("from pivotal.memory import ledger\n")
    assert set(cycle(tmp_path)) == {"pivotal.memory.ledger", "pivotal.memory.langgraph_store"}


def test_every_module_of_memory_is_in_a_room():
    """lesson/ (the record, its screen, its ledger), storage/ (where it is kept), policy/ (what is kept)."""
    loose = [path.name for path in MEMORY.glob("*.py") if path.name != "__init__.py"]
    rooms = {path.name for path in MEMORY.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert loose == [] and rooms == ROOMS
