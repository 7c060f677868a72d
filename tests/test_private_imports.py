"""LangGraph's private modules that Pivotal imports, each pinned with the reason it is needed.

Pivotal uses LangGraph's public API everywhere else. A private name can move in any release: this
test fails on the upgrade that moves it (or on a new private import nobody pinned), rather than
the graph failing at import time in a user's app.
"""

import ast
import inspect
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PINNED = {
    ("langgraph._internal._constants", "CONFIG_KEY_TASK_ID"): (
        "graphs/builder.py `_as_node`: LangGraph's own test for a nested run (`is_nested` in "
        "langgraph/pregel/_loop.py) is the parent's task id in the config; no public name says a graph "
        "runs as a node of a parent graph"
    ),
    ("langgraph._internal._runnable", "RunnableCallable"): (
        "graphs/builder.py `_logged` / `_routed`: one node or route with a sync and an async twin that "
        "LangGraph injects `runtime` into, untraced (trace=False); `add_node` builds the same object from "
        "a plain function but takes only one of the two, and RunnableLambda neither injects the runtime "
        "nor skips the trace"
    ),
}


def _private_imports() -> set[tuple[str, str]]:
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    found = set()
    for path in (path for folder in folders for path in (ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("langgraph")
                and "._" in f".{node.module}"
            ):
                found |= {(node.module, alias.name) for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {
                    (alias.name, "*")
                    for alias in node.names
                    if alias.name.startswith("langgraph") and "._" in alias.name
                }
    return found


def test_every_private_langgraph_import_is_pinned_with_its_reason():
    assert _private_imports() == set(PINNED), "a private LangGraph import was added or removed: pin it here with why"


@pytest.mark.parametrize("module, name", sorted(PINNED))
def test_each_pinned_name_still_exists(module, name):
    value = getattr(__import__(module, fromlist=[name]), name)
    assert value is not None


def test_the_task_id_key_is_what_a_parent_graph_passes_its_node():
    """The key `_as_node` reads is the one LangGraph sets for a node's task."""
    from langgraph._internal._constants import CONFIG_KEY_TASK_ID
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class S(TypedDict):
        seen: bool

    def node(state: S, config) -> dict:
        return {"seen": CONFIG_KEY_TASK_ID in config["configurable"]}

    graph = StateGraph(S).add_node("n", node).add_edge(START, "n").compile()
    assert graph.invoke({"seen": False})["seen"] is True


def test_the_runnable_takes_a_sync_and_an_async_twin_and_no_trace():
    from langgraph._internal._runnable import RunnableCallable

    parameters = inspect.signature(RunnableCallable).parameters
    assert {"func", "afunc", "name", "trace"} <= set(parameters)
