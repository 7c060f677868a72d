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
    # any face's output as one typed result
    "result": "pivotal.graphs",
    "Result": "pivotal.graphs",
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
    "fork_preview": "pivotal.core.environments.preview",
    "afork_preview": "pivotal.core.environments.preview",
    "ForkPreview": "pivotal.core.environments.preview",
    "critic_report": "pivotal.core.environments.critic_report",
    "acritic_report": "pivotal.core.environments.critic_report",
    "CriticReport": "pivotal.core.environments.critic_report",
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

__all__ = sorted([*_HOMES, "__version__"])
"""Derived from `_HOMES`, the one list of public names. The `TYPE_CHECKING` imports below repeat them
for type checkers only (`X as X` is how a stub re-exports a name); tests/test_face.py holds the two in step."""


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
    from pivotal.core.context import Context as Context
    from pivotal.core.environments import (
        ActionSpec as ActionSpec,
        Environment as Environment,
        Idempotent as Idempotent,
        Oracle as Oracle,
        Restorable as Restorable,
        StepResult as StepResult,
        environment_names as environment_names,
        make_environment as make_environment,
        register_environment as register_environment,
    )
    from pivotal.core.environments.base import Compensating as Compensating
    from pivotal.core.environments.critic_report import (
        CriticReport as CriticReport,
        acritic_report as acritic_report,
        critic_report as critic_report,
    )
    from pivotal.core.environments.preview import (
        ForkPreview as ForkPreview,
        afork_preview as afork_preview,
        fork_preview as fork_preview,
    )
    from pivotal.core.environments.tools import ToolEnvironment as ToolEnvironment
    from pivotal.core.errors import (
        EnvironmentFault as EnvironmentFault,
        InfrastructureFault as InfrastructureFault,
        PivotalError as PivotalError,
    )
    from pivotal.core.models import make_model as make_model
    from pivotal.core.secrets import redacting as redacting
    from pivotal.core.state import State as State
    from pivotal.core.task import Task as Task
    from pivotal.graphs import (
        Result as Result,
        RunResult as RunResult,
        aresume as aresume,
        arun as arun,
        build_graph as build_graph,
        create_pivotal_agent as create_pivotal_agent,
        result as result,
        resume as resume,
        run as run,
        run_batch as run_batch,
        run_batch_on_ray as run_batch_on_ray,
    )
    from pivotal.graphs.busy import DoubleTextRejected as DoubleTextRejected, TurnInterrupted as TurnInterrupted
    from pivotal.middleware import PivotalCritic as PivotalCritic, PivotalMemory as PivotalMemory
