"""Measures what the graph costs on top of its model calls, and what the local model costs.

Part 1 runs the whole graph with `sim` models, whose replies are near free, so what is
left per step is framework overhead (LangGraph, checkpointing, prompts, parsing). The
baseline, measured in the same process, is the same number of bare structured calls to
the sim model with no graph around them; the ratio graph/bare is what the graph adds.
The same runs with a SQLite checkpointer show what durable checkpoints cost over memory.

Part 2 runs the gridworld demo on the embedded SmolLM2-135M (`local`) and reports
seconds per step and output tokens/s, plus its ratio to the sim step cost from part 1.

The machine is small and shared, so every figure is a median over runs and every
comparison is a ratio against a baseline measured in the same run.

Run: python benchmarks/bench_models.py [--runs N] [--skip-local] [--json PATH]
     (from the repo root)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from pivotal.core.context import Context
from pivotal.core.models.factory import make_model
from pivotal.core.models.structured import ask
from pivotal.core.schemas import Verdict
from pivotal.graphs import RunResult, arun

SEEDS = range(10)
BARE_MESSAGES = [
    SystemMessage("You are the critic. Judge the proposed action before it runs."),
    HumanMessage("Grid 6x6, agent at (0,0), goal at (5,5). Proposed action: move_right {}."),
]
BARE_FALLBACK = Verdict(decision="approve", confidence=0.5)
LOCAL_TASK = {"env": "gridworld", "params": {"seed": 0, "size": 4}}


def sim_context() -> Context:
    return Context(model="sim", memory=False, max_pivot_retries=0)


def local_context() -> Context:
    return Context(model="local", memory=False, max_steps=4, max_pivot_retries=0, max_critique_rounds=1)


async def graph_pass(checkpoint_path: str) -> dict[str, float]:
    """One run per seed; ms per executed step and LLM calls per step over the whole pass."""
    results = [
        await arun({"env": "gridworld", "params": {"seed": s}}, sim_context(), checkpoint_path=checkpoint_path)
        for s in SEEDS
    ]
    executed = sum(r.executed for r in results)
    model_s = sum(u["seconds"] for r in results for u in r.usage.values())
    return {
        "ms_per_step": 1000 * sum(r.wall_s for r in results) / executed,
        "calls_per_step": sum(r.llm_calls for r in results) / executed,
        "llm_calls": sum(r.llm_calls for r in results),
        "model_ms_per_step": 1000 * model_s / executed,
    }


async def bare_call_ms(calls: int) -> float:
    """Mean ms of one structured sim call with no graph around it: the baseline."""
    model = make_model("sim")
    started = time.perf_counter()
    for _ in range(calls):
        await ask(
            model,
            Verdict,
            BARE_MESSAGES,
            role="critic",
            fallback=BARE_FALLBACK,
            retries=0,
            metadata={"pivotal_run": "x"},
        )
    return 1000 * (time.perf_counter() - started) / calls


async def bench_sim(runs: int) -> dict[str, Any]:
    """Interleave memory, SQLite and bare passes so load spikes hit all three alike."""
    await graph_pass(":memory:")  # imports, graph compile, first-call caches
    await bare_call_ms(20)
    memory, sqlite, bare = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(runs):
            memory.append(await graph_pass(":memory:"))
            sqlite.append(await graph_pass(str(Path(folder) / f"bench_{i}.sqlite")))
            bare.append(await bare_call_ms(int(memory[-1]["llm_calls"])))  # as many calls as the graph made
    graph_ms = statistics.median(p["ms_per_step"] for p in memory)
    calls_per_step = statistics.median(p["calls_per_step"] for p in memory)
    bare_ms = calls_per_step * statistics.median(bare)
    sqlite_ms = statistics.median(p["ms_per_step"] for p in sqlite)
    return {
        "runs": runs,
        "seeds": len(SEEDS),
        "calls_per_step": calls_per_step,
        "bare_ms_per_call": statistics.median(bare),
        "bare_ms_per_step": bare_ms,
        "graph_ms_per_step": graph_ms,
        "overhead_ms_per_step": graph_ms - bare_ms,
        "graph_over_bare": graph_ms / bare_ms,
        "in_graph_model_ms_per_step": statistics.median(p["model_ms_per_step"] for p in memory),
        "sqlite_ms_per_step": sqlite_ms,
        "sqlite_over_memory": sqlite_ms / graph_ms,
    }


async def local_load_s() -> float:
    """The first call loads the GGUF; the same call again is generation only, so the gap is load.

    Slightly high: llama.cpp may reuse the repeated prompt's cache on the second call.
    """
    model = make_model("local", local_context().local_threads)
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        await ask(
            model,
            Verdict,
            BARE_MESSAGES,
            role="critic",
            fallback=BARE_FALLBACK,
            retries=0,
            metadata={"pivotal_run": "x"},
        )
        timings.append(time.perf_counter() - started)
    return max(timings[0] - timings[1], 0.0)


def per_role(results: list[RunResult]) -> dict[str, dict[str, float]]:
    """Calls, s/call, output tok/s and input tokens/call per role, summed over runs."""
    roles: dict[str, dict[str, float]] = {}
    for result in results:
        for role, usage in result.usage.items():
            total = roles.setdefault(role, {"calls": 0, "seconds": 0.0, "input_tokens": 0, "output_tokens": 0})
            for key in total:
                total[key] += usage.get(key, 0)
    return {
        role: {
            "calls": t["calls"] / len(results),
            "s_per_call": t["seconds"] / max(t["calls"], 1),
            "out_tok_per_s": t["output_tokens"] / t["seconds"] if t["seconds"] else 0.0,
            "in_tok_per_call": t["input_tokens"] / max(t["calls"], 1),
        }
        for role, t in roles.items()
    }


async def bench_local(runs: int, sim_ms_per_step: float) -> dict[str, Any]:
    load_s = await local_load_s()
    results = [await arun(LOCAL_TASK, local_context(), checkpoint_path=":memory:") for _ in range(runs)]
    s_per_step = statistics.median(r.wall_s / max(r.executed, 1) for r in results)
    out_tokens = sum(u.get("output_tokens", 0) for r in results for u in r.usage.values())
    model_s = sum(u.get("seconds", 0.0) for r in results for u in r.usage.values())
    return {
        "runs": runs,
        "load_s": load_s,
        "status": [r.status for r in results],
        "executed": statistics.median(r.executed for r in results),
        "llm_calls": statistics.median(r.llm_calls for r in results),
        "wall_s": statistics.median(r.wall_s for r in results),
        "s_per_step": s_per_step,
        "out_tok_per_s": out_tokens / model_s if model_s else 0.0,
        "roles": per_role(results),
        "local_over_sim": 1000 * s_per_step / sim_ms_per_step,
    }


def print_sim(sim: dict[str, Any]) -> None:
    print(f"sim models, gridworld, {sim['seeds']} seeds x {sim['runs']} runs (medians)")
    rows = [
        ("LLM calls per step", sim["calls_per_step"], ""),
        ("bare sim call", sim["bare_ms_per_call"], "ms"),
        ("bare LLM calls per step", sim["bare_ms_per_step"], "ms"),
        ("  (model time inside graph)", sim["in_graph_model_ms_per_step"], "ms"),
        ("graph per step, :memory:", sim["graph_ms_per_step"], "ms"),
        ("overhead per step", sim["overhead_ms_per_step"], "ms"),
        ("ratio graph / bare", sim["graph_over_bare"], "x"),
        ("graph per step, SQLite file", sim["sqlite_ms_per_step"], "ms"),
        ("ratio SQLite / :memory:", sim["sqlite_over_memory"], "x"),
    ]
    for label, value, unit in rows:
        print(f"  {label:<30}{value:9.2f} {unit}")


def print_local(local: dict[str, Any]) -> None:
    print(f"\nlocal SmolLM2-135M, gridworld size 4, max_steps 4, {local['runs']} run(s) (medians)")
    print(f"  {'model load (first call)':<30}{local['load_s']:9.2f} s")
    print(f"  {'wall per run':<30}{local['wall_s']:9.2f} s   status {', '.join(local['status'])}")
    print(f"  {'executed steps / LLM calls':<30}{local['executed']:9.0f} / {local['llm_calls']:.0f}")
    print(f"  {'seconds per executed step':<30}{local['s_per_step']:9.2f} s")
    print(f"  {'output tokens/s (all roles)':<30}{local['out_tok_per_s']:9.1f}")
    print(f"  {'ratio local / sim per step':<30}{local['local_over_sim']:9.0f} x")
    print(f"  {'role':<10}{'calls':>7}{'s/call':>9}{'out tok/s':>11}{'in tok/call':>13}")
    for role, r in local["roles"].items():
        print(
            f"  {role:<10}{r['calls']:7.0f}{r['s_per_call']:9.2f}{r['out_tok_per_s']:11.1f}{r['in_tok_per_call']:13.0f}"
        )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"sim": await bench_sim(args.runs)}
    print_sim(report["sim"])
    if not args.skip_local:
        report["local"] = await bench_local(args.local_runs, report["sim"]["graph_ms_per_step"])
        print_local(report["local"])
    return report


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="passes over the 10 sim seeds (default 5)")
    parser.add_argument("--local-runs", type=int, default=1, help="local demo runs (default 1, ~25 s each)")
    parser.add_argument("--skip-local", action="store_true", help="skip the embedded local model")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    numbers = asyncio.run(main(arguments))
    if arguments.json:
        arguments.json.write_text(json.dumps(numbers, indent=2) + "\n")
