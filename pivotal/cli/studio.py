"""`pivotal studio`: check langgraph.json, then serve the graph to LangGraph Studio offline-safely."""

import argparse
import importlib.util
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from pivotal.cli.options import Commands
from pivotal.core.errors import PivotalError

QUIET = {"LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}


def add_commands(commands: Commands) -> None:
    studio = commands.add_parser("studio", help="check langgraph.json and start `langgraph dev` for Studio")
    studio.add_argument("--config", default="langgraph.json", help="LangGraph config (default langgraph.json)")
    studio.add_argument("--port", type=int, default=0, help="port (default: 2024 if free, else a free one)")
    studio.add_argument("--check", action="store_true", help="only check that every graph in the config loads")
    studio.set_defaults(handler=_studio)


def _studio(args: argparse.Namespace) -> int:
    config = Path(args.config)
    for name, target in check_config(config).items():
        print(f"graph {name!r}: {target} loads", file=sys.stderr)
    if args.check:
        return 0
    langgraph = shutil.which("langgraph") or str(Path(sys.executable).parent / "langgraph")
    if not Path(langgraph).exists():
        raise PivotalError("the `langgraph` CLI is not installed; install the dev extra: pip install -e '.[dev]'")
    port = args.port or _port()
    print(f"Studio: https://smith.langchain.com/studio/?baseUrl=http://127.0.0.1:{port}", file=sys.stderr)
    os.chdir(config.parent.resolve())
    os.execve(
        langgraph,
        [
            langgraph,
            "dev",
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--config",
            config.name,
        ],
        {**os.environ, **QUIET},
    )
    return 0  # not reached


def check_config(config: Path) -> dict[str, str]:
    """Every graph the config names, loaded: a wrong path or name is one line, not a server traceback."""
    if not config.is_file():
        raise PivotalError(f"{config} does not exist; run from the project folder or pass --config")
    try:
        graphs = json.loads(config.read_text(encoding="utf-8"))["graphs"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PivotalError(f'{config} is not a LangGraph config with a "graphs" map ({exc})') from None
    for name, target in graphs.items():
        _load(config, name, target)
    return graphs


def _load(config: Path, name: str, target: str) -> None:
    source, _, attribute = str(target).rpartition(":")
    if "/" in source:  # a file, as the server reads it; otherwise a module path like pivotal.graphs.studio
        module, where = _load_file(config, name, target, source, attribute), source
    else:
        module, where = _load_module(config, name, target, source, attribute), source
    graph = getattr(module, attribute, None)
    if graph is None or not hasattr(graph, "get_graph"):
        raise PivotalError(f"{config}: graph {name!r}: {where} has no compiled graph named {attribute!r}")


def _load_file(config: Path, name: str, target: str, source: str, attribute: str) -> Any:
    path = (config.parent / source).resolve()
    if not path.is_file() or not attribute:
        raise PivotalError(
            f"{config}: graph {name!r} points at {target!r}, but {path} does not exist "
            "or no :attribute is given; expected e.g. ./graphs/studio.py:graph or pivotal.graphs.studio:graph"
        )
    _search_config_folder(config)
    spec = importlib.util.spec_from_file_location(f"_studio_{name}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 — say which graph failed and why, in one line
        raise PivotalError(f"{config}: graph {name!r}: importing {path} failed: {type(exc).__name__}: {exc}") from None
    return module


def _load_module(config: Path, name: str, target: str, source: str, attribute: str) -> Any:
    if not source or not attribute:
        raise PivotalError(
            f"{config}: graph {name!r} points at {target!r}; expected e.g. ./graphs/studio.py:graph "
            "or pivotal.graphs.studio:graph"
        )
    _search_config_folder(config)
    try:
        return importlib.import_module(source)
    except Exception as exc:  # noqa: BLE001 — say which graph failed and why, in one line
        raise PivotalError(
            f"{config}: graph {name!r}: importing {source} failed: {type(exc).__name__}: {exc}"
        ) from None


def _search_config_folder(config: Path) -> None:
    """The server imports from the config's folder; so does the check."""
    root = str(config.parent.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)


def _port(preferred: int = 2024) -> int:
    """Studio's default port when free; `langgraph dev` would otherwise move silently."""
    for port in (preferred, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                return probe.getsockname()[1]
            except OSError:
                continue
    raise PivotalError("no free port on 127.0.0.1")
