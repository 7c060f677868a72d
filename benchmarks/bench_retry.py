"""Pivotal against full retry at equal cost (issue 32): executed steps and success, paired by seed.

Our own plugin environments like the issue's (pivotal.bench.retry_envs: a cliff grid, a lava and
door-key grid, the cave-quest text adventure; pivotal.testing.plugin_envs: the word-room text
adventure), `sim` models at error 0.2-0.4, critic on and off, memory off. Every task runs under each
configuration with the same environment seed and the same sim seed: full retry, and pivotal retry
going back to the first mistake, the point of no return, or the better of the two per failure
(`pivot=best`). The main tables use the default budget ("fair": one path limit per attempt, one
total for all attempts); one more table runs pivotal retry under "path" and "new" against the same
full-retry runs (a full retry keeps nothing, so every budget treats it alike); "new" gives a pivotal retry
more steps than a full retry gets, so its rows are labelled as not a fair comparison. Per family and over
all: executed steps as a ratio of full retry's with a 95% paired bootstrap interval, and success
counts with the difference's interval (pivotal.bench.metrics). Every table is headed by its budget.

Run: python benchmarks/bench_retry.py [--seeds 480] [--loop-detection on|off|both] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any, get_args

import pivotal.bench.retry_envs  # noqa: F401  (registers the bench's plugin environments)
import pivotal.testing.plugin_envs  # noqa: F401  (registers word-room)
from pivotal.bench.ablations import record
from pivotal.bench.metrics import paired
from pivotal.core.context import Context
from pivotal.core.environments import make_environment
from pivotal.core.task import Task
from pivotal.graphs import arun

FAMILIES = {"text": ("word-room", "cave-quest"), "cliff": ("cliff-grid",), "lava": ("lava-key-grid",)}
MAX_STEPS = {"word-room": 8, "cave-quest": 16, "cliff-grid": 18, "lava-key-grid": 20}
"""About 1.5 times each environment's shortest solution, so a wasted detour can cost the task."""
ERRORS = (0.2, 0.3, 0.4)
CRITIC = {"critic on": True, "critic off": False}
STRATEGIES = {
    "full": {"retry": "full"},
    "first_mistake": {"retry": "pivotal", "pivot": "first_mistake"},
    "no_return": {"retry": "pivotal", "pivot": "no_return"},
    "best": {"retry": "pivotal", "pivot": "best"},
}
FIRST = "first/fair"
"""No retry: each task's first attempt alone, the same in every configuration (same seeds), so the
tables can say which share of the steps no retry strategy can change, and what a perfect retry costs."""
OTHER_BUDGETS = ("path", "new")
"""Run with pivot first_mistake and best only, against the fair budget's full-retry runs."""


def configs() -> dict[str, dict[str, Any]]:
    """Config name -> Context fields: the first attempts alone, the fair table's four, then pivotal
    under the other budgets.
    """
    found = {FIRST: {"retry": "none", "budget": "fair"}}
    found.update({f"{name}/fair": {**fields, "budget": "fair"} for name, fields in STRATEGIES.items()})
    for budget in OTHER_BUDGETS:
        for name in ("first_mistake", "best"):
            found[f"{name}/{budget}"] = {**STRATEGIES[name], "budget": budget}
    return found


def loop_settings(wanted: str) -> dict[str, dict[str, Any]]:
    """`--loop-detection` laid over every run, when this build's Context has the field."""
    if "loop_detection" not in Context.field_names():
        if wanted != "default":
            print(f"--loop-detection {wanted} ignored: this build's Context has no loop_detection field")
        return {"": {}}
    if wanted == "default":
        return {"": {}}
    kind = Context.__dataclass_fields__["loop_detection"]
    default = kind.default if isinstance(kind.default, str) else "off"
    on = default if default != "off" else next((v for v in get_args(kind.type) if v != "off"), "off")
    chosen = {"on": [on], "off": ["off"], "both": [on, "off"]}[wanted]
    return {f"loops {value}": {"loop_detection": value} for value in chosen}


def cells(seeds: int) -> list[tuple[str, str, float, str, int]]:
    """(family, env, error, critic, seed) for `seeds` tasks spread evenly over the cells."""
    grid = [(f, e, err, c) for f, envs in FAMILIES.items() for e in envs for err in ERRORS for c in CRITIC]
    return [(*grid[i % len(grid)], i // len(grid)) for i in range(seeds)]


async def one(task: tuple[str, str, float, str, int], name: str, fields: dict[str, Any]) -> dict[str, Any]:
    family, env, error, critic, seed = task
    context = Context(
        model=f"sim:error={error},seed={seed}",
        lesson_model="sim",
        memory=False,
        critic=CRITIC[critic],
        max_steps=MAX_STEPS[env],
        max_pivot_retries=2,
        **fields,
    )
    started = time.perf_counter()
    result = await arun({"env": env, "params": {"seed": seed}}, context, checkpoint_path=":memory:")
    row = record(result, env, error, name, 0, seed, time.perf_counter() - started)
    row.update(family=family, critic=critic, stream=f"{env}/{error}/{critic}/{seed}", budget=result.retries["budget"])
    if name.startswith(FIRST) and result.status != "success":
        row["perfect_retry"] = fewest_steps_after(env, seed, result.trajectory)
    return row


def fewest_steps_after(env: str, seed: int, trajectory: list[dict[str, Any]]) -> int | None:
    """The fewest steps any retry of this failed attempt needs: from the state along its path (the
    start included) closest to the goal, by the environment's own `steps_to_goal`. A retry that
    restarts there and makes no mistake costs this; no strategy's retry can cost less.
    """
    world = make_environment(env)
    world.reset(Task(env=env, params={"seed": seed}))
    path = [(step["action"], step["arguments"]) for step in trajectory]
    left = [world.steps_to_goal(path[:k]) for k in range(len(path) + 1)]
    return min((n for n in left if n is not None), default=None)


async def measure(
    seeds: int, loops: dict[str, dict[str, Any]], only: list[str] | None = None, concurrency: int = 2
) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(concurrency)

    async def limited(task: tuple[str, str, float, str, int], name: str, fields: dict[str, Any]) -> dict[str, Any]:
        async with limit:
            return await one(task, name, fields)

    jobs = [
        limited(task, f"{name}{'|' + loop if loop else ''}", {**fields, **extra})
        for loop, extra in loops.items()
        for name, fields in configs().items()
        if not only or name in only
        for task in cells(seeds)
    ]
    return list(await asyncio.gather(*jobs))


def table(rows: list[dict[str, Any]], budget: str, names: list[str], base: str) -> dict[str, Any]:
    """Each `names` config against `base`, per family and over all (paired by stream and seed)."""
    out: dict[str, Any] = {"budget": budget, "baseline": base, "rows": {}}
    for name in names:
        grouped = [{**r, "env": r["family"], "error": "*"} for r in rows if r["config"] in (name, base)]
        groups = paired(grouped, name, base)
        out["rows"][name] = {group.removesuffix("@*"): _line(found) for group, found in groups.items()}
    return out


def _line(found: dict[str, Any]) -> dict[str, Any]:
    saved, success, tasks = found["executed"], found["success"], found["tasks"]
    ci = saved["ci95"]
    return {
        "tasks": tasks,
        "steps_ratio": None if saved["saved"] is None else round(1 - saved["saved"], 3),
        "steps_ratio_ci95": None if ci is None else [round(1 - ci[1], 3), round(1 - ci[0], 3)],
        "success": round(success["new"] * tasks),
        "success_baseline": round(success["baseline"] * tasks),
        "success_delta_ci95": None if success["ci95"] is None else [round(v * tasks) for v in success["ci95"]],
    }


def tables(rows: list[dict[str, Any]], loop: str) -> list[dict[str, Any]]:
    suffix = f"|{loop}" if loop else ""
    mine = [r for r in rows if r["config"].endswith(suffix) and (loop or "|" not in r["config"])]
    base = f"full/fair{suffix}"
    names = [f"{n}/fair{suffix}" for n in STRATEGIES if n != "full"]
    fair = table(mine, "fair", names, base)
    other = [f"{n}/{b}{suffix}" for b in OTHER_BUDGETS for n in ("first_mistake", "best")]
    found = [fair, table(mine, "path, new — new is not a fair comparison (full retry: fair)", other, base)]
    first = {r["stream"]: r for r in mine if r["config"] == FIRST + suffix}
    if first:
        found += anatomy(mine, first, names, base)
    return [{**t, "loops": loop} for t in found]


PERFECT = "perfect retry"
"""Not a strategy: each failed first attempt followed by the cheapest retry there can be (restart at
the state on its path closest to the goal, then no mistake): the floor under every strategy's steps."""


def anatomy(rows: list[dict[str, Any]], first: dict[str, dict[str, Any]], names: list[str], base: str) -> list[dict]:
    """Where the steps go, under the fair budget: the tasks whose first attempt failed (the only ones
    where strategies differ, as every configuration runs the same first attempt), the steps after that
    first attempt, and the perfect retry's floor over all tasks.
    """
    failed = {stream for stream, row in first.items() if row["status"] != "success"}
    retried = [r for r in rows if r["stream"] in failed]
    after = [{**r, "executed": r["executed"] - first[r["stream"]]["executed"]} for r in retried]
    floor = [_perfect(row) for row in first.values()]
    share = {fam: _first_share(rows, first, base, fam) for fam in [*FAMILIES, "all"]}
    title = f"fair · {PERFECT}: restart at the closest state, no mistake after it"
    return [
        table(retried, "fair · tasks whose first attempt failed", names, base),
        table(after, "fair · steps after the first attempt (tasks whose first attempt failed)", names, base),
        {**table([*rows, *floor], title, [PERFECT], base), "first_share": share},
    ]


def _perfect(first: dict[str, Any]) -> dict[str, Any]:
    more = first.get("perfect_retry")
    solved = first["status"] == "success" or more is not None
    return {
        **first,
        "config": PERFECT,
        "executed": first["executed"] + (more or 0),
        "status": "success" if solved else "failure",
    }


def _first_share(rows: list[dict[str, Any]], first: dict[str, dict[str, Any]], base: str, family: str) -> float:
    """The share of full retry's executed steps spent in first attempts, the same in every configuration."""
    full = [r for r in rows if r["config"] == base and family in ("all", r["family"])]
    spent = sum(r["executed"] for r in full)
    return round(sum(first[r["stream"]]["executed"] for r in full) / spent, 3) if spent else 0.0


COLUMNS = ("steps vs full (95% CI)", "success (full)", "Δ success 95% CI")


def markdown(found: list[dict[str, Any]], header: str) -> str:
    lines = [header, ""]
    for t in (t for t in found if any(t["rows"].values())):  # a table whose configs were not run is left out
        lines += [f"### budget: {t['budget']}{' · ' + t['loops'] if t['loops'] else ''} — against {t['baseline']}", ""]
        if "first_share" in t:
            shares = ", ".join(f"{family} {share}" for family, share in t["first_share"].items())
            lines += [
                f"First attempts (the same in every configuration) spent this share of full retry's steps: {shares}.",
                "",
            ]
        lines += [f"| config | group | tasks | {' | '.join(COLUMNS)} |", "|---|---|---|---|---|---|"]
        for name, groups in t["rows"].items():
            for group, c in groups.items():
                ci = c["steps_ratio_ci95"]
                ratio = f"{c['steps_ratio']}× ({ci[0]}–{ci[1]})" if ci else f"{c['steps_ratio']}×"
                delta = c["success_delta_ci95"]
                success = f"{c['success']} ({c['success_baseline']})"
                lines.append(f"| {name} | {group} | {c['tasks']} | {ratio} | {success} | {delta} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=480, help="tasks in all, spread over env, error and critic")
    parser.add_argument("--loop-detection", choices=("on", "off", "both"), default="default")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument(
        "--configs", nargs="+", choices=list(configs()), help=f"run only these ({FIRST} and full/fair always)"
    )
    arguments = parser.parse_args()
    if arguments.seeds < 1:
        parser.error(f"--seeds must be >= 1 (got {arguments.seeds})")
    loops = loop_settings(arguments.loop_detection)
    started = time.perf_counter()
    only = sorted({FIRST, "full/fair", *arguments.configs}) if arguments.configs else None
    rows = asyncio.run(measure(arguments.seeds, loops, only))
    wall = round(time.perf_counter() - started, 1)
    found = [t for loop in loops for t in tables(rows, loop)]
    header = (
        f"python benchmarks/bench_retry.py --seeds {arguments.seeds}: {len(rows)} runs in {wall} s; "
        f"sim error {', '.join(map(str, ERRORS))}, critic on and off, max_pivot_retries 2, memory off"
    )
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "retry.json").write_text(json.dumps({"command": header, "tables": found, "runs": rows}, indent=1))
    (arguments.out / "retry.md").write_text(markdown(found, header))
    print(markdown(found, header))
    print(f"wall time {wall} s for {len(rows)} runs ({arguments.seeds} seeds)")


if __name__ == "__main__":
    main()
