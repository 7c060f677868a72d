"""The live environment instance behind each run.

Environments are not serialisable, so they live in this process-wide table keyed by run id,
and the checkpointed trajectory is the truth. Before any node uses the environment it is
brought in line with the trajectory: unchanged, restored from the last step's snapshot,
extended by the missing actions (after a crash), or reset and replayed without any LLM
call (after a pivot, a Studio fork, or a resume on an environment that cannot snapshot).
"""

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from pivotal.environments import Environment, Idempotent, Restorable, make_environment
from pivotal.task import Task

Action = tuple[str, dict[str, Any]]
_MAX_LIVE = 4096


@dataclass
class Live:
    env: Environment
    task: Task
    first_observation: str
    applied: list[Action] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


_table: "OrderedDict[str, Live]" = OrderedDict()
_table_lock = threading.Lock()


def lookup(run_id: str) -> Live | None:
    with _table_lock:
        return _table.get(run_id)


def release(run_id: str) -> None:
    with _table_lock:
        _table.pop(run_id, None)


def open_live(run_id: str, task: Task) -> Live:
    """Create and reset the run's environment (blocking: call from a thread)."""
    env = make_environment(task.env)
    live = Live(env, task, env.reset(task))
    with _table_lock:
        _table[run_id] = live
        while len(_table) > _MAX_LIVE:
            _table.popitem(last=False)
    return live


async def attach(run_id: str, task: Task, trajectory: list[dict[str, Any]]) -> tuple[Live, int]:
    """The run's environment in the state the trajectory describes, and how many steps were replayed."""
    return await asyncio.to_thread(_attach, run_id, task, trajectory)


def _attach(run_id: str, task: Task, trajectory: list[dict[str, Any]]) -> tuple[Live, int]:
    live = lookup(run_id) or open_live(run_id, task)
    with live.lock:
        return live, _sync(live, trajectory)


def _sync(live: Live, trajectory: list[dict[str, Any]]) -> int:
    wanted: list[Action] = [(step["action"], step["arguments"]) for step in trajectory]
    if live.applied == wanted:
        return 0
    if isinstance(live.env, Restorable) and (not trajectory or trajectory[-1].get("snapshot")):
        if trajectory:
            live.env.restore(trajectory[-1]["snapshot"])
        else:
            live.env.reset(live.task)
        live.applied = wanted
        return 0
    if live.applied == wanted[: len(live.applied)]:
        return _replay(live, wanted, start=len(live.applied))
    live.env.reset(live.task)
    live.applied = []
    return _replay(live, wanted, start=0)


def _replay(live: Live, wanted: list[Action], start: int) -> int:
    for name, arguments in wanted[start:]:
        live.env.step(name, arguments)
        live.applied.append((name, arguments))
    return len(wanted) - start


def run_step(live: Live, name: str, arguments: dict[str, Any], key: str):
    """Execute one new action (blocking: call from a thread); tracked so later syncs know it ran.

    `key` names this step of this attempt of this run; it is the same when a resumed run
    executes the step again, so an `Idempotent` environment can refuse to act twice."""
    with live.lock:
        if isinstance(live.env, Idempotent):
            result = live.env.step_once(key, name, arguments)
        else:
            result = live.env.step(name, arguments)
        live.applied.append((name, arguments))
        snapshot = live.env.snapshot() if isinstance(live.env, Restorable) else None
        return result, snapshot
