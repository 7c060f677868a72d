"""The run API: one task on one thread, started or continued to its end or next pause (`arun`/`run`),
or a paused one answered (`aresume`/`resume`). The CLI's `run` and `resume`, batches and Ray workers all
run a task through here.

The `Context` comes in once: it is checked (graphs/checks.py), saved with the thread, and handed to
the graph, whose nodes read it from their runtime. Nothing else here reads a setting.
"""

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.types import Command

from pivotal.core.context import Context, refuse_loosening, run_context
from pivotal.core.environments.live import release
from pivotal.core.errors import PivotalError
from pivotal.core.secrets import redact_tree
from pivotal.core.task import Task
from pivotal.graphs.builder import recursion_limit
from pivotal.graphs.checkpointer import graph_over
from pivotal.graphs.checks import check_arguments, check_context, check_run, check_task
from pivotal.graphs.lease import thread_lease
from pivotal.graphs.summary import RunResult, summarise
from pivotal.graphs.threads import asks_again, in_flight_step, paused_run, refuse_another_task

Graph = Pregel[Any, Context, Any, Any]
"""A compiled graph that runs with a `Context` (`build_graph`'s, or an application's own)."""

OnUpdate = Callable[[str, dict[str, Any]], None]
"""Told each node's name and the state it wrote, as the node finishes."""


async def arun(
    task: Task | dict[str, Any] | str,
    context: Context | None = None,
    *,
    checkpointer: BaseCheckpointSaver | None = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    thread_id: str | None = None,
    plugins: Iterable[str] = (),
    on_update: OnUpdate | None = None,
    graph: Graph | None = None,
) -> RunResult:
    """Run one task to its end and summarise it. Pass `checkpointer` to share one across runs.

    `plugins` (module names that register the task's environment) are saved with the thread,
    so `pivotal resume` can import them again in another process. `on_update(node, update)` is
    called as each node finishes, with the state it changed: a live trace (`pivotal run` prints one).

    `graph`: an application's own compiled graph (`create_pivotal_agent`, `build_graph(store=...)`), run
    with its checkpointer, store and settings; `context` may then tighten its safety settings, never
    loosen them, and `checkpointer`/`checkpoint_path` are the graph's own.
    """
    check_arguments(
        context=context,
        graph=graph,
        checkpointer=checkpointer,
        checkpoint_path=checkpoint_path,
        thread_id=thread_id,
        plugins=plugins,
    )
    context = settings_for(graph, context, checkpointer, checkpoint_path)
    [parsed] = check_run([task], context)
    thread_id = thread_id or uuid.uuid4().hex
    async with graph_over(checkpointer, checkpoint_path, graph) as graph, thread_lease(graph.checkpointer, thread_id):
        return await run_on_thread(graph, parsed, context, thread_id, list(plugins), on_update)


def settings_for(
    graph: Graph | None,
    context: Context | None,
    checkpointer: BaseCheckpointSaver | None = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
) -> Context:
    """The run's Context: the caller's, else the graph's own (an application's graph was built with
    settings) or the defaults. Over an application's graph a context may tighten, never loosen, and the
    checkpoints are the graph's: both refused in one line before anything runs.
    """
    if graph is None:
        return context or Context()
    if checkpointer is not None or checkpoint_path is not None:
        raise PivotalError("a run on an application's graph keeps its checkpoints in the graph's own checkpointer; "
                           "pass graph= or checkpointer=/checkpoint_path=, not both")  # fmt: skip
    schema = graph.context_schema
    own = schema() if isinstance(schema, type) and issubclass(schema, Context) else Context()
    refuse_loosening(context, own)
    return run_context(context, own) or own


async def aresume(
    thread_id: str,
    reply: Any,
    context: Context | dict[str, Any] | None = None,
    *,
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    on_update: OnUpdate | None = None,
    graph: Graph | None = None,
) -> RunResult:
    """Continue a run paused for approval: `reply` is {"decision": "approve"|"reject", "reason": ...}.

    The run goes on with the settings it started with. `context` may repeat them (a Context,
    or a dict of the fields a caller set explicitly) but not contradict them. Everything the
    rest of the run needs is checked before the reply is written, so a failed resume leaves
    the thread exactly as it was, still waiting. `graph`: the application's graph the run paused on (`arun`).
    """
    check_arguments(
        context=None if isinstance(context, dict) else context,  # a dict: the fields a caller set, checked below
        graph=graph,
        checkpointer=checkpointer,
        checkpoint_path=checkpoint_path,
        thread_id=thread_id,
    )
    if graph is not None:  # its model objects were never saved with the thread: they come from the graph again
        own = settings_for(graph, None, checkpointer, checkpoint_path).model_objects()
        context = context if isinstance(context, Context) else {**own, **(context or {})}
    async with graph_over(checkpointer, checkpoint_path, graph) as graph, thread_lease(graph.checkpointer, thread_id):
        saved = await paused_run(graph, thread_id)  # read under the lease: a second resume waits, then finds none
        context = Context.resumed(saved.get("run_settings") or {}, context)
        check_context(context)
        check_task(saved["task"])
        return await _invoke(graph, Command(resume=reply), thread_id, context, saved.get("run_id", ""), on_update)


def resume(thread_id: str, reply: Any, context: Context | dict[str, Any] | None = None, **kwargs: Any) -> RunResult:
    """Blocking `aresume`."""
    return asyncio.run(aresume(thread_id, reply, context, **kwargs))


def run(task: Task | dict[str, Any] | str, context: Context | None = None, **kwargs: Any) -> RunResult:
    """Blocking `arun`, for scripts and the CLI."""
    return asyncio.run(arun(task, context, **kwargs))


async def run_on_thread(
    graph: Graph,
    task: Task,
    context: Context,
    thread_id: str | None,
    plugins: list[str] | None = None,
    on_update: OnUpdate | None = None,
) -> RunResult:
    """Start the task on its thread, or continue it from the thread's last checkpoint. On a finished
    thread the same task is read back, and another task opens a new turn (nodes/start.py), so a chat
    app's next message through `arun` is answered, not met with the last turn's result.
    """
    thread_id = thread_id or uuid.uuid4().hex
    thread: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    saved = await graph.aget_state(thread) if graph.checkpointer is not None else None
    # A node that finished just before a crash has its writes saved but no checkpoint after it:
    # `next` is then empty while `tasks` still holds it, so only no next *and* no tasks means done.
    # A process killed right after its first checkpoint left only its input, never applied (`next`
    # is `__start__`): nothing of the turn ran, so the task is given again as a new input.
    began = saved is not None and bool(saved.values) and tuple(saved.next) != ("__start__",)
    finished = began and saved is not None and not saved.next and not saved.tasks
    if finished and saved is not None and asks_again(task, saved.values.get("task") or {}):
        return summarise(saved.values, context, thread_id, 0.0, time.time())  # finished before a crash: never re-run
    if began and saved is not None and not finished:
        refuse_another_task(saved, task, thread_id)
        Context.resumed(saved.values.get("run_settings") or {}, context)
        in_flight = in_flight_step(saved, task)
        result = await _invoke(graph, None, thread_id, context, saved.values.get("run_id", ""), on_update, task.id)
        return result.model_copy(update={"at_least_once": in_flight})
    run_id = uuid.uuid4().hex
    start = {
        "task": redact_tree(task.model_dump()),
        "run_id": run_id,
        "run_settings": context.saved(),
        "plugins": plugins or [],
    }
    return await _invoke(graph, start, thread_id, context, run_id, on_update, task.id)


async def _invoke(
    graph: Graph,
    run_input: Any,
    thread_id: str,
    context: Context,
    run_id: str,
    on_update: OnUpdate | None = None,
    task_id: str = "",
) -> RunResult:
    """Run (or continue) the graph to its end or next pause, telling `on_update` each node's writes as
    it finishes, then release the live environment and summarise the last values (and the pause, if any).
    The node ceiling is one the Context bounds can never reach (builder.py `recursion_limit`).
    """
    metadata = {"pivotal_task": task_id} if task_id else {}
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": recursion_limit(context),
        "metadata": metadata,
    }
    started, started_at = time.perf_counter(), time.time()
    final: dict[str, Any] = {}
    paused = None
    chunk: Any  # a (mode, chunk) pair per part, as `stream_mode` is a list
    # "sync": each step's checkpoint is on disk before the next step starts, so a killed process
    # resumes after the last executed action, not before it. An application's graph built with no
    # checkpointer has nothing to write, and LangGraph fails on "sync" there after the first node.
    durable: dict[str, Any] = {"durability": "sync"} if graph.checkpointer is not None else {}
    try:
        async for mode, chunk in graph.astream(
            run_input, config=config, context=context, stream_mode=["updates", "values"], **durable
        ):
            if mode == "values":
                final = dict(chunk)
                continue
            for node, update in chunk.items():
                if node == "__interrupt__":
                    paused = update
                elif on_update is not None:
                    on_update(node, update or {})
    finally:
        release(run_id)
    final = {**final, "__interrupt__": paused} if paused else final
    return summarise(final, context, thread_id, time.perf_counter() - started, started_at)
