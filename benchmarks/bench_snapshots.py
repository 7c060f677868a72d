"""Per-step cost of snapshotting after every step against snapshotting only when it pays (every ~k steps).

The environment is a gridworld whose snapshot waits `--snapshot-ms` and whose step waits `--step-ms`
(`SlowSnapshotWorld`: a container checkpoint, a big simulator copy). Declared `rewind = "replay"`,
Pivotal snapshots it once the steps since the last snapshot took as long as a snapshot, and a pivot
restores the nearest snapshot and replays the steps after it; without the declaration it is
snapshotted after every step and a pivot restores. The same tasks (`sim` model with errors and no
critic, so attempts fail and pivots go back mid-way) run on both in interleaved passes (the order
alternates, so drift in the machine's load falls on both alike). Per configuration: wall seconds per
executed step (median over passes), of which the environment's waits (snapshots and steps,
replayed ones included), snapshots and replayed steps, and the ratio to every-step snapshots. The
decisions (every step's action, observation and state, and the outcome) must be identical: the
script says whether they are.

Run: python benchmarks/bench_snapshots.py [--tasks 6] [--passes 3] [--snapshot-ms 20] [--step-ms 2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.graphs import arun
from pivotal.testing.slow_snapshot_env import SlowSnapshotWorld

CONFIGS = {"every-step": False, "every-k": True}
"""Configuration → whether the environment declares replay safe."""
BASELINE = "every-step"
made: list[SlowSnapshotWorld] = []


def register(snapshot_s: float, step_s: float) -> None:
    for name, replay in CONFIGS.items():
        register_environment(f"bench-{name}", lambda replay=replay: _made(replay, snapshot_s, step_s))


def _made(replay: bool, snapshot_s: float, step_s: float) -> SlowSnapshotWorld:
    env = SlowSnapshotWorld(replay, snapshot_seconds=snapshot_s, step_seconds=step_s)
    made.append(env)
    return env


async def one_pass(config: str, tasks: int) -> dict[str, Any]:
    """Every task once: wall seconds, executed steps, snapshots taken, steps replayed, and the decisions."""
    executed = snapshots = replayed = 0
    decisions = []
    wall = time.perf_counter()
    for seed in range(tasks):
        context = Context(model=f"sim:error=0.35,seed={seed}", critic=False, memory=False, max_steps=12)
        result = await arun({"env": f"bench-{config}", "params": {"seed": seed}}, context, checkpoint_path=":memory:")
        executed, replayed, snapshots = (
            executed + result.executed,
            replayed + result.replayed,
            snapshots + made[-1].snapshots,
        )
        steps = [(s["action"], s["observation"], s["state"]) for s in result.trajectory]
        decisions.append((result.status, steps, [r["pivotal_step"] for r in result.reflections]))
    wall = time.perf_counter() - wall
    return {"wall_s": wall, "executed": executed, "snapshots": snapshots, "replayed": replayed, "decisions": decisions}


async def measure(tasks: int, passes: int, snapshot_s: float, step_s: float) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {config: [] for config in CONFIGS}
    await one_pass(BASELINE, 1)  # warm-up: imports, compiled graph
    names = list(CONFIGS)
    for index in range(passes):
        for config in names[index % 2 :] + names[: index % 2]:
            runs[config].append(await one_pass(config, tasks))
    identical = all(run["decisions"] == runs[BASELINE][0]["decisions"] for passes_ in runs.values() for run in passes_)
    found = {}
    for config, passes_ in runs.items():
        first = passes_[0]
        per_step = statistics.median(run["wall_s"] / run["executed"] for run in passes_)
        found[config] = {
            "executed": first["executed"],
            "snapshots": first["snapshots"],
            "replayed": first["replayed"],
            "ms_per_step": round(1000 * per_step, 2),
            "env_ms_per_step": round(
                1000
                * (first["snapshots"] * snapshot_s + (first["executed"] + first["replayed"]) * step_s)
                / first["executed"],
                2,
            ),
        }
    for numbers in found.values():
        numbers["vs_every_step"] = round(numbers["ms_per_step"] / found[BASELINE]["ms_per_step"], 2)
    pivots = sum(len(d[2]) for d in runs[BASELINE][0]["decisions"])
    return {
        "tasks": tasks,
        "passes": passes,
        "snapshot_ms": 1000 * snapshot_s,
        "step_ms": 1000 * step_s,
        "pivots": pivots,
        "identical_decisions": identical,
        "configs": found,
    }


def report(found: dict[str, Any]) -> str:
    head = (
        f"{found['tasks']} gridworld tasks ({found['pivots']} pivots), snapshot {found['snapshot_ms']:g} ms, "
        f"step {found['step_ms']:g} ms, median of {found['passes']} passes; "
        f"identical decisions: {found['identical_decisions']}"
    )
    rows = [
        f"  {config:<11} {n['executed']:>4} steps  {n['snapshots']:>4} snapshots  {n['replayed']:>3} replayed"
        f"  {n['ms_per_step']:7.2f} ms/step ({n['vs_every_step']:.2f}x), of which waits {n['env_ms_per_step']:6.2f}"
        for config, n in found["configs"].items()
    ]
    return "\n".join([head, *rows])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--snapshot-ms", type=float, default=20.0)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    register(arguments.snapshot_ms / 1000, arguments.step_ms / 1000)
    results = asyncio.run(
        measure(arguments.tasks, arguments.passes, arguments.snapshot_ms / 1000, arguments.step_ms / 1000)
    )
    print(json.dumps(results, indent=2) if arguments.json else report(results))
