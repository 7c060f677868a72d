"""Two settings of a store folder against each other in one process: Chroma's index write interval
(memory/storage/chroma.py `SYNC_THRESHOLD`) and when a family is read into memory
(memory/policy/mirror.py `VECTORS_PER_QUERY`).

Two stores are seeded alike, each made and used under its own settings; their memory-on passes of
benchmarks/bench_batch.py (cold and warm) are interleaved, the order alternating each round, with a
memory-off pass and a bare-loop pass per round, so the machine's noise hits both alike. Per pass:
wall and CPU per step, and each Chroma call's count and CPU of the whole process (Chroma does much of
its work in threads of its own). The defaults compare today's settings with the ones before them:
Chroma's sync_threshold of 1,000, and a 1,000-lesson family read after 16 queries (62.5 vectors per
query), as the fixed MIRROR_AFTER did.

Run: python benchmarks/bench_store_settings.py [--rounds 8] [--old 1000 62.5] [--new 100 100]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import statistics
import tempfile
import time
from typing import Any

import bench_batch as bench

from pivotal.memory.policy import mirror
from pivotal.memory.policy.registry import close_stores
from pivotal.memory.storage import chroma

CALLS = {
    chroma.ChromaLessons: ("nearest", "with_vectors", "update", "put", "read", "count"),
    chroma.ChromaRecords: ("append",),
}
spent: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])


def _counted() -> None:
    """Each Chroma call counted, with the process's CPU spent inside it."""
    for owner, names in CALLS.items():
        for name in names:
            call = getattr(owner, name)

            @functools.wraps(call)
            def counted(*args: Any, _call: Any = call, _key: str = f"{owner.__name__}.{name}", **kwargs: Any) -> Any:
                started = time.process_time()
                try:
                    return _call(*args, **kwargs)
                finally:
                    spent[_key][0] += 1
                    spent[_key][1] += time.process_time() - started

            setattr(owner, name, counted)


async def compare(rounds: int, settings: dict[str, tuple[int, float]], stored: int, seeds: int) -> dict[str, Any]:
    def use(which: str) -> None:
        chroma.SYNC_THRESHOLD, mirror.VECTORS_PER_QUERY = settings[which]

    out: dict[str, list[tuple[tuple[float, float], dict[str, Any]]]] = collections.defaultdict(list)
    tasks = [{"env": "gridworld", "params": {"seed": s}} for s in range(seeds)]
    with tempfile.TemporaryDirectory() as folder:
        stores = {which: f"{folder}/store-{which}" for which in settings}
        for which, path in stores.items():
            use(which)
            bench._seed_store(path, stored)
        for run in range(rounds + 1):  # the first round warms imports and caches; it is not counted
            off = await bench._pivotal_pass(tasks, f"{folder}/o{run}.sqlite", memory=False, store=stores["new"])
            timed: dict[str, Any] = {"off": (off, {})}
            for mode in ("cold", "warm"):
                for which in list(settings)[:: 1 if run % 2 == 0 else -1]:
                    use(which)
                    spent.clear()
                    path = f"{folder}/{which}-{mode}{run}.sqlite"
                    warm = mode == "warm"
                    passed = await bench._pivotal_pass(tasks, path, memory=True, store=stores[which], warm=warm)
                    timed[f"{which}_{mode}"] = (passed, {k: (n, 1000 * s) for k, (n, s) in spent.items()})
            timed["agent"] = (await bench._timed(bench._agent_pass(f"{folder}/a{run}.sqlite", seeds)), {})
            if run:
                for name, value in timed.items():
                    out[name].append(value)
        close_stores()
    return _report(out, rounds, settings)


def _report(out: dict[str, list[Any]], rounds: int, settings: dict[str, tuple[int, float]]) -> dict[str, Any]:
    median = statistics.median
    report: dict[str, Any] = {"rounds": rounds, "settings": settings, "passes": {}}
    agent = [t for t, _ in out["agent"]]
    for name, rows in out.items():
        calls: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
        for _, counted in rows:
            for call, value in counted.items():
                calls[call].append(value)
        report["passes"][name] = {
            "ms_per_step": round(median(t[0] for t, _ in rows), 2),
            "cpu_ms_per_step": round(median(t[1] for t, _ in rows), 2),
            "wall_over_agent": round(median(t[0] / a[0] for (t, _), a in zip(rows, agent, strict=True)), 3),
            "cpu_over_agent": round(median(t[1] / a[1] for (t, _), a in zip(rows, agent, strict=True)), 3),
            "chroma_calls": {
                call: {"calls": median(n for n, _ in v), "process_cpu_ms": round(median(s for _, s in v), 1)}
                for call, v in sorted(calls.items())
            },
        }
    old, new = list(settings)  # "old", "new"
    off = [t for t, _ in out["off"]]
    for mode in ("cold", "warm"):
        a, b = [t for t, _ in out[f"{old}_{mode}"]], [t for t, _ in out[f"{new}_{mode}"]]
        report[f"{mode}_memory_own_cpu_ms_per_step"] = {
            old: round(median(x[1] - o[1] for x, o in zip(a, off, strict=True)), 2),
            new: round(median(x[1] - o[1] for x, o in zip(b, off, strict=True)), 2),
        }
        paired = [y[1] - x[1] for x, y in zip(a, b, strict=True)]
        report[f"{mode}_{new}_minus_{old}_cpu_ms_per_step"] = {
            "median": round(median(paired), 2),
            "range": [round(min(paired), 2), round(max(paired), 2)],
        }
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--old", nargs=2, type=float, default=[1000, 62.5], metavar=("SYNC", "VECTORS_PER_QUERY"))
    parser.add_argument("--new", nargs=2, type=float, default=[100, 100], metavar=("SYNC", "VECTORS_PER_QUERY"))
    parser.add_argument("--stored", type=int, default=1000, help="lessons in each store")
    parser.add_argument("--seeds", type=int, default=10, help="tasks per pass")
    arguments = parser.parse_args()
    _counted()
    chosen = {"old": (int(arguments.old[0]), arguments.old[1]), "new": (int(arguments.new[0]), arguments.new[1])}
    print(json.dumps(asyncio.run(compare(arguments.rounds, chosen, arguments.stored, arguments.seeds)), indent=1))
