"""When the world is snapshotted: after every step, or, for environments that declare replay safe,
only when replaying from the last snapshot would cost more than taking a new one.
"""

import asyncio
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.live import attach, open_live, release, rewind, run_step
from pivotal.core.task import Task
from pivotal.graphs import arun
from pivotal.testing.slow_snapshot_env import SlowSnapshotWorld

TASK = Task(env="slow-replay", params={"seed": 3})
MOVES = ["right", "left", "down", "down", "left", "right", "down", "down"]
"""A walk in gridworld seed 3 (A at (0, 2)) that stays on the floor."""
made: list[SlowSnapshotWorld] = []
_ids = itertools.count()


def _made(replay: bool, **costs: float) -> SlowSnapshotWorld:
    env = SlowSnapshotWorld(replay, **costs)
    made.append(env)
    return env


register_environment("slow-replay", lambda: _made(True, snapshot_seconds=0.05))
register_environment("slow-snapshot", lambda: _made(False, snapshot_seconds=0.05))
"""A snapshot 10x the ~5 ms a step can wait for the GIL while the event loop runs: steps of a few
microseconds never add up to one, so these tests do not depend on how busy the machine is."""
register_environment("cheap-replay", lambda: _made(True, snapshot_seconds=0.0, step_seconds=0.1))
"""A free snapshot is timed on the wall clock too: on 2 cores at load 12 one waited over the 20 ms step it
once had (2026-12-03, the full suite) and a step went unsnapshotted; 100 ms steps leave it 5x that margin."""


def _walk(env_name: str, moves: list[str] = MOVES) -> tuple[str, list[dict]]:
    run_id = f"snap-{next(_ids)}"
    live = open_live(run_id, Task(env=env_name, params={"seed": 3}))
    trajectory = []
    for index, move in enumerate(moves):
        result, snapshot = run_step(live, move, {}, f"{run_id}:{index}")
        trajectory.append({"index": index, "action": move, "arguments": {}, "observation": result.observation,
                           "snapshot": snapshot, "state": result.info["state"]})  # fmt: skip
    return run_id, trajectory


def test_a_costly_snapshot_is_skipped_while_replaying_is_cheaper():
    run_id, trajectory = _walk("slow-replay")
    release(run_id)
    taken = [s for s in trajectory if s["snapshot"] is not None]
    assert len(taken) < len(trajectory)
    assert made[-1].snapshots == 1 + len(taken)  # the one at reset, then only those


def test_an_environment_that_does_not_declare_replay_is_snapshotted_at_every_step():
    run_id, trajectory = _walk("slow-snapshot")
    release(run_id)
    assert all(s["snapshot"] is not None for s in trajectory)


def test_cheap_snapshots_are_taken_at_every_step_even_with_replay_declared():
    run_id, trajectory = _walk("cheap-replay")
    release(run_id)
    assert all(s["snapshot"] is not None for s in trajectory)


async def test_rewind_restores_the_nearest_snapshot_and_replays_only_the_steps_after_it():
    run_id, trajectory = _walk("slow-replay")
    trajectory[2]["snapshot"] = {"pos": [1, 2], "done": False, "moves": 3}  # as if taken after step 2
    trajectory[5]["snapshot"] = None
    env = made[-1]
    try:
        rewound = await rewind(run_id, TASK, trajectory, 6, timeout=10)
    finally:
        release(run_id)
    assert rewound.mode == "replay" and len(rewound.trajectory) == 6
    assert rewound.replayed == 3 and env.restores == 1  # steps 3, 4, 5 after the snapshot of step 2
    assert env.state_key() == trajectory[5]["state"]


async def test_a_new_process_rebuilds_the_world_from_the_checkpointed_steps():
    """No live environment (as in another process): reset, nearest snapshot, replay the rest."""
    run_id, trajectory = _walk("slow-replay")
    release(run_id)
    live, replayed = await attach(run_id, TASK, trajectory, timeout=10)
    release(run_id)
    last_snapshot = max((s["index"] for s in trajectory if s["snapshot"] is not None), default=-1)
    assert replayed == len(trajectory) - 1 - last_snapshot
    assert live.env.state_key() == trajectory[-1]["state"]
    assert live.env is made[-1] and made[-1].steps == replayed


async def test_every_k_snapshots_with_replay_decide_exactly_as_every_step_snapshots():
    """Same sim seeds, same decisions: pivots that restore-and-replay end where pivots that restore do."""
    runs = {}
    for name in ("slow-snapshot", "slow-replay"):
        context = Context(model="sim:error=0.35,seed=7", critic=False, memory=False, max_steps=12)
        result = await arun({"env": name, "params": {"seed": 7}}, context, checkpoint_path=":memory:")
        runs[name] = (result, made[-1])
    (every, every_env), (sparse, sparse_env) = runs["slow-snapshot"], runs["slow-replay"]
    assert every.retries["count"] >= 1 and every.retries["kept_steps"] > 0  # a pivot went back mid-way

    def decisions(result):
        return [(s["action"], s["observation"], s["state"]) for s in result.trajectory]

    assert decisions(sparse) == decisions(every) and sparse.status == every.status
    assert [r["pivotal_step"] for r in sparse.reflections] == [r["pivotal_step"] for r in every.reflections]
    kept = sparse.retries["kept_steps"]
    nearest = max((s["index"] for s in sparse.trajectory[:kept] if s["snapshot"] is not None), default=-1)
    assert sparse.replayed == kept - 1 - nearest and every.replayed == 0  # only what came after a snapshot
    assert sparse_env.snapshots < every_env.snapshots


ROOT = Path(__file__).resolve().parents[1]
FORK = """
import asyncio, json, sys
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pivotal.graphs import build_graph
from pivotal.core.context import Context
from pivotal.testing import slow_snapshot_env  # registers slow-snapshot-grid

async def main(path, thread_id, checkpoint_id, model):
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        graph = build_graph(checkpointer=saver)
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
        context = Context(model=model, critic=False, memory=False, max_steps=12)
        final = await graph.ainvoke(None, config, context=context)
        print(json.dumps({"status": final["status"], "replayed": final["counters"].get("replayed", 0),
                          "steps": [[s["action"], s["observation"]] for s in final["trajectory"]]}))

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_run_forked_in_another_process_rebuilds_the_world_from_the_nearest_snapshot(tmp_path):
    """That process has no live environment: it resets, restores the nearest checkpointed snapshot
    and replays only the steps after it, then decides exactly as the original run did.
    """
    path = str(tmp_path / "cp.sqlite")
    context = Context(model="sim:error=0.35,seed=9", critic=False, memory=False, max_steps=12)
    task = {"env": "slow-snapshot-grid", "params": {"seed": 7}}
    original = asyncio.run(arun(task, context, checkpoint_path=path))
    at = 3  # the checkpoint the executor started from before step 3: three steps done, before the pivot
    assert original.retries["kept_steps"] > at
    nearest = max((s["index"] for s in original.trajectory[:at] if s["snapshot"] is not None), default=-1)
    checkpoint = original.trajectory[at]["checkpoint_id"]
    fork = [sys.executable, "-c", FORK, path, original.thread_id, checkpoint, context.model]
    done = subprocess.run(fork, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    forked = json.loads(done.stdout.strip().splitlines()[-1])
    assert forked["status"] == original.status
    assert forked["steps"] == [[s["action"], s["observation"]] for s in original.trajectory]
    assert forked["replayed"] == original.replayed + (at - 1 - nearest)
