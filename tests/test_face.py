"""The public face: what an application needs is importable from `pivotal`, and importing it is cheap."""

import runpy
import subprocess
import sys

import pytest

import pivotal


def test_every_public_name_resolves_and_dir_lists_them():
    for name in pivotal.__all__:
        assert getattr(pivotal, name) is not None, name
    assert set(pivotal.__all__) == set(pivotal._HOMES) | {"__version__"}
    assert dir(pivotal) == pivotal.__all__


def test_an_unknown_name_is_an_attribute_error():
    try:
        pivotal.graph_builder  # noqa: B018
    except AttributeError as error:
        assert "graph_builder" in str(error)
    else:
        raise AssertionError("no AttributeError")


def test_import_pivotal_loads_neither_langgraph_nor_chroma():
    code = (
        "import sys, pivotal; print(sorted(m for m in ('langgraph', 'langchain_core', 'chromadb') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_python_dash_m_pivotal_cli_runs_the_same_command_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pivotal", "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("pivotal.cli", run_name="__main__")
    assert exited.value.code == 0 and "usage:" in capsys.readouterr().out


def test_the_type_checkers_imports_name_each_public_name_from_its_home():
    """`_HOMES` is the one list; the `TYPE_CHECKING` block must import the same names from the same homes."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(pivotal))
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    )
    imported = {
        alias.name: node.module for node in ast.walk(block) if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert imported == pivotal._HOMES
