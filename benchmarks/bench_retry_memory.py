"""Memory and retry together (issue 42 item 3): does memory on lower pivotal retry's success or edge?

Streams of tasks on one layout each (one store per stream, so later tasks recall earlier tasks'
lessons), `sim` models at error 0.2-0.4, critic on, the fair budget, step recall. Four configurations
at the same seeds: full and pivotal (`pivot=best`) retry, each with memory off and on. Environments:
a generated 8x8 FrozenLake (the stream's seed picks the lake), and the retry bench's worlds (cliff
grid, lava and door-key grid, cave quest, word room; `-blind` twins with `--blind`). Paired task by
task (env, error, stream, position in the stream): success and executed steps with 95% bootstrap
intervals (pivotal.bench.metrics.paired).

Run: python benchmarks/bench_retry_memory.py [--envs frozenlake cliff-grid ...] [--streams 4] [--tasks 6]
     [--errors 0.2 0.3 0.4] [--blind] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pivotal.bench.retry_envs  # noqa: F401  (registers the bench's plugin environments)
import pivotal.testing.plugin_envs  # noqa: F401  (registers word-room)
from pivotal.bench.ablations import record
from pivotal.bench.metrics import paired
from pivotal.bench.pivot_truth import BLIND
from pivotal.core.context import Context
from pivotal.graphs import arun
from pivotal.memory.policy.registry import close_store

MAX_STEPS = {"frozenlake": 24, "word-room": 8, "cave-quest": 16, "cliff-grid": 18, "lava-key-grid": 20}
PARAMS = {"frozenlake": {"size": 8}}
"""A generated 8x8 lake: its seed (the stream's) picks the layout; the named maps ignore the seed."""
CONFIGS = {
    "full": {"retry": "full", "memory": False},
    "full+memory": {"retry": "full", "memory": True, "recall": "step"},
    "pivotal": {"retry": "pivotal", "pivot": "best", "memory": False},
    "pivotal+memory": {"retry": "pivotal", "pivot": "best", "memory": True, "recall": "step"},
}
COMPARISONS = [
    ("pivotal+memory", "pivotal"),
    ("full+memory", "full"),
    ("pivotal", "full"),
    ("pivotal+memory", "full+memory"),
]


async def stream(env: str, error: float, config: str, index: int, tasks: int, blind: bool) -> list[dict[str, Any]]:
    rows = []
    world = f"{env}{BLIND}" if blind and env != "frozenlake" else env
    with tempfile.TemporaryDirectory(prefix="pivotal-retrymem-") as store:
        for position in range(tasks):
            context = Context(
                model=f"sim:error={error},seed={index * 1000 + position}",
                lesson_model="sim",
                store_path=store,
                max_steps=MAX_STEPS[env],
                max_pivot_retries=2,
                budget="fair",
                **CONFIGS[config],
            )
            task = {"env": world, "params": {"seed": index, **PARAMS.get(env, {})}, "family": f"{env}-{index}"}
            started = time.perf_counter()
            result = await arun(task, context, checkpoint_path=":memory:")
            row = record(result, env, error, config, index, position, time.perf_counter() - started)
            rows.append(row)
        close_store(store)
    return rows


async def measure(envs: list[str], errors: list[float], streams: int, tasks: int, blind: bool) -> list[dict]:
    limit = asyncio.Semaphore(2)

    async def one(*args: Any) -> list[dict[str, Any]]:
        async with limit:
            return await stream(*args)

    jobs = [
        one(env, error, config, index, tasks, blind)
        for env in envs
        for error in errors
        for index in range(streams)
        for config in CONFIGS
    ]
    return [row for rows in await asyncio.gather(*jobs) for row in rows]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"configs": {}, "comparisons": {}}
    for config in CONFIGS:
        mine = [r for r in rows if r["config"] == config]
        per_env: dict[str, Any] = {}
        for env in sorted({r["env"] for r in mine}):
            here = [r for r in mine if r["env"] == env]
            per_env[env] = {"tasks": len(here), "success": sum(r["status"] == "success" for r in here),
                            "executed": sum(r["executed"] for r in here)}  # fmt: skip
        out["configs"][config] = per_env
    for new, base in COMPARISONS:
        found = paired(rows, new, base)
        overall = found.get("all") or next(iter(found.values()), {})
        out["comparisons"][f"{new} vs {base}"] = {
            "all": overall,
            "per_env": {g: {"success": v["success"], "executed": v.get("executed")} for g, v in found.items()},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["frozenlake", "cliff-grid", "lava-key-grid", "cave-quest"])
    parser.add_argument("--errors", nargs="+", type=float, default=[0.2, 0.3, 0.4])
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--blind", action="store_true", help="the worlds' twins without steps_to_goal")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    rows = asyncio.run(measure(args.envs, args.errors, args.streams, args.tasks, args.blind))
    found = summary(rows)
    found["seconds"] = round(time.perf_counter() - started)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, **found}, indent=1, default=str))
    for config, envs in found["configs"].items():
        print(config, {env: f"{c['success']}/{c['tasks']} {c['executed']} steps" for env, c in envs.items()})
    for name, comparison in found["comparisons"].items():
        overall = comparison["all"]
        print(name, json.dumps({k: overall.get(k) for k in ("tasks", "success", "executed")}, default=str))
    print(f"{found['seconds']} s")


if __name__ == "__main__":
    main()
