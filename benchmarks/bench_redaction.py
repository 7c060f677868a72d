"""Per-step cost of redaction on entry, against the redaction of before (issue 30, item 8).

Every text entering the state is redacted: per step that is the observation and its info (as
before) plus, now, the actor's and the critic's replies (`core/models/roles.redacted`), with a
wider list of secret-named variables. This times one step's redaction both ways, on the same
texts, with the same environment (six secret-named variables set, as a deployed process has):

- before: `core/secrets.py` as of a git revision (default: main), loaded from `git show`, doing
  what a step did then: `redact(observation)` and `redact_tree(info)`;
- after: this tree's module doing what a step does now: the same two, plus both replies.

Reported: median microseconds per step over many rounds, the ratio, and each part alone.

And the cost of redaction where LangGraph serialises (issue 39, item 8): every checkpoint and
pending write of a real run (the sim on gridworld, every step checkpointed), serialised by
LangGraph's own `JsonPlusSerializer` and by `RedactingSerializer` around it: median microseconds
per write over all of them, and the ratio.

Run: python benchmarks/bench_redaction.py [--rounds 2000] [--before main] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pivotal.core import secrets as after
from pivotal.core.context import Context
from pivotal.core.models.roles import redacted
from pivotal.core.models.structured import Answer
from pivotal.core.schemas import Verdict, proposal_schema

ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENT = {
    "OPENAI_API_KEY": "sk-bench" + "x" * 40,
    "ANTHROPIC_API_KEY": "sk-ant-bench" + "y" * 40,
    "AWS_ACCESS_KEY_ID": "AKIABENCH0000000000",
    "AWS_SECRET_ACCESS_KEY": "benchAwsSecret/0000000000000000000000",
    "MY_SERVICE_KEY": "svc-bench-0000-kappa",
    "GITHUB_TOKEN": "ghp_" + "b" * 36,
}
OBSERVATION = "\n".join(
    [
        "You are at (2, 3). The goal G is at (5, 5).",
        "around you: up=wall, right=floor, down=floor, left=hole",
        *(". . # . . . G ." for _ in range(12)),
        "moving right brings you closer to the goal",
    ]
)
"""~300 characters: a gridworld step; a tool's output is often longer (see --observation-chars)."""


def _old_module(revision: str) -> Any:
    source = subprocess.run(
        ["git", "show", f"{revision}:core/secrets.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_secrets.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_secrets", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replies() -> list[Answer[Any]]:
    schema = proposal_schema({name: {} for name in ("up", "down", "left", "right")})
    proposal = schema.model_validate({"thought": "right gets closer to the goal", "action": "right"})
    verdict = Verdict(decision="approve", confidence=0.9, diagnosis="safe, and it makes progress toward the goal")
    return [Answer(value=proposal), Answer(value=verdict)]


def _median_us(step: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        step()
        times.append(time.perf_counter_ns() - started)
    return statistics.median(times) / 1000


def _run_writes() -> tuple[list[Any], dict[str, Any]]:
    """What a real run hands its checkpointer (each channel's value, checkpoint and pending write:
    InMemorySaver serialises them one by one), and the run's state at its end.
    """
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver

    from pivotal.graphs import build_graph

    saver = InMemorySaver()
    written: list[Any] = []
    serde = saver.serde

    class Recording:
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            written.append(obj)
            return serde.dumps_typed(obj)

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            return serde.loads_typed(data)

    graph = build_graph(checkpointer=saver, context=Context(model="sim", memory=False, max_steps=12))
    saver.serde = Recording()  # after build_graph: the plain objects, before any redaction
    task = {"task": {"goal": "walk to G", "env": "gridworld", "params": {"seed": 1}}}
    final = asyncio.run(graph.ainvoke(task, {"configurable": {"thread_id": "bench"}}))
    return written, dict(graph.get_state({"configurable": {"thread_id": "bench"}}).values or final)


def _sqlite_put_us(serde: Any, checkpoint: dict[str, Any], rounds: int) -> float:
    """Median microseconds of one `SqliteSaver.put` of the run's final state to a file (WAL, as LangGraph sets it)."""
    import sqlite3
    import uuid

    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(tempfile.mkdtemp()) / "bench.sqlite"
    saver = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False), serde=serde)
    saver.setup()
    config = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}

    def put() -> None:
        saver.put(config, {**checkpoint, "id": str(uuid.uuid4())}, {"source": "loop", "step": 1, "parents": {}}, {})

    put()
    return _median_us(put, rounds)


def _write_costs(rounds: int) -> dict[str, Any]:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    writes, state = _run_writes()
    plain, redacting = JsonPlusSerializer(), after.RedactingSerializer(JsonPlusSerializer())
    rounds = max(1, rounds // 20)

    def every(serde: Any) -> None:
        for value in writes:
            serde.dumps_typed(value)

    every(plain), every(redacting)
    plain_us = _median_us(lambda: every(plain), rounds) / len(writes)
    redacting_us = _median_us(lambda: every(redacting), rounds) / len(writes)
    sizes = sorted(len(plain.dumps_typed(value)[1]) for value in writes)
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = {**empty_checkpoint(), "channel_values": state}
    put_plain = _sqlite_put_us(JsonPlusSerializer(), checkpoint, rounds * 5)
    put_redacting = _sqlite_put_us(after.RedactingSerializer(JsonPlusSerializer()), checkpoint, rounds * 5)
    return {
        "writes_per_run": len(writes),
        "write_bytes_median": sizes[len(sizes) // 2],
        "write_bytes_max": sizes[-1],
        "write_plain_us": round(plain_us, 2),
        "write_redacting_us": round(redacting_us, 2),
        "write_ratio": round(redacting_us / plain_us, 2),
        "sqlite_put_final_state_bytes": len(plain.dumps_typed(checkpoint)[1]),
        "sqlite_put_plain_us": round(put_plain, 2),
        "sqlite_put_redacting_us": round(put_redacting, 2),
        "sqlite_put_ratio": round(put_redacting / put_plain, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--before", default="main", help="git revision whose core/secrets.py is 'before'")
    parser.add_argument("--observation-chars", type=int, default=0, help="pad the observation to this length")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.update(ENVIRONMENT)
    before = _old_module(args.before)
    observation = OBSERVATION
    if args.observation_chars > len(observation):
        observation = (observation + "\n") * (args.observation_chars // (len(observation) + 1) + 1)
        observation = observation[: args.observation_chars]
    info = {"state": {"pos": [2, 3], "goal": [5, 5]}, "log": "moved right"}
    replies = _replies()

    def step_before() -> None:
        values = before.secret_values()
        before.redact(observation, values)
        before.redact_tree(info, values)

    def step_after() -> None:
        values = after.secret_values()
        after.redact(observation, values)
        after.redact_tree(info, values)
        for reply in replies:
            redacted(reply)

    parts = {
        "secret_values (before)": lambda: before.secret_values(),
        "secret_values (after)": lambda: after.secret_values(),
        "redact observation (before)": lambda: before.redact(observation),
        "redact observation (after)": lambda: after.redact(observation),
        "redact both replies (after only)": lambda: [redacted(reply) for reply in replies],
    }
    for warm in (step_before, step_after, *parts.values()):
        warm()
    result = {
        "rounds": args.rounds,
        "observation_chars": len(observation),
        "secret_variables": len(after.secret_values()),
        "step_before_us": round(_median_us(step_before, args.rounds), 2),
        "step_after_us": round(_median_us(step_after, args.rounds), 2),
        **{name: round(_median_us(part, args.rounds), 2) for name, part in parts.items()},
    }
    result["ratio"] = round(result["step_after_us"] / result["step_before_us"], 2)
    result.update(_write_costs(args.rounds))
    if args.json:
        print(json.dumps(result))
        return
    for name, value in result.items():
        print(f"{name:36} {value}")


if __name__ == "__main__":
    sys.exit(main())
