"""Scaling a batch out: one process against Ray workers, side by side in one run.

The same gridworld tasks with `sim` models that sleep a fixed latency per call, memory off, run
- in one process (`run_batch`) on SQLite (bench_batch's `efficiency`, the baseline) and on Postgres;
- on a local Ray instance with 1 and 2 workers (`run_batch_on_ray`), on Postgres,
at the same total concurrency (with 2 workers each runs half of it). Ideal wall time = total
model latency / total concurrency; efficiency = ideal / measured. Each row also gives executed
steps per second, its ratio to the one-process SQLite row, and how busy the machine's CPUs were
(from /proc/stat, so other processes on the machine count too). From the Ray rows: what one
worker sustained at best, the checkpoints Postgres took per second, and the model requests per second,
for the scaling estimate in docs/cli.md.

Last, what one `chroma run` server answers per second (recall's query, 4 clients, 1,000 lessons).

Run: python benchmarks/bench_scale.py [--quick] [--tasks 500] [--chroma-only] [--json]   (needs Postgres at
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

from pivotal.core.context import Context
from pivotal.graphs import run_batch, run_batch_on_ray
from pivotal.graphs.summary import RunResult

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
    """What one worker sustained at best (the 50 ms plan's Ray rows, per worker), and the load each
    executed step puts on the model provider and on Postgres: the inputs of the N-machine estimate.
    """
    ray = [r for r in rows if r["label"].startswith("Ray")]
    per_worker = max(r["steps_per_s"] / int(r["label"].split()[1]) for r in ray)
    calls_per_step = ray[0]["llm_calls"] / ray[0]["executed_steps"]
    return {
        "steps_per_s_per_worker": round(per_worker, 1),
        "llm_calls_per_step": round(calls_per_step, 2),
        "checkpoints_per_step": round(checkpoints_per_step, 1),
        "model_requests_per_s_per_worker": round(per_worker * calls_per_step, 1),
        "postgres_checkpoints_per_s_per_worker": round(per_worker * checkpoints_per_step, 1),
    }


def chroma_queries(seconds: float, clients: int, stored: int = 1000) -> dict[str, Any]:
    """What one `chroma run` server answers per second: recall's query (4 nearest approved lessons of
    a family among `stored`), the query vector already embedded, as each worker embeds its own.
    """
    import random
    import threading

    import chromadb

    from pivotal.testing.servers import chroma_server

    rng = random.Random(0)
    vector = lambda: [rng.uniform(-1, 1) for _ in range(384)]
    with tempfile.TemporaryDirectory() as folder, chroma_server(Path(folder)) as url:
        port = int(url.rsplit(":", 1)[1])
        lessons = chromadb.HttpClient(host="127.0.0.1", port=port).create_collection(
            "lessons", configuration={"hnsw": {"space": "cosine"}}
        )
        for start in range(0, stored, 250):
            ids = [str(i) for i in range(start, min(start + 250, stored))]
            lessons.add(ids=ids, embeddings=[vector() for _ in ids], metadatas=[{"status": "approved"} for _ in ids])
        queries = [vector() for _ in range(200)]
        answered = [0] * clients
        deadline = time.perf_counter() + seconds

        def ask(client: int) -> None:
            mine = chromadb.HttpClient(host="127.0.0.1", port=port).get_collection("lessons")
            while time.perf_counter() < deadline:
                mine.query(
                    query_embeddings=[queries[answered[client] % 200]], n_results=4, where={"status": "approved"}
                )
                answered[client] += 1

        threads = [threading.Thread(target=ask, args=(client,)) for client in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return {"clients": clients, "stored": stored, "seconds": seconds, "queries_per_s": round(sum(answered) / seconds)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.chroma_only:
        return {"chroma_server": chroma_queries(10, 4)}
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
    report["chroma_server"] = chroma_queries(10, 4)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="60 tasks per batch; nothing written")
    parser.add_argument("--chroma-only", action="store_true", help="only the Chroma server's queries per second")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments))
    if arguments.chroma_only:
        print(json.dumps(report["chroma_server"]))
        if RESULTS.exists():  # the figure joins the last full run's
            RESULTS.write_text(json.dumps({**json.loads(RESULTS.read_text()), **report}, indent=2) + "\n")
        raise SystemExit(0)
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
        print("per worker (best Ray row, 50 ms):", json.dumps(report["scaling"]))
        print("one Chroma server:", json.dumps(report["chroma_server"]))
