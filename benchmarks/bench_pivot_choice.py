"""Where a pivotal retry goes back to: the first mistake against the point of no return (`Context.pivot`).

The bench's own runs (`pivotal.bench.ablations`: streams of tasks, `sim` models at one error rate,
the per-environment step limits, memory off), once per pivot choice at equal seeds, with the critic
(the bench's `critic+pivotal`) and without it (`actor+pivotal`: more failed attempts, so the pivot
matters more). Per environment and choice: success, executed steps, LLM calls and attempts, summed
over the tasks, and the executed steps per success. Every number is a count, not a time.

Run: python benchmarks/bench_pivot_choice.py [--envs gridworld frozenlake minesweeper] [--error 0.3]
     [--streams 6] [--tasks 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from pivotal.bench.ablations import Plan, run_plan
from pivotal.core.environments import environment_names

CHOICES = ("first_mistake", "no_return")
VARIANTS = {"critic+pivotal": {}, "actor+pivotal": {"critic": False}}
"""The bench configuration each variant runs, and the Context fields it changes on top of it."""


async def measure(envs: list[str], error: float, streams: int, tasks: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for variant, changes in VARIANTS.items():
        for choice in CHOICES:
            # Plan.limits are Context fields laid over the bench's defaults: the pivot choice is one more.
            plan = Plan(envs=envs, errors=[error], streams=streams, tasks=tasks, configs=["critic+pivotal"],
                        limits={**changes, "pivot": choice})  # fmt: skip
            for row in await run_plan(plan):
                cell = found.setdefault(variant, {}).setdefault(row["env"], {}).setdefault(choice, _empty())
                cell["tasks"] += 1
                cell["success"] += row["status"] == "success"
                cell["executed"] += row["executed"]
                cell["llm_calls"] += row["llm_calls"]
                cell["attempts"] += row["attempts"]
    for envs_ in found.values():
        for cells in envs_.values():
            for cell in cells.values():
                cell["steps_per_success"] = round(cell["executed"] / cell["success"], 2) if cell["success"] else None
    return {"error": error, "streams": streams, "tasks": tasks, "variants": found}


def _empty() -> dict[str, int]:
    return {"tasks": 0, "success": 0, "executed": 0, "llm_calls": 0, "attempts": 0}


def report(found: dict[str, Any]) -> str:
    lines = [f"sim error {found['error']}, {found['streams']} streams x {found['tasks']} tasks per environment"]
    for variant, envs in found["variants"].items():
        lines.append(variant)
        for env, cells in envs.items():
            for choice, c in cells.items():
                lines.append(
                    f"  {env:<12} {choice:<13} success {c['success']:>3}/{c['tasks']:<3} executed {c['executed']:>5}"
                    f"  calls {c['llm_calls']:>5}  attempts {c['attempts']:>4}  steps/success {c['steps_per_success']}"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_envs = [e for e in ("gridworld", "frozenlake", "minesweeper") if e in environment_names()]
    parser.add_argument("--envs", nargs="+", default=default_envs)
    parser.add_argument("--error", type=float, default=0.3)
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results = asyncio.run(measure(arguments.envs, arguments.error, arguments.streams, arguments.tasks))
    print(json.dumps(results, indent=2) if arguments.json else report(results))
