"""Many tasks over one checkpointer (`run_batch`), each on its own thread under its lease; a Ray
worker runs its share of a batch through the same `run_leased`.

A task's failure is its result, never the batch's; only a fault of the storage every task shares
(`InfrastructureFault`) stops the batch, which then resumes from its checkpoints.
"""

import asyncio
import inspect
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from pivotal.core.context import Context
from pivotal.core.errors import InfrastructureFault, PivotalError, infrastructure_fault
from pivotal.core.task import Task
from pivotal.graphs.checkpointer import graph_over
from pivotal.graphs.checks import check_arguments, check_run
from pivotal.graphs.lease import Busy, ThreadBusy, thread_lease
from pivotal.graphs.runner import Graph, run_on_thread, settings_for
from pivotal.graphs.summary import ENDED, RunResult
from pivotal.memory.policy.registry import opened_lesson_store
from pivotal.memory.policy.store import ExperienceStore


async def run_batch(
    tasks: Iterable[Task | dict[str, Any] | str],
    context: Context | None = None,
    *,
    concurrency: int = 4,
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    thread_prefix: str | None = None,
    on_result: Callable[[int, RunResult], Any] | None = None,
    thread_keys: list[str] | None = None,
    plugins: Iterable[str] = (),
    busy: Busy = "skip",
    on_start: Callable[[int], Any] | None = None,
    graph: Graph | None = None,
) -> list[RunResult]:
    """Run many tasks, at most `concurrency` at once, over one checkpointer; results keep input order.

    Task i runs on LangGraph thread `{thread_prefix}:{thread_keys[i]}` (default key: i). Give the
    same prefix and checkpoints again after a crash and finished tasks are read back from their
    checkpoints, unfinished ones continue from their last one. A task that raises becomes a result with status "error";
    the others go on. `on_result(i, result)` (sync or async) is called as each task finishes.
    Pass `checkpointer` (any LangGraph saver, left open) to use the application's own instead of
    opening `checkpoint_path`.

    Each task holds its thread's lease (graphs/lease.py) from before it reads the thread until its
    `on_result` has returned. A thread another process owns, or finished and reported, is left to
    it: its result has status "skipped" (`busy="skip"`), or the task waits for it (`busy="wait"`).
    `on_start(i)` is called once task i's first checkpoint is written in this call, before any of
    its nodes runs (with the SQLite and Postgres savers, which hold leases). `graph`: an application's
    own compiled graph, as for `arun`.
    """
    if concurrency <= 0:
        raise PivotalError(f"concurrency must be > 0 (got {concurrency})")
    check_arguments(
        context=context, graph=graph, checkpointer=checkpointer, checkpoint_path=checkpoint_path, plugins=plugins
    )
    context = settings_for(graph, context, checkpointer, checkpoint_path)
    parsed, threads = batch_threads(tasks, context, thread_prefix, thread_keys)
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int, task: Task, graph: Graph) -> RunResult:
        async def report(result: RunResult) -> None:
            if on_result is not None and inspect.isawaitable(done := on_result(index, result)):
                await done

        async def start() -> None:
            if on_start is not None and inspect.isawaitable(done := on_start(index)):
                await done

        async with limit:
            return await run_leased(graph, task, context, threads[index], list(plugins), busy, report, start)

    async with graph_over(checkpointer, checkpoint_path, graph) as graph:  # compiled once for the whole batch
        try:
            async with asyncio.TaskGroup() as group:  # a storage fault cancels the rest, which stay resumable
                running = [group.create_task(one(i, task, graph)) for i, task in enumerate(parsed)]
        except BaseExceptionGroup as failed:
            if isinstance(failed.exceptions[0], InfrastructureFault) and (store := _opened_memory(context)):
                store.fault_reported()
            raise failed.exceptions[0] from None
    await _flush_memory(context)
    return [task.result() for task in running]


async def _flush_memory(context: Context) -> None:
    """The batch's deferred lesson counts (write_buffer.py `DEFER_LESSONS`, a store folder's journal)
    are in the store when it returns. A store that cannot take them (its disk full) stops the
    batch as a storage fault, as it would have mid-batch: counts left waiting for exit would fail
    there with the batch already reported done (the journal keeps them for the next open).
    """
    if (store := _opened_memory(context)) is None:
        return
    try:
        await asyncio.to_thread(store.flush)
    except Exception as exc:
        if not (fault := infrastructure_fault(exc)):
            raise
        store.fault_reported()
        raise InfrastructureFault(f"{fault}; the batch stopped: fix it, then resume the batch") from exc


def _opened_memory(context: Context) -> ExperienceStore | None:
    return opened_lesson_store(context) if context.memory else None


def batch_threads(
    tasks: Iterable[Task | dict[str, Any] | str],
    context: Context,
    thread_prefix: str | None,
    thread_keys: list[str] | None,
) -> tuple[list[Task], list[str]]:
    """A batch's tasks, each checked, and the LangGraph thread each runs on (`{prefix}:{key}`):
    the whole batch is refused before any task runs, wherever the batch runs.
    """
    parsed = check_run(tasks, context)
    prefix = thread_prefix or uuid.uuid4().hex[:12]
    keys = thread_keys or [str(i) for i in range(len(parsed))]
    if len(keys) != len(parsed):
        raise PivotalError(f"thread_keys has {len(keys)} keys for {len(parsed)} tasks")
    return parsed, [f"{prefix}:{key}" for key in keys]


async def run_leased(
    graph: Graph,
    task: Task,
    context: Context,
    thread_id: str,
    plugins: list[str],
    busy: Busy,
    report: Callable[[RunResult], Any] | None = None,
    start: Callable[[], Awaitable[None]] | None = None,
) -> RunResult:
    """`run_or_report` holding the thread's lease, with `report(result)` awaited before it is
    released: a process that takes the thread after it knows the result was reported (without
    `report`, e.g. on a Ray worker whose driver reports, the lease says nothing of it). What
    `report` raises (the results disk) is raised; a lease refused is a "skipped" result.
    """
    started, reported = time.time(), False
    try:
        async with thread_lease(graph.checkpointer, thread_id, busy, start) as lease:
            result = await run_or_report(graph, task, context, thread_id, plugins)
            reported = True
            if report is not None:
                await report(result)
                lease.done = result.status in ENDED
            return result
    except ThreadBusy as exc:
        result = RunResult.skipped(task, thread_id, str(exc))
    except InfrastructureFault:
        raise
    except Exception as exc:  # the lease's own database, or the lease lost: recorded like a run's failure
        if reported:
            raise
        if fault := infrastructure_fault(exc):
            raise InfrastructureFault(f"{fault}; the batch stopped: fix it, then resume the batch") from exc
        result = RunResult.from_error(task, thread_id, exc, started)
    if report is not None:
        await report(result)
    return result


async def run_or_report(
    graph: Graph, task: Task, context: Context, thread_id: str, plugins: list[str] | None = None
) -> RunResult:
    """One batch task: what it raises is recorded in its result, never raised into the batch,
    except a fault of the storage every task shares (`InfrastructureFault`): that stops the batch.
    """
    started = time.time()
    try:
        return await run_on_thread(graph, task, context, thread_id, plugins)
    except Exception as exc:  # one task's failure must not stop the batch (re-raised only as a shared fault)
        if fault := infrastructure_fault(exc):
            raise InfrastructureFault(f"{fault}; the batch stopped: fix it, then resume the batch") from exc
        return RunResult.from_error(task, thread_id, exc, started)
