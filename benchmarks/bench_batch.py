"""Batch throughput and per-step framework overhead.

1. Efficiency: N gridworld tasks through `run_batch` with `sim` models that sleep 50 ms per
   call, at concurrency C, SQLite checkpoints on disk. Ideal wall time = total model latency / C;
   efficiency = ideal / measured. Peak RSS of this process is reported too, and the bare agent
   loop (below) runs the same batch as the baseline, in interleaved pairs (medians).
2. Overhead per step against two baselines measured in the same run, same AsyncSqliteSaver,
   same durability, same seeds, latency 0:
   - an empty 4-node LangGraph loop (recall → actor → critic → executor, nodes do nothing);
   - a bare 4-node agent loop whose actor and critic make the same structured `sim` calls and
     whose executor steps the same gridworld — a plain LangGraph agent without Pivotal; and the
     same loop without its empty recall node, since Pivotal enters no recall node with memory off.
   Memory on is measured cold (each pass embeds its own situations and lesson texts, as the first
   process on a store folder), cold in a second process (the process's caches dropped, the vectors
   the folder keeps read back: memory/storage/vector_file.py) and warm (the process's caches kept,
   as in a long batch where situations come back). `--journal-ab`
   adds a cold pass on a second store, seeded alike, whose evidence journal is off (each run's
   evidence one Chroma update, as before memory/policy/journal.py), and counts Chroma writes.

Run: python benchmarks/bench_batch.py [--tasks 500] [--concurrency 64 8] [--latency 0.05] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from pivotal.core.context import Context
from pivotal.core.environments.live import open_live, release
from pivotal.core.models.factory import make_model
from pivotal.core.models.structured import ask
from pivotal.core.models.world import given
from pivotal.core.schemas import Verdict, proposal_schema
from pivotal.core.task import Task
from pivotal.graphs import run_batch
from pivotal.memory.policy.registry import close_stores, open_store
from pivotal.memory.storage.embeddings import _cached_vector

MAX_STEPS = 20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def efficiency(tasks: int, concurrency: int, latency: float, folder: str) -> dict[str, Any]:
    context = Context(model=f"sim:latency={latency}", memory=False, max_pivot_retries=0)
    batch = [{"env": "gridworld", "params": {"seed": seed}} for seed in range(tasks)]
    before = peak_rss_mb()
    started = time.perf_counter()
    results = await run_batch(batch, context, concurrency=concurrency, checkpoint_path=f"{folder}/batch.sqlite")
    wall = time.perf_counter() - started
    calls = sum(r.llm_calls for r in results)
    ideal = calls * latency / concurrency
    return {
        "tasks": tasks,
        "concurrency": concurrency,
        "latency_s": latency,
        "llm_calls": calls,
        "succeeded": sum(r.status == "success" for r in results),
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "efficiency": round(ideal / wall, 3),
        "rss_before_mb": round(before, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


class LoopState(TypedDict, total=False):
    run_id: str
    observation: str
    proposal: dict[str, Any]
    steps: int
    done: bool
    target: int


def empty_loop(saver: Any):
    async def noop(state: LoopState) -> dict[str, Any]:
        return {}

    async def executor(state: LoopState) -> dict[str, Any]:
        return {"steps": state.get("steps", 0) + 1, "done": state.get("steps", 0) + 1 >= state["target"]}

    return _loop(saver, noop, noop, noop, executor)


def agent_loop(saver: Any, latency: float = 0.0, *, with_recall: bool = True):
    """What an application would write without Pivotal: propose, review, execute, repeat.
    `with_recall=False`: without its (empty) recall node, as Pivotal runs with memory off.
    """
    model = make_model(f"sim:latency={latency}" if latency else "sim")

    async def recall(state: LoopState) -> dict[str, Any]:
        return {}

    async def actor(state: LoopState) -> dict[str, Any]:
        live = _live(state)
        schema = proposal_schema({a.name: a.parameters for a in live.env.describe_actions()})
        with given(live):
            answer = await ask(
                model,
                schema,
                [SystemMessage("Choose the next move."), HumanMessage(state["observation"])],
                role="actor",
                fallback=None,
                retries=0,
                metadata={},
            )
        return {"proposal": answer.value.chosen()}

    async def critic(state: LoopState) -> dict[str, Any]:
        with given(_live(state)):
            await ask(
                model,
                Verdict,
                [SystemMessage("Review the move."), HumanMessage(str(state["proposal"]))],
                role="critic",
                fallback=Verdict(decision="approve", confidence=0.5),
                retries=0,
                metadata={"pivotal_proposal": state["proposal"]},
            )
        return {}

    async def executor(state: LoopState) -> dict[str, Any]:
        live = _live(state)
        result = await asyncio.to_thread(live.env.step, state["proposal"]["action"], {})
        live.applied.append((state["proposal"]["action"], {}))
        steps = state.get("steps", 0) + 1
        return {"observation": result.observation, "steps": steps, "done": result.done or steps >= MAX_STEPS}

    return _loop(saver, recall if with_recall else None, actor, critic, executor)


_lives: dict[str, Any] = {}


def _live(state: LoopState) -> Any:
    return _lives[state["run_id"]]


def _loop(saver: Any, recall: Any, actor: Any, critic: Any, executor: Any):
    builder = StateGraph(LoopState)
    first = "recall" if recall is not None else "actor"
    for name, node in (("recall", recall), ("actor", actor), ("critic", critic), ("executor", executor)):
        if node is not None:
            builder.add_node(name, node)
    builder.add_edge(START, first)
    if recall is not None:
        builder.add_edge("recall", "actor")
    builder.add_edge("actor", "critic")
    builder.add_edge("critic", "executor")
    builder.add_conditional_edges("executor", lambda s: END if s.get("done") else first, [first, END])
    return builder.compile(checkpointer=saver)


async def overhead(seeds: int, runs: int, folder: str, stored: int, *, journal_ab: bool = False) -> dict[str, Any]:
    """Per executed step, in interleaved passes (noise on a busy 2-core machine hits all alike):
    Pivotal with memory off, Pivotal with memory on (step recall over `stored` lessons of the
    family), the bare agent loop and the empty loop. Wall and CPU time; medians and ranges.
    """
    store_path, unjournaled = f"{folder}/store", f"{folder}/store-unjournaled"
    _seed_store(store_path, stored)
    if journal_ab:
        _seed_store(unjournaled, stored)
        open_store(unjournaled).shelf.journal = None  # its runs' evidence goes to Chroma at once
    writes = _count_chroma_writes() if journal_ab else {}
    tasks = [{"env": "gridworld", "params": {"seed": s}} for s in range(seeds)]
    names = ("off", "on", "second", "warm", "agent", "agent3", "empty", *(("unjournaled",) if journal_ab else ()))
    passes: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    counted: dict[str, list[dict[str, int]]] = {"on": [], "unjournaled": []}
    for run in range(runs + 1):  # the first pass warms imports and caches; it is not counted
        timed = {"off": await _pivotal_pass(tasks, f"{folder}/p{run}.sqlite", memory=False, store=store_path)}
        # a second process reads back the vectors any earlier pass left in the folder
        cold = [("on", store_path), ("second", store_path), *((("unjournaled", unjournaled),) if journal_ab else ())]
        for name, path in cold[:: -1 if run % 2 else 1]:  # which goes first alternates
            before = dict(writes)
            timed[name] = await _pivotal_pass(
                tasks, f"{folder}/{name}{run}.sqlite", memory=True, store=path, second_process=name == "second"
            )
            if name in counted:
                counted[name].append({k: writes[k] - before[k] for k in writes})
        timed["warm"] = await _pivotal_pass(tasks, f"{folder}/w{run}.sqlite", memory=True, store=store_path, warm=True)
        timed["agent"] = await _timed(_agent_pass(f"{folder}/a{run}.sqlite", seeds))
        timed["agent3"] = await _timed(_agent_pass(f"{folder}/b{run}.sqlite", seeds, with_recall=False))
        timed["empty"] = await _timed(_empty_pass(f"{folder}/e{run}.sqlite", 100))
        if run:
            for name, value in timed.items():
                passes[name].append(value)
    report = {"seeds": seeds, "runs": runs, "stored_lessons": stored, **_ratios(passes)}
    # the vectors a second process reads back, pass by pass against the cold one of the same round
    pairs = [(s[0] / c[0], s[1] / c[1]) for s, c in zip(passes["second"], passes["on"], strict=True)]
    report["second_over_on"] = round(statistics.median(p[0] for p in pairs), 2)
    report["second_over_on_range"] = [round(min(p[0] for p in pairs), 2), round(max(p[0] for p in pairs), 2)]
    report["second_cpu_over_on"] = round(statistics.median(p[1] for p in pairs), 2)
    if journal_ab:
        pairs = [(j[0] / u[0], j[1] / u[1]) for j, u in zip(passes["on"], passes["unjournaled"], strict=True)]
        report["on_over_unjournaled"] = round(statistics.median(p[0] for p in pairs), 2)
        report["on_over_unjournaled_range"] = [round(min(p[0] for p in pairs), 2), round(max(p[0] for p in pairs), 2)]
        report["on_cpu_over_unjournaled"] = round(statistics.median(p[1] for p in pairs), 2)
        report["chroma_writes_per_pass"] = {
            name: {k: statistics.median(c[k] for c in found[1:]) for k in writes} for name, found in counted.items()
        }
    return report


def _count_chroma_writes() -> dict[str, int]:
    """Chroma write calls of every store in this process, counted from now on (lesson upserts and
    updates, ledger appends: each costs ~10-40 ms on disk whatever it holds).
    """
    from pivotal.memory.storage import chroma, ledger_file

    counts = {"lesson_upserts": 0, "lesson_updates": 0, "record_appends": 0}
    for owner, name, key in (
        (chroma.ChromaLessons, "put", "lesson_upserts"),
        (chroma.ChromaLessons, "update", "lesson_updates"),
        (chroma.ChromaRecords, "append", "record_appends"),
        (ledger_file.LedgerFile, "append", "record_appends"),  # a folder's ledger (memory/storage/ledger_file.py)
    ):
        method = getattr(owner, name)

        def counted(*args: Any, _method: Any = method, _key: str = key, **kwargs: Any) -> Any:
            counts[_key] += 1
            return _method(*args, **kwargs)

        setattr(owner, name, counted)
    return counts


def _ratios(passes: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    median = statistics.median
    report: dict[str, Any] = {}
    for name, values in passes.items():
        report[f"{name}_ms_per_step"] = round(median(v[0] for v in values), 2)
        report[f"{name}_cpu_ms_per_step"] = round(median(v[1] for v in values), 2)
    for name in ("off", "on", "second", "warm", *(("unjournaled",) if "unjournaled" in passes else ())):
        pairs = [p[0] / a[0] for p, a in zip(passes[name], passes["agent"], strict=True)]
        cpu = [p[1] / a[1] for p, a in zip(passes[name], passes["agent"], strict=True)]
        report[f"memory_{name}_over_agent_loop"] = round(median(pairs), 2)
        report[f"memory_{name}_over_agent_loop_range"] = [round(min(pairs), 2), round(max(pairs), 2)]
        report[f"memory_{name}_cpu_over_agent_loop"] = round(median(cpu), 2)
    # memory off, Pivotal enters no recall node: against the bare loop without its empty one too
    pairs = [p[0] / a[0] for p, a in zip(passes["off"], passes["agent3"], strict=True)]
    report["memory_off_over_3_node_loop"] = round(median(pairs), 2)
    report["memory_off_over_3_node_loop_range"] = [round(min(pairs), 2), round(max(pairs), 2)]
    return report


def _seed_store(path: str, count: int) -> None:
    """Lessons of the gridworld family, so step recall embeds and searches as in a long-lived store."""
    from bench_store import lessons

    made = [lesson.model_copy(update={"family": "gridworld"}) for lesson in lessons(count)]
    open_store(path).put(made)
    close_stores()


async def _timed(work: Any) -> tuple[float, float]:
    """(wall ms, CPU ms) per step of a pass that returns its step count."""
    wall, cpu = time.perf_counter(), time.process_time()
    steps = await work
    return 1000 * (time.perf_counter() - wall) / steps, 1000 * (time.process_time() - cpu) / steps


async def _pivotal_pass(
    tasks: list[dict[str, Any]],
    path: str,
    *,
    memory: bool,
    store: str,
    warm: bool = False,
    second_process: bool = False,
) -> tuple[float, float]:
    """Cold (the default): each pass pays for its own situations' embeddings, recall answers and
    lesson reads (repeats within it still hit), as the first process on the store folder would.
    `second_process`: the same, but the vectors the folder keeps are read back from it, as the
    next process on the folder would. Warm: the process's caches stay, as in a long batch where
    the same situations and lesson texts come back.
    """
    context = Context(model="sim", memory=memory, store_path=store, max_pivot_retries=0, max_steps=MAX_STEPS)
    if not warm:  # the store stays open (its index loaded), as in a batch: only what it remembered goes
        shelf = open_store(store).shelf
        shelf.forget_recall()
        shelf.forget_vectors(on_disk=not second_process)
        _cached_vector.cache_clear()

    async def work() -> int:
        results = await run_batch(tasks, context, concurrency=1, checkpoint_path=path)
        return sum(r.executed for r in results)

    return await _timed(work())


async def _agent_pass(path: str, seeds: int, *, with_recall: bool = True) -> int:
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        graph = agent_loop(saver, with_recall=with_recall)
        return sum([await _agent_task(graph, seed) for seed in range(seeds)])


async def _agent_task(graph: Any, seed: int) -> int:
    """One gridworld task through the bare loop; its executed steps."""
    run_id = uuid.uuid4().hex
    live = await asyncio.to_thread(open_live, run_id, Task(env="gridworld", params={"seed": seed}))
    _lives[run_id] = live
    final = await graph.ainvoke(
        {"run_id": run_id, "observation": live.first_observation},
        {"configurable": {"thread_id": run_id}, "recursion_limit": 1000},
        durability="sync",
    )
    release(run_id), _lives.pop(run_id)
    return final["steps"]


async def agent_efficiency(
    tasks: int, concurrency: int, latency: float, folder: str, *, with_recall: bool = True
) -> dict[str, Any]:
    """The bare agent loop as a batch: the same tasks, latency and concurrency, one checkpoint file,
    so Pivotal's batch efficiency has a baseline measured in the same run.
    """
    gate = asyncio.Semaphore(concurrency)

    async def one(graph: Any, seed: int) -> int:
        async with gate:
            return await _agent_task(graph, seed)

    started = time.perf_counter()
    async with AsyncSqliteSaver.from_conn_string(f"{folder}/agent-batch.sqlite") as saver:
        graph = agent_loop(saver, latency, with_recall=with_recall)
        steps = sum(await asyncio.gather(*(one(graph, seed) for seed in range(tasks))))
    wall = time.perf_counter() - started
    ideal = 2 * steps * latency / concurrency  # an actor and a critic call per step
    return {"tasks": tasks, "concurrency": concurrency, "wall_s": round(wall, 2), "efficiency": round(ideal / wall, 3)}


async def _empty_pass(path: str, steps: int) -> int:
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        await empty_loop(saver).ainvoke(
            {"target": steps}, {"configurable": {"thread_id": "e"}, "recursion_limit": 10 * steps}, durability="sync"
        )
    return steps


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        report = {"overhead": await overhead(args.seeds, args.runs, folder, args.stored, journal_ab=args.journal_ab)}
        close_stores()  # what the journal holds reaches Chroma before the folder goes
        report["efficiency"] = [
            await efficiency_pairs(args.tasks, concurrency, args.latency, args.pairs, folder)
            for concurrency in ([] if args.overhead_only else args.concurrency)
        ]
    return report


async def efficiency_pairs(tasks: int, concurrency: int, latency: float, pairs: int, folder: str) -> dict[str, Any]:
    """Pivotal's batch and the bare loop's (with and without its empty recall node, which Pivotal
    does not enter with memory off), interleaved with the order reversed each time: one batch of
    each on a noisy 2-core machine differed by 25% either way from run to run.
    """
    runs: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []
    batches = {
        "pivotal": efficiency,
        "bare": agent_efficiency,
        "bare3": functools.partial(agent_efficiency, with_recall=False),
    }
    for pair in range(pairs):
        done = {}
        for which in list(batches)[:: 1 if pair % 2 == 0 else -1]:
            where = f"{folder}/{which}{concurrency}-{pair}"
            Path(where).mkdir()
            done[which] = await batches[which](tasks, concurrency, latency, where)
        runs.append((done["pivotal"], done["bare"], done["bare3"]))
    median = statistics.median
    ratios = [p["efficiency"] / b["efficiency"] for p, b, _ in runs]
    strict = [p["efficiency"] / b["efficiency"] for p, _, b in runs]
    return {
        **runs[-1][0],
        "pairs": pairs,
        "efficiency": median(p["efficiency"] for p, _, _ in runs),
        "wall_s": round(median(p["wall_s"] for p, _, _ in runs), 2),
        "bare_loop": {
            "wall_s": round(median(b["wall_s"] for _, b, _ in runs), 2),
            "efficiency": median(b["efficiency"] for _, b, _ in runs),
        },
        "over_bare_loop": round(median(ratios), 2),
        "over_bare_loop_range": [round(min(ratios), 2), round(max(ratios), 2)],
        "over_3_node_loop": round(median(strict), 2),
        "over_3_node_loop_range": [round(min(strict), 2), round(max(strict), 2)],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[64, 8],
        help="one batch per value (CPU per step caps useful concurrency; see the note)",
    )
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--pairs", type=int, default=3, help="interleaved batch pairs per concurrency (median)")
    parser.add_argument("--seeds", type=int, default=10, help="tasks per overhead pass")
    parser.add_argument("--runs", type=int, default=3, help="overhead passes (median)")
    parser.add_argument("--stored", type=int, default=1000, help="lessons in the store for the memory-on pass")
    parser.add_argument("--overhead-only", action="store_true", help="skip the batch efficiency part")
    parser.add_argument(
        "--journal-ab",
        action="store_true",
        help="add a memory-on pass with the evidence journal off; count Chroma writes",
    )
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments))
    if arguments.json:
        print(json.dumps(report, indent=2))
    else:
        o = report["overhead"]
        print(
            f"per step ({o['runs']} interleaved passes x {o['seeds']} tasks, median): bare agent loop "
            f"{o['agent_ms_per_step']} ms ({o['agent_cpu_ms_per_step']} ms CPU); empty loop {o['empty_ms_per_step']} ms"
        )
        labels = {
            "off": "memory off",
            "on": "memory on, cold caches",
            "second": "memory on, cold, a second process (the folder's vectors)",
            "warm": "memory on, warm caches",
        }
        if "unjournaled" in o.get("chroma_writes_per_pass", {}):
            labels["unjournaled"] = "memory on, cold, evidence journal off"
        for name, label in labels.items():
            print(
                f"  pivotal, {label}: {o[f'{name}_ms_per_step']} ms ({o[f'{name}_cpu_ms_per_step']} ms CPU) = "
                f"{o[f'memory_{name}_over_agent_loop']}x the bare loop (range "
                f"{o[f'memory_{name}_over_agent_loop_range'][0]}-{o[f'memory_{name}_over_agent_loop_range'][1]}x; "
                f"CPU {o[f'memory_{name}_cpu_over_agent_loop']}x)"
            )
        print(
            f"  memory on, a second process / the first (paired passes): {o['second_over_on']}x (range "
            f"{o['second_over_on_range'][0]}-{o['second_over_on_range'][1]}x; CPU {o['second_cpu_over_on']}x)"
        )
        if "on_over_unjournaled" in o:
            print(
                f"  memory on / the same without its evidence journal: {o['on_over_unjournaled']}x (range "
                f"{o['on_over_unjournaled_range'][0]}-{o['on_over_unjournaled_range'][1]}x; CPU "
                f"{o['on_cpu_over_unjournaled']}x); Chroma writes per pass: {o['chroma_writes_per_pass']}"
            )
        print(
            f"  pivotal, memory off, against the bare loop without its empty recall node "
            f"({o['agent3_ms_per_step']} ms): {o['memory_off_over_3_node_loop']}x (range "
            f"{o['memory_off_over_3_node_loop_range'][0]}-{o['memory_off_over_3_node_loop_range'][1]}x)"
        )
        for e in report["efficiency"]:
            print(
                f"batch: {e['tasks']} tasks at concurrency {e['concurrency']}, {e['latency_s']} s/call: "
                f"{e['wall_s']} s vs ideal {e['ideal_s']} s -> efficiency {e['efficiency']:.1%}; "
                f"{e['succeeded']} succeeded; peak RSS {e['peak_rss_mb']} MB (before {e['rss_before_mb']} MB); "
                f"the bare agent loop in the same run: {e['bare_loop']['wall_s']} s -> "
                f"{e['bare_loop']['efficiency']:.1%}; pivotal's efficiency / the bare loop's: {e['over_bare_loop']}x "
                f"(median of {e['pairs']} interleaved pairs, range {e['over_bare_loop_range'][0]}-"
                f"{e['over_bare_loop_range'][1]}x); without its empty recall node: {e['over_3_node_loop']}x "
                f"(range {e['over_3_node_loop_range'][0]}-{e['over_3_node_loop_range'][1]}x)"
            )
