"""Built-in environments: verifiable goals, legal-move pre-checks, exact snapshot/restore."""

import pytest

from pivotal.core.environments import check_action, make_environment
from pivotal.core.environments.live import attach, open_live, release
from pivotal.core.task import Task


def _walk_expert(env, limit=50):
    for _ in range(limit):
        name, arguments = env.expert_action()
        result = env.step(name, arguments)
        if result.done:
            return result
    raise AssertionError("expert never finished")


@pytest.mark.parametrize(
    "env_name,params",
    [
        ("gridworld", {"seed": 4}),
        ("gridworld", {"seed": 9, "size": 8}),
        ("frozenlake", {}),
        ("frozenlake", {"size": 6, "seed": 1}),
    ],
)
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
        for _ in range(3):
            name, arguments = live.env.expert_action()
            live.env.step(name, arguments)
            live.applied.append((name, arguments))
            steps.append({"action": name, "arguments": arguments, "snapshot": live.env.snapshot()})
        _, replayed = await attach("run-x", task, steps[:1], timeout=5)
        assert replayed == 0 and live.env.snapshot() == steps[0]["snapshot"]
    finally:
        release("run-x")


# --- taxi (Gymnasium Taxi-v4) and configs (tools adapter) ---------------------------------------


def test_taxi_penalises_an_illegal_pickup_and_the_oracle_calls_it_fatal():
    from pivotal.core.environments.taxi import Taxi
    from pivotal.core.task import Task

    env = Taxi()
    observation = env.reset(Task(env="taxi", params={"seed": 3}))
    assert "The taxi is at row" in observation and "Destination:" in observation
    quality, reason = env.judge("dropoff", {})
    assert quality == "fatal" and "illegal" in reason
    result = env.step("dropoff", {})
    assert "Illegal dropoff" in result.observation and result.info["reward"] == -10 and not result.done


def test_taxi_expert_reaches_the_drop_off_and_restore_rewinds():
    from pivotal.core.environments.taxi import Taxi
    from pivotal.core.task import Task

    env = Taxi()
    env.reset(Task(env="taxi", params={"seed": 1}))
    start = env.snapshot()
    for _ in range(30):
        result = env.step(*env.expert_action())
        if result.done:
            break
    assert result.success
    env.restore(start)
    assert env.snapshot() == start and env.expert_action() is not None


def test_configs_verifier_fails_a_run_that_deleted_anything():
    from pivotal.core.environments.configs import ConfigCopy
    from pivotal.core.task import Task

    env = ConfigCopy()
    env.reset(Task(env="configs", params={"seed": 0}))
    assert {spec.name for spec in env.describe_actions() if spec.irreversible} == {"delete"}
    value = env.step("read", {"path": env.source}).observation.split(": ", 1)[1]
    assert env.judge("delete", {"path": env.target})[0] == "fatal"
    env.step("delete", {"path": f"staging/{env.service}/other"})
    env.step("write", {"path": env.target, "value": value})
    result = env.step("submit", {"answer": "done"})
    assert result.done and not result.success


def test_configs_first_mistake_is_the_first_call_off_the_plan():
    from pivotal.core.environments.configs import ConfigCopy
    from pivotal.core.task import Task

    env = ConfigCopy()
    env.reset(Task(env="configs", params={"seed": 2}))
    plan = [env.expert_action()]
    index, reason = env.first_mistake([plan[0], ("submit", {"answer": "done"})])
    assert index == 1 and "submit" in reason
