"""Where `best`'s steps go above the perfect-retry floor, with the environment's hook on (issue 42).

bench_pivot_accuracy's tasks on the hooked worlds (`--offset N --seeds S`: word-room, cave-quest,
cliff-grid, lava-key-grid, gridworld; `sim` error 0.2, 0.3, 0.4; critic on and off; budget fair,
memory off, max_pivot_retries 2), each run with full retry, with `best`, and with an **oracle pivot**
(`oracle`): the restart at the state of the failed attempt closest to the goal by the world's own
distances, the start included, the earliest of equals that fits the path budget, with no bound from
the reflection; the retry then runs as any other, the `sim` actor slipping at its error rate. Its cost
is the **realistic floor**: what a pivot rule that always picks the best restart pays when the actor
keeps making mistakes. Beside it, the **perfect floor** of bench_retry: each failed first attempt,
then a retry from its closest state (no budget bound) that makes no mistake (`steps_to_goal`).

For every task whose first attempt failed, `best`'s retry steps minus the perfect floor's, split:

- `restart_further`: how much farther from the goal `best`'s first restart was than the closest state
  (the steps a perfect retry from there would spend over the floor's);
- `slips_in_success`: a first retry that succeeded spent more than the distance from its restart;
- `failed_ended` / `failed_ran_out` / `failed_other`: a first retry that failed (the world ended it,
  it used its path budget, or it was stuck / ended by the run's checks), its steps and all later
  retries' over the distance from its restart;
- `no_retry`: no retry ran (the floor's retry is counted as saved: negative).

Run: python benchmarks/bench_retry_floor.py [--offset 100] [--seeds 100] [--configs full best oracle bounded]
     (`bounded`: `best` as it was before 2026-12-04 late, bounded by the reflection's point of no return)
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import time
from pathlib import Path
from typing import Any

import bench_pivot_accuracy as bench

from pivotal.bench.pivot_truth import attempt_paths, costs_to_go, played
from pivotal.nodes import pivot as pivot_node

RULE: contextvars.ContextVar[tuple[str, str, int] | None] = contextvars.ContextVar("rule", default=None)
"""(rule, env, seed) of the run in this task: `oracle` takes the restart from the world's truth."""
STRATEGIES = {
    "full": {"retry": "full"},
    "best": {"retry": "pivotal", "pivot": "best"},
    "oracle": {"retry": "pivotal", "pivot": "best"},
    "bounded": {"retry": "pivotal", "pivot": "best"},
}
_product_pivot_step = pivot_node._pivot_step
CALLS = [0]


def _oracle_step(reflections: list[Any], context: Any, trajectory: list[Any], initial: Any = None) -> int:
    rule = RULE.get()
    if rule is not None and rule[0] == "bounded":
        return _bounded_step(reflections, context, trajectory, initial)
    if rule is None or rule[0] != "oracle":
        return _product_pivot_step(reflections, context, trajectory, initial)
    _, env, seed = rule
    CALLS[0] += 1
    path = [(step["action"], step.get("arguments") or {}) for step in trajectory]
    costs = costs_to_go(env, {"seed": seed}, path)
    fits = [(c, k) for k, c in enumerate(costs) if c is not None and c <= context.max_steps - k]
    return min(fits)[1] if fits else 0


def _bounded_step(reflections: list[Any], context: Any, trajectory: list[Any], initial: Any = None) -> int:
    """`best` before 2026-12-04 late: the closest recorded state no later than the reflection's point
    of no return, and not consulted where that point is not after the first mistake.
    """
    first = reflections[-1]["pivotal_step"]
    late = reflections[-1].get("no_return_step", first)
    if late <= first:
        return first
    left = {step["index"] + 1: step["goal_steps_left"] for step in trajectory if "goal_steps_left" in step}
    room = lambda keep: context.max_steps - (0 if context.budget == "new" else keep)  # noqa: E731
    fits = [(n, keep) for keep, n in left.items() if keep <= late and n is not None and n <= room(keep)]
    if fits:
        return min(fits)[1]
    blind = [{k: v for k, v in step.items() if k != "goal_steps_left"} for step in trajectory]
    return _product_pivot_step(reflections, context, blind, initial)


pivot_node._pivot_step = _oracle_step


async def run(env: str, seed: int, error: float, critic: bool, fields: dict[str, Any], rule: str) -> dict[str, Any]:
    RULE.set((rule, env, seed))
    result = await bench.run_task(env, seed, error, critic, fields)
    row = bench.row_of(env, seed, error, critic, result)
    final = [(step["action"], step.get("arguments") or {}) for step in result.trajectory]
    row["read"] = read(env, seed, result, final, bench.limit_of(env))
    return row


def read(env: str, seed: int, result: Any, final: list[Any], limit: int) -> dict[str, Any]:
    """One run against the world's truth: first attempt's steps and end, its closest state's distance
    (free: the perfect floor's; fitting the budget), and each retry's restart distance, steps and end.
    """
    params = {"seed": seed}
    attempts = attempt_paths(result.reflections, final, result.retries.get("count", 0) + 1)
    out: dict[str, Any] = {"attempts": []}
    for number, (kept, path) in enumerate(attempts):
        _, end = played(env, params, path)
        if end == "other" and len(path) >= limit:
            end = "ran_out"
        if end == "other":
            why = result.reflections[number].get("failure", "") if number < len(result.reflections) else result.reason
            end = "other_" + _why(str(why))
        costs = costs_to_go(env, params, path)
        row = {"kept": kept, "new_steps": len(path) - kept, "end": end,
               "restart_cost": costs[min(kept, len(costs) - 1)]}  # fmt: skip
        if number == 0:
            reach = [c for c in costs if c is not None]
            row["closest"] = min(reach) if reach else None
            fits = [c for k, c in enumerate(costs) if c is not None and c <= limit - k]
            row["closest_fit"] = min(fits) if fits else None
            row["closest_set"] = [k for k, c in enumerate(costs) if c is not None and c == row["closest"]]
        out["attempts"].append(row)
    return out


def _why(text: str) -> str:
    """What ended an attempt that neither the world nor its path budget ended (the executor's words)."""
    if "out of reach" in text:
        return "out_of_reach"
    if "needs at least" in text:
        return "no_room"
    if "circles" in text:
        return "loop"
    return "stuck_or_total"


def decompose(rows: list[dict[str, Any]], config: str) -> dict[str, Any]:
    """`config`'s retry steps over the perfect floor's, on the tasks whose first attempt failed."""
    parts = dict.fromkeys(
        (
            "restart_further",
            "slips_in_success",
            "failed_ended",
            "failed_ran_out",
            "failed_other_out_of_reach",
            "failed_other_no_room",
            "failed_other_loop",
            "failed_other_stuck_or_total",
            "no_retry",
        ),
        0,
    )
    out: dict[str, Any] = {"tasks_first_failed": 0, "retry_steps": 0, "floor_retry_steps": 0,
                           "floor_fit_retry_steps": 0, "restart_at_closest": 0, "restarts": 0,
                           "all_restarts": 0, "all_restarts_at_closest": 0, "successes": 0}  # fmt: skip
    ends: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["config"] != config:
            continue
        out["successes"] += r["status"] == "success"
        first, *retries = r["read"]["attempts"]
        for a in retries:
            cell = ends.setdefault(a["end"], {"attempts": 0, "steps": 0})
            cell["attempts"] += 1
            cell["steps"] += a["new_steps"]
        if first["end"] == "success":
            continue
        out["tasks_first_failed"] += 1
        floor = first["closest"] or 0
        out["floor_retry_steps"] += floor
        out["floor_fit_retry_steps"] += first["closest_fit"] if first["closest_fit"] is not None else 0
        spent = sum(a["new_steps"] for a in retries)
        out["retry_steps"] += spent
        if not retries:
            parts["no_retry"] -= floor
            continue
        one = retries[0]
        out["restarts"] += 1
        out["restart_at_closest"] += one["kept"] in first["closest_set"]
        here = one["restart_cost"] if one["restart_cost"] is not None else floor
        parts["restart_further"] += here - floor
        if one["end"] == "success":
            parts["slips_in_success"] += spent - here
        else:
            parts[f"failed_{one['end']}"] += spent - here
    for r in rows:  # every restart, scored as bench_pivot_accuracy scores them
        if r["config"] == config:
            for s in r["attempt_scores"]:
                if s["restart_closest"] is not None:
                    out["all_restarts"] += 1
                    out["all_restarts_at_closest"] += s["restart_closest"]
    out["over_floor"] = out["retry_steps"] - out["floor_retry_steps"]
    out["retry_ends"] = ends
    out["parts"] = parts
    return out


def floors(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The perfect floor (and its budget-bound twin) against full retry's executed steps, paired bootstrap."""
    full = [r for r in rows if r["config"] == "full"]
    extra = []
    for r in full:
        first = r["read"]["attempts"][0]
        done = first["end"] == "success"
        for name, key in (("perfect", "closest"), ("perfect_fit", "closest_fit")):
            left = 0 if done else (first[key] if first[key] is not None else 0)
            extra.append({**r, "config": name, "executed": first["new_steps"] + left,
                          "status": "success" if done or first[key] is not None else "failure"})  # fmt: skip
    return {name: bench.compare([*full, *[e for e in extra if e["config"] == name]], name, "full")
            for name in ("perfect", "perfect_fit")}  # fmt: skip


def against_perfect(rows: list[dict[str, Any]], config: str) -> dict[str, Any]:
    """`config`'s executed steps as a ratio of the perfect floor's, paired bootstrap."""
    perfect = []
    for r in rows:
        if r["config"] == "full":
            first = r["read"]["attempts"][0]
            left = 0 if first["end"] == "success" else (first["closest"] or 0)
            perfect.append({**r, "config": "perfect", "executed": first["new_steps"] + left, "status": "success"})
    return bench.compare([*perfect, *[r for r in rows if r["config"] == config]], config, "perfect")


async def measure(seeds: int, offset: int, configs: list[str]) -> list[dict[str, Any]]:
    jobs = [
        (name, (env, seed, error, critic, STRATEGIES[name], name))
        for env, seed, critic in bench.tasks(bench.HOOKED, seeds, offset)
        for error in bench.ERRORS
        for name in configs
    ]
    return await bench.gather(jobs, runner=run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--offset", type=int, default=100)
    parser.add_argument("--configs", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default="retry_floor")
    arguments = parser.parse_args()
    started = time.perf_counter()
    rows = asyncio.run(measure(arguments.seeds, arguments.offset, arguments.configs))
    found: dict[str, Any] = {"seeds": arguments.seeds, "offset": arguments.offset, "hooked": True}
    found["floors"] = floors(rows)
    for name in arguments.configs:
        if name != "full":
            found[name] = {"vs_full": bench.compare(rows, name, "full"), "decompose": decompose(rows, name)}
    found["full"] = {"decompose": decompose(rows, "full")}
    for a, b in (("best", "oracle"), ("bounded", "oracle"), ("best", "bounded")):
        if a in arguments.configs and b in arguments.configs:
            found[f"{a}_vs_{b}"] = bench.compare(rows, a, b)
    for name in arguments.configs:
        if name != "full":
            found[name]["vs_perfect"] = against_perfect(rows, name)
    found["oracle_pivots"] = CALLS[0]
    found["wall_s"] = round(time.perf_counter() - started, 1)
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / f"{arguments.name}_{arguments.offset}.json").write_text(json.dumps(found, indent=1))
    (arguments.out / f"{arguments.name}_{arguments.offset}_runs.json").write_text(json.dumps(rows))
    print(json.dumps({k: v for k, v in found.items()}, indent=1))


if __name__ == "__main__":
    main()
