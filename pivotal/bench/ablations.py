"""What is compared: each configuration is one `Context` switch away from the next."""

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pivotal.bench.retry_envs  # noqa: F401  (registers the -blind twins the hook-off configuration runs on)
from pivotal.bench.pivot_truth import BLIND, score_run
from pivotal.bench.truth import judge_trajectory
from pivotal.core.context import Context
from pivotal.core.environments import environment_names
from pivotal.graphs import arun
from pivotal.graphs.summary import RunResult
from pivotal.memory.policy.registry import close_store
from pivotal.memory.policy.rules import NO_QUARANTINE

CONFIGS: dict[str, dict[str, Any]] = {
    "actor": {"critic": False, "precheck": False, "retry": "none", "memory": False},
    "critic": {"retry": "none", "memory": False},
    "critic+full": {"retry": "full", "memory": False},
    "critic+pivotal": {"retry": "pivotal", "memory": False},
    "critic+pivotal+memory": {"retry": "pivotal", "memory": True, "recall": "step"},
    "critic+pivotal+memory(task)": {"retry": "pivotal", "memory": True, "recall": "task"},
    "critic+pivotal+memory(no quarantine)": {"retry": "pivotal", "memory": True, "recall": "step", **NO_QUARANTINE},
    "critic+pivotal (loops off)": {"retry": "pivotal", "memory": False, "loop_detection": "off"},
    "critic+pivotal (hook off)": {"retry": "pivotal", "memory": False},
}
ON_ASK = frozenset({"critic+pivotal+memory(no quarantine)"})
"""Configurations run only when a plan names them (pivotal/bench/poison_paths.py: the quarantine's
cost to the memory gain), not in the default ablation."""
HOOK_OFF = frozenset({"critic+pivotal (hook off)"})
"""Configurations run on the environment's twin without its `steps_to_goal` hook (`-blind`, registered by
pivotal.bench.retry_envs), and only where the environment has one: elsewhere they would repeat another."""
COMPARISONS: list[tuple[str, str]] = [
    ("critic+pivotal", "critic+full"),
    ("critic+pivotal", "critic"),
    ("critic+full", "critic"),
    ("critic", "actor"),
    ("critic+pivotal+memory", "critic+pivotal"),
    ("critic+pivotal", "critic+pivotal (loops off)"),
    ("critic+pivotal", "critic+pivotal (hook off)"),
]
"""(new, baseline) pairs the report compares task by task at equal seeds; a pair whose configurations
did not both run is left out. Each pair differs in one switch, so the difference is that switch's."""


def rules(config: str) -> str:
    """What a configuration was compared under: its step budget, loop detection and the hook."""
    fields = {**{name: getattr(Context, name, None) for name in ("budget", "loop_detection")}, **CONFIGS[config]}
    hook = "off" if config in HOOK_OFF else "on where the world has one"
    note = " (not a fair comparison)" if fields["budget"] == "new" else ""
    return f"budget {fields['budget']}{note} · loop detection {fields['loop_detection']} · distance hook {hook}"


def runs_on(config: str, env: str) -> bool:
    return config not in HOOK_OFF or f"{env}{BLIND}" in environment_names()


MAX_STEPS = {"gridworld": 20, "frozenlake": 20, "taxi": 30, "configs": 8, "minesweeper": 20}


@dataclass
class Plan:
    envs: list[str]
    errors: list[float]
    streams: int
    tasks: int
    """Tasks per stream: one layout (environment seed), a new model seed per task, one store."""
    configs: list[str] = field(default_factory=lambda: [c for c in CONFIGS if c not in ON_ASK])
    model: str = "sim"
    max_pivot_retries: int = 2
    params: dict[str, Any] = field(default_factory=dict)
    """Extra environment params for every task (e.g. a smaller grid for the slow local model)."""
    env_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Extra params for one environment's tasks (a generated lake, whose seed picks the layout)."""
    limits: dict[str, int] = field(default_factory=dict)
    """Context limits that override the per-environment defaults (max_steps, max_critique_rounds)."""
    new_layout_per_task: bool = False
    """Each task of a stream in a layout of its own (another maze, board or lake), still one store:
    do lessons learnt elsewhere mislead? (benchmarks/bench_transfer.py)"""


def context_for(config: str, env: str, model: str, plan: Plan, store: str) -> Context:
    limits: dict[str, Any] = {"max_steps": MAX_STEPS.get(env, 20), **plan.limits}
    return Context(
        model=model,
        lesson_model="sim" if model.startswith("sim") else model,
        max_pivot_retries=plan.max_pivot_retries,
        store_path=store,
        **limits,
        **CONFIGS[config],
    )


def model_spec(plan: Plan, error: float, stream: int, task: int) -> str:
    if plan.model != "sim":
        return plan.model
    return f"sim:error={error},seed={stream * 1000 + task}"


OnRecord = Callable[[dict[str, Any]], None]


async def run_stream(
    plan: Plan, env: str, error: float, config: str, stream: int, on_record: OnRecord | None = None
) -> list[dict[str, Any]]:
    """Tasks of one stream in order, sharing one store, so later tasks can use earlier lessons.
    `on_record` hears of each task as it ends (the progress bar), not only of the whole stream.
    """
    records = []
    with tempfile.TemporaryDirectory(prefix="pivotal-bench-") as store:
        for index in range(plan.tasks):
            layout = stream * 1000 + index if plan.new_layout_per_task else stream
            params = {"seed": layout, **plan.params, **plan.env_params.get(env, {})}
            task = {"env": env, "params": params, "family": f"{env}-{stream}"}
            context = context_for(config, env, model_spec(plan, error, stream, index), plan, store)
            started = time.perf_counter()
            world = f"{env}{BLIND}" if config in HOOK_OFF else env
            result = await arun({**task, "env": world}, context, checkpoint_path=":memory:")
            row = record(result, env, error, config, stream, index, time.perf_counter() - started)
            records.append({**row, "pivot_scores": score_run(world, params, result.reflections)})
            if on_record:
                on_record(records[-1])
        close_store(store)  # before the folder goes: its Chroma client and lock are released
    return records


def record(
    result: RunResult, env: str, error: float, config: str, stream: int, index: int, wall: float
) -> dict[str, Any]:
    truth = judge_trajectory(result.task, result.trajectory)
    tokens = sum(int(u.get("input_tokens", 0)) + int(u.get("output_tokens", 0)) for u in result.usage.values())
    return {
        "env": env,
        "error": error,
        "config": config,
        "stream": stream,
        "index": index,
        "status": result.status,
        "attempts": result.retries.get("count", 0) + 1,
        "executed": result.executed,
        "replayed": result.replayed,
        "llm_calls": result.llm_calls,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "revised": result.critic.get("revised", 0),
        "revisits": result.revisits,
        "no_ops": result.no_ops,
        "repeats": result.repeats,
        "lessons": result.lessons,
        **truth,
    }


def task_count(plan: Plan) -> int:
    cells = sum(runs_on(config, env) for env in plan.envs for config in plan.configs)
    return cells * len(plan.errors) * plan.streams * plan.tasks


async def run_plan(plan: Plan, concurrency: int = 4, on_record: OnRecord | None = None) -> list[dict[str, Any]]:
    """Every (env, error, config, stream) at once up to `concurrency`; tasks inside a stream in order."""
    limit = asyncio.Semaphore(concurrency)

    async def one(env: str, error: float, config: str, stream: int) -> list[dict[str, Any]]:
        async with limit:
            return await run_stream(plan, env, error, config, stream, on_record)

    jobs = [
        one(env, error, config, stream)
        for env in plan.envs
        for error in plan.errors
        for config in plan.configs
        for stream in range(plan.streams)
        if runs_on(config, env)
    ]
    return [row for rows in await asyncio.gather(*jobs) for row in rows]
