"""Batches over Ray: one actor per worker, each with its own event loop, its own concurrency and one
compiled graph, all sharing Postgres checkpoints and one Chroma server for lessons.

The driver alone keeps the queue and reports results, once per task. A worker that dies (its process
killed, its machine lost) is killed for good measure and restarted by Ray, and the tasks it was
running go back on the queue: whichever worker picks one up continues its LangGraph thread from the
last checkpoint, so no finished step runs again. Ray is imported only here, when a batch asks for it
(`pip install 'pivotal[ray]'`).
"""

import asyncio
import importlib
import inspect
import logging
import os
import time
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pivotal.core.checkpoints import is_postgres
from pivotal.core.context import Context
from pivotal.core.errors import InfrastructureFault, PivotalError
from pivotal.core.settings import settings
from pivotal.core.task import Task
from pivotal.graphs.batch import batch_threads, run_leased
from pivotal.graphs.builder import build_graph
from pivotal.graphs.checkpointer import open_checkpointer
from pivotal.graphs.checks import check_task
from pivotal.graphs.lease import Busy
from pivotal.graphs.summary import RunResult

INSTALL = "Ray batches need Ray: pip install 'pivotal[ray]'"
MAX_WORKER_DEATHS = 3
"""A task whose worker died this many times while running it is reported as an error instead of
being handed on again: something in the task itself (memory, a crashing library) kills workers."""


class Worker:
    """A Ray actor's body. It opens its checkpointer and compiles its graph on the first task, inside
    the actor's own event loop, and keeps both for every task after.
    """

    def __init__(self, checkpoints: str, plugins: list[str], context: Context) -> None:
        self.checkpoints, self.plugins, self.context = checkpoints, plugins, context
        self.stack = AsyncExitStack()
        self.graph: Any = None
        self.opening: asyncio.Lock | None = None

    async def run(self, task: dict[str, Any], thread_id: str, busy: Busy = "skip") -> dict[str, Any]:
        """{"result": RunResult fields}, or {"fault": why} when the shared storage (or this
        worker's setup) failed, which stops the whole batch on the driver. The thread's lease is the
        one every process takes (graphs/lease.py), so another batch's process leaves it alone.
        """
        try:
            graph = await self._graph()
            parsed = check_task(task, self.context.default_env)
            result = await run_leased(graph, parsed, self.context, thread_id, self.plugins, busy)
        except PivotalError as exc:
            return {"fault": str(exc)}
        return {"result": result.model_dump()}

    async def pid(self) -> int:
        return os.getpid()

    async def _graph(self) -> Any:
        self.opening = self.opening or asyncio.Lock()
        async with self.opening:
            if self.graph is None:
                _import_plugins(self.plugins)
                saver = await self.stack.enter_async_context(open_checkpointer(self.checkpoints))
                self.graph = build_graph(checkpointer=saver)
        return self.graph


def _import_plugins(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 — whatever the plugin raised, say which plugin
            raise PivotalError(
                f"cannot import plugin {module!r} on a Ray worker: {type(exc).__name__}: {exc}"
            ) from None


@dataclass
class _Slot:
    """One worker as the driver sees it. `ready` is cleared from its first lost task until it answers
    again, so the other tasks lost in the same death neither restart it again nor get sent to it
    while Ray brings it back.
    """

    actor: Any
    ready: asyncio.Event = field(default_factory=asyncio.Event)


async def run_batch_on_ray(
    tasks: Iterable[Task | dict[str, Any] | str],
    context: Context | None = None,
    *,
    checkpoints: str | None = None,
    address: str | None = None,
    workers: int | None = None,
    concurrency: int = 4,
    thread_prefix: str | None = None,
    thread_keys: list[str] | None = None,
    on_result: Callable[[int, RunResult], Any] | None = None,
    plugins: Iterable[str] = (),
) -> list[RunResult]:
    """`run_batch` over Ray workers: `concurrency` tasks in flight on each worker; results keep input order.

    `address` joins an existing cluster (`ray://HOST:10001` or `HOST:6379`); without one, and without
    a Ray instance already running in this process, Ray starts on this machine and `workers`
    defaults to its cores. Checkpoints must be a `postgresql://` URL every worker reaches, and
    memory, when on, a Chroma server (`Context.store_url`). `on_result(i, result)` is called
    exactly once per task, on the driver, as results stream back. A thread another process holds is
    skipped, as in `run_batch`; a task handed on after its worker died waits for that worker's lease
    (taken at once when its process is gone).
    """
    context = context or Context()
    checkpoints = checkpoints or settings().checkpoint_path
    check_ray_inputs(context, checkpoints, concurrency, workers)
    parsed, threads = batch_threads(tasks, context, thread_prefix, thread_keys)
    ray = ray_module()
    async with open_checkpointer(checkpoints):  # reached, tables made, before any worker opens them at once
        pass
    started = not ray.is_initialized()
    if started:
        _start(ray, address)
    try:
        slots = _workers(ray, workers, concurrency, (checkpoints, list(plugins), context))
        return await _drive(ray, slots, parsed, concurrency, threads, on_result)
    finally:
        if started:
            ray.shutdown()


def check_ray_inputs(context: Context, checkpoints: str, concurrency: int, workers: int | None) -> None:
    """What every worker must share, checked before Ray starts: one line each, naming the fix."""
    if concurrency <= 0:
        raise PivotalError(f"concurrency must be > 0 (got {concurrency})")
    if workers is not None and workers <= 0:
        raise PivotalError(f"workers must be > 0 (got {workers})")
    if not is_postgres(checkpoints):
        raise PivotalError(
            f"Ray workers need checkpoints they all reach, not {checkpoints!r}: pass --checkpoints "
            "postgresql://USER@HOST:PORT/DATABASE (or set PIVOTAL_CHECKPOINT_URL)"
        )
    if context.memory and not context.store_url:
        raise PivotalError(
            "Ray workers with memory need one Chroma server for their lessons: start `chroma run` and set "
            "PIVOTAL_STORE_URL=http://HOST:PORT, or pass --no-memory"
        )


def ray_module() -> Any:
    """Ray, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise PivotalError(INSTALL) from None
    return ray


def _start(ray: ModuleType, address: str | None) -> None:
    """This machine's cores (no address) or an existing cluster; workers log to their own files, not
    over the batch's progress bar.
    """
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        words = " ".join(str(exc).split())[:300]
        raise PivotalError(
            f"cannot join the Ray cluster at {address}: {words}; check the address (HOST:6379 or ray://HOST:10001)"
        ) from None


def _workers(ray: ModuleType, count: int | None, concurrency: int, arguments: tuple[Any, ...]) -> list[_Slot]:
    """One actor per worker, one CPU each, restarted by Ray however often it dies. Each gets this
    process's PIVOTAL_* settings (a worker on another machine has its own environment otherwise).
    """
    count = count or max(int(ray.cluster_resources().get("CPU", 1)), 1)
    settings_vars = {name: value for name, value in os.environ.items() if name.startswith("PIVOTAL_")}
    actor = ray.remote(num_cpus=1, max_restarts=-1)(Worker).options(
        max_concurrency=concurrency + 1, runtime_env={"env_vars": settings_vars} if settings_vars else None
    )
    return [_Slot(actor.remote(*arguments)) for _ in range(count)]


async def _drive(
    ray: ModuleType,
    slots: list[_Slot],
    tasks: list[Task],
    concurrency: int,
    threads: list[str],
    on_result: Callable[[int, RunResult], Any] | None,
) -> list[RunResult]:
    if not tasks:
        return []
    driver = _Driver(ray, tasks, threads, on_result, feeders=len(slots) * concurrency)
    try:
        async with asyncio.TaskGroup() as group:  # a storage fault cancels the rest, which stay resumable
            for slot in slots:
                slot.ready.set()
                for _ in range(concurrency):
                    group.create_task(driver.feed(slot))
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    finally:
        for slot in slots:
            ray.kill(slot.actor, no_restart=True)  # nothing of this batch runs on after it returns
    return [driver.results[index] for index in range(len(tasks))]


class _Driver:
    """`concurrency` feeders per worker pull from one queue, so a fast worker takes more tasks and a
    dead worker's tasks go to whichever worker is free first; each task is reported once.
    """

    def __init__(
        self,
        ray: ModuleType,
        tasks: list[Task],
        threads: list[str],
        on_result: Callable[[int, RunResult], Any] | None,
        feeders: int,
    ) -> None:
        self.ray, self.tasks, self.threads, self.on_result, self.feeders = ray, tasks, threads, on_result, feeders
        self.queue: asyncio.Queue[int | None] = asyncio.Queue()
        for index in range(len(tasks)):
            self.queue.put_nowait(index)
        self.results: dict[int, RunResult] = {}
        self.deaths = [0] * len(tasks)
        self.reviving: set[asyncio.Task[None]] = set()  # held, so a pending revive is never collected

    async def feed(self, slot: _Slot) -> None:
        while (index := await self.queue.get()) is not None:
            await slot.ready.wait()
            busy = "wait" if self.deaths[index] else "skip"  # a dead worker's lease: its successor waits it out
            try:
                answer = await slot.actor.run.remote(self.tasks[index].model_dump(), self.threads[index], busy)
            except self.ray.exceptions.RayActorError as exc:
                await self.lost(slot, index, exc)
                continue
            if "fault" in answer:
                raise InfrastructureFault(answer["fault"])
            await self.report(index, RunResult.model_validate(answer["result"]))

    async def report(self, index: int, result: RunResult) -> None:
        if index in self.results:  # a task handed on after a death can only answer once
            return
        self.results[index] = result
        if len(self.results) == len(self.tasks):
            for _ in range(self.feeders):
                self.queue.put_nowait(None)  # every feeder stops
        if self.on_result is not None and inspect.isawaitable(done := self.on_result(index, result)):
            await done

    async def lost(self, slot: _Slot, index: int, exc: Exception) -> None:
        """The worker stopped answering mid-task. It is killed (so restarted) before the task moves
        on, so a worker that was only cut off cannot go on running the thread beside its successor.
        """
        if slot.ready.is_set():
            slot.ready.clear()
            self.ray.kill(slot.actor, no_restart=False)
            reviving = asyncio.get_running_loop().create_task(self.revive(slot))
            self.reviving.add(reviving)
            reviving.add_done_callback(self.reviving.discard)
        self.deaths[index] += 1
        if self.deaths[index] < MAX_WORKER_DEATHS:
            self.queue.put_nowait(index)
            return
        why = RuntimeError(f"its Ray worker died {self.deaths[index]} times while running it ({type(exc).__name__})")
        await self.report(index, RunResult.from_error(self.tasks[index], self.threads[index], why, time.time()))

    async def revive(self, slot: _Slot) -> None:
        """Until Ray has the worker back, its feeders wait instead of sending it tasks."""
        while True:
            try:
                await slot.actor.pid.remote()
            except self.ray.exceptions.RayActorError:
                await asyncio.sleep(0.2)
                continue
            slot.ready.set()
            return
