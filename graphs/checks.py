"""What a run is checked for before its first node starts: context, model specs and keys, the store,
the task and its environment, and whether the retries it asks for can rewind that environment.

A bad flag costs one clear line, not a half-finished run. A batch checks its shared context once and
each task on its own line, so one bad task never stops the others.
"""

import os
import warnings
from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from pivotal.core.context import Context
from pivotal.core.environments import make_environment
from pivotal.core.environments.base import (
    RewindWarning,
    check_approvals,
    check_names,
    check_params,
    rewind_notice as notice_for,
)
from pivotal.core.errors import PivotalError, shown
from pivotal.core.models.reachability import check_models
from pivotal.core.task import Task, parse_task
from pivotal.memory.policy.registry import check_memory

ARGUMENTS: dict[str, tuple[Any, str]] = {
    "context": (Context, "a Context, e.g. Context(model='sim', max_steps=20)"),
    "graph": (Pregel, "a compiled graph (create_pivotal_agent(...), build_graph(...))"),
    "checkpointer": (BaseCheckpointSaver, "a LangGraph checkpointer (InMemorySaver(), AsyncSqliteSaver, ...)"),
    "checkpoint_path": (str | os.PathLike, "a SQLite file's path, a postgresql:// URL or ':memory:'"),
    "thread_id": (str, "a str"),
    "plugins": (Iterable, "a list of module names, e.g. ['my_envs']"),
}
"""What each argument of the run API (`run`, `arun`, `resume`, `run_batch`) takes, as its message says it."""


def check_arguments(**given: object) -> None:
    """The run API's arguments are of the kinds they take, each refused in one line naming it: the
    wrong kind was met later by an AttributeError from deep inside (`run("hi", "sim")` said that a
    str has no `default_env`). None is each one's default.
    """
    for name, value in given.items():
        kind, takes = ARGUMENTS[name]
        letters = name == "plugins" and isinstance(value, str | bytes)  # one name, read as its letters
        if value is not None and (letters or not isinstance(value, kind)):
            raise PivotalError(f"{name} must be {takes}, not {shown(value)}{_hint(name, value)}")


def _hint(name: str, value: object) -> str:
    """The likely meaning of a str where a Context goes: a model spec given as the second argument."""
    return f"; a model spec goes in Context(model={value!r})" if name == "context" and isinstance(value, str) else ""


def check_run(tasks: Iterable[Task | dict[str, Any] | str], context: Context) -> list[Task]:
    """A run's (or a batch's) tasks, parsed, once its context and each task passed: the whole run is
    refused before any task starts, wherever it runs. A retry that cannot rewind is a `RewindWarning`.
    """
    parsed = [check_task(task, context.default_env) for task in tasks]
    warn_rewinds(parsed, context)  # told first: a run refused for its models still hears it cannot rewind
    check_safety_names(parsed, context)
    check_context(context)
    return parsed


def check_safety_names(tasks: list[Task], context: Context) -> None:
    """`require_approval_for` and `observe_only` name actions of the run's environments: a misspelt
    name would let the real action run unasked. A batch may span environments, so a name need be an
    action of one of its tasks' environments only (the graph itself checks its own `default_env`).
    """
    if not tasks:
        return
    envs = dict.fromkeys(task.env for task in tasks)
    specs = [spec for env in envs for spec in make_environment(env).describe_actions()]
    actions = [spec.name for spec in specs]
    irreversible = [spec.name for spec in specs if spec.irreversible]
    check_approvals(context.require_approval_for, actions, what="action", irreversible=irreversible)
    check_names("observe_only", [name for name in context.observed_actions() if name != "*"], actions, what="action")


def check_context(context: Context) -> None:
    """Model specs, keys, endpoints, the store and its embedding model: shared by every task of a
    batch, so checked once.
    """
    check_models(context)
    if context.memory:
        # a LangGraph store is the app's to open; the embedding model is needed either way
        check_memory(context)


def check_task(task: Task | dict[str, Any] | str | None, default_env: str = "") -> Task:
    """The task parsed, and its environment built once, so an unknown name or bad parameter fails here."""
    parsed = parse_task(task, default_env)
    check_params(make_environment(parsed.env), parsed)
    return parsed


def rewind_notice(task: Task | dict[str, Any] | str, context: Context) -> str:
    """The line a run starts with when its environment cannot go back and a retry was asked for ("" else)."""
    parsed = parse_task(task, context.default_env)
    return notice_for(make_environment(parsed.env), parsed.env, context.retry, context.max_pivot_retries)


def rewind_notices(tasks: list[Task], context: Context) -> list[str]:
    """The rewind notice once per environment of these tasks that cannot go back."""
    found = (notice_for(make_environment(name), name, context.retry, context.max_pivot_retries)
             for name in dict.fromkeys(task.env for task in tasks))  # fmt: skip
    return [notice for notice in found if notice]


def warn_rewinds(tasks: list[Task], context: Context) -> None:
    """The notices as `RewindWarning`s: a script asked for a retry its environment cannot give (the
    CLI shows them as lines of its own: in the live trace, or above a batch's summary).
    """
    for notice in rewind_notices(tasks, context):
        warnings.warn(notice, RewindWarning, stacklevel=4)
