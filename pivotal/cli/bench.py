"""`pivotal bench`: run the ablations and write report.md, results.json and PNG plots."""

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from pivotal.errors import PivotalError

QUICK = {
    "envs": ["gridworld", "frozenlake", "taxi", "configs", "minesweeper"],
    "errors": [0.3],
    "streams": 2,
    "tasks": 4,
}
FULL = {
    "envs": ["gridworld", "frozenlake", "taxi", "configs", "minesweeper"],
    "errors": [0.1, 0.3, 0.5],
    "streams": 6,
    "tasks": 8,
}


def add_commands(commands: Any) -> None:
    bench = commands.add_parser("bench", help="ablations side by side: report.md, results.json, PNG plots")
    bench.add_argument("--quick", action="store_true", help="a small run (< 3 min on 2 cores) with the same shape")
    bench.add_argument("--out", default="bench-report", help="output folder (default bench-report)")
    bench.add_argument("--envs", nargs="+", help=f"environments (default {' '.join(FULL['envs'])})")
    bench.add_argument("--errors", nargs="+", type=float, help="sim error rates (default 0.1 0.3 0.5)")
    bench.add_argument("--streams", type=int, help="task streams per configuration and environment")
    bench.add_argument("--tasks", type=int, help="tasks per stream (they share one lesson store)")
    bench.add_argument(
        "--local",
        type=int,
        default=0,
        metavar="N",
        help="also run N gridworld tasks with the embedded model (slow: ~1.5 min each)",
    )
    bench.add_argument("--concurrency", type=int, default=4, help="streams run at once")
    bench.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    from pivotal.bench.ablations import Plan, run_plan
    from pivotal.bench.report import write

    try:
        import matplotlib  # noqa: F401 — checked first, so a missing extra costs no benchmark time
    except ImportError:
        raise PivotalError("pivotal bench draws its plots with matplotlib: pip install -e '.[bench]'") from None

    shape = dict(QUICK if args.quick else FULL)
    shape.update(
        {
            k: v
            for k, v in (("envs", args.envs), ("errors", args.errors), ("streams", args.streams), ("tasks", args.tasks))
            if v is not None
        }
    )
    if shape["streams"] <= 0 or shape["tasks"] <= 0 or args.concurrency <= 0:
        raise PivotalError("--streams, --tasks and --concurrency must be > 0")
    plan = Plan(**shape)
    started = time.perf_counter()
    records = asyncio.run(run_plan(plan, args.concurrency))
    local = asyncio.run(_local(args.local)) if args.local else None
    results = _results(records, plan, local, time.perf_counter() - started)
    for path in write(Path(args.out), results):
        print(path)
    return 0


def _results(records: list[dict[str, Any]], plan: Any, local: dict[str, Any] | None, wall: float) -> dict[str, Any]:
    from pivotal.bench import metrics

    return {
        "meta": {
            "command": "pivotal " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "pivotal bench",
            "tasks_run": len(records),
            "wall_s": round(wall, 1),
            "model": plan.model,
            "errors": plan.errors,
            "envs": plan.envs,
            "streams": plan.streams,
            "tasks": plan.tasks,
            "configs": plan.configs,
        },
        "groups": metrics.by_group(records),
        "pivotal_vs_full": metrics.pivotal_vs_full(records),
        "memory_curve": metrics.memory_curve(records),
        "local": local,
        "records": records,
    }


async def _local(tasks: int) -> dict[str, Any]:
    """The embedded model on small gridworlds: the real-model check, few tasks because each is slow."""
    from pivotal.bench.ablations import Plan, run_stream
    from pivotal.bench.metrics import summarise

    plan = Plan(
        envs=["gridworld"],
        errors=[0.0],
        streams=tasks,
        tasks=1,
        model="local",
        max_pivot_retries=1,
        params={"size": 4},
        limits={"max_steps": 6, "max_critique_rounds": 1},
    )
    configs = {}
    for config in ("actor", "critic+pivotal"):
        rows = [row for seed in range(tasks) for row in await run_stream(plan, "gridworld", 0.0, config, seed)]
        configs[config] = summarise(rows)
    return {
        "env": f"gridworld seeds 0–{tasks - 1}, 4x4, max 6 steps, 1 critique round, 1 retry",
        "tasks": tasks,
        "configs": configs,
    }
