"""The live environment instance behind each run.

Environments are not serialisable, so they live in this process-wide table keyed by run id,
and the checkpointed trajectory is the truth. Before any node uses the environment it is
brought in line with the trajectory without running any executed action again:

- restored from the last step's snapshot when the environment can `restore` (a resume in
  another process, a Studio fork, a pivot on a simulator);
- reset and replayed only when the environment declares `rewind = "replay"` (deterministic,
  no side effects); one that can also `restore` goes back to the nearest earlier snapshot and
  replays only the steps after it, since it is snapshotted only when that pays (see `_snapshot_due`);
- otherwise taken as it is: the world holds what the executed steps did, and going on from
  the real state is the only safe move.

A pivot is the one place that goes *back*; `rewind` does it the way the environment declares.
"""

import asyncio
import contextvars
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from pivotal.core.environments import Environment, Idempotent, Restorable, make_environment
from pivotal.core.environments.base import GOAL_STEPS, Compensating, DistanceOracle, Rewind, StepResult, rewind_mode
from pivotal.core.errors import EnvironmentFault, PivotalError
from pivotal.core.logs import logger
from pivotal.core.secrets import redact, redact_tree, secret_values
from pivotal.core.state import Proposal, Step
from pivotal.core.task import Task

Action = tuple[str, dict[str, Any]]
T = TypeVar("T")
_MAX_LIVE = 4096


@dataclass
class Live:
    env: Environment
    task: Task
    first_observation: str
    initial: dict[str, Any] | None = None
    """Snapshot right after reset, so a restorable environment can go back to step 0 without a reset."""
    applied: list[Action] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    snapshot_cost: float = 0.0
    """Seconds the latest snapshot took, measured in this process."""
    unsaved: float = 0.0
    """Seconds of steps run since the world was last snapshotted or restored: what a replay to here costs."""
    no_distance: bool = False
    """The environment's `steps_to_goal` failed once (raised, or answered no number): not asked again."""


@dataclass
class Rewound:
    """What a pivot did to the world: the trajectory to keep and the compensations still to run."""

    mode: Rewind
    trajectory: list[Step]
    compensations: list[Proposal]
    replayed: int


_table: "OrderedDict[str, Live]" = OrderedDict()
_table_lock = threading.Lock()


def lookup(run_id: str) -> Live | None:
    with _table_lock:
        return _table.get(run_id)


def release(run_id: str) -> None:
    with _table_lock:
        _table.pop(run_id, None)


def open_live(run_id: str, task: Task) -> Live:
    """Create and reset the run's environment (blocking: call from a thread).

    `reset` must not act on the outside world: it runs again whenever a process that has no
    live instance for the run picks it up. Its text is redacted here, where it enters the
    program, so nothing downstream (state, a sim model's lesson, the store) sees a raw key.
    """
    env = make_environment(task.env)
    live = Live(env, task, redact(_reset(env, task)))
    live.initial = _timed_snapshot(live) if isinstance(env, Restorable) else None
    with _table_lock:
        _table[run_id] = live
        while len(_table) > _MAX_LIVE:
            _table.popitem(last=False)
    return live


def _reset(env: Environment, task: Task) -> str:
    """A reset that fails is a bad task or a broken environment, known before any step: one line
    naming the environment, not a traceback from inside the graph.
    """
    try:
        observation = env.reset(task)
    except PivotalError:
        raise
    except Exception as exc:  # noqa: BLE001 — whatever the environment raised, say which one
        raise PivotalError(
            f"environment {task.env!r}: reset() raised {_said(exc)}; fix the environment or task"
        ) from None
    if not isinstance(observation, str):
        raise PivotalError(
            f"environment {task.env!r}: reset() returned {type(observation).__name__} "
            f"{redact(repr(observation))[:100]}, not the first observation as text; return a str"
        )
    return observation


async def attach(run_id: str, task: Task, trajectory: list[Step], timeout: float) -> tuple[Live, int]:
    """The run's environment in the state the trajectory describes, and how many steps were replayed.

    Between the nodes of one step the environment is already there: it is used directly, with no
    thread hand-off (the actor, critic and executor each attach).
    """
    live = lookup(run_id)
    if live is not None and not live.lock.locked() and live.applied == _actions(trajectory):
        return live, 0
    return await in_env_thread(_attach, run_id, task, trajectory, timeout=timeout, what=f"{task.env}: reset/restore")


async def in_env_thread(function: Callable[..., T], *args: Any, timeout: float, what: str) -> T:
    """Environment code runs in a thread of its own, under a deadline, and whatever it raises stays an Exception.

    A thread of its own: a tool that hangs holds that thread, never the event loop's default
    executor that the store and the checkpointer use, nor a pool the other tasks wait on. A daemon
    thread: past the deadline the task stops with a retryable error and the thread is left to
    finish (Python cannot kill it), but it cannot keep the process alive once the command has
    written its results and released its locks; a pool's worker would be joined at exit, for ever.
    An Exception: a `SystemExit` or `KeyboardInterrupt` raised by a tool would otherwise end the
    whole batch. The caller's context goes with it, the run's config included, as LangChain hands it
    to child runs: a LangChain tool the environment calls is a tool run of the node that called it.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    threading.Thread(
        target=contextvars.copy_context().run,
        args=(_in_thread, loop, future, function, args),
        name=f"pivotal-env {what}",
        daemon=True,
    ).start()
    try:
        return await asyncio.wait_for(future, timeout)
    except TimeoutError:
        raise EnvironmentFault(
            f"environment call {what} did not finish within {timeout:g} s (PIVOTAL_STEP_TIMEOUT); whether it "
            "took effect is unknown: resuming the task continues it from its last checkpoint"
        ) from None


def _in_thread(
    loop: asyncio.AbstractEventLoop, future: "asyncio.Future[T]", function: Callable[..., T], args: tuple[Any, ...]
) -> None:
    try:
        outcome: tuple[Any, BaseException | None] = (_contained(function, *args), None)
    except BaseException as exc:  # noqa: BLE001 — `_contained` let only PivotalError and EnvironmentFault out
        outcome = (None, exc)
    try:
        loop.call_soon_threadsafe(_settle, future, *outcome)
    except RuntimeError:  # the loop closed while a hung call went on: nobody waits for its answer
        pass


def _settle(future: "asyncio.Future[Any]", result: object, error: BaseException | None) -> None:
    if future.done():  # the caller stopped waiting (the deadline passed, the task was cancelled)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _contained(function: Callable[..., T], *args: Any) -> T:
    """What environment code raises, as the task's own fault: in one redacted line (it is
    checkpointed), and never mistaken for the batch's storage failing (see `infrastructure_fault`).
    """
    try:
        return function(*args)
    except (PivotalError, EnvironmentFault):
        raise
    except Exception as exc:  # noqa: BLE001 — whatever environment code raised is the task's own fault
        raise EnvironmentFault(f"environment code raised {_said(exc)}") from None
    except BaseException as exc:  # noqa: BLE001 — raised by environment code, never a signal to this process
        raise EnvironmentFault(f"environment code raised {_said(exc)}; a tool should raise an Exception") from None


def _said(exc: BaseException) -> str:
    return redact(" ".join(f"{type(exc).__name__}: {exc}".split()))[:300]


def _attach(run_id: str, task: Task, trajectory: list[Step]) -> tuple[Live, int]:
    live = lookup(run_id) or open_live(run_id, task)
    with live.lock:
        return live, _sync(live, trajectory)


def _actions(trajectory: list[Step]) -> list[Action]:
    return [(step["action"], step["arguments"]) for step in trajectory]


def _sync(live: Live, trajectory: list[Step]) -> int:
    wanted = _actions(trajectory)
    if live.applied == wanted:
        return 0
    if rewind_mode(live.env) == "replay":
        return _restore_and_replay(live, trajectory, wanted)
    snapshot = trajectory[-1].get("snapshot") if trajectory else live.initial
    if isinstance(live.env, Restorable) and snapshot is not None:
        live.env.restore(snapshot)
        live.applied = wanted
        return 0
    live.applied = wanted  # the world already holds these steps: never run a tool to rebuild it
    return 0


def _restore_and_replay(live: Live, trajectory: list[Step], wanted: list[Action]) -> int:
    """From whichever point leaves the fewest steps to replay: where the world already is when that
    is on the way, else the nearest earlier snapshot (the one taken at reset counts), else a reset.
    """
    on_the_way = len(live.applied) if live.applied == wanted[: len(live.applied)] else -1
    base, snapshot = _nearest_snapshot(live, trajectory)
    if snapshot is not None and base > on_the_way and isinstance(live.env, Restorable):
        live.env.restore(snapshot)
        live.applied, live.unsaved = wanted[:base], 0.0
    elif on_the_way < 0:
        live.env.reset(live.task)
        live.applied, live.unsaved = [], 0.0
    return _replay(live, wanted, start=len(live.applied))


def _nearest_snapshot(live: Live, trajectory: list[Step]) -> tuple[int, dict[str, Any] | None]:
    """The latest snapshot the trajectory holds, with the number of steps it includes."""
    for index in range(len(trajectory) - 1, -1, -1):
        if trajectory[index].get("snapshot") is not None:
            return index + 1, trajectory[index]["snapshot"]
    return 0, live.initial


def _replay(live: Live, wanted: list[Action], start: int) -> int:
    for name, arguments in wanted[start:]:
        started = time.perf_counter()
        live.env.step(name, arguments)
        live.unsaved += time.perf_counter() - started
        live.applied.append((name, arguments))
    return len(wanted) - start


async def rewind(run_id: str, task: Task, trajectory: list[Step], keep: int, timeout: float) -> Rewound:
    """Go back to just before step `keep` the way the environment allows (see `Rewind`)."""
    live, _ = await attach(run_id, task, trajectory, timeout)
    mode = rewind_mode(live.env)
    if mode in ("snapshot", "replay"):
        kept = trajectory[:keep]
        _, replayed = await attach(run_id, task, kept, timeout)
        return Rewound(mode, kept, [], replayed)
    compensations = (
        _compensations(live.env, trajectory, keep)
        if mode == "compensate" and isinstance(live.env, Compensating)
        else []
    )
    return Rewound(mode, trajectory, compensations, 0)


def _compensations(env: Compensating, trajectory: list[Step], keep: int) -> list[Proposal]:
    """The undo actions of the abandoned steps, newest first; each step is compensated at most once."""
    undone = {step["compensates"] for step in trajectory if step.get("compensates") is not None}
    pending: list[Proposal] = []
    for step in reversed(trajectory[keep:]):
        if step.get("compensates") is not None or step["index"] in undone or step.get("error"):
            continue
        undo = env.compensation(step["action"], step["arguments"])
        if undo is not None:
            pending.append(
                {
                    "action": undo[0],
                    "arguments": undo[1],
                    "compensates": step["index"],
                    "thought": f"undo step {step['index']} ({step['action']}), abandoned by the retry",
                }
            )
    return pending


def run_step(live: Live, name: str, arguments: dict[str, Any], key: str) -> tuple[StepResult, dict[str, Any] | None]:
    """Execute one new action (blocking: call from a thread); tracked so later syncs know it ran.

    `key` names this step of this attempt of this run; it is the same when a resumed run
    executes the step again, so an `Idempotent` environment can refuse to act twice. What comes
    back (observation, info, snapshot) is redacted: all of it is checkpointed. The snapshot is None
    for a step `_snapshot_due` skips. The world's state after the step (`state_of`) goes in
    `info["state"]`, for telling when the agent goes in circles, and the steps the goal still needs
    in `info[GOAL_STEPS]` where the environment can say (`steps_to_goal`).
    """
    with live.lock:
        started = time.perf_counter()
        if isinstance(live.env, Idempotent):
            result = live.env.step_once(key, name, arguments)
        else:
            result = live.env.step(name, arguments)
        live.unsaved += time.perf_counter() - started
        live.applied.append((name, arguments))
        _check_step_result(live.env, result)
        snapshot = _timed_snapshot(live) if _snapshot_due(live) else None
        state = state_of(live.env, snapshot)
        left = _goal_steps(live) if not result.done else {}
    values = secret_values()
    observation = redact(_text(result.observation, f"{type(live.env).__name__}.step"), values)
    info = redact_tree({**result.info, "state": state, **left}, values)
    return replace(result, observation=observation, info=info), redact_tree(snapshot, values)


def _goal_steps(live: Live) -> dict[str, int | None]:
    """`{GOAL_STEPS: n}` from the environment's `steps_to_goal`, {} when it has none. A hook that
    raises, or answers what is not a number or None, is logged once and read as "cannot say" from
    then on: the step already ran, and an estimate only saves steps.
    """
    if live.no_distance or not isinstance(live.env, DistanceOracle):
        return {}
    try:
        left = live.env.steps_to_goal(list(live.applied))
        left = left if left is None else int(left)
    except Exception as exc:  # noqa: BLE001 (an app's hook: its failure must not fail a step that ran)
        live.no_distance = True
        logger().warning("steps_to_goal_failed", env=type(live.env).__name__, error=f"{type(exc).__name__}: {exc}")
        return {}
    return {GOAL_STEPS: left}


def _check_step_result(env: Environment, result: object) -> None:
    """A step that returned something else (a bare observation string, a tuple) is the environment's
    bug, named in one line; the action did run, so it is recorded as applied before this check.
    """
    if not isinstance(result, StepResult):
        raise EnvironmentFault(
            f"{type(env).__name__}.step returned {type(result).__name__} {redact(repr(result))[:80]}, not a "
            "StepResult(observation, done, success, info); fix the environment's step()"
        )


def _snapshot_due(live: Live) -> bool:
    """Whether to snapshot after this step: always, unless the environment declares replay safe.

    Then only once the steps run since the last snapshot took at least as long as a snapshot does
    (both measured as the run goes). Replaying back to the nearest snapshot so costs at most about
    one snapshot, while snapshots cost at most about as much as the steps themselves: with steps
    of s seconds and snapshots of c, one snapshot every ~c/s steps, every step when c <= s.
    An environment that does not declare replay is snapshotted at every step, since going back
    must never run one of its actions again. A step left without a snapshot has no state for
    noticing circles unless the environment gives `state_key()`.
    """
    if not isinstance(live.env, Restorable):
        return False
    return rewind_mode(live.env) != "replay" or live.unsaved >= live.snapshot_cost


def _timed_snapshot(live: Live) -> dict[str, Any]:
    started = time.perf_counter()
    snapshot = cast(Restorable, live.env).snapshot()  # the caller checked Restorable
    live.snapshot_cost, live.unsaved = time.perf_counter() - started, 0.0
    return snapshot


def state_of(env: Environment, snapshot: dict[str, Any] | None) -> Any:
    """What the world is, for comparing two moments: the environment's `state_key()` when it has
    one (a snapshot may also hold counters that never repeat), else its snapshot, else None.
    """
    key = getattr(env, "state_key", None)
    return key() if callable(key) else snapshot


def _text(observation: object, source: str) -> str:
    """An environment's observation, refused in one line when it is not text (it is redacted,
    clipped and shown to models as text).
    """
    if not isinstance(observation, str):
        raise PivotalError(f"{source} returned {type(observation).__name__}, not the text of an observation")
    return observation
