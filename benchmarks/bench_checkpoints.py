"""Checkpoint write cost per graph step: SQLite (synchronous NORMAL and FULL) against Postgres.

The same gridworld tasks (`sim` model, no latency, memory off) run through `run_batch` on each
backend and on an in-memory saver, in interleaved passes (the order rotates each pass, so drift in
the machine's load falls on every backend alike). A backend's write cost per step is its wall time
minus the in-memory run's of the same pass, over the checkpoints the run wrote; medians over the
passes, and the ratio to SQLite NORMAL (the default). CPU time of this process is reported the same
way: Postgres does part of its work in the server's processes, which this process's CPU does not
count but the wall time does (both share this machine's cores).

SQLite writes to a file under --folder (a real disk, so FULL's fsyncs cost what they cost); Postgres
to a fresh database on --postgres, dropped at the end.

Run: python benchmarks/bench_checkpoints.py [--tasks 20] [--passes 5] [--concurrency 1 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from typing import Any

from pivotal.core.context import Context
from pivotal.core.settings import settings
from pivotal.graphs import run_batch

BACKENDS = ("memory", "sqlite-normal", "sqlite-full", "postgres")
BASELINE = "sqlite-normal"


async def one_pass(backend: str, tasks: int, concurrency: int, where: dict[str, str]) -> dict[str, float]:
    """One batch on one backend: wall and CPU seconds, and the checkpoints it wrote."""
    _sync(backend)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    location = _location(backend, where, prefix)
    batch = [{"env": "gridworld", "params": {"seed": seed}} for seed in range(tasks)]
    context = Context(model="sim", memory=False, max_pivot_retries=0)
    wall, cpu = time.perf_counter(), time.process_time()
    results = await run_batch(batch, context, concurrency=concurrency, checkpoint_path=location, thread_prefix=prefix)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert all(r.status == "success" for r in results), [r.reason for r in results if r.status != "success"]
    return {"wall_s": wall, "cpu_s": cpu, "checkpoints": _count(backend, location, prefix)}


def _sync(backend: str) -> None:
    """SQLite's synchronous mode is read from PIVOTAL_CHECKPOINT_SYNC when a checkpointer opens."""
    os.environ["PIVOTAL_CHECKPOINT_SYNC"] = "full" if backend == "sqlite-full" else "normal"
    settings.cache_clear()


def _location(backend: str, where: dict[str, str], prefix: str) -> str:
    if backend == "memory":
        return ":memory:"
    if backend == "postgres":
        return where["postgres"]
    return os.path.join(where["folder"], f"{prefix}.sqlite")  # a new file per pass: none grows across passes


def _count(backend: str, location: str, prefix: str) -> int:
    query = "SELECT count(*) FROM checkpoints WHERE thread_id LIKE %s"
    if backend == "postgres":
        import psycopg

        with psycopg.connect(location) as db:
            return db.execute(query, (f"{prefix}:%",)).fetchone()[0]
    if backend.startswith("sqlite"):
        with sqlite3.connect(location) as db:
            return db.execute(query.replace("%s", "?"), (f"{prefix}:%",)).fetchone()[0]
    return 0


async def measure(tasks: int, passes: int, concurrency: int, where: dict[str, str]) -> dict[str, Any]:
    """Interleaved passes; per backend the medians of its paired differences with the in-memory run."""
    runs: dict[str, list[dict[str, float]]] = {backend: [] for backend in BACKENDS}
    await one_pass("memory", tasks, concurrency, where)  # warm-up: imports, compiled graph, first connection
    for index in range(passes):
        order = BACKENDS[index % len(BACKENDS) :] + BACKENDS[: index % len(BACKENDS)]
        for backend in order:
            runs[backend].append(await one_pass(backend, tasks, concurrency, where))
    return {"tasks": tasks, "passes": passes, "concurrency": concurrency, "backends": _summary(runs)}


def _summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    checkpoints = runs[BASELINE][0]["checkpoints"]
    found = {}
    for backend, passes in runs.items():
        extra_wall = [run["wall_s"] - base["wall_s"] for run, base in zip(passes, runs["memory"], strict=True)]
        extra_cpu = [run["cpu_s"] - base["cpu_s"] for run, base in zip(passes, runs["memory"], strict=True)]
        found[backend] = {
            "checkpoints": passes[0]["checkpoints"] or checkpoints,
            "wall_s": round(statistics.median(run["wall_s"] for run in passes), 3),
            "wall_ms_per_step": round(1000 * statistics.median(run["wall_s"] for run in passes) / checkpoints, 3),
            "write_ms_per_step": round(1000 * statistics.median(extra_wall) / checkpoints, 3),
            "write_cpu_ms_per_step": round(1000 * statistics.median(extra_cpu) / checkpoints, 3),
        }
    base = found[BASELINE]
    for numbers in found.values():
        numbers["wall_vs_sqlite_normal"] = round(numbers["wall_s"] / base["wall_s"], 2)
        numbers["write_vs_sqlite_normal"] = round(numbers["write_ms_per_step"] / base["write_ms_per_step"], 2)
    return found


def fresh_database(server: str) -> str:
    import psycopg

    name = f"pivotal_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    name = fresh_database(args.postgres)
    try:
        with tempfile.TemporaryDirectory(dir=args.folder) as folder:
            where = {"folder": folder, "postgres": f"{args.postgres}/{name}"}
            return [await measure(args.tasks, args.passes, c, where) for c in args.concurrency]
    finally:
        drop_database(args.postgres, name)


def report(found: dict[str, Any]) -> str:
    head = f"{found['tasks']} gridworld tasks, concurrency {found['concurrency']}, median of {found['passes']} passes"
    rows = [
        f"  {backend:<14} {n['checkpoints']:>5} checkpoints"
        f"  wall {n['wall_s']:6.2f} s ({n['wall_vs_sqlite_normal']:.2f}x)"
        f"  write {n['write_ms_per_step']:6.2f} ms/step ({n['write_vs_sqlite_normal']:.2f}x)"
        f"  cpu {n['write_cpu_ms_per_step']:6.2f} ms/step"
        for backend, n in found["backends"].items()
    ]
    return "\n".join([head, *rows])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432", help="server URL, no database")
    parser.add_argument("--folder", help="where the SQLite files go (default: the temp folder); a real disk, not tmpfs")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results = asyncio.run(main(arguments))
    print(json.dumps(results, indent=2) if arguments.json else "\n\n".join(report(found) for found in results))
