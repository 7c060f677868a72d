"""Go back to just before the pivotal step, as far as the environment allows.

Which step is redone is `Context.pivot`: the reflection's first mistake, its point of no return
(the last state from which the goal was still reachable, which keeps more of the path), or per
failure the restart with the shortest retry that still fits the path budget ("best"): the state the
environment said was closest to the goal, where it says (`Step.goal_steps_left`), else whichever of
the two the reflection's estimates favour, else the one the run's own record favours (critic
verdicts, no-ops, revisited states: `recorded_restart`), as an application's tools know no distance.
`full` retry goes back to step 0 instead. How the world goes back is the environment's
declaration (`rewind`): restored from a snapshot or replayed (the trajectory is cut), undone by
compensating actions that the actor proposes next and the critic reviews, or not at all: the
retry then goes forward from the real state with every executed step still in the trajectory.
No executed action is ever run again here.
"""

import json
from typing import Any

from langgraph.runtime import Runtime

from pivotal.core.context import Context
from pivotal.core.environments.live import rewind
from pivotal.core.state import PivotUpdate, Proposal, Reflection, State, Step, task_of


async def pivot(state: State, runtime: Runtime[Context]) -> PivotUpdate:
    reflections = state["reflections"]
    pivotal = runtime.context.retry == "pivotal"
    keep = _pivot_step(reflections, runtime.context, state["trajectory"], state.get("initial_state")) if pivotal else 0
    task = task_of(state)
    rewound = await rewind(state["run_id"], task, state["trajectory"], keep, runtime.context.step_timeout)
    trajectory = rewound.trajectory
    observation = trajectory[-1]["observation"] if trajectory else state["first_observation"]
    went_back = rewound.mode in ("snapshot", "replay")  # else every executed step stays in the trajectory
    kept = len(trajectory)
    note: Reflection = {
        "rewind": rewound.mode,
        "kept_steps": kept,
        "not_undone": [] if went_back else _not_undone(trajectory, keep, rewound.compensations),
    }
    return {
        "trajectory": trajectory,
        "observation": observation,
        "attempt_failed": "",
        "stuck": False,
        "reflections": [*reflections[:-1], {**reflections[-1], **note}],
        "retries": state.get("retries", 0) + 1,
        "proposal": None,
        "chosen": None,
        "critiques": [],
        "compensations": rewound.compensations,
        # kept steps are not this attempt's: with compensate/forward they even stay in the world
        "attempt_start": kept if runtime.context.budget == "new" or not went_back else 0,
        "counters": {"replayed": rewound.replayed, "kept_steps": kept},
    }


def _pivot_step(reflections: list[Reflection], context: Context, trajectory: list[Step], initial: Any = None) -> int:
    """The step the retry redoes: every step before it is kept. A reflection checkpointed before
    reflections named a point of no return has only its first mistake.
    """
    reflection = reflections[-1]
    first = reflection["pivotal_step"]
    late = reflection.get("no_return_step", first)
    if context.pivot == "best" and (closest := closest_restart(trajectory, context)) is not None:
        return closest
    if context.pivot == "first_mistake" or late <= first:
        return first
    if context.pivot == "no_return":
        return late
    left_first, left_late = reflection.get("steps_left_at_pivotal"), reflection.get("steps_left_at_no_return")
    chosen = best_restart(first, late, left_first, left_late, context)
    if not READ_THE_RECORD or (left_first is not None and left_late is not None):
        return chosen
    return recorded_restart(trajectory, initial, _half_way(chosen, first, late, context), late)


READ_THE_RECORD = True
"""Whether `best` falls back on the run's record (`recorded_restart`) where nothing says how far the
goal is; benchmarks/bench_pivot_accuracy.py switches it off to measure the reflection's choice alone."""


def _half_way(chosen: int, first: int, late: int, context: Context) -> int:
    """Where nothing says how far the goal was and the point of no return would use more than half the
    path: keep the path up to its half (not before the first mistake), not just the steps before the
    first mistake. An attempt that ran out of steps names its last step as the point of no return, and
    restarting at its first slip threw away the progress after it. Under "new" kept steps take no room.
    """
    if chosen != first or late * 2 <= context.max_steps or context.budget == "new":
        return chosen
    return max(first, min(late, context.max_steps // 2))


def recorded_restart(trajectory: list[Step], initial: Any, chosen: int, late: int) -> int:
    """Without the environment's distances or the reflection's estimates: the restart the run's own
    record favours, no later than the point of no return. From the reflection's choice, go back to
    the state with the best progress estimate (`progress_estimates`) where one is better, then to
    the first visit of that state (a loop before it only used up room).

    Measured on the retry bench's worlds with every hook off (benchmarks/bench_pivot_accuracy.py
    --parts rules, 144 paired tasks): executed steps 0.873x full retry's against 0.897x for the
    reflection's choice alone, successes 124 and 124 (full retry 118).
    """
    if chosen >= len(trajectory):
        return chosen  # stuck before acting: every executed step is kept
    estimates = progress_estimates(trajectory, initial)
    bound = max(0, min(late, len(trajectory) - 1))
    chosen = min(chosen, bound)
    best = min(estimates[: bound + 1])
    if estimates[chosen] > best:
        chosen = estimates.index(best)
    return _first_visit(trajectory, initial, chosen)


def _first_visit(trajectory: list[Step], initial: Any, keep: int) -> int:
    """The fewest kept steps that leave the world exactly as `keep` kept steps do (by its reported state)."""
    states = [initial, *(step.get("state") for step in trajectory)]
    here = states[keep]
    if here is None:
        return keep
    return next(k for k in range(keep + 1) if states[k] == here)


def progress_estimates(trajectory: list[Step], initial: Any) -> list[float]:
    """What the run itself recorded of the distance to the goal, without the environment's hook: entry
    k for the state after k steps, lower is closer. A step the critic approved counts as one step
    closer and one it let through doubting (revise) one farther; one no critic judged, none. A state
    the world was in before gets that earlier estimate back (a loop gains nothing), and a step that
    changed nothing keeps the one before it.
    """
    estimates = [0.0]
    seen: dict[str, float] = {}
    if initial is not None:
        seen[json.dumps(initial, sort_keys=True, default=str)] = 0.0
    for step in trajectory:
        here = estimates[-1] + _judged(step)
        if step.get("no_op") or step.get("error"):
            here = estimates[-1]
        if step.get("state") is not None:
            key = json.dumps(step["state"], sort_keys=True, default=str)
            here = seen.setdefault(key, here)
        estimates.append(here)
    return estimates


def _judged(step: Step) -> float:
    verdicts = [v for v in step.get("verdicts") or [] if v.get("source") in ("critic", "critic-advisory")]
    ran = [v for v in verdicts if v.get("action") == step["action"] and v.get("arguments") == step.get("arguments")]
    if not ran:
        return 0.0
    return -1.0 if ran[-1].get("decision") == "approve" else 1.0


def best_restart(first: int, late: int, left_first: int | None, left_late: int | None, context: Context) -> int:
    """Keep the detour after the first mistake (restart at `late`, the point of no return) only when
    it made progress and the rest is likely to fit: the steps still needed from there, at the pace
    this attempt kept on the detour (its steps per step of progress), within the room the path
    budget leaves. Else the first mistake, whose retry has the most room. Under "new" kept steps
    take no room. Without estimates the detour is kept while it uses at most half the path's room.
    Measured on benchmarks/bench_retry.py (96 seeds, fair budget) against first_mistake: success
    83 vs 82, executed steps 0.85x vs 0.885x full retry's; "no_return" 79 and 0.785x.
    """
    if left_first is None or left_late is None:
        return late if context.budget == "new" or late * 2 <= context.max_steps else first
    if left_late >= left_first:
        return first  # the detour made no progress: keeping it saves nothing and uses up room
    pace = max((late - first) / (left_first - left_late), 1.0)
    return late if left_late * pace <= _room(late, context) else first


def closest_restart(trajectory: list[Step], context: Context) -> int | None:
    """Where the environment said how far the goal was after each step: restart from the state
    closest to the goal (the earliest of equals, for the most room) whose steps still needed fit the
    room the path budget leaves after the kept steps. That is the restart a perfect retry would take
    (benchmarks/bench_retry.py); None where the environment did not say or nothing fits. The
    reflection's point of no return does not bound it: a state the environment gives a distance from
    is not past the point of no return by its own word (None would say so), and where the reflection
    named an earlier step the retry threw away progress it had.

    Measured on held-out seeds of the retry bench (240 tasks each, seeds 20-29 and 30-39 of each
    cell) against the estimate rule (`best_restart`): executed steps 0.815x vs 0.859x and 0.798x vs 0.831x of
    full retry's, successes 217 vs 217 and 214 vs 212, then bounded by the reflection's point of no
    return. Unbounded (benchmarks/bench_retry_floor.py, hook on, 300 tasks each): 0.812x vs 0.827x and
    276 vs 268 successes on dev seeds, 0.834x vs 0.846x and 277 vs 272 held-out; the restart is then
    the closest state in every case, as an oracle pivot's.
    """
    left = {step["index"] + 1: step["goal_steps_left"] for step in trajectory if "goal_steps_left" in step}
    fits = [(n, keep) for keep, n in left.items() if n is not None and n <= _room(keep, context)]
    return min(fits)[1] if fits else None


def _room(keep: int, context: Context) -> int:
    """The steps a retry that keeps `keep` steps may take on its path: kept steps count against
    `max_steps`, except under the "new" budget.
    """
    return context.max_steps - (0 if context.budget == "new" else keep)


def _not_undone(trajectory: list[Step], keep: int, compensations: list[Proposal]) -> list[int]:
    """Abandoned steps that stay done in the world: the actor must take them as given."""
    undone = {c["compensates"] for c in compensations}
    return [s["index"] for s in trajectory[keep:] if s["index"] not in undone and s.get("compensates") is None]
