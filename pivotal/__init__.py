"""Pivotal: actor–critic orchestration for LLM agents on LangGraph.

This module is the public face: what an application needs is importable from `pivotal`
itself, and what is not listed in `__all__` may move between releases. Names are imported on
first use, so `import pivotal` stays cheap (the graph, LangChain and Chroma load only when an
application touches them).

    from pivotal import Context, create_pivotal_agent, run
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES = {
    # building and running the graph
    "create_pivotal_agent": "pivotal.graphs",
    "build_graph": "pivotal.graphs",
    "run": "pivotal.graphs",
    "arun": "pivotal.graphs",
    "run_batch": "pivotal.graphs",
    "run_batch_on_ray": "pivotal.graphs",
    "resume": "pivotal.graphs",
    "aresume": "pivotal.graphs",
    "RunResult": "pivotal.graphs",
    # what a run is given
    "Context": "pivotal.core.context",
    "Task": "pivotal.core.task",
    "State": "pivotal.core.state",
    # environments: the application's tools, or its own world
    "ToolEnvironment": "pivotal.core.environments.tools",
    "register_environment": "pivotal.core.environments",
    "environment_names": "pivotal.core.environments",
    "make_environment": "pivotal.core.environments",
    "Environment": "pivotal.core.environments",
    "ActionSpec": "pivotal.core.environments",
    "StepResult": "pivotal.core.environments",
    "Restorable": "pivotal.core.environments",
    "Idempotent": "pivotal.core.environments",
    "Compensating": "pivotal.core.environments.base",
    "Oracle": "pivotal.core.environments",
    # the critic and the lessons as middleware for LangChain's create_agent
    "PivotalCritic": "pivotal.middleware",
    "PivotalMemory": "pivotal.middleware",
    # keeping secrets out of an app's own checkpointer
    "redacting": "pivotal.core.secrets",
    # models by spec string
    "make_model": "pivotal.core.models",
    # what a caller may catch
    "PivotalError": "pivotal.core.errors",
    "EnvironmentFault": "pivotal.core.errors",
    "InfrastructureFault": "pivotal.core.errors",
    "DoubleTextRejected": "pivotal.graphs.busy",
    "TurnInterrupted": "pivotal.graphs.busy",
}

__all__ = [
    "ActionSpec",
    "Compensating",
    "Context",
    "DoubleTextRejected",
    "Environment",
    "EnvironmentFault",
    "Idempotent",
    "InfrastructureFault",
    "Oracle",
    "PivotalCritic",
    "PivotalError",
    "PivotalMemory",
    "Restorable",
    "RunResult",
    "State",
    "StepResult",
    "Task",
    "ToolEnvironment",
    "TurnInterrupted",
    "__version__",
    "aresume",
    "arun",
    "build_graph",
    "create_pivotal_agent",
    "environment_names",
    "make_environment",
    "make_model",
    "redacting",
    "register_environment",
    "resume",
    "run",
    "run_batch",
    "run_batch_on_ray",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pivotal' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from pivotal.core.context import Context
    from pivotal.core.environments import (
        ActionSpec,
        Environment,
        Idempotent,
        Oracle,
        Restorable,
        StepResult,
        environment_names,
        make_environment,
        register_environment,
    )
    from pivotal.core.environments.base import Compensating
    from pivotal.core.environments.tools import ToolEnvironment
    from pivotal.core.errors import EnvironmentFault, InfrastructureFault, PivotalError
    from pivotal.core.models import make_model
    from pivotal.core.secrets import redacting
    from pivotal.core.state import State
    from pivotal.core.task import Task
    from pivotal.graphs import (
        RunResult,
        aresume,
        arun,
        build_graph,
        create_pivotal_agent,
        resume,
        run,
        run_batch,
        run_batch_on_ray,
    )
    from pivotal.graphs.busy import DoubleTextRejected, TurnInterrupted
    from pivotal.middleware import PivotalCritic, PivotalMemory
