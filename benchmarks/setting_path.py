"""Follow one command-line setting from `pivotal run` to the first node that gets it (issue 40, item 2).

Runs `pivotal run ... --max-pivot-retries 1` in this process under a profiler and keeps every call of
Pivotal's own code that is handed the setting: the parsed flags (`argparse.Namespace`), a `Context`,
a LangGraph `Runtime` whose context is one, or a dict of saved settings, each holding the value given.
The path ends at the first call into `nodes/` (where the setting reaches the nodes).

The calls, in order, are grouped into stays: consecutive calls in one module. Printed: the stays, the
modules passed, how often the path enters `graphs/runner.py` (stays there) and how many of its functions
it calls, climbs (a stay in a higher folder layer
than the one before it: cli > middleware > graphs > nodes > memory/prompts > core) and returns (a stay
in a module the path already left). Counts, not times, so one run on a busy machine is enough.

    .venv/bin/python benchmarks/setting_path.py [--show]
"""

import argparse
import ast
import atexit
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["pivotal", "middleware", "graphs", "nodes", "memory", "prompts", "core"]
"""Folders from the top layer down (pyproject's import-linter contract); `pivotal/` holds cli, bench, testing."""
RANK = {"pivotal": 0, "middleware": 1, "graphs": 2, "nodes": 3, "memory": 4, "prompts": 4, "core": 5}
VALUE = 1
"""--max-pivot-retries 1: the default is 2, so any object holding 1 came from the command line."""


def carries(value: Any) -> bool:
    from langgraph.runtime import Runtime

    from pivotal.core.context import Context

    if isinstance(value, Runtime):
        value = value.context
    if isinstance(value, Context | argparse.Namespace):
        return getattr(value, "max_pivot_retries", None) == VALUE
    if isinstance(value, dict):
        return value.get("max_pivot_retries") == VALUE
    return False


def follow(argv: list[str]) -> list[tuple[str, str]]:
    """(module, function) of each call of our code handed the setting, up to the first node."""
    from pivotal.cli.main import main

    path: list[tuple[str, str]] = []
    done = threading.Event()
    started: set[Any] = set()  # frames already counted: a coroutine that resumes is not a new call

    def profile(frame, event, arg):  # noqa: ANN001 — sys.setprofile's signature
        if event != "call" or done.is_set() or frame in started:
            return
        code = frame.f_code
        file = Path(code.co_filename)
        if not file.is_relative_to(ROOT) or ".venv" in file.parts or file.parts[len(ROOT.parts)] == "benchmarks":
            return
        arguments = [frame.f_locals.get(name) for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
        if not any(carries(value) for value in arguments):
            return
        started.add(frame)
        module = file.relative_to(ROOT).as_posix()
        path.append((module, code.co_qualname))
        if module.startswith("nodes/"):
            done.set()

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        main(argv)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return path


def stays(path: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    grouped: list[tuple[str, list[str]]] = []
    for module, function in path:
        if grouped and grouped[-1][0] == module:
            grouped[-1][1].append(function)
        else:
            grouped.append((module, [function]))
    return grouped


def layer(module: str) -> int:
    return RANK[module.split("/")[0]]


def runner_shape() -> dict[str, int]:
    """Lines and top-level definitions (functions and classes) of graphs/runner.py."""
    source = (ROOT / "graphs" / "runner.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    defined = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    return {"lines": len(source.splitlines()), "definitions": len(defined)}


def measure(show: bool = False) -> dict[str, int]:
    home = tempfile.mkdtemp(prefix="setting-path-")
    atexit.register(shutil.rmtree, home, True)  # registered first, so it runs after the store's own flush at exit
    argv = ["run", "--model", "sim", "--max-pivot-retries", str(VALUE), "--checkpoints", ":memory:"]
    path = follow([*argv, "--store", f"{home}/store"])  # as a person runs it: the live trace on
    grouped = stays(path)
    seen: set[str] = set()
    returns = climbs = 0
    for index, (module, functions) in enumerate(grouped):
        returns += module in seen
        climbs += index > 0 and layer(module) < layer(grouped[index - 1][0])
        seen.add(module)
        if show:
            print(f"  {module}: {', '.join(functions)}", file=sys.stderr)
    return {
        "calls": len(path),
        "stays": len(grouped),
        "modules": len(seen),
        "runner_entries": sum(module == "graphs/runner.py" for module, _ in grouped),
        "runner_calls": sum(module == "graphs/runner.py" for module, _ in path),
        "climbs": climbs,
        "returns": returns,
        "reached": grouped[-1][0] if grouped else "",
        **{f"runner_{k}": v for k, v in runner_shape().items()},
    }


if __name__ == "__main__":
    import contextlib
    import io
    import json

    show = "--show" in sys.argv
    with contextlib.redirect_stdout(io.StringIO()):
        found = measure(show)
    print(json.dumps(found))
