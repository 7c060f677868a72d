"""Built-in environments: verifiable goals, legal-move pre-checks, exact snapshot/restore."""

import pytest

from pivotal.environments import check_action, make_environment
from pivotal.environments.live import attach, open_live, release
from pivotal.task import Task


def _walk_expert(env, limit=50):
    for _ in range(limit):
        name, arguments = env.expert_action()
        result = env.step(name, arguments)
        if result.done:
            return result
    raise AssertionError("expert never finished")


@pytest.mark.parametrize("env_name,params", [("gridworld", {"seed": 4}), ("gridworld", {"seed": 9, "size": 8}),
                                             ("frozenlake", {}), ("frozenlake", {"size": 6, "seed": 1})])
def test_expert_path_reaches_a_verified_goal(env_name, params):
    env = make_environment(env_name)
    env.reset(Task(env=env_name, params=params))
    assert _walk_expert(env).success


@pytest.mark.parametrize("env_name", ["gridworld", "frozenlake"])
def test_snapshot_restore_gives_back_the_same_future(env_name):
    env = make_environment(env_name)
    env.reset(Task(env=env_name, params={"seed": 2}))
    name, arguments = env.expert_action()
    env.step(name, arguments)
    saved = env.snapshot()
    after = [env.step(*env.expert_action()).observation for _ in range(2)]
    env.restore(saved)
    assert [env.step(*env.expert_action()).observation for _ in range(2)] == after


def test_gridworld_falling_into_a_hole_ends_in_failure_and_the_oracle_blames_that_step():
    env = make_environment("gridworld")
    env.reset(Task(params={"seed": 2}))
    moves = []
    for _ in range(40):  # walk the expert path until a hole is next to us, then step in
        fatal = [m for m in ("up", "down", "left", "right") if env.judge(m, {})[0] == "fatal"]
        if fatal:
            result = env.step(fatal[0], {})
            moves.append((fatal[0], {}))
            break
        move = env.expert_action()
        env.step(*move)
        moves.append(move)
    assert result.done and not result.success
    assert env.first_mistake(moves)[0] == len(moves) - 1


def test_gridworld_precheck_refuses_walls_and_unknown_actions():
    env = make_environment("gridworld")
    observation = env.reset(Task(params={"seed": 0}))
    walls = [m for m in ("up", "down", "left", "right") if f"{m}=wall" in observation]
    assert walls and all(check_action(env, m, {}) for m in walls)
    assert "unknown action 'jump'" in check_action(env, "jump", {})


def test_frozenlake_is_gymnasium_underneath():
    env = make_environment("frozenlake")
    text = env.reset(Task(env="frozenlake"))
    assert type(env.env.unwrapped).__name__ == "FrozenLakeEnv" and "S" in text


async def test_live_environment_follows_a_cut_trajectory():
    task = Task(params={"seed": 4})
    live = open_live("run-x", task)
    try:
        steps = []
        for index in range(3):
            name, arguments = live.env.expert_action()
            live.env.step(name, arguments)
            live.applied.append((name, arguments))
            steps.append({"action": name, "arguments": arguments, "snapshot": live.env.snapshot()})
        _, replayed = await attach("run-x", task, steps[:1])
        assert replayed == 0 and live.env.snapshot() == steps[0]["snapshot"]
    finally:
        release("run-x")
