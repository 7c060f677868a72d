"""The Pivotal graph and the helpers that run it.

`graph` is what `langgraph.json` serves to LangGraph Studio / `langgraph dev`; the platform
supplies its own checkpointer there. `run`, `arun` and `run_batch` add a checkpointer (SQLite,
or Postgres for a `postgresql://` URL) and a summary for applications and the CLI; `run_batch_on_ray`
spreads a batch over Ray workers.
"""

from pivotal.graphs.agent import create_pivotal_agent
from pivotal.graphs.batch import run_batch
from pivotal.graphs.builder import build_graph
from pivotal.graphs.outcome import Result, result
from pivotal.graphs.ray_batch import run_batch_on_ray
from pivotal.graphs.runner import aresume, arun, resume, run
from pivotal.graphs.summary import RunResult


def __getattr__(name: str):
    """`graph` is compiled on first use, so importing `pivotal.graphs` (the CLI, the bench) compiles nothing."""
    if name == "graph":
        globals()["graph"] = build_graph()
        return globals()["graph"]
    raise AttributeError(f"module 'pivotal.graphs' has no attribute {name!r}")


__all__ = [
    "Result",
    "RunResult",
    "aresume",
    "arun",
    "build_graph",
    "create_pivotal_agent",
    "graph",
    "result",
    "resume",
    "run",
    "run_batch",
    "run_batch_on_ray",
]
