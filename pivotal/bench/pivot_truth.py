"""Ground truth for the reflector's pivotal step (issue 42): from the environment itself, the step of
a failed attempt after which the goal went out of reach or the cost to go rose for good, and how often
a reflection (and the restart a pivot then chose) named it.

The cost to go after each prefix of the attempt comes from the environment's `steps_to_goal` where it
has one; else from its oracle's expert, played out from that prefix in a fresh copy of the world (the
expert's steps to success; None when it cannot get there). Hook-less bench variants (`-blind`) are
scored with their hooked original, so switching the hook off for a run never switches off its truth.
"""

import copy
import json
from typing import Any, cast

from pivotal.core.environments import Environment, Oracle, make_environment
from pivotal.core.environments.base import DistanceOracle
from pivotal.core.environments.live import state_of
from pivotal.core.stats import wilson
from pivotal.core.task import Task

Call = tuple[str, dict[str, Any]]
EXPERT_CAP = 200
"""Expert steps played out before a prefix counts as out of reach (the bench's worlds need < 40)."""
BLIND = "-blind"
"""Suffix of a bench environment registered without its `steps_to_goal` hook (pivotal.bench.retry_envs)."""


def costs_to_go(env: str, params: dict[str, Any], actions: list[Call]) -> list[int | None]:
    """The fewest steps to the goal after each prefix: entry k for the state after k steps (0: the
    start), None where the goal was out of reach.
    """
    name = env.removesuffix(BLIND)
    task = Task(env=name, params=params)
    world = make_environment(name)
    if isinstance(world, DistanceOracle):
        world.reset(task)
        return [world.steps_to_goal(actions[:k]) for k in range(len(actions) + 1)]
    return _played_out(world, task, actions)


def _played_out(world: Environment, task: Task, actions: list[Call]) -> list[int | None]:
    """Walk the path once; after each prefix, the expert plays a copy of the world to the end (once
    per state the world's snapshot names: the attempts of a run go through the same states).
    """
    world.reset(task)
    costs: list[int | None] = []
    for action, arguments in actions:
        costs.append(_remembered(world, task))
        result = world.step(action, arguments)
        if result.done:
            return [*costs, *[0 if result.success else None] * (len(actions) + 1 - len(costs))]
    return [*costs, _remembered(world, task)]


_SEEN: dict[str, int | None] = {}
SEEN_LIMIT = 100_000


def _remembered(world: Environment, task: Task) -> int | None:
    snapshot = getattr(world, "snapshot", None)
    if not callable(snapshot):
        return _expert_steps(copy.deepcopy(world))
    key = json.dumps([task.env, task.params, snapshot()], sort_keys=True, default=str)
    if key not in _SEEN:
        if len(_SEEN) >= SEEN_LIMIT:
            _SEEN.clear()
        _SEEN[key] = _expert_steps(copy.deepcopy(world))
    return _SEEN[key]


def _expert_steps(world: Environment) -> int | None:
    if not isinstance(world, Oracle):
        return None
    for taken in range(EXPERT_CAP):
        call = world.expert_action()
        if call is None:
            return None
        result = cast(Environment, world).step(*call)  # an Oracle is an Environment that knows the way
        if result.done:
            return taken + 1 if result.success else None
    return None


def true_pivot(costs: list[int | None]) -> int | None:
    """The first step after which the cost to go never came back down to what it was before it (out
    of reach counts as endless): the last visit of the attempt's closest state, its step index. None
    when the attempt ended at its closest state (it ran out of steps while still on its way, or was
    stuck): no step went wrong for good, so there is nothing to name.
    """
    far = [float("inf") if c is None else c for c in costs]
    for step in range(len(far) - 1):
        if far[step] < min(far[step + 1 :]):
            return step
    return None


def closest(costs: list[int | None]) -> set[int]:
    """The prefixes (kept-step counts) whose state was the attempt's closest to the goal: where a
    perfect retry restarts.
    """
    far = [float("inf") if c is None else c for c in costs]
    best = min(far)
    return {k for k, c in enumerate(far) if c == best} if best != float("inf") else set()


def score_run(env: str, params: dict[str, Any], reflections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per reflected attempt that recorded its path: the true pivot, the reflection's
    `pivotal_step` and `no_return_step`, the restart the pivot chose (`kept_steps`) and whether that
    restart was at a closest state.
    """
    rows = []
    for reflection in reflections:
        path = reflection.get("attempt_path")
        if not path:
            continue
        costs = costs_to_go(env, params, [(action, arguments or {}) for action, arguments in path])
        truth, best = true_pivot(costs), closest(costs)
        kept = reflection.get("kept_steps")
        rows.append(
            {
                "env": env,
                "attempt": reflection.get("attempt", 0),
                "steps": len(path),
                "true_pivot": truth,
                "named": reflection.get("pivotal_step"),
                "no_return": reflection.get("no_return_step"),
                "kept": kept,
                "restart_closest": None if kept is None or not best else kept in best,
                "restart_excess": None if kept is None or not best else _excess(costs, kept),
            }
        )
    return rows


def _excess(costs: list[int | None], kept: int) -> float | None:
    """How much farther from the goal the chosen restart was than the closest state (None: out of reach)."""
    here = costs[min(kept, len(costs) - 1)]
    reachable = [c for c in costs if c is not None]
    return None if here is None or not reachable else float(here - min(reachable))


def accuracy(rows: list[dict[str, Any]], field: str = "named") -> dict[str, Any]:
    """Top-1 and within-one accuracy of `field` against the true pivot, over the attempts that have one,
    with 95% Wilson intervals.
    """
    scored = [r for r in rows if r["true_pivot"] is not None and r.get(field) is not None]
    top1 = sum(r[field] == r["true_pivot"] for r in scored)
    near = sum(abs(r[field] - r["true_pivot"]) <= 1 for r in scored)
    n = len(scored)
    return {
        "attempts": len(rows),
        "scored": n,
        "no_true_pivot": sum(r["true_pivot"] is None for r in rows),
        "top1": round(top1 / n, 3) if n else None,
        "top1_ci95": wilson(top1, n) if n else None,
        "within1": round(near / n, 3) if n else None,
        "within1_ci95": wilson(near, n) if n else None,
    }


def attempt_outcomes(
    env: str,
    params: dict[str, Any],
    reflections: list[dict[str, Any]],
    final_path: list[Call],
    attempts: int,
    limit: int,
) -> list[dict[str, Any]]:
    """How each attempt of one run ended and what it executed: the steps it took past the kept ones
    (`new_steps`) and its end, read from the world played along its path: `success`, `ended` (the
    world ended it without success: a fall), `ran_out` (its path reached the step limit) or `other`
    (stuck, or the run's shared total spent). Of the run's `attempts`, the last is `final_path` when
    no reflection recorded it (a success, or a failure with no retry left and memory off). Where a pivotal
    retry's executed steps go (issue 42): the bench sums `new_steps` per first attempt and retry and
    per end. `repeated_fatal`: an attempt the world ended on the very call, from the very state, that
    ended an earlier one of the run (the state as the world compares two moments, `state_key` where it
    has one: a snapshot's move counter would keep a fall reached by a detour from matching). An
    attempt the world did not end repeats nothing.
    """
    rows, fatal = [], set()
    for number, (kept, path) in enumerate(attempt_paths(reflections, final_path, attempts)):
        states, end = played(env, params, path)
        ended = (states[-2], json.dumps(path[-1], sort_keys=True)) if end == "ended" else None
        if end == "other" and len(path) >= limit:
            end = "ran_out"
        rows.append({"attempt": number, "kept": kept, "new_steps": len(path) - kept, "end": end,
                     "repeated_fatal": ended is not None and ended in fatal})  # fmt: skip
        if ended is not None:
            fatal.add(ended)
    return rows


def attempt_paths(
    reflections: list[dict[str, Any]], final_path: list[Call], attempts: int
) -> list[tuple[int, list[Call]]]:
    """Each attempt's kept steps (the restart its retry began from; 0 for the first) and whole path:
    the reflections' recorded paths, then `final_path` for the attempts none recorded (`attempt_outcomes`).
    """
    paths = [[(a, x or {}) for a, x in r.get("attempt_path") or []] for r in reflections][:attempts]
    paths += [final_path] * (attempts - len(paths))
    return [(reflections[n - 1].get("kept_steps", 0) if n else 0, path) for n, path in enumerate(paths)]


def played(env: str, params: dict[str, Any], path: list[Call]) -> tuple[list[str], str]:
    """The world's state (`state_of`: its state_key, else its snapshot) before each step and after the
    last, and how the path ended.
    """
    name = env.removesuffix(BLIND)
    world = make_environment(name)
    world.reset(Task(env=name, params=params))
    states, end = [], "other"
    for action, arguments in path:
        states.append(_state(world))
        result = world.step(action, arguments)
        if result.done:
            end = "success" if result.success else "ended"
    states.append(_state(world))
    return states, end


def _state(world: Environment) -> str:
    shot = getattr(world, "snapshot", None)
    return json.dumps(state_of(world, shot() if callable(shot) else None), sort_keys=True, default=str)


def steps_by_end(runs: list[list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Executed steps and attempts per first attempt / retry and per end, over runs' `attempt_outcomes`."""
    out: dict[str, dict[str, int]] = {}
    for attempts in runs:
        for row in attempts:
            cell = out.setdefault(
                f"{'first' if row['attempt'] == 0 else 'retry'} {row['end']}", {"attempts": 0, "steps": 0}
            )
            cell["attempts"] += 1
            cell["steps"] += row["new_steps"]
            cell["repeated_fatal"] = cell.get("repeated_fatal", 0) + int(row["repeated_fatal"])
    return dict(sorted(out.items()))
