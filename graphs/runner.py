"""Run the graph from Python: one task (`arun`/`run`) or many (`run_batch`).

Everything a run needs is checked before the first node starts (context, model specs and
keys, environment, task, store directory), so a bad flag costs one clear line, not a
half-finished run.
"""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel, Field

from graphs.builder import build_graph
from memory.store import open_store
from pivotal.context import Context
from pivotal.environments import make_environment
from pivotal.environments.live import release
from pivotal.errors import PivotalError
from pivotal.models.factory import make_model, parse_spec
from pivotal.models.reachability import check_reachable
from pivotal.models.roles import ROLE_MODEL
from pivotal.settings import settings
from pivotal.task import Task, parse_task


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
    critic: dict[str, int]
    retries: dict[str, Any]
    lessons: dict[str, int]
    usage: dict[str, dict[str, float]]
    trajectory: list[dict[str, Any]]
    reflections: list[dict[str, Any]]
    wall_s: float


def recursion_limit(context: Context) -> int:
    """A ceiling that the Context bounds can never reach, so only they end a run."""
    per_step = 3 * (context.max_critique_rounds + 1) + 2
    per_attempt = context.max_steps * per_step + 4
    return (context.max_pivot_retries + 1) * per_attempt + 10


def preflight(task: Task | dict[str, Any] | str, context: Context) -> Task:
    """Fail before any work on a bad task, model spec, missing key or unusable store."""
    check_context(context)
    return check_task(task)


def check_context(context: Context) -> None:
    """Model specs, keys, endpoints and the store: shared by every task of a batch, so checked once."""
    roles = set(ROLE_MODEL.values()) if context.memory else {"actor", "critic", "reflector"}
    specs = {context.model_for(role) for role in roles} | ({context.fallback_model} - {""})  # type: ignore[arg-type]
    for spec in sorted(specs):
        parse_spec(spec)
        make_model(spec, context.local_threads)
        check_reachable(spec)
    if context.memory:
        open_store(context.store_path, context.store_url)


def check_task(task: Task | dict[str, Any] | str) -> Task:
    parsed = parse_task(task)
    make_environment(parsed.env)
    return parsed


@asynccontextmanager
async def open_checkpointer(path: str | None = None) -> AsyncIterator[BaseCheckpointSaver]:
    """SQLite on disk, so an interrupted run can resume; `":memory:"` keeps nothing."""
    path = path or settings().checkpoint_path
    if path == ":memory:":
        yield InMemorySaver()
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PivotalError(f"cannot create the checkpoint folder for {path}: {exc.strerror}; "
                           "set PIVOTAL_CHECKPOINT_PATH to a writable file") from None
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        yield saver


async def arun(task: Task | dict[str, Any] | str, context: Context | None = None, *,
               checkpointer: BaseCheckpointSaver | None = None, checkpoint_path: str | None = None,
               thread_id: str | None = None) -> RunResult:
    """Run one task to its end and summarise it. Pass `checkpointer` to share one across runs."""
    context = context or Context()
    parsed = preflight(task, context)
    if checkpointer is None:
        async with open_checkpointer(checkpoint_path) as saver:
            return await _run(build_graph(checkpointer=saver), parsed, context, thread_id)
    return await _run(build_graph(checkpointer=checkpointer), parsed, context, thread_id)


def run(task: Task | dict[str, Any] | str, context: Context | None = None, **kwargs: Any) -> RunResult:
    """Blocking `arun`, for scripts and the CLI."""
    return asyncio.run(arun(task, context, **kwargs))


async def run_batch(tasks: Iterable[Task | dict[str, Any] | str], context: Context | None = None, *,
                    concurrency: int = 4, checkpoint_path: str | None = None) -> list[RunResult]:
    """Run many tasks concurrently over one checkpointer; results keep the input order."""
    context = context or Context()
    check_context(context)
    parsed = [check_task(task) for task in tasks]
    limit = asyncio.Semaphore(concurrency)

    async def one(task: Task, graph: Any) -> RunResult:
        async with limit:
            return await _run(graph, task, context, None)

    async with open_checkpointer(checkpoint_path) as saver:
        graph = build_graph(checkpointer=saver)  # compiled once for the whole batch
        return list(await asyncio.gather(*(one(task, graph) for task in parsed)))


async def _run(graph: Any, task: Task, context: Context, thread_id: str | None) -> RunResult:
    thread_id = thread_id or uuid.uuid4().hex
    run_id = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": recursion_limit(context),
              "metadata": {"pivotal_task": task.id}}
    started = time.perf_counter()
    try:
        final = await graph.ainvoke({"task": task.model_dump(), "run_id": run_id}, config=config,
                                    context=context)
    finally:
        release(run_id)
    return summarise(final, context, thread_id, time.perf_counter() - started)


def summarise(final: dict[str, Any], context: Context, thread_id: str, wall_s: float) -> RunResult:
    counters = final.get("counters") or {}
    trajectory = final.get("trajectory") or []
    return RunResult(
        status=final.get("status", "failure"), reason=final.get("reason", ""), task=final["task"],
        thread_id=thread_id, run_id=final["run_id"],
        steps=int(counters.get("executed", 0)) + int(counters.get("replayed", 0)),
        executed=int(counters.get("executed", 0)), replayed=int(counters.get("replayed", 0)),
        trajectory_length=len(trajectory),
        llm_calls=int(counters.get("llm_calls", 0)),
        critic={k: int(counters.get(k, 0)) for k in ("approved", "revised", "rejected", "prechecked")},
        retries={"strategy": context.retry, "count": int(final.get("retries", 0)),
                 "kept_steps": int(counters.get("kept_steps", 0)),
                 "replayed_steps": int(counters.get("replayed", 0))},
        lessons={"recalled": len(final.get("recalled") or []), "candidates": len(final.get("candidates") or []),
                 "approved": len(final.get("approved_lessons") or []),
                 **{k: int(counters.get(f"lessons_{k}", 0)) for k in ("written", "merged", "scored", "retired")}},
        usage=final.get("usage") or {}, trajectory=trajectory, reflections=final.get("reflections") or [],
        wall_s=round(wall_s, 3))
