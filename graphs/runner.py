"""Run the graph from Python: one task (`arun`/`run`) or many (`run_batch`).

Everything a run needs is checked before the first node starts (context, model specs and
keys, environment, task, store directory), so a bad flag costs one clear line, not a
half-finished run.
"""

import asyncio
import inspect
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot
from pydantic import BaseModel, Field

from pivotal.core.checkpoints import check_file, is_postgres
from pivotal.core.context import Context
from pivotal.core.environments import Idempotent, make_environment
from pivotal.core.environments.base import RewindWarning, rewind_notice as notice_for
from pivotal.core.environments.live import release
from pivotal.core.environments.once import irreversible
from pivotal.core.errors import InfrastructureFault, PivotalError, infrastructure_fault, make_folder
from pivotal.core.models.reachability import check_models
from pivotal.core.secrets import redact, redact_tree, redacting
from pivotal.core.settings import settings
from pivotal.core.task import Task, parse_task
from pivotal.graphs.builder import build_graph, recursion_limit
from pivotal.graphs.lease import Busy, ThreadBusy, thread_lease
from pivotal.graphs.postgres import open_postgres
from pivotal.memory.policy.registry import check_memory, opened_lesson_store
from pivotal.memory.policy.store import ExperienceStore

Graph = Pregel[Any, Context, Any, Any]
"""A compiled graph that runs with a `Context` (`build_graph`'s, or an application's own)."""

OnUpdate = Callable[[str, dict[str, Any]], None]
"""Told each node's name and the state it wrote, as the node finishes."""
ENDED = ("success", "failure")
"""Statuses of a run that is over: nothing of it is left to run."""


class RunResult(BaseModel):
    """What one run did: outcome, cost and where to find it in the checkpointer."""

    status: str
    reason: str
    task: dict[str, Any]
    thread_id: str
    run_id: str
    steps: int = Field(description="environment steps run, all attempts: executed + replayed")
    executed: int = Field(description="environment steps run on the actor's decision, all attempts")
    replayed: int = Field(description="steps re-applied without any LLM call to restore state")
    trajectory_length: int = Field(description="steps in the final trajectory (kept prefix plus new steps)")
    llm_calls: int
    revisits: int = Field(0, description="steps that put the world back as it was after an earlier step (circles)")
    no_ops: int = Field(0, description="steps that left the world as it was (a bump into a wall, a look at nothing)")
    repeats: int = Field(0, description="proposals of a call already proposed from the same state in that attempt")
    critic: dict[str, int]
    retries: dict[str, Any]
    lessons: dict[str, int]
    usage: dict[str, dict[str, float]]
    trajectory: list[dict[str, Any]]
    reflections: list[dict[str, Any]]
    wall_s: float
    started_at: float = Field(0.0, description="Unix time this process started (or resumed) the run")
    finished_at: float = Field(0.0, description="Unix time it ended")
    error: str = Field("", description="status 'error': what raised, in one line; the batch went on")
    interrupt: dict[str, Any] | None = Field(
        None, description="status 'interrupted': the action awaiting a person; continue with resume(thread_id, reply)"
    )
    answer: str = Field("", description="the agent's final answer, when the environment takes one (finish)")
    verified: bool = Field(True, description="False: the agent declared success and nothing checked it")
    at_least_once: list[int] = Field(
        default_factory=list,
        description=(
            "steps that were in flight when an earlier process stopped and ran again on resume in an "
            "environment without step_once: their action may have happened twice"
        ),
    )

    @classmethod
    def from_error(cls, task: Task, thread_id: str, exc: BaseException, started_at: float) -> "RunResult":
        reason = redact(" ".join(f"{type(exc).__name__}: {exc}".split())[:500])
        return cls(
            status="error",
            reason=reason,
            error=reason,
            task=redact_tree(task.model_dump()),
            thread_id=thread_id,
            run_id="",
            steps=0,
            executed=0,
            replayed=0,
            trajectory_length=0,
            llm_calls=0,
            critic={},
            retries={},
            lessons={},
            usage={},
            trajectory=[],
            reflections=[],
            wall_s=round(time.time() - started_at, 3),
            started_at=started_at,
            finished_at=time.time(),
        )

    @classmethod
    def skipped(cls, task: Task, thread_id: str, why: str) -> "RunResult":
        """Another process owns the thread, or finished and reported it: this one ran nothing."""
        return cls.from_error(task, thread_id, ThreadBusy(why), time.time()).model_copy(
            update={"status": "skipped", "reason": why, "error": ""}
        )


def preflight(task: Task | dict[str, Any] | str, context: Context) -> Task:
    """Fail before any work on a bad task, model spec, missing key or unusable store."""
    check_context(context)
    return check_task(task, context.default_env)


def check_context(context: Context) -> None:
    """Model specs, keys, endpoints, the store and its embedding model: shared by every task of a
    batch, so checked once.
    """
    check_models(context)
    if context.memory:
        # a LangGraph store is the app's to open; the embedding model is needed either way
        check_memory(context)


def rewind_notice(task: Task | dict[str, Any] | str, context: Context) -> str:
    """The line a run starts with when its environment cannot go back and a retry was asked for ("" else)."""
    parsed = parse_task(task, context.default_env)
    env = make_environment(parsed.env)
    return notice_for(env, parsed.env, context.retry, context.max_pivot_retries)


def rewind_notices(tasks: list[Task], context: Context) -> list[str]:
    """The rewind notice once per environment of these tasks that cannot go back."""
    found = (notice_for(make_environment(name), name, context.retry, context.max_pivot_retries)
             for name in dict.fromkeys(task.env for task in tasks))  # fmt: skip
    return [notice for notice in found if notice]


def warn_rewinds(tasks: list[Task], context: Context) -> None:
    """The notices as `RewindWarning`s: a script asked for a retry its environment cannot give
    (the CLI prints the lines itself).
    """
    for notice in rewind_notices(tasks, context):
        warnings.warn(notice, RewindWarning, stacklevel=3)


def check_task(task: Task | dict[str, Any] | str, default_env: str = "") -> Task:
    parsed = parse_task(task, default_env)
    make_environment(parsed.env)
    return parsed


@asynccontextmanager
async def open_checkpointer(path: str | None = None) -> AsyncIterator[BaseCheckpointSaver]:
    """SQLite on disk, so an interrupted run can resume; a `postgresql://` URL, so processes on
    several machines share the runs; `":memory:"` keeps nothing.
    """
    path = path or settings().checkpoint_path
    if path == ":memory:":
        yield redacting(InMemorySaver())
        return
    if is_postgres(path):
        async with open_postgres(path) as saver:
            yield redacting(saver)
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    check_file(path)  # a damaged file is refused in one line, never opened over and replaced
    make_folder(
        Path(path).parent,
        f"cannot create the checkpoint folder for {path}",
        "set PIVOTAL_CHECKPOINT_PATH to a writable file",
    )
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        # WAL (LangGraph's choice) with synchronous=NORMAL: a commit is in the OS's hands before the
        # next step starts, so a killed process loses nothing; only a power loss or OS crash can drop
        # the last steps' checkpoints, which idempotency keys then cover. FULL fsyncs every commit.
        await saver.conn.execute(f"PRAGMA synchronous={settings().checkpoint_sync.upper()}")
        yield redacting(saver)


async def arun(
    task: Task | dict[str, Any] | str,
    context: Context | None = None,
    *,
    checkpointer: BaseCheckpointSaver | None = None,
    checkpoint_path: str | None = None,
    thread_id: str | None = None,
    plugins: Iterable[str] = (),
    on_update: OnUpdate | None = None,
) -> RunResult:
    """Run one task to its end and summarise it. Pass `checkpointer` to share one across runs.

    `plugins` (module names that register the task's environment) are saved with the thread,
    so `pivotal resume` can import them again in another process. `on_update(node, update)` is
    called as each node finishes, with the state it changed: a live trace (`pivotal run` prints one).
    """
    context = context or Context()
    parsed = preflight(task, context)
    warn_rewinds([parsed], context)
    thread_id = thread_id or uuid.uuid4().hex
    async with _graph(checkpointer, checkpoint_path) as graph, thread_lease(graph.checkpointer, thread_id):
        return await _run(graph, parsed, context, thread_id, list(plugins), on_update)


async def aresume(
    thread_id: str,
    reply: Any,
    context: Context | dict[str, Any] | None = None,
    *,
    checkpoint_path: str | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    on_update: OnUpdate | None = None,
) -> RunResult:
    """Continue a run paused for approval: `reply` is {"decision": "approve"|"reject", "reason": ...}.

    The run goes on with the settings it started with. `context` may repeat them (a Context,
    or a dict of the fields a caller set explicitly) but not contradict them. Everything the
    rest of the run needs is checked before the reply is written, so a failed resume leaves
    the thread exactly as it was, still waiting.
    """
    async with _graph(checkpointer, checkpoint_path) as graph, thread_lease(graph.checkpointer, thread_id):
        saved = await paused_run(graph, thread_id)  # read under the lease: a second resume waits, then finds none
        context = Context.resumed(saved.get("run_settings") or {}, context)
        check_context(context)
        check_task(saved["task"])
        config = _config(thread_id, context)
        return await _invoke(graph, Command(resume=reply), config, context, saved.get("run_id", ""), on_update)


async def paused_run(graph: Graph, thread_id: str) -> dict[str, Any]:
    """The values of a thread that waits for approval; one clear line when it does not."""
    saved = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    if not any(task.interrupts for task in saved.tasks):
        raise PivotalError(
            f"thread {thread_id!r} is not waiting for approval; nothing to resume (check --thread-id and --checkpoints)"
        )
    return saved.values


async def saved_values(thread_id: str, checkpoint_path: str | None = None) -> dict[str, Any]:
    """A thread's last saved values ({} for none): the CLI reads its plugins and settings first."""
    async with _graph(None, checkpoint_path) as graph:
        saved = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    return dict(saved.values or {})


async def held_threads(checkpoint_path: str | None, thread_ids: list[str]) -> set[str]:
    """Which of these threads the checkpoints hold at least one checkpoint of."""
    async with open_checkpointer(checkpoint_path) as saver:
        found = [await saver.aget_tuple({"configurable": {"thread_id": thread}}) for thread in thread_ids]
    return {thread for thread, saved in zip(thread_ids, found, strict=True) if saved is not None}


@asynccontextmanager
async def _graph(checkpointer: BaseCheckpointSaver | None, checkpoint_path: str | None) -> AsyncIterator[Any]:
    """The graph over the given checkpointer, or over one opened (and closed) for this call."""
    if checkpointer is not None:
        yield build_graph(checkpointer=checkpointer)
        return
    async with open_checkpointer(checkpoint_path) as saver:
        yield build_graph(checkpointer=saver)


def resume(thread_id: str, reply: Any, context: Context | None = None, **kwargs: Any) -> RunResult:
    """Blocking `aresume`."""
    return asyncio.run(aresume(thread_id, reply, context, **kwargs))


def run(task: Task | dict[str, Any] | str, context: Context | None = None, **kwargs: Any) -> RunResult:
    """Blocking `arun`, for scripts and the CLI."""
    return asyncio.run(arun(task, context, **kwargs))


async def run_batch(
    tasks: Iterable[Task | dict[str, Any] | str],
    context: Context | None = None,
    *,
    concurrency: int = 4,
    checkpoint_path: str | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    thread_prefix: str | None = None,
    on_result: Callable[[int, RunResult], Any] | None = None,
    thread_keys: list[str] | None = None,
    plugins: Iterable[str] = (),
    busy: Busy = "skip",
    on_start: Callable[[int], Any] | None = None,
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
    its nodes runs (with the SQLite and Postgres savers, which hold leases).
    """
    if concurrency <= 0:
        raise PivotalError(f"concurrency must be > 0 (got {concurrency})")
    context = context or Context()
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

    async with _graph(checkpointer, checkpoint_path) as graph:  # compiled once for the whole batch
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
    """The batch's deferred lesson counts (write_buffer.py `DEFER_LESSONS`) are on disk when it
    returns: in a store folder's journal, or written to the store now.
    """
    if (store := _opened_memory(context)) is not None:
        await asyncio.to_thread(store.secure)


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
    check_context(context)
    parsed = [check_task(task, context.default_env) for task in tasks]
    warn_rewinds(parsed, context)
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
        return await _run(graph, task, context, thread_id, plugins)
    except Exception as exc:  # one task's failure must not stop the batch (re-raised only as a shared fault)
        if fault := infrastructure_fault(exc):
            raise InfrastructureFault(f"{fault}; the batch stopped: fix it, then resume the batch") from exc
        return RunResult.from_error(task, thread_id, exc, started)


async def _run(
    graph: Graph,
    task: Task,
    context: Context,
    thread_id: str | None,
    plugins: list[str] | None = None,
    on_update: OnUpdate | None = None,
) -> RunResult:
    """Start the task on its thread, or continue it from the thread's last checkpoint."""
    thread_id = thread_id or uuid.uuid4().hex
    config = _config(thread_id, context, {"pivotal_task": task.id})
    saved = await graph.aget_state(config) if graph.checkpointer is not None else None
    # A node that finished just before a crash has its writes saved but no checkpoint after it:
    # `next` is then empty while `tasks` still holds it, so only no next *and* no tasks means done.
    if saved is not None and saved.values and not saved.next and not saved.tasks:
        return summarise(saved.values, context, thread_id, 0.0, time.time())  # finished before a crash: never re-run
    if saved is not None and saved.values:
        Context.resumed(saved.values.get("run_settings") or {}, context)
        in_flight = _in_flight_step(saved, task)
        result = await _invoke(graph, None, config, context, saved.values.get("run_id", ""), on_update)
        return result.model_copy(update={"at_least_once": in_flight})
    run_id = uuid.uuid4().hex
    start = {
        "task": redact_tree(task.model_dump()),
        "run_id": run_id,
        "run_settings": context.saved(),
        "plugins": plugins or [],
    }
    return await _invoke(graph, start, config, context, run_id, on_update)


def _in_flight_step(saved: StateSnapshot, task: Task) -> list[int]:
    """The step an earlier process may have executed without checkpointing it, when the
    environment cannot tell a repeat (no `step_once`): that one step is at-least-once.
    """
    env = make_environment(task.env)
    if "executor" not in saved.next or isinstance(env, Idempotent):
        return []
    if irreversible(env, (saved.values.get("chosen") or {}).get("action")):
        return []  # noted before its tool ran: taken as run, never run again (core/environments/once.py)
    return [len(saved.values.get("trajectory") or [])]


def _config(thread_id: str, context: Context, metadata: dict[str, Any] | None = None) -> RunnableConfig:
    return {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": recursion_limit(context),
        "metadata": metadata or {},
    }


async def _invoke(
    graph: Graph,
    run_input: Any,
    config: RunnableConfig,
    context: Context,
    run_id: str,
    on_update: OnUpdate | None = None,
) -> RunResult:
    """Run (or continue) the graph to its end or next pause, then release the live environment."""
    started, started_at = time.perf_counter(), time.time()
    try:
        # "sync": each step's checkpoint is on disk before the next step starts, so a
        # killed process resumes after the last executed action, not before it.
        if on_update is None:
            final = await graph.ainvoke(run_input, config=config, context=context, durability="sync")
        else:
            final = await _streamed(graph, run_input, config, context, on_update)
    finally:
        release(run_id)
    return summarise(final, context, config["configurable"]["thread_id"], time.perf_counter() - started, started_at)


async def _streamed(graph: Graph, run_input: Any, config: RunnableConfig, context: Context, on_update: OnUpdate) -> Any:
    """What `ainvoke` returns (the last values, and the pause if any), telling `on_update` each node's writes."""
    final: dict[str, Any] = {}
    paused = None
    chunk: Any  # a (mode, chunk) pair per part, as `stream_mode` is a list
    async for mode, chunk in graph.astream(
        run_input, config=config, context=context, durability="sync", stream_mode=["updates", "values"]
    ):
        if mode == "values":
            final = dict(chunk)
            continue
        for node, update in chunk.items():
            if node == "__interrupt__":
                paused = update
            else:
                on_update(node, update or {})
    return {**final, "__interrupt__": paused} if paused else final


def summarise(
    final: dict[str, Any], context: Context, thread_id: str, wall_s: float, started_at: float = 0.0
) -> RunResult:
    paused = [item.value for item in final.get("__interrupt__") or []]
    final = redact_tree({k: v for k, v in final.items() if k != "__interrupt__"})  # keys echoed by tools stay out
    counters = final.get("counters") or {}
    trajectory = final.get("trajectory") or []
    return RunResult(
        status="interrupted" if paused else final.get("status", "failure"),
        reason="waiting for a person to approve an action" if paused else final.get("reason", ""),
        interrupt=redact_tree(paused[0]) if paused else None,
        answer=final.get("answer") or "",
        verified=final.get("verified", True) is not False,
        task=final["task"],
        thread_id=thread_id,
        run_id=final["run_id"],
        steps=int(counters.get("executed", 0)) + int(counters.get("replayed", 0)),
        executed=int(counters.get("executed", 0)),
        replayed=int(counters.get("replayed", 0)),
        trajectory_length=len(trajectory),
        llm_calls=int(counters.get("llm_calls", 0)),
        revisits=int(counters.get("revisits", 0)),
        no_ops=int(counters.get("no_ops", 0)),
        repeats=int(counters.get("repeats", 0)),
        critic={
            k: int(counters.get(k, 0))
            for k in ("approved", "revised", "rejected", "prechecked", "human_approved", "human_rejected")
        },
        retries={
            "strategy": context.retry,
            "budget": context.budget,
            "pivot": context.pivot,
            "count": int(final.get("retries", 0)),
            "kept_steps": int(counters.get("kept_steps", 0)),
            "replayed_steps": int(counters.get("replayed", 0)),
        },
        lessons={
            "recalled": len(final.get("recalled") or []),
            "candidates": len(final.get("candidates") or []),
            "approved": len(final.get("approved_lessons") or []),
            **{k: int(counters.get(f"lessons_{k}", 0)) for k in ("written", "merged", "scored", "retired")},
        },
        usage=final.get("usage") or {},
        trajectory=trajectory,
        reflections=final.get("reflections") or [],
        wall_s=round(wall_s, 3),
        started_at=started_at,
        finished_at=time.time(),
    )
