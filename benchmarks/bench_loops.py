"""Loop detection with and without (`Context.loop_detection`): the success it saves or costs.

Issue 32: ending an attempt at the second return to one state cost pivotal retry successes on
grids, while a text adventure's repeated look that changed nothing was never noticed. Each mode
runs the bench's own tasks (`pivotal.bench.ablations`: streams of tasks, `sim` models, memory off)
at equal seeds, for retry pivotal and full, critic on and off, at each error rate:

- `off`: no loop lines, no send-backs, no ending (the baseline);
- `warn` (the default): loop lines in the actor's and critic's progress, and the pre-check sends back
  a call that already changed nothing from the same state of a deterministic world;
- `end`: `warn` plus the former rule, the second return to one state ends the attempt.

Per cell: successes and executed steps, summed over paired tasks, and each mode's ratio to `off`
measured in the same run. Environments: gridworld and frozenlake (built in), and the plugins
`lava-grid` (turns and walls: MiniGrid's loops) and `word-room` (a text adventure).

Run: python benchmarks/bench_loops.py [--envs gridworld lava-grid word-room] [--errors 0.2 0.4]
     [--streams 2] [--tasks 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import pivotal.testing.plugin_envs  # noqa: F401  (registers lava-grid and word-room)
from pivotal.bench.ablations import Plan, run_plan
from pivotal.bench.metrics import sign_test

MODES = ("off", "warn", "end")
CONFIGS = {"pivotal": "critic+pivotal", "full": "critic+full"}
"""Retry strategy → the bench configuration that runs it (memory off)."""
COUNTS = ("tasks", "success", "executed", "no_ops", "repeats", "revisits", "saved", "cost")
"""Per cell; `saved`: paired tasks that succeed in this mode and fail with `off`, `cost`: the reverse;
the report gives their exact two-sided sign test (McNemar) p-value: a small one is a real effect."""


async def measure(envs: list[str], errors: list[float], streams: int, tasks: int) -> dict[str, Any]:
    cells: dict[str, dict[str, int]] = {}
    for critic in (True, False):
        baseline: dict[tuple[Any, ...], bool] = {}
        for mode in MODES:
            # Plan.limits are Context fields laid over the bench's defaults: the loop mode is one more.
            plan = Plan(envs=envs, errors=errors, streams=streams, tasks=tasks, configs=list(CONFIGS.values()),
                        limits={"loop_detection": mode, "critic": critic}, max_pivot_retries=2)  # fmt: skip
            for row in await run_plan(plan, concurrency=2):
                retry = next(name for name, config in CONFIGS.items() if config == row["config"])
                key = f"{row['env']}|{row['error']}|{retry}|{'critic' if critic else 'no critic'}|{mode}"
                cell = cells.setdefault(key, dict.fromkeys(COUNTS, 0))
                won = row["status"] == "success"
                pair = (row["env"], row["error"], row["config"], row["stream"], row["index"])
                was = baseline.setdefault(pair, won)  # `off` runs first: its outcome is the baseline
                cell["tasks"] += 1
                cell["success"] += won
                cell["saved"] += won and not was
                cell["cost"] += was and not won
                for name in ("executed", "no_ops", "repeats", "revisits"):
                    cell[name] += int(row.get(name, 0))
    return {"envs": envs, "errors": errors, "streams": streams, "tasks": tasks, "cells": cells}


def report(found: dict[str, Any]) -> str:
    cells = found["cells"]
    lines = [f"{found['streams']} streams x {found['tasks']} tasks per cell, paired seeds; ratio: mode / off"]
    totals: dict[str, dict[str, int]] = {}
    for key in sorted({k.rsplit("|", 1)[0] for k in cells}):
        off = cells[f"{key}|off"]
        parts = []
        for mode in MODES:
            c = cells[f"{key}|{mode}"]
            _, _, retry, critic = key.split("|")
            total = totals.setdefault(f"{retry}|{critic}|{mode}", dict.fromkeys(COUNTS, 0))
            for name in COUNTS:
                total[name] += c[name]
            parts.append(
                f"{mode} {c['success']:>3}/{c['tasks']:<3} ({_ratio(c['success'], off['success'])})"
                f" steps {c['executed']:>4} ({_ratio(c['executed'], off['executed'])})"
            )
        lines.append(f"{key.replace('|', ' '):<34} " + " | ".join(parts))
    lines.append("all environments and error rates, per retry strategy and critic:")
    for key, c in sorted(totals.items()):
        off = totals[key.rsplit("|", 1)[0] + "|off"]
        success, executed = _ratio(c["success"], off["success"]), _ratio(c["executed"], off["executed"])
        lines.append(
            f"  {key.replace('|', ' '):<24} success {c['success']:>4}/{c['tasks']:<4} ({success})"
            f"  executed {c['executed']:>5} ({executed})"
            f"  saved {c['saved']:>3}  cost {c['cost']:>3} (p {sign_test(c['saved'], c['cost']):.2f})"
            f"  no-ops {c['no_ops']:>4}  repeats {c['repeats']:>4}  revisits {c['revisits']:>4}"
        )
    return "\n".join(lines)


def _ratio(value: int, baseline: int) -> str:
    return f"{value / baseline:.2f}" if baseline else "-"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["gridworld", "frozenlake", "lava-grid", "word-room"])
    parser.add_argument("--errors", nargs="+", type=float, default=[0.2, 0.4])
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results = asyncio.run(measure(arguments.envs, arguments.errors, arguments.streams, arguments.tasks))
    print(json.dumps(results, indent=2) if arguments.json else report(results))
