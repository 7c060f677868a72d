"""Does the reflector name the right step, and what does a wrong one cost? (issue 42)

Every failed attempt's true pivotal step comes from the environment itself (pivotal.bench.pivot_truth:
the first step after which the goal went out of reach or the cost to go rose for good). Three parts:

- `accuracy`: the reflector's top-1 and within-one accuracy (its `pivotal_step`, its `no_return_step`,
  and the restart the pivot then chose) per environment and model: `sim` at each error rate, and any
  `--model` (the embedded one is `local`: slow, a few tasks only).
- `curve`: the actor and critic at one error rate, the reflector with its own error knob
  (`reflector_model=sim:error=r`): accuracy and pivotal retry's executed steps against full retry's as
  the reflector gets worse, with the environment's `steps_to_goal` hook on and off.
- `rules`: with every hook off (`-blind` worlds), each pivot rule against full retry, paired by seed.

Budget "fair" throughout (one path limit per attempt, one total for all attempts), memory off,
max_pivot_retries 2, loop detection at its default.

Run: python benchmarks/bench_pivot_accuracy.py [--parts accuracy curve rules] [--seeds 96] [--model local]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pivotal.bench.retry_envs  # noqa: F401  (registers the bench's plugin environments and -blind twins)
import pivotal.testing.plugin_envs  # noqa: F401  (registers word-room)
from pivotal.bench.metrics import paired
from pivotal.bench.pivot_truth import accuracy, score_run
from pivotal.core.context import Context
from pivotal.graphs import arun

MAX_STEPS = {"word-room": 8, "cave-quest": 16, "cliff-grid": 18, "lava-key-grid": 20, "gridworld": 20,
             "frozenlake": 20, "taxi": 30, "minesweeper": 20}  # fmt: skip
"""bench_retry's limits (about 1.5x the shortest solution), the core worlds' from pivotal.bench.ablations."""
HOOKED = ("word-room", "cave-quest", "cliff-grid", "lava-key-grid", "gridworld")
"""The worlds with a `steps_to_goal` hook; each has a `-blind` twin without it."""
EVERY = (*HOOKED, "frozenlake", "taxi", "minesweeper")
ERRORS = (0.2, 0.3, 0.4)
REFLECTOR_ERRORS = (0.0, 0.25, 0.5, 0.75, 1.0)
RULES = ("room", "signals", "signals-back", "back")


def limit_of(env: str) -> int:
    return MAX_STEPS[env.removesuffix("-blind")]


async def one(env: str, seed: int, error: float, critic: bool, fields: dict[str, Any]) -> dict[str, Any]:
    context = Context(
        model=f"sim:error={error},seed={seed}",
        lesson_model="sim",
        memory=False,
        critic=critic,
        max_steps=limit_of(env),
        max_pivot_retries=2,
        budget="fair",
        **fields,
    )
    params = {"seed": seed}
    result = await arun({"env": env, "params": params}, context, checkpoint_path=":memory:")
    return {
        "env": env,
        "error": error,
        "stream": f"{env}/{error}/{critic}/{seed}",
        "index": 0,
        "status": result.status,
        "attempts": result.retries.get("count", 0) + 1,
        "executed": result.executed,
        "llm_calls": result.llm_calls,
        "tokens": 0,
        "wall_s": 0.0,
        "attempt_scores": score_run(env, params, result.reflections),
    }


async def gather(jobs: list[tuple[str, tuple]], concurrency: int = 2) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(concurrency)

    async def limited(name: str, job: tuple) -> dict[str, Any]:
        async with limit:
            return {**await one(*job), "config": name}

    return list(await asyncio.gather(*(limited(name, job) for name, job in jobs)))


def tasks(envs: tuple[str, ...], seeds: int) -> list[tuple[str, int, bool]]:
    """(env, seed, critic) spread over the environments and critic on/off."""
    grid = [(env, critic) for env in envs for critic in (True, False)]
    return [(grid[i % len(grid)][0], i // len(grid), grid[i % len(grid)][1]) for i in range(seeds)]


def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
    flat = [s for r in rows for s in r["attempt_scores"]]
    return {field: accuracy(flat, field) for field in ("named", "no_return", "kept")}


async def part_accuracy(seeds: int, model: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for error in ERRORS:
        jobs = [(f"sim@{error}", (env, seed, error, True, {})) for env, seed, _ in tasks(EVERY, seeds)]
        rows = await gather(jobs)
        out[f"sim error {error}"] = {
            "all": scores(rows),
            **{env: scores([r for r in rows if r["env"] == env]) for env in EVERY},
        }
    if model:  # slow: a real reflector on a sim actor's failed attempts
        few = [(env, seed, c) for env, seed, c in tasks(("cliff-grid", "cave-quest"), 8)]
        jobs = [(model, (env, seed, 0.3, True, {"reflector_model": model})) for env, seed, _ in few]
        rows = await gather(jobs, concurrency=1)
        out[f"{model} (actor sim error 0.3)"] = {"all": scores(rows)}
    return out


def compare(rows: list[dict[str, Any]], new: str, base: str) -> dict[str, Any]:
    found = paired([{**r, "env": "all", "error": "*"} for r in rows], new, base)
    row = next(iter(found.values()))
    saved = row["executed"]
    ci = saved["ci95"]
    n = row["tasks"]
    return {
        "tasks": n,
        "steps_ratio": None if saved["saved"] is None else round(1 - saved["saved"], 3),
        "steps_ratio_ci95": None if ci is None else [round(1 - ci[1], 3), round(1 - ci[0], 3)],
        "success": round(row["success"]["new"] * n),
        "success_full": round(row["success"]["baseline"] * n),
        "success_delta_ci95": None
        if row["success"]["ci95"] is None
        else [round(v * n) for v in row["success"]["ci95"]],
    }


async def part_curve(seeds: int, error: float = 0.3) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hook in ("on", "off"):
        envs = HOOKED if hook == "on" else tuple(f"{e}-blind" for e in HOOKED)
        for r in REFLECTOR_ERRORS:
            reflector = {"reflector_model": f"sim:error={r},seed=7"}
            jobs = []
            for env, seed, critic in tasks(envs, seeds):
                jobs.append(("full", (env, seed, error, critic, {**reflector, "retry": "full"})))
                jobs.append(("best", (env, seed, error, critic, {**reflector, "retry": "pivotal"})))
            rows = await gather(jobs)
            best = [r for r in rows if r["config"] == "best"]
            out[f"hook {hook} · reflector error {r}"] = {**compare(rows, "best", "full"), "accuracy": scores(best)}
            print(f"curve hook {hook} r={r}: {out[f'hook {hook} · reflector error {r}']}", flush=True)
    return out


async def part_rules(seeds: int, rules: tuple[str, ...] = RULES) -> dict[str, Any]:
    envs = tuple(f"{e}-blind" for e in HOOKED)
    jobs = [
        ("full", (env, seed, error, critic, {"retry": "full"}))
        for env, seed, critic in tasks(envs, seeds)
        for error in ERRORS
    ]
    rows = await gather(jobs)
    out: dict[str, Any] = {}
    for rule in rules:
        os.environ["PIVOTAL_RULE"] = rule
        mine = [
            (rule, (env, seed, error, critic, {"retry": "pivotal"}))
            for env, seed, critic in tasks(envs, seeds)
            for error in ERRORS
        ]
        rows += await gather(mine)
        out[rule] = {**compare(rows, rule, "full"), "accuracy": scores([r for r in rows if r["config"] == rule])}
        per_env = {}
        for env in envs:
            subset = [r for r in rows if r["env"] == env]
            per_env[env] = compare(subset, rule, "full")
        out[rule]["per_env"] = per_env
        print(f"rule {rule}: {json.dumps({k: v for k, v in out[rule].items() if k != 'per_env'})}", flush=True)
    os.environ.pop("PIVOTAL_RULE", None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("accuracy", "curve", "rules"), default=["accuracy", "curve"])
    parser.add_argument("--seeds", type=int, default=96, help="tasks per configuration, spread over env and critic")
    parser.add_argument("--model", help="also score this reflector model (e.g. local: slow, 8 tasks)")
    parser.add_argument("--rules", nargs="+", default=list(RULES))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    arguments = parser.parse_args()
    started = time.perf_counter()
    found: dict[str, Any] = {"seeds": arguments.seeds}
    if "accuracy" in arguments.parts:
        found["accuracy"] = asyncio.run(part_accuracy(arguments.seeds, arguments.model))
        print(json.dumps(found["accuracy"]["sim error 0.3"]["all"]), flush=True)
    if "curve" in arguments.parts:
        found["curve"] = asyncio.run(part_curve(arguments.seeds))
    if "rules" in arguments.parts:
        found["rules"] = asyncio.run(part_rules(arguments.seeds, tuple(arguments.rules)))
    found["wall_s"] = round(time.perf_counter() - started, 1)
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "pivot_accuracy.json").write_text(json.dumps(found, indent=1))
    print(f"wall {found['wall_s']} s")


if __name__ == "__main__":
    main()
