"""Do lessons transfer safely? Memory on against off, paired task by task at equal seeds, on two
kinds of stream sharing one store: every task in the same layout (lessons should help) and every
task in a layout of its own (lessons from other mazes, boards or lakes must not hurt).

The `sim` model is a stand-in for an LLM that reads its lessons: its actor follows a recalled
recipe (a solved run's moves) wherever one is shown, until the critic objects to a move, and
heeds a recalled guardrail that states the oracle's own reason against a move. A recipe recalled
in the wrong maze is followed into its walls, so the new-layout stream tests recall's scope, and
the same-layout stream tests that the right recipe is found. It measures what recall surfaces and
where, not how well a real model weighs advice.

Run: python benchmarks/bench_transfer.py [--streams 6] [--tasks 8] [--error 0.5] [--json]
(at error 0.3 success is ~100% either way on two of the three environments: no room to raise it)
"""

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from pivotal.bench.ablations import Plan, run_plan
from pivotal.bench.metrics import paired

ENVS = ["gridworld", "frozenlake", "minesweeper"]
CONFIGS = ["critic+pivotal", "critic+pivotal+memory"]
OUT = Path(__file__).parent / "results" / "transfer.json"


async def measure(streams: int, tasks: int, error: float) -> dict[str, Any]:
    report: dict[str, Any] = {"streams": streams, "tasks": tasks, "error": error, "model": "sim"}
    for kind, different in (("same layout", False), ("a new layout per task", True)):
        plan = Plan(envs=ENVS, errors=[error], streams=streams, tasks=tasks, configs=CONFIGS)
        plan.new_layout_per_task = different
        plan.env_params = {"frozenlake": {"size": 4}}  # a generated lake: the named 4x4 map ignores the seed
        started = time.perf_counter()
        records = await run_plan(plan)
        compared = paired(records, "critic+pivotal+memory", "critic+pivotal")
        report[kind] = {
            "wall_s": round(time.perf_counter() - started, 1),
            "recalled_per_task": _mean(r["lessons"]["recalled"] for r in records if r["config"] == CONFIGS[1]),
            **{group: _brief(c) for group, c in compared.items()},
        }
    return report


def _brief(compared: dict[str, Any]) -> dict[str, Any]:
    success, executed = compared["success"], compared["executed"]
    return {
        "tasks": compared["tasks"],
        "success_on": success["new"],
        "success_off": success["baseline"],
        "success_difference": success["difference"],
        "success_ci95": success["ci95"],
        "executed_saved": executed["saved"],
        "executed_saved_ci95": executed["ci95"],
    }


def _mean(values: Any) -> float:
    values = list(values)
    return round(sum(values) / len(values), 2) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--error", type=float, default=0.5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(measure(args.streams, args.tasks, args.error))
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2) if args.json else _table(report))


def _table(report: dict[str, Any]) -> str:
    lines = [f"memory on vs off, sim error {report['error']}, {report['streams']} streams x {report['tasks']} tasks"]
    for kind in ("same layout", "a new layout per task"):
        part = report[kind]
        lines.append(f"{kind} ({part['wall_s']} s; {part['recalled_per_task']} lessons recalled per task):")
        for group, c in part.items():
            if isinstance(c, dict):
                lines.append(f"  {group}: {json.dumps(c)}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
