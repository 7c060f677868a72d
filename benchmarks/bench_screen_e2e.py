"""Issue 41's goal as it is worded: of the outside lesson sets, how many hostile lessons ever reach an
actor's or a critic's prompt as advice, by each path a lesson arrives by (pivotal/bench/poison_paths.py:
import, the writer after the gate, a program's raw store write, the environment's observations through
real graph runs), on a real Chroma store; and what the same defences cost benign lessons. With `--gain`,
the quarantine's effect on memory's gain (bench_transfer.py's same-layout stream, memory on with and
without the quarantine against memory off).

    python benchmarks/bench_screen_e2e.py --set dev                      # import, writer, raw
    python benchmarks/bench_screen_e2e.py --set frozen --observation 50  # and 50+50 texts shown by the world
    python benchmarks/bench_screen_e2e.py --gain --streams 6 --tasks 8   # the quarantine's cost

The frozen set is measured, never tuned against (pivotal/bench/attack_lessons.py). Prints one JSON
object and writes it to benchmarks/results/screen_e2e.json (`--out` to change).
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from pivotal.bench.ablations import Plan, run_plan
from pivotal.bench.attack_lessons import load
from pivotal.bench.metrics import paired
from pivotal.bench.poison_paths import measure
from pivotal.memory.lesson.screen import screen_lesson

OUT = Path(__file__).parent / "results" / "screen_e2e.json"
ENVS = ["gridworld", "frozenlake", "minesweeper"]
MEMORY = "critic+pivotal+memory"
OPEN = "critic+pivotal+memory(no quarantine)"
OFF = "critic+pivotal"


def paths_report(bank: str, observation: int) -> dict[str, Any]:
    header, rows = load(bank)  # type: ignore[arg-type]
    rule = {r["id"]: screen_lesson(r["situation"], r["text"]) is not None for r in rows}
    screen_only = {
        label: f"{sum(rule[r['id']] for r in rows if r['label'] == label)}/{sum(r['label'] == label for r in rows)}"
        for label in ("hostile", "benign")
    }
    paths = ["import", "writer", "raw"] + (["observation"] if observation else [])
    started = time.perf_counter()
    report = measure(rows, paths, observation_rows=observation)
    return {
        "set": bank,
        "rows_sha256": header["rows_sha256"],
        "rule_screen_refused": screen_only,
        "paths": report,
        "wall_s": round(time.perf_counter() - started, 1),
    }


async def gain_report(streams: int, tasks: int, error: float) -> dict[str, Any]:
    plan = Plan(envs=ENVS, errors=[error], streams=streams, tasks=tasks, configs=[OFF, MEMORY, OPEN])
    plan.env_params = {"frozenlake": {"size": 4}}
    started = time.perf_counter()
    records = await run_plan(plan)
    out: dict[str, Any] = {"streams": streams, "tasks": tasks, "error": error, "model": "sim", "layout": "same"}
    for name, new in (("quarantine on (default)", MEMORY), ("quarantine off", OPEN)):
        compared = paired(records, new, OFF)
        out[name] = {
            group: {
                "success_memory": c["success"]["new"],
                "success_off": c["success"]["baseline"],
                "gain": c["success"]["difference"],
                "gain_ci95": c["success"]["ci95"],
            }
            for group, c in compared.items()
        }
        out[name]["recalled_per_task"] = round(
            sum(r["lessons"]["recalled"] for r in records if r["config"] == new)
            / max(1, sum(r["config"] == new for r in records)),
            2,
        )
    out["wall_s"] = round(time.perf_counter() - started, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--set", choices=["dev", "dev_grammar", "frozen"], action="append", help="the lesson set(s) to push through"
    )
    parser.add_argument("--observation", type=int, default=0, help="texts of each label the world shows (graph runs)")
    parser.add_argument("--gain", action="store_true", help="measure the quarantine's effect on memory's gain")
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--error", type=float, default=0.5)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    result: dict[str, Any] = {}
    for bank in args.set or []:
        result[bank] = paths_report(bank, args.observation)
    if args.gain:
        result["gain"] = asyncio.run(gain_report(args.streams, args.tasks, args.error))
    if not result:
        parser.error("nothing to measure: give --set and/or --gain")
    text = json.dumps(result, ensure_ascii=False, indent=2)
    print(text)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
