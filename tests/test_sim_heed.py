"""The `sim` actor heeding its run's reflections (`sim:heed=`, issue 42): at the state a reflection named a
call from as the mistake, it makes another; a right reflection buys the expert's move, a wrong one costs it.
"""

import random

import pytest

import pivotal.bench.retry_envs  # noqa: F401  (registers cliff-grid and its -blind twin)
from pivotal.core.context import Context
from pivotal.core.environments import make_environment
from pivotal.core.environments.live import Live
from pivotal.core.errors import PivotalError
from pivotal.core.models.factory import make_model
from pivotal.core.models.sim import _answer, _heeded, _named_here
from pivotal.core.models.world import given
from pivotal.core.task import Task
from pivotal.graphs import arun

MOVES = ["up", "down", "left", "right"]
# cliff-grid seed 0: start bottom-left at (3, 0), the cliff to its right; (2, 1) has the cliff below it
FELL = [["up", {}], ["right", {}], ["down", {}]]  # a failed attempt: its reflection named `down` from (2, 1)


def _live(path):
    env = make_environment("cliff-grid")
    task = Task(env="cliff-grid", params={"seed": 0})
    first = env.reset(task)
    live = Live(env=env, task=task, first_observation=first, initial=env.snapshot())
    for name, arguments in path:
        env.step(name, arguments)
        live.applied.append((name, arguments))
    return live


def test_the_named_call_is_found_from_the_same_path_or_the_same_state_reached_another_way():
    assert _named_here(_live(FELL[:2]), [FELL]) == [("down", {})]
    detour = [("up", {}), ("up", {}), ("right", {}), ("down", {})]  # (2, 1) again, by another path
    assert _named_here(_live(detour), [FELL]) == [("down", {})]
    assert _named_here(_live(FELL[:1]), [FELL]) == []  # (2, 0): not where the call was named
    assert _named_here(None, [FELL]) == []


def test_a_heeded_right_reflection_gives_the_expert_move_and_a_wrong_one_another_move():
    live = _live(FELL[:2])
    expert = live.env.expert_action()
    assert expert is not None and expert[0] != "down"
    right = _heeded(live, live.env, random.Random(0), [("down", {})], MOVES, 0.5)
    assert (right["action"], right["thought"]) == (expert[0], "a reflection named the other move")
    for seed in range(5):  # the reflection named the expert's own move: heeding it costs a wrong one
        wrong = _heeded(live, live.env, random.Random(seed), [expert], MOVES, 0.5)
        assert wrong["action"] != expert[0]


def test_heeding_gives_way_to_a_critique_of_this_step():
    live = _live(FELL[:2])
    expert = live.env.expert_action()
    wrongly = {"pivotal_named": [[*FELL[:2], list(expert)]]}  # a wrong reflection: it named the expert's move
    critique = "<critiques_of_this_step>- down was revised by the critic: it falls</critiques_of_this_step>"
    with given(live):
        heeded = _answer("actor", wrongly, random.Random(0), 0.0, {}, "", heed=True)
        critiqued = _answer("actor", wrongly, random.Random(0), 0.0, {}, critique, heed=True)
    assert heeded["action"] != expert[0] and critiqued["action"] == expert[0]


def test_heed_is_a_share_between_zero_and_one_and_off_by_default():
    assert make_model("sim").heed == 0.0
    assert make_model("sim:heed=0.5").heed == 0.5
    with pytest.raises(PivotalError, match="sim option heed must be between 0 and 1"):
        make_model("sim:heed=2")


async def _run(seed, heed, retry):
    context = Context(model=f"sim:error=0.4,seed={seed},heed={heed}", lesson_model="sim", memory=False,
                      critic=False, max_steps=18, max_pivot_retries=2, retry=retry)  # fmt: skip
    return await arun({"env": "cliff-grid-blind", "params": {"seed": seed}}, context, checkpoint_path=":memory:")


@pytest.mark.parametrize("retry", ["full", "pivotal"])
async def test_an_actor_that_always_heeds_never_repeats_a_named_call_from_its_state(retry):
    heeded = 0
    for seed in range(100, 112):
        result = await _run(seed, 1.0, retry)
        heeded += sum(str(s.get("thought", "")).startswith("a reflection named") for s in result.trajectory)
        named, path = set(), []
        for reflection in result.reflections:  # the earlier attempts' named (state, call) pairs
            failed = reflection["failed_path"]
            named.add((str(_live_state(seed, failed[:-1])), str(failed[-1])))
        kept = result.reflections[-1].get("kept_steps") or 0 if result.reflections else 0
        for step in result.trajectory:  # the last attempt's own steps never make one of them again, unless sent back
            call = [step["action"], step["arguments"]]
            sent_back = any(v["decision"] != "approve" for v in step.get("verdicts") or [])
            assert step["index"] < kept or sent_back or (str(_live_state(seed, path)), str(call)) not in named
            path.append(call)
    assert heeded >= 1


def _live_state(seed, path):
    world = make_environment("cliff-grid")
    world.reset(Task(env="cliff-grid", params={"seed": seed}))
    for name, arguments in path:
        world.step(name, arguments)
    return world.snapshot()
