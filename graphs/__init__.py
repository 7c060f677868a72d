"""The Pivotal graph and the helpers that run it.

`graph` is what `langgraph.json` serves to LangGraph Studio / `langgraph dev`; the platform
supplies its own checkpointer there. `run`, `arun` and `run_batch` add a SQLite checkpointer
and a summary for applications and the CLI.
"""

from graphs.builder import build_graph
from graphs.runner import RunResult, aresume, arun, resume, run, run_batch

graph = build_graph()

__all__ = ["RunResult", "aresume", "arun", "build_graph", "graph", "resume", "run", "run_batch"]
