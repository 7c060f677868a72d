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
     [--offset N] (rules: another set of tasks, e.g. dev seeds to tune on and held-out ones to report)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pivotal.bench.retry_envs  # noqa: F401  (registers the bench's plugin environments and -blind twins)
import pivotal.testing.plugin_envs  # noqa: F401  (registers word-room)
from pivotal.bench.metrics import paired
from pivotal.bench.pivot_truth import accuracy, attempt_outcomes, score_run, steps_by_end
from pivotal.core.context import Context
from pivotal.graphs import RunResult, arun
from pivotal.nodes import pivot as pivot_node

MAX_STEPS = {"word-room": 8, "cave-quest": 16, "cliff-grid": 18, "lava-key-grid": 20, "gridworld": 20,
             "frozenlake": 20, "taxi": 30, "minesweeper": 20}  # fmt: skip
"""bench_retry's limits (about 1.5x the shortest solution), the core worlds' from pivotal.bench.ablations."""
HOOKED = ("word-room", "cave-quest", "cliff-grid", "lava-key-grid", "gridworld")
"""The worlds with a `steps_to_goal` hook; each has a `-blind` twin without it."""
EVERY = (*HOOKED, "frozenlake", "taxi", "minesweeper")
ERRORS = (0.2, 0.3, 0.4)
REFLECTOR_ERRORS = (0.0, 0.3, 0.6, 1.0)
RULES = ("reflection", "record")
"""`best` without the hook: the reflection's choice alone, or read against the run's record (the default)."""


def limit_of(env: str) -> int:
    return MAX_STEPS[env.removesuffix("-blind")]


FOLLOW: float | None = None
"""`--follow`: the `sim` actor's rate of following a remembered move (None: the sim's default)."""


HEED: float | None = None
"""`--heed`: the `sim` actor's rate of heeding a reflection that named its call from here (None: the sim's default)."""


def context_for(env: str, seed: int, error: float, critic: bool, fields: dict[str, Any]) -> Context:
    """The bench's run settings for one task (benchmarks/bench_retry_bounds.py runs the same)."""
    knobs = "".join(f",{name}={value}" for name, value in (("follow", FOLLOW), ("heed", HEED)) if value is not None)
    return Context(
        model=f"sim:error={error},seed={seed}{knobs}",
        lesson_model="sim",
        memory=False,
        critic=critic,
        max_steps=limit_of(env),
        max_pivot_retries=2,
        budget="fair",
        **fields,
    )


async def run_task(env: str, seed: int, error: float, critic: bool, fields: dict[str, Any]) -> RunResult:
    context = context_for(env, seed, error, critic, fields)
    return await arun({"env": env, "params": {"seed": seed}}, context, checkpoint_path=":memory:")


async def one(env: str, seed: int, error: float, critic: bool, fields: dict[str, Any]) -> dict[str, Any]:
    return row_of(env, seed, error, critic, await run_task(env, seed, error, critic, fields))


def row_of(env: str, seed: int, error: float, critic: bool, result: RunResult) -> dict[str, Any]:
    """One run's row: what `compare` pairs, the reflections' scores and where the attempts' steps went."""
    params = {"seed": seed}
    attempts = result.retries.get("count", 0) + 1
    final = [(step["action"], step.get("arguments") or {}) for step in result.trajectory]
    return {
        "env": env,
        "error": error,
        "stream": f"{env}/{error}/{critic}/{seed}",
        "index": 0,
        "status": result.status,
        "attempts": attempts,
        "executed": result.executed,
        "llm_calls": result.llm_calls,
        "tokens": 0,
        "wall_s": 0.0,
        "attempt_scores": score_run(env, params, result.reflections),
        "attempt_outcomes": attempt_outcomes(env, params, result.reflections, final, attempts, limit_of(env)),
    }


async def gather(
    jobs: list[tuple[str, tuple]], concurrency: int = 2, runner: Callable[..., Awaitable[dict[str, Any]]] = one
) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(concurrency)

    async def limited(name: str, job: tuple) -> dict[str, Any]:
        async with limit:
            return {**await runner(*job), "config": name}

    return list(await asyncio.gather(*(limited(name, job) for name, job in jobs)))


def tasks(envs: tuple[str, ...], seeds: int, offset: int = 0) -> list[tuple[str, int, bool]]:
    """(env, seed, critic) spread over the environments and critic on/off; world and model seeds from
    `offset` on (the bench's own tasks start at 0; another offset is another set of tasks).
    """
    grid = [(env, critic) for env in envs for critic in (True, False)]
    return [(grid[i % len(grid)][0], offset + i // len(grid), grid[i % len(grid)][1]) for i in range(seeds)]


def scores(rows: list[dict[str, Any]]) -> dict[str, Any]:
    flat = [s for r in rows for s in r["attempt_scores"]]
    return {field: accuracy(flat, field) for field in ("named", "no_return", "kept")}


async def part_accuracy(seeds: int, model: str | None, sim: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for error in ERRORS if sim else ():
        jobs = [(f"sim@{error}", (env, seed, error, critic, {})) for env, seed, critic in tasks(EVERY, seeds)]
        rows = await gather(jobs)
        out[f"sim error {error}"] = {
            "all": scores(rows),
            **{env: scores([r for r in rows if r["env"] == env]) for env in EVERY},
        }
    if model:  # slow: a real reflector on a sim actor's failed attempts
        few = tasks(("cliff-grid", "cave-quest"), 8)
        jobs = [(model, (env, seed, 0.3, critic, {"reflector_model": model})) for env, seed, critic in few]
        rows = await gather(jobs, concurrency=1)
        out[f"{model} (actor sim error 0.3)"] = {
            "all": scores(rows),
            **{env: scores([r for r in rows if r["env"] == env]) for env in ("cliff-grid", "cave-quest")},
        }
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


async def part_curve(seeds: int, hooks: tuple[str, ...] = ("on", "off"), error: float = 0.3) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hook in hooks:
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


async def part_rules(
    seeds: int,
    rules: tuple[str, ...] = RULES,
    reuse: Path | None = None,
    offset: int = 0,
    moves: str = "off",
    hooked: bool = False,
) -> dict[str, Any]:
    """`reuse`: a runs file an earlier `--parts rules` wrote at the same `offset`, whose full-retry runs
    (deterministic per seed) stand in for running them again. Each rule's row also says where the
    executed steps went (`steps_by_end`: first attempts and retries, per how they ended), full retry's too.
    `moves`: `Context.reuse_moves` for every run ("all" shows full retry the remembered moves too).
    `hooked`: the worlds with their `steps_to_goal` hook instead of the `-blind` twins.
    """
    envs = HOOKED if hooked else tuple(f"{e}-blind" for e in HOOKED)
    jobs = [
        ("full", (env, seed, error, critic, {"retry": "full", "reuse_moves": moves}))
        for env, seed, critic in tasks(envs, seeds, offset)
        for error in ERRORS
    ]
    kept = json.loads(reuse.read_text()) if reuse and reuse.exists() else []
    rows = [r for r in kept if r["config"] == "full"] or await gather(jobs)
    out: dict[str, Any] = {"_full_steps_by_end": steps_by_end([r["attempt_outcomes"] for r in rows])}
    for rule in rules:
        pivot_node.READ_THE_RECORD = rule == "record"
        mine = [
            (rule, (env, seed, error, critic, {"retry": "pivotal", "reuse_moves": moves}))
            for env, seed, critic in tasks(envs, seeds, offset)
            for error in ERRORS
        ]
        rows += await gather(mine)
        out[rule] = {**compare(rows, rule, "full"), "accuracy": scores([r for r in rows if r["config"] == rule])}
        per_env = {}
        for env in envs:
            subset = [r for r in rows if r["env"] == env]
            per_env[env] = compare(subset, rule, "full")
        out[rule]["per_env"] = per_env
        out[rule]["steps_by_end"] = steps_by_end([r["attempt_outcomes"] for r in rows if r["config"] == rule])
        shown = {k: v for k, v in out[rule].items() if k not in ("per_env", "steps_by_end")}
        print(f"rule {rule}: {json.dumps(shown)}", flush=True)
    pivot_node.READ_THE_RECORD = True
    return {**out, "_runs": rows}


END_KINDS = tuple(f"{when} {end}" for when in ("first", "retry") for end in ("success", "ended", "ran_out", "other"))


def _pct(row: dict[str, Any], kind: str) -> str:
    value, ci = row[kind], row[f"{kind}_ci95"]
    return "n/a" if value is None else f"{value:.0%} ({ci[0]:.0%}–{ci[1]:.0%})"


def _accuracy_cells(found: dict[str, Any]) -> str:
    return " | ".join(
        _pct(found[field], kind) for field in ("named", "no_return", "kept") for kind in ("top1", "within1")
    )


def _ratio(row: dict[str, Any]) -> str:
    ci, delta = row["steps_ratio_ci95"], row["success_delta_ci95"]
    ratio = f"{row['steps_ratio']}× ({ci[0]}–{ci[1]})" if ci else f"{row['steps_ratio']}×"
    return f"{ratio} | {row['success']} ({row['success_full']}) | {delta}"


ACCURACY_HEAD = (
    "reflection top-1 | reflection within one | no return top-1 | no return within one | restart top-1 | "
    "restart within one"
)


def markdown(found: dict[str, Any]) -> str:
    lines = [f"python benchmarks/bench_pivot_accuracy.py --seeds {found['seeds']}: {found['wall_s']} s", ""]
    if "accuracy" in found:
        lines += ["### Accuracy per model and environment (pivot best, critic on and off)", ""]
        lines += [f"| model | env | attempts (scored) | {ACCURACY_HEAD} |", "|---" * 9 + "|"]
        for model, envs in found["accuracy"].items():
            for env, fields in envs.items():
                n = f"{fields['named']['attempts']} ({fields['named']['scored']})"
                lines.append(f"| {model} | {env} | {n} | {_accuracy_cells(fields)} |")
        lines.append("")
    if "curve" in found:
        lines += ["### Retry's cost as the reflector gets worse (actor and critic sim error 0.3)", ""]
        head = "| setting | tasks | steps vs full (95% CI) | success (full) | Δ success 95% CI | restart top-1 | "
        lines += [head + "restart within one | reflection within one |", "|---" * 8 + "|"]
        for name, row in found["curve"].items():
            acc = row["accuracy"]
            cells = f"{_pct(acc['kept'], 'top1')} | {_pct(acc['kept'], 'within1')} | {_pct(acc['named'], 'within1')}"
            lines.append(f"| {name} | {row['tasks']} | {_ratio(row)} | {cells} |")
        lines.append("")
    if "rules" in found:
        worlds = "with their steps_to_goal hook" if found.get("hooked") else "with every hook off (-blind worlds)"
        lines += [f"### Pivot rules {worlds}, against full retry", ""]
        lines += [
            "| rule | group | tasks | steps vs full (95% CI) | success (full) | Δ success 95% CI |",
            "|---" * 6 + "|",
        ]
        rules = {name: row for name, row in found["rules"].items() if not name.startswith("_")}
        for rule, row in rules.items():
            lines.append(f"| {rule} | all | {row['tasks']} | {_ratio(row)} |")
            for env, cell in row["per_env"].items():
                lines.append(f"| {rule} | {env} | {cell['tasks']} | {_ratio(cell)} |")
        lines += ["", "Where the executed steps went (attempts, steps; ended: the world ended it):", ""]
        lines += ["| rule | " + " | ".join(END_KINDS) + " |", "|---" * (len(END_KINDS) + 1) + "|"]
        ends = {"full": found["rules"].get("_full_steps_by_end", {})}
        ends.update({rule: row["steps_by_end"] for rule, row in rules.items() if "steps_by_end" in row})
        for rule, cells in ends.items():
            shown = [f"{cells[k]['attempts']}, {cells[k]['steps']}" if k in cells else "0, 0" for k in END_KINDS]
            lines.append(f"| {rule} | " + " | ".join(shown) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="*", choices=("accuracy", "curve", "rules"), default=["accuracy", "curve"])
    parser.add_argument("--seeds", type=int, default=96, help="tasks per configuration, spread over env and critic")
    parser.add_argument("--model", help="also score this reflector model on 8 tasks (local, the embedded one: slow)")
    parser.add_argument("--rules", nargs="+", default=list(RULES))
    parser.add_argument("--hooks", nargs="+", choices=("on", "off"), default=["on", "off"], help="curve: hook on, off")
    parser.add_argument("--offset", type=int, default=0, help="rules: seeds from here (0: the bench's own tasks)")
    parser.add_argument("--reuse", type=Path, help="full-retry runs from an earlier rules part (pivot_rules_runs.json)")
    parser.add_argument("--reuse-moves", choices=("off", "pivotal", "all"), default="off",
                        help="rules: Context.reuse_moves for every run (all: full retry too)")  # fmt: skip
    parser.add_argument("--hooked", action="store_true", help="rules: the hooked worlds, not the -blind twins")
    parser.add_argument("--follow", type=float, help="the sim actor's rate of following a remembered move")
    parser.add_argument("--heed", type=float, help="the sim actor's rate of heeding a reflection that named its call")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    arguments = parser.parse_args()
    global FOLLOW, HEED
    FOLLOW, HEED = arguments.follow, arguments.heed
    started = time.perf_counter()
    arguments.out.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {"seeds": arguments.seeds, "hooked": arguments.hooked, "reuse_moves": arguments.reuse_moves,
                             "follow": arguments.follow, "heed": arguments.heed,
                             "offset": arguments.offset}  # fmt: skip
    if "accuracy" in arguments.parts or arguments.model:
        sim = "accuracy" in arguments.parts
        found["accuracy"] = asyncio.run(part_accuracy(arguments.seeds, arguments.model, sim))
    if "curve" in arguments.parts:
        found["curve"] = asyncio.run(part_curve(arguments.seeds, tuple(arguments.hooks)))
    if "rules" in arguments.parts:
        runs = arguments.out / "pivot_rules_runs.json"
        found["rules"] = asyncio.run(
            part_rules(
                arguments.seeds,
                tuple(arguments.rules),
                arguments.reuse,
                arguments.offset,
                arguments.reuse_moves,
                arguments.hooked,
            )
        )
        runs.write_text(json.dumps(found["rules"].pop("_runs")))
    found["wall_s"] = round(time.perf_counter() - started, 1)
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "pivot_accuracy.json").write_text(json.dumps(found, indent=1))
    (arguments.out / "pivot_accuracy.md").write_text(markdown(found))
    print(markdown(found))
    print(f"wall {found['wall_s']} s")


if __name__ == "__main__":
    main()
