"""The reflector's pivotal step against the environment's truth (issue 42), and the pivot's own signals."""

import pytest

import pivotal.bench.retry_envs  # noqa: F401 — registers cliff-grid and the -blind twins
import pivotal.testing.plugin_envs  # noqa: F401 — registers lava-grid (no steps_to_goal: scored by playing out)
from pivotal.bench.pivot_truth import (
    accuracy,
    attempt_outcomes,
    closest,
    costs_to_go,
    score_run,
    steps_by_end,
    true_pivot,
)
from pivotal.core.context import Context
from pivotal.core.environments import make_environment
from pivotal.core.environments.base import DistanceOracle
from pivotal.core.task import Task
from pivotal.graphs import arun
from pivotal.nodes.pivot import progress_estimates

# cliff-grid seed 0: start bottom-left (11 steps from G); the cliff along the bottom row
DETOUR_THEN_CLIFF = [("up", {}), ("right", {}), ("left", {}), ("right", {}), ("right", {}), ("down", {})]


def test_the_true_pivot_is_the_step_after_which_the_cost_to_go_never_came_back():
    assert true_pivot([3, 2, 3, 2, 5, None]) == 3  # the last visit of the closest state; step 4 rose for good
    assert true_pivot([3, 4, None]) == 0  # the first step already led away for good
    assert true_pivot([3, 2, 1]) is None  # ended at its closest state: no step went wrong for good
    assert closest([3, 2, 3, 2, 5, None]) == {1, 3} and closest([None]) == set()


def test_cliff_costs_come_from_the_hook_and_the_blind_twin_is_scored_by_the_original():
    costs = costs_to_go("cliff-grid", {"seed": 0}, DETOUR_THEN_CLIFF)
    assert costs == [11, 10, 9, 10, 9, 8, None]  # the detour (left) costs one, the cliff ends it
    assert true_pivot(costs) == 5
    assert costs_to_go("cliff-grid-blind", {"seed": 0}, DETOUR_THEN_CLIFF) == costs
    assert not isinstance(make_environment("cliff-grid-blind"), DistanceOracle)
    assert isinstance(make_environment("cliff-grid"), DistanceOracle)


def test_a_world_without_the_hook_is_scored_by_its_expert_playing_out_each_prefix():
    path = [("left", {}), ("right", {}), ("right", {}), ("forward", {})]
    costs = costs_to_go("lava-grid", {"seed": 0}, path)
    world = make_environment("lava-grid")
    world.reset(Task(env="lava-grid", params={"seed": 0}))
    expected = [world.distances[world.pose]]
    for name, arguments in path:
        world.step(name, arguments)
        expected.append(world.distances.get(world.pose))
    assert costs == expected


def test_accuracy_scores_the_reflection_the_point_of_no_return_and_the_restart():
    reflection = {"attempt_path": [list(c) for c in DETOUR_THEN_CLIFF], "pivotal_step": 2, "no_return_step": 5}
    rows = score_run("cliff-grid", {"seed": 0}, [{**reflection, "kept_steps": 1}, {"pivotal_step": 0}])
    assert len(rows) == 1 and rows[0]["true_pivot"] == 5 and rows[0]["restart_closest"] is False
    assert rows[0]["restart_excess"] == 2.0  # kept 1 step: 10 to go, where the closest state had 8
    found = {field: accuracy(rows, field) for field in ("named", "no_return", "kept")}
    assert found["named"]["top1"] == 0.0 and found["named"]["within1"] == 0.0
    assert found["no_return"]["top1"] == 1.0 and found["no_return"]["top1_ci95"][1] == 1.0
    assert found["kept"]["scored"] == 1 and found["kept"]["within1"] == 0.0


def test_attempt_outcomes_say_how_each_attempt_ended_what_it_executed_and_a_repeated_fall():
    fell = [list(call) for call in DETOUR_THEN_CLIFF]
    retry = [{"attempt_path": fell, "kept_steps": 5}]  # kept five steps, then stepped down again
    rows = attempt_outcomes("cliff-grid-blind", {"seed": 0}, retry, DETOUR_THEN_CLIFF, attempts=2, limit=18)
    assert [(r["end"], r["new_steps"], r["repeated_fatal"]) for r in rows] == [("ended", 6, False), ("ended", 1, True)]
    ran = attempt_outcomes("cliff-grid", {"seed": 0}, [], DETOUR_THEN_CLIFF[:4], attempts=1, limit=4)
    assert [(r["end"], r["new_steps"]) for r in ran] == [("ran_out", 4)]
    short = attempt_outcomes("cliff-grid", {"seed": 0}, [], DETOUR_THEN_CLIFF[:4], attempts=1, limit=18)
    assert short[0]["end"] == "other"  # neither ended nor at the limit: stuck, or the shared total spent
    assert steps_by_end([rows, ran]) == {
        "first ended": {"attempts": 1, "steps": 6, "repeated_fatal": 0},
        "first ran_out": {"attempts": 1, "steps": 4, "repeated_fatal": 0},
        "retry ended": {"attempts": 1, "steps": 1, "repeated_fatal": 1},
    }


@pytest.mark.slow
def test_the_run_records_each_failed_attempts_whole_path_for_scoring():
    result = arun_sync("cliff-grid-blind", Context(model="sim:error=0.6,seed=3", memory=False, max_steps=12))
    assert result.reflections, "a failing seed is needed for this test"
    assert all(len(r["attempt_path"]) >= len(r["failed_path"]) for r in result.reflections)
    assert all("goal_steps_left" not in step for step in result.trajectory)  # the hook is off in the blind twin


def arun_sync(env: str, context: Context):
    import asyncio

    return asyncio.run(arun({"env": env, "params": {"seed": 0}}, context, checkpoint_path=":memory:"))


def test_progress_estimates_read_the_critic_and_give_a_revisited_state_its_earlier_estimate():
    def step(index, decision, state, **more):
        verdict = {"action": "right", "arguments": {}, "decision": decision, "source": "critic"}
        return {"index": index, "action": "right", "arguments": {}, "verdicts": [verdict], "state": state, **more}

    trajectory = [
        step(0, "approve", [1]),
        step(1, "revise", [2]),
        step(2, "approve", [1]),  # back where step 0 left the world: no better than then
        step(3, "approve", [3]),
        step(4, "approve", [3], no_op=True),
    ]
    assert progress_estimates(trajectory, [0]) == [0.0, -1.0, 0.0, -1.0, -2.0, -2.0]
    unjudged = [{**s, "verdicts": []} for s in trajectory]
    assert progress_estimates(unjudged, [0]) == [0.0] * 6


def test_a_repeated_fall_is_the_same_state_by_its_key_and_an_attempt_that_did_not_fall_repeats_none():
    # gridworld seed 0: start (0, 2), a hole at (1, 3); its snapshot counts moves, its state_key does not
    first = [["right", {}], ["down", {}]]  # (0, 3) after one move, then down into the hole
    detour = [("left", {}), ("right", {}), ("right", {}), ("down", {})]  # (0, 3) after three moves, the same fall
    rows = attempt_outcomes("gridworld-blind", {"seed": 0}, [{"attempt_path": first, "kept_steps": 0}], detour, 2, 20)
    assert [(r["end"], r["repeated_fatal"]) for r in rows] == [("ended", False), ("ended", True)]
    wander = [["left", {}]]  # neither attempt fell: nothing for the second to repeat
    retry = [{"attempt_path": wander, "kept_steps": 0}]
    rows = attempt_outcomes("gridworld", {"seed": 0}, retry, [("left", {})], 2, 20)
    assert [(r["end"], r["repeated_fatal"]) for r in rows] == [("other", False), ("other", False)]
    assert steps_by_end([rows])["retry other"]["repeated_fatal"] == 0
