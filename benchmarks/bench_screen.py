"""The poisoning screens measured apart on the outside lesson sets (pivotal/bench/attack_lessons.py).

For each set (dev and dev_grammar: tuned against; frozen: held out, never tuned against) and each screen (the rule
screen, memory/lesson/screen.py; the model screen, the critic's model asked by nodes/gate.py's
`model_screen`), the share of hostile lessons refused and of benign lessons refused.

    python benchmarks/bench_screen.py                    # the rule screen only
    python benchmarks/bench_screen.py --model sim        # and the model screen on `sim`
    python benchmarks/bench_screen.py --model local --sample 40   # ... on the embedded model (~4 s a
                                                                  # lesson on 1 thread): 40 of each label
    python benchmarks/bench_screen.py --misses dev       # list what the rule screen got wrong on dev
                                                         # (or dev_grammar: pivotal/bench/attack_grammar.py)

Prints one JSON object; `--out FILE` writes it too. `--misses` works on the dev set only: the
frozen set's misses are never listed, so no rule is written against them.
"""

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from typing import Any

from pivotal.bench.attack_lessons import load
from pivotal.memory.lesson.screen import screen_lesson


def rates(rows: list[dict[str, Any]], refused: list[bool]) -> dict[str, Any]:
    hostile = [r for r, x in zip(rows, refused, strict=True) if r["label"] == "hostile" and x]
    benign = [r for r, x in zip(rows, refused, strict=True) if r["label"] == "benign" and x]
    n_hostile = sum(r["label"] == "hostile" for r in rows)
    n_benign = len(rows) - n_hostile
    return {
        "hostile_refused": f"{len(hostile)}/{n_hostile}",
        "hostile_refused_rate": round(len(hostile) / n_hostile, 3),
        "benign_refused": f"{len(benign)}/{n_benign}",
        "benign_refused_rate": round(len(benign) / n_benign, 3),
    }


def by_category(rows: list[dict[str, Any]], refused: list[bool]) -> dict[str, str]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row, out in zip(rows, refused, strict=True):
        if row["label"] == "hostile":
            counts[row["category"]][0] += out
            counts[row["category"]][1] += 1
    return {k: f"{a}/{n}" for k, (a, n) in sorted(counts.items())}


def sample(rows: list[dict[str, Any]], per_label: int | None) -> list[dict[str, Any]]:
    """Evenly spaced rows of each label, in file order: the same ones every run."""
    if not per_label:
        return rows
    picked = []
    for label in ("hostile", "benign"):
        of_label = [r for r in rows if r["label"] == label]
        step = max(len(of_label) / per_label, 1.0)
        picked += [of_label[int(i * step)] for i in range(min(per_label, len(of_label)))]
    return picked


async def model_refusals(rows: list[dict[str, Any]], model: str) -> list[bool]:
    from pivotal.core.context import Context
    from pivotal.nodes.gate import model_screen

    context = Context(model=model, model_screen=True, local_threads=1)
    refused = []
    for row in rows:
        verdict, _ = await model_screen(context, {"run_id": "bench-screen"}, {"kind": "skill", **row})
        refused.append(verdict is not None)
    return refused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="also measure the model screen with this model spec (sim, local, ...)")
    parser.add_argument("--sample", type=int, help="the model screen reads this many rows of each label per set")
    parser.add_argument("--misses", choices=["dev", "dev_grammar"], help="list the rule screen's misses on this set")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    result: dict[str, Any] = {"sets": {}}
    for bank in ("dev", "dev_grammar", "frozen"):
        header, rows = load(bank)
        started = time.perf_counter()
        rule = [screen_lesson(r["situation"], r["text"]) is not None for r in rows]
        seconds = time.perf_counter() - started
        entry: dict[str, Any] = {
            "frozen": header["frozen"],
            "rows_sha256": header["rows_sha256"],
            "rule": {**rates(rows, rule), "by_category": by_category(rows, rule), "ms_per_lesson": 0.0},
        }
        entry["rule"]["ms_per_lesson"] = round(1000 * seconds / len(rows), 3)
        if args.model:
            picked = sample(rows, args.sample)
            started = time.perf_counter()
            model = asyncio.run(model_refusals(picked, args.model))
            seconds = time.perf_counter() - started
            ruled = {r["id"]: x for r, x in zip(rows, rule, strict=True)}
            both = [ruled[r["id"]] or m for r, m in zip(picked, model, strict=True)]
            entry["model"] = {
                "spec": args.model,
                "rows": len(picked),
                **rates(picked, model),
                "by_category": by_category(picked, model),
                "s_per_lesson": round(seconds / len(picked), 2),
                "refused_ids": [r["id"] for r, m in zip(picked, model, strict=True) if m],
            }
            entry["rule_on_those_rows"] = rates(picked, [ruled[r["id"]] for r in picked])
            entry["rule_then_model"] = rates(picked, both)
        if args.misses == bank:
            entry["misses"] = [
                {k: r[k] for k in ("id", "label", "category", "situation", "text")}
                for r, x in zip(rows, rule, strict=True)
                if x != (r["label"] == "hostile")
            ]
        result["sets"][bank] = entry
    text = json.dumps(result, ensure_ascii=False, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
