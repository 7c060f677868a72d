"""Scaling a batch out: one process against Ray workers, side by side in one run.

The same gridworld tasks with `sim` models that sleep a fixed latency per call, memory off, run
- in one process (`run_batch`) on SQLite (bench_batch's `efficiency`, the baseline) and on Postgres;
- on a local Ray instance with 1 and 2 workers (`run_batch_on_ray`), on Postgres,
at the same total concurrency (with 2 workers each runs half of it). Ideal wall time = total
model latency / total concurrency; efficiency = ideal / measured. Each row also gives executed
steps per second, its ratio to the one-process SQLite row, and how busy the machine's CPUs were
(from /proc/stat, so other processes on the machine count too). From the 2-worker rows: what one
worker sustains, the checkpoints Postgres took per second, and the model requests per second,
for the scaling estimate in the README.

Run: python benchmarks/bench_scale.py [--quick] [--tasks 500] [--json]   (needs Postgres at
127.0.0.1:5432 and `pip install -e '.[dev]'`; writes benchmarks/results/scale.json unless --quick)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench_batch import efficiency

from graphs import run_batch, run_batch_on_ray
from graphs.runner import RunResult
from pivotal.context import Context

SERVER = "postgresql://postgres@127.0.0.1:5432"
RESULTS = Path(__file__).parent / "results" / "scale.json"
PLANS = {"latency-0.05": (0.05, 64), "latency-1": (1.0, 256)}
"""(seconds per model call, total tasks in flight): CPU-bound, then latency-bound."""


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


async def measure(
    label: str, latency: float, concurrency: int, batch: Callable[[], Awaitable[list[RunResult]]]
) -> dict[str, Any]:
    busy, total = cpu_ticks()
    started = time.perf_counter()
    results = await batch()
    wall = time.perf_counter() - started
    busy_after, total_after = cpu_ticks()
    calls = sum(r.llm_calls for r in results)
    ideal = calls * latency / concurrency
    return {
        "label": label,
        "tasks": len(results),
        "concurrency": concurrency,
        "latency_s": latency,
        "succeeded": sum(r.status == "success" for r in results),
        "llm_calls": calls,
        "executed_steps": sum(r.executed for r in results),
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "efficiency": round(ideal / wall, 3),
        "steps_per_s": round(sum(r.executed for r in results) / wall, 1),
        "machine_cpu_busy": round((busy_after - busy) / max(total_after - total, 1), 2),
    }


async def plan(tasks: int, latency: float, concurrency: int, url: str, folder: str) -> list[dict[str, Any]]:
    batch = [{"env": "gridworld", "params": {"seed": seed}} for seed in range(tasks)]
    context = Context(model=f"sim:latency={latency}", memory=False, max_pivot_retries=0)
    sqlite = await efficiency(tasks, concurrency, latency, folder)  # bench_batch's one-process baseline
    rows = [{"label": "one process, SQLite", **sqlite, "steps_per_s": None, "machine_cpu_busy": None}]
    rows.append(
        await measure(
            "one process, Postgres",
            latency,
            concurrency,
            lambda: run_batch(batch, context, concurrency=concurrency, checkpoint_path=url),
        )
    )
    for workers in (1, 2):
        rows.append(
            await measure(
                f"Ray, {workers} worker{'s' if workers > 1 else ''}, Postgres",
                latency,
                concurrency,
                lambda workers=workers: run_batch_on_ray(
                    batch, context, checkpoints=url, workers=workers, concurrency=concurrency // workers
                ),
            )
        )
    return rows


async def postgres_checkpoints(url: str) -> int:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as connection:
        cursor = await connection.execute("SELECT count(*) FROM checkpoints")
        return (await cursor.fetchone())[0]


def database() -> tuple[str, Callable[[], None]]:
    import psycopg

    name = f"bench_scale_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

    return f"{SERVER}/{name}", drop


def scaling(rows: list[dict[str, Any]], checkpoints_per_step: float) -> dict[str, Any]:
    """What one worker sustains when CPU-bound (the 50 ms plan's 2-worker row), and the load each
    executed step puts on the model provider and on Postgres: the inputs of the N-machine estimate.
    """
    two = next(r for r in rows if r["label"].startswith("Ray, 2"))
    per_worker = two["steps_per_s"] / 2
    calls_per_step = two["llm_calls"] / two["executed_steps"]
    return {
        "steps_per_s_per_worker": round(per_worker, 1),
        "llm_calls_per_step": round(calls_per_step, 2),
        "checkpoints_per_step": round(checkpoints_per_step, 1),
        "model_requests_per_s_per_worker": round(per_worker * calls_per_step, 1),
        "postgres_checkpoints_per_s_per_worker": round(per_worker * checkpoints_per_step, 1),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    tasks = 60 if args.quick else args.tasks
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    report: dict[str, Any] = {"ray_start_s": round(time.perf_counter() - started, 1), "plans": {}}
    url, drop = database()
    try:
        with tempfile.TemporaryDirectory() as folder:
            for name, (latency, concurrency) in PLANS.items():
                report["plans"][name] = await plan(tasks, latency, concurrency, url, folder)
        steps = sum(r["executed_steps"] for rows in report["plans"].values() for r in rows if "Postgres" in r["label"])
        checkpoints_per_step = await postgres_checkpoints(url) / steps
    finally:
        drop()
        ray.shutdown()
    for rows in report["plans"].values():
        base = rows[0]["wall_s"]
        for row in rows:
            row["speed_vs_one_process_sqlite"] = round(base / row["wall_s"], 2)
    report["scaling"] = scaling(report["plans"]["latency-0.05"], checkpoints_per_step)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="60 tasks per batch; nothing written")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments))
    if not arguments.quick:
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    if arguments.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"Ray started in {report['ray_start_s']} s (not counted below)")
        for name, rows in report["plans"].items():
            for r in rows:
                print(
                    f"{name}: {r['label']:<28} {r['tasks']} tasks at {r['concurrency']} in flight: {r['wall_s']} s "
                    f"vs ideal {r['ideal_s']} s -> efficiency {r['efficiency']:.0%}, "
                    f"x{r['speed_vs_one_process_sqlite']} the one-process SQLite speed; "
                    f"{r['steps_per_s'] or '-'} steps/s, machine CPU busy {r['machine_cpu_busy'] or '-'}"
                )
        print("per worker (2-worker, 50 ms row):", json.dumps(report["scaling"]))
