"""A retry shown the move an earlier attempt made from the state it stands in (`Context.reuse_moves`),
and the `sim` actor's rate of following it (`sim:follow=`): issue 42's reuse of the run's own record.
"""

import pytest

import pivotal.bench.retry_envs  # noqa: F401  (registers the -blind worlds)
from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.core.models.factory import make_model
from pivotal.graphs import arun
from pivotal.nodes.reflector import moves_that_held
from pivotal.prompts.show import held_here


def _step(index, action, state, **more):
    return {"index": index, "action": action, "arguments": {}, "state": state, **more}


def _judged(decision):
    return [{"source": "critic", "action": "right", "arguments": {}, "decision": decision}]


def test_only_moves_the_record_vouches_for_are_held():
    trajectory = [
        _step(
            0,
            "right",
            [0, 1],
            verdicts=_judged("approve"),
        ),
        _step(1, "up", [0, 1], no_op=True),  # changed nothing
        _step(2, "down", [1, 1]),  # the attempt comes back to [0, 1] below: a loop through it
        _step(3, "up", [0, 1]),
        _step(
            4,
            "right",
            [0, 2],
            verdicts=_judged("revise"),
        ),
        _step(5, "down", [1, 2]),  # no critic judged it, the world changed, never came back
        _step(6, "down", [2, 2], done=True),  # ended the attempt (a fall)
    ]
    held = moves_that_held({"trajectory": trajectory, "initial_state": [0, 0]})
    assert [(index, action) for index, _, action, _ in held] == [(0, "right"), (5, "down")]
    assert held[0][1] == [0, 0] and held[1][1] == [0, 2]  # the state each move was made from


def test_the_actor_is_shown_the_held_move_from_its_own_state_but_never_the_named_mistake():
    held = [[0, [0, 0], "right", {}], [1, [0, 1], "down", {}], [2, [1, 1], "down", {}]]
    reflection = {"pivotal_step": 2, "no_return_step": 2, "kept_steps": 2, "held_moves": held}
    assert held_here([reflection], (0, 1)).startswith("down\n")  # a checkpoint's list is the world's tuple
    assert held_here([reflection], [1, 1]) == ""  # step 2 is the one the retry redoes
    assert held_here([reflection], [5, 5]) == ""
    assert held_here([reflection], None) == ""


def test_an_unknown_reuse_choice_and_a_follow_rate_out_of_range_are_refused_in_one_line():
    with pytest.raises(PivotalError, match="reuse_moves must be one of off, pivotal, all"):
        Context(model="sim", reuse_moves="always")
    with pytest.raises(PivotalError, match="sim option follow must be between 0 and 1"):
        make_model("sim:follow=2")
    assert Context(model="sim").reuse_moves == "off"


async def _run(seed, error, reuse, follow, critic=False):
    context = Context(model=f"sim:error={error},seed={seed},follow={follow}", lesson_model="sim", memory=False,
                      critic=critic, max_steps=18, max_pivot_retries=2, reuse_moves=reuse)  # fmt: skip
    result = await arun({"env": "cliff-grid-blind", "params": {"seed": seed}}, context, checkpoint_path=":memory:")
    return result, [(s["action"], s.get("thought")) for s in result.trajectory]


@pytest.mark.parametrize("seed", [101, 104, 110])
async def test_a_sim_actor_that_never_follows_runs_exactly_as_without_the_block(seed):
    off, off_path = await _run(seed, 0.4, "off", 0.8)
    never, never_path = await _run(seed, 0.4, "pivotal", 0.0)
    assert (never.status, never.executed, never_path) == (off.status, off.executed, off_path)


async def test_a_sim_actor_that_always_follows_plays_the_held_move_from_that_very_state():
    result, _ = await _run(110, 0.4, "pivotal", 1.0)
    held = {(str(list(before)), action) for r in result.reflections for _, before, action, _ in r["held_moves"]}
    followed = 0
    for step in result.trajectory:
        if step.get("thought") == "an earlier attempt's move from here held":
            before = result.trajectory[step["index"] - 1]["state"] if step["index"] else [3, 0]  # cliff-grid's start
            assert (str(list(before)), step["action"]) in held
            followed += 1
    assert followed >= 2
