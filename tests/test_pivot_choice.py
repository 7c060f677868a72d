"""Where a pivotal retry goes back to: the first mistake, or the point of no return (Context.pivot)."""

import random

import pytest
from langgraph.runtime import Runtime
from pydantic import ValidationError

from pivotal.core.context import Context
from pivotal.core.environments.frozenlake import FrozenLake
from pivotal.core.environments.gridworld import GridWorld
from pivotal.core.environments.live import open_live, release, run_step
from pivotal.core.errors import PivotalError
from pivotal.core.schemas import ReflectionReply, reflection_schema
from pivotal.core.task import Task
from pivotal.graphs import arun
from pivotal.nodes.pivot import _pivot_step, pivot

REFLECTION = {"error_type": "wrong_action", "diagnosis": "d", "advice": "a"}


def test_reflection_refuses_a_point_of_no_return_before_the_first_mistake():
    with pytest.raises(ValidationError, match="no_return_step 1 is before pivotal_step 3"):
        ReflectionReply(pivotal_step=3, no_return_step=1, **REFLECTION)
    assert ReflectionReply(pivotal_step=1, no_return_step=3, **REFLECTION).no_return_step == 3


def test_reflection_schema_refuses_steps_past_the_attempt():
    schema = reflection_schema(4)
    assert schema(pivotal_step=0, no_return_step=3, **REFLECTION).no_return_step == 3
    with pytest.raises(ValidationError, match="less than or equal to 3"):
        schema(pivotal_step=0, no_return_step=4, **REFLECTION)
    with pytest.raises(ValidationError, match="no_return_step"):
        schema(pivotal_step=0, **REFLECTION)  # the model is asked for both steps
    properties = schema.model_json_schema()["properties"]
    assert properties["no_return_step"]["maximum"] == 3 and properties["pivotal_step"]["maximum"] == 3


def test_an_unknown_pivot_choice_is_refused_in_one_line():
    with pytest.raises(PivotalError, match="pivot must be one of best, first_mistake, no_return"):
        Context(model="sim", pivot="latest")


# FrozenLake 4x4:  S F F F / F H F H / F F F H / H F F G
LATE_HOLE = [("up", {}), ("down", {}), ("down", {}), ("right", {}), ("up", {})]
"""Bumps the edge first (a wasted move: the first mistake), then walks into the hole at (1, 1)."""


def test_frozenlake_oracle_puts_the_point_of_no_return_at_the_hole():
    lake = FrozenLake()
    lake.reset(Task(env="frozenlake"))
    assert lake.first_mistake(LATE_HOLE)[0] == 0
    assert lake.last_recoverable(LATE_HOLE) == 4
    assert lake.last_recoverable(LATE_HOLE[:4]) == 3  # no hole: every step was recoverable


def test_gridworld_oracle_keeps_the_whole_path_when_nothing_is_irreversible():
    grid = GridWorld()
    grid.reset(Task(env="gridworld", params={"seed": 3}))  # A at (0, 2); a hole at (3, 3)
    wander = [("right", {}), ("left", {}), ("up", {}), ("down", {}), ("down", {}), ("right", {})]
    assert grid.first_mistake(wander)[0] == 0  # right: wasteful, but it can be walked back
    assert grid.last_recoverable(wander) == 5  # still reachable at the end: only the last step is redone
    assert grid.last_recoverable([*wander, ("down", {})]) == 6  # (3, 3) is a hole: no way back after it
    assert grid.situation().startswith("around you: up=wall")  # the oracle left the maze as it was


async def _pivot_with(choice: str) -> list[dict]:
    task = Task(env="frozenlake")
    live = open_live(f"pivot-{choice}", task)
    trajectory = []
    for index, (move, arguments) in enumerate(LATE_HOLE):
        result, snapshot = run_step(live, move, arguments, f"k{index}")
        trajectory.append({"index": index, "action": move, "arguments": arguments, "observation": result.observation,
                           "snapshot": snapshot})  # fmt: skip
    state = {"run_id": f"pivot-{choice}", "task": task.model_dump(), "trajectory": trajectory, "first_observation": "",
             "reflections": [{"pivotal_step": 0, "no_return_step": 4}], "retries": 0}  # fmt: skip
    try:
        update = await pivot(state, Runtime(context=Context(model="sim", pivot=choice)))
        return update["trajectory"], live.env.snapshot()["s"]
    finally:
        release(f"pivot-{choice}")


@pytest.mark.parametrize(("choice", "kept", "tile"), [("first_mistake", 0, 0), ("no_return", 4, 9)])
async def test_the_pivot_keeps_the_prefix_the_context_names(choice, kept, tile):
    trajectory, where = await _pivot_with(choice)
    assert [s["action"] for s in trajectory] == [a for a, _ in LATE_HOLE[:kept]]
    assert where == tile  # the lake was put back: on the start tile, or at (2, 1) below the hole


async def test_no_return_keeps_more_steps_than_first_mistake_on_frozenlake():
    """Without a critic the sim actor walks into holes late; the reflector (no errors) names both steps."""
    kept = {"first_mistake": [], "no_return": []}
    for seed in range(8, 12):
        for choice in kept:
            context = Context(
                model=f"sim:error=0.3,seed={seed}", reflector_model="sim", critic=False, memory=False,
                pivot=choice, max_steps=20, max_pivot_retries=1,
            )  # fmt: skip
            result = await arun({"env": "frozenlake"}, context, checkpoint_path=":memory:")
            kept[choice].append(result.retries.get("kept_steps", 0))
            for reflection in result.reflections:
                assert reflection["pivotal_step"] <= reflection["no_return_step"]
                expected = reflection["no_return_step" if choice == "no_return" else "pivotal_step"]
                assert reflection["kept_steps"] == expected
    assert all(n >= f for n, f in zip(kept["no_return"], kept["first_mistake"], strict=True))
    assert sum(kept["no_return"]) > sum(kept["first_mistake"])


@pytest.mark.parametrize("seed", range(6))
def test_the_sim_reflector_names_both_steps_and_a_wrong_one_in_its_own_words(seed):
    from pivotal.core.models.sim import _reflect

    live = open_live(f"sim-reflect-{seed}", Task(env="frozenlake"))
    try:
        for index, (move, arguments) in enumerate(LATE_HOLE):
            run_step(live, move, arguments, f"k{index}")
        right = _reflect(live, live.env, random.Random(seed), wrong=False)
        wrong = _reflect(live, live.env, random.Random(seed), wrong=True)
    finally:
        release(f"sim-reflect-{seed}")
    assert (right["pivotal_step"], right["no_return_step"]) == (0, 4)
    step = wrong["pivotal_step"]
    assert wrong["diagnosis"] == f"step {step} ({LATE_HOLE[step][0]}) was the mistake"
    assert step <= wrong["no_return_step"] < len(LATE_HOLE)
    ReflectionReply.model_validate(wrong)  # what the graph will accept


def _walk(decisions: list[str], states: list[int] | None = None) -> list[dict]:
    """Executed steps without the environment's distances: each with the critic's verdict on it."""
    states = states or list(range(1, len(decisions) + 1))
    return [
        {"index": i, "action": "right", "arguments": {}, "state": [s],
         "verdicts": [{"action": "right", "arguments": {}, "decision": d, "source": "critic"}] if d else []}
        for i, (d, s) in enumerate(zip(decisions, states, strict=True))
    ]  # fmt: skip


def test_without_the_hook_best_restarts_where_the_critic_last_saw_progress(monkeypatch):
    """Four approved steps, then six the critic doubted: the reflection's point of no return (9) would
    keep the doubted detour; the run's own record says the state after step 3 was the closest.
    """
    trajectory = _walk(["approve"] * 4 + ["revise"] * 6)
    reflections = [{"pivotal_step": 2, "no_return_step": 9}]
    assert _pivot_step(reflections, Context(model="sim", max_steps=20), trajectory, [0]) == 4
    monkeypatch.setattr("pivotal.nodes.pivot.READ_THE_RECORD", False)  # the reflection's choice alone
    assert _pivot_step(reflections, Context(model="sim", max_steps=20), trajectory, [0]) == 9


def test_without_the_hook_or_a_critic_best_keeps_the_reflections_choice_less_its_loops():
    trajectory = _walk([""] * 8)
    reflections = [{"pivotal_step": 2, "no_return_step": 7}]
    assert _pivot_step(reflections, Context(model="sim", max_steps=20), trajectory, [0]) == 7
    looped = _walk([""] * 8, states=[1, 2, 3, 2, 1, 0, 1, 2])  # after 7 steps the world is as after 1
    assert _pivot_step(reflections, Context(model="sim", max_steps=20), looped, [0]) == 1


def test_without_any_signal_an_attempt_that_ran_out_keeps_half_its_path_not_its_first_slip():
    trajectory = _walk([""] * 20)
    reflections = [{"pivotal_step": 1, "no_return_step": 19}]  # ran out of steps: its last step is the latest
    assert _pivot_step(reflections, Context(model="sim", max_steps=20), trajectory, [0]) == 10
    assert _pivot_step(reflections, Context(model="sim", max_steps=20, pivot="first_mistake"), trajectory, [0]) == 1
