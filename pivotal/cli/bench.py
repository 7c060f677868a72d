"""`pivotal bench`: run the ablations and write report.md, results.json and PNG plots."""

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from pivotal.cli.options import Commands
from pivotal.core.errors import PivotalError

QUICK: dict[str, Any] = {
    "envs": ["gridworld", "frozenlake", "taxi", "configs", "minesweeper"],
    "errors": [0.3],
    "streams": 2,
    "tasks": 4,
}
# 12 streams × 8 tasks = 96 tasks per cell. Measured 2026-11-30 (errors 0.3 and 0.5), pivotal retry's saving of
# executed steps against full retry had 95% half-widths of 4–9 points at 48 tasks per cell and 4–12 at 32: the
# savings of 6–26% cleared zero, those of 3–6% (frozenlake, taxi, configs at 0.5) did not. At 96 the half-width
# is ~4–6 points, so savings of ~10% or more clear zero with ~80% power (z 1.96 + 0.84) and the pooled interval
# is ~±2 points; the smaller ones would need 200–400 tasks per cell, and the report calls them not significant.
FULL: dict[str, Any] = {
    "envs": ["gridworld", "frozenlake", "taxi", "configs", "minesweeper"],
    "errors": [0.1, 0.3, 0.5],
    "streams": 12,
    "tasks": 8,
}


CONFIG_COUNT = 8
"""len(ablations.CONFIGS), for the help text; not imported, since that loads the graph on every command
(tests/test_bench.py checks the two agree)."""
SECONDS_PER_RUN = 0.24
"""Wall seconds per task run, 4 streams at once (one process, so one core): the full run took 2,066 s for 8,640
runs on 2 idle cores, 2026-12-01, once Taxi's truth judge stopped searching its table on every step (it had made
a full run ~100 min, and the figure before that, 0.26 s from gridworld and frozenlake alone, promised ~40)."""


def add_commands(commands: Commands) -> None:
    runs = len(FULL["envs"]) * len(FULL["errors"]) * CONFIG_COUNT * FULL["streams"] * FULL["tasks"]
    bench = commands.add_parser(
        "bench",
        help="ablations side by side: report.md, results.json, PNG plots",
        description=f"The full run (no --quick): {len(FULL['envs'])} environments × {len(FULL['errors'])} error rates "
        f"× {CONFIG_COUNT} configurations × {FULL['streams'] * FULL['tasks']} tasks = {runs:,} runs, about "
        f"{5 * round(runs * SECONDS_PER_RUN / 300):.0f} min on 2 idle cores.",
    )
    bench.add_argument(
        "--quick", action="store_true", help="a small run (~2 min on 2 cores): 8 tasks per cell, wide intervals"
    )
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
        help=f"also run N gridworld tasks per configuration ({', '.join(LOCAL_CONFIGS)}) with the embedded model, "
        "reported with the same tables (slow: ~2 min per task, its 4 configurations, on 2 idle cores; more on busy "
        "ones; intervals need N ≥ 5)",
    )
    bench.add_argument("--concurrency", type=int, default=4, help="streams run at once")
    bench.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    from pivotal.bench.ablations import Plan, run_plan, task_count
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
    if shape["streams"] <= 0 or shape["tasks"] <= 0 or args.concurrency <= 0 or args.local < 0:
        raise PivotalError("--streams, --tasks and --concurrency must be > 0 and --local ≥ 0")
    plan = Plan(**shape)
    embedded = local_plan(args.local) if args.local else None
    started = time.perf_counter()
    with _progress(task_count(plan) + (task_count(embedded) if embedded else 0)) as bar:
        tick = lambda row: _tick(bar, row)  # noqa: E731
        records = asyncio.run(run_plan(plan, args.concurrency, tick))
        local = asyncio.run(local_results(embedded, tick)) if embedded else None
    results = _results(records, plan, local, time.perf_counter() - started)
    for path in write(Path(args.out), results):
        print(path)
    return 0


def _progress(total: int) -> Any:
    """On stderr, so the printed paths stay clean for scripts; only on a terminal, like `pivotal batch`."""
    from tqdm import tqdm

    return tqdm(total=total, unit="task", file=sys.stderr, disable=not sys.stderr.isatty(), dynamic_ncols=True)


def _tick(bar: Any, row: dict[str, Any]) -> None:
    bar.set_postfix_str(f"{row['env']}@{row['error']} {row['config']}", refresh=False)
    bar.update()


def _results(records: list[dict[str, Any]], plan: Any, local: dict[str, Any] | None, wall: float) -> dict[str, Any]:
    from pivotal.bench import metrics
    from pivotal.bench.ablations import COMPARISONS, rules

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
            "rules": {config: rules(config) for config in plan.configs},
        },
        "groups": metrics.by_group(records),
        "comparisons": metrics.comparisons(records, COMPARISONS),
        "memory_curve": metrics.memory_curve(records),
        "pivot_accuracy": metrics.pivot_accuracy(records),
        "local": local,
        "records": records,
    }


LOCAL_CONFIGS = ["actor", "critic", "critic+full", "critic+pivotal"]


def local_plan(tasks: int, model: str = "local") -> Any:
    """The embedded model on small gridworlds: the real-model check, few tasks because each is slow."""
    from pivotal.bench.ablations import Plan

    return Plan(
        envs=["gridworld"],
        errors=[0.0],
        streams=tasks,
        tasks=1,
        configs=LOCAL_CONFIGS,
        model=model,
        max_pivot_retries=1,
        params={"size": 4},
        limits={"max_steps": 6, "max_critique_rounds": 1},
    )


async def local_results(plan: Any, on_record: Any = None) -> dict[str, Any]:
    """The embedded model's runs through the same metrics as the sim runs, one task at a time (one model)."""
    from pivotal.bench import metrics
    from pivotal.bench.ablations import COMPARISONS, run_plan

    records = await run_plan(plan, 1, on_record)
    return {
        "env": f"gridworld seeds 0–{plan.streams - 1}, 4x4, max 6 steps, 1 critique round, 1 retry; "
        f"model `{plan.model}` (no injected error: `@0.0` is only the label)",
        "tasks": plan.streams,
        "groups": metrics.by_group(records),
        "comparisons": metrics.comparisons(records, COMPARISONS),
        "records": records,
    }
