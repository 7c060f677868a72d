"""Issue 32 items 2 and 3: one fair step budget by default, a pivot that picks the better restart
point per failure (`pivot="best"`), and the bench's own environments with consistent oracles.
"""

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.runtime import Runtime

import pivotal.bench.retry_envs  # noqa: F401  (registers the bench environments)
import pivotal.testing.plugin_envs  # noqa: F401  (registers word-room)
from pivotal.bench.retry_envs import CaveQuest, CliffGrid, LavaKeyGrid
from pivotal.core.context import Context
from pivotal.core.environments.gridworld import GridWorld
from pivotal.core.task import Task
from pivotal.graphs import arun
from pivotal.nodes.pivot import _pivot_step, best_restart, closest_restart
from pivotal.nodes.reflector import reflector

ROOT = Path(__file__).resolve().parents[1]
ENVS = [(CliffGrid, "cliff-grid"), (LavaKeyGrid, "lava-key-grid"), (CaveQuest, "cave-quest")]


def test_the_fair_budget_is_the_default_and_shares_one_total():
    context = Context(model="sim", max_steps=5, max_pivot_retries=2)
    assert (context.budget, context.pivot, context.total_steps()) == ("fair", "best", 15)
    assert context.budget_spent(4, 14) == ""
    assert context.budget_spent(5, 6) == "step budget of 5 spent without reaching the goal"
    assert context.budget_spent(1, 15).startswith("total step budget of 15 spent")
    assert Context(model="sim", budget="path").total_steps() is None


async def test_no_retry_once_the_shared_total_is_spent():
    """A retry left by max_pivot_retries but none by the total: the reflector gives up."""
    context = Context(model="sim", max_steps=4, max_pivot_retries=2, memory=False)
    state = {"run_id": "r", "task": Task(env="word-room").model_dump(), "trajectory": [], "retries": 1,
             "counters": {"executed": 12}, "attempt_failed": "step budget of 4 spent"}  # fmt: skip
    update = await reflector(state, Runtime(context=context))
    assert update["status"] == "failure"


@pytest.mark.parametrize("retry", ["full", "pivotal"])
async def test_the_fair_budget_bounds_every_path_and_the_total_for_both_strategies(retry):
    """An actor that always errs (word-room: every wrong command does nothing) spends every attempt; loop
    detection off, which would send back a command that already changed nothing (tests/test_loops.py).
    """
    context = Context(
        model="sim:error=1.0,seed=3,legal=1", lesson_model="sim", critic=False, memory=False,
        retry=retry, max_steps=6, max_pivot_retries=2, loop_detection="off",
    )  # fmt: skip
    result = await arun({"env": "word-room"}, context, checkpoint_path=":memory:")
    assert result.status == "failure" and result.retries["budget"] == "fair"
    assert result.executed <= context.total_steps() == 18
    assert result.trajectory_length <= context.max_steps  # a kept prefix counts against the path
    if retry == "full":
        assert result.executed == 18  # three whole attempts: the shared total, spent
    assert result.retries["count"] == 2


async def test_under_the_new_budget_a_pivotal_path_may_outgrow_max_steps():
    """What the fair default prevents: the same run under "new" ends with a longer path."""
    longest = 0
    for seed in range(6):
        context = Context(
            model=f"sim:error=0.6,seed={seed},legal=1", lesson_model="sim", critic=False, memory=False,
            budget="new", max_steps=6, max_pivot_retries=2,
        )  # fmt: skip
        result = await arun({"env": "word-room"}, context, checkpoint_path=":memory:")
        longest = max(longest, result.trajectory_length)
    assert longest > 6


def test_best_keeps_a_cheap_detour_and_drops_a_costly_one():
    context = Context(model="sim", max_steps=20)
    # mistake at 3 (8 steps left), the detour moved on: 4 left from step 9; at its pace (6 steps for
    # 4 of progress) they take 6 of the 11 steps of room -> restart at 9
    assert best_restart(3, 9, 8, 4, context) == 9
    # the detour led away: more steps left from 9 than from 3 -> back to the first mistake
    assert best_restart(3, 9, 5, 7, context) == 3
    # fewer steps left, but at the detour's pace (13 steps for 5) 3 steps need ~8 of 4 -> the first mistake
    assert best_restart(3, 16, 8, 3, context) == 3
    # under "new" kept steps cost the path nothing: the same late restart fits
    assert best_restart(3, 16, 8, 3, Context(model="sim", max_steps=20, budget="new")) == 16
    # no estimates: the detour is kept while it uses at most half the path
    assert best_restart(3, 9, None, None, context) == 9
    assert best_restart(3, 12, None, None, context) == 3


async def test_best_restarts_later_than_first_mistake_when_the_detour_paid_off():
    """cave-quest, seed 0: the lamp is taken and lit, then the potion is drunk. The first mistake
    is an early wasted look around; the point of no return is the potion, with 3 steps left.
    """
    env = CaveQuest()
    env.reset(Task(env="cave-quest", params={"seed": 0}))
    room = env.lamp_room
    path = [("command", {"text": t}) for t in ("examine the walls", f"go to the {room}", "take the lamp",
                                                "light the lamp", "go to the hall", "drink the potion")]  # fmt: skip
    first, _ = env.first_mistake(path)
    late = env.last_recoverable(path)
    assert (first, late) == (0, 5)
    left_first, left_late = env.steps_to_goal(path[:first]), env.steps_to_goal(path[:late])
    assert (left_first, left_late) == (10, 6)
    assert best_restart(first, late, left_first, left_late, Context(model="sim", max_steps=16)) == late


@pytest.mark.parametrize(("cls", "name"), ENVS)
@pytest.mark.parametrize("seed", range(4))
def test_the_expert_path_solves_each_bench_environment(cls, name, seed):
    env = cls()
    env.reset(Task(env=name, params={"seed": seed}))
    shortest, taken = env.distance(env.state), []
    while (call := env.expert_action()) is not None:
        taken.append(call)
        result = env.step(*call)
        if result.done:
            break
    assert result.success and len(taken) == shortest
    assert env.steps_to_goal(taken) == 0 or env.steps_to_goal(taken[:-1]) == 1


def test_cliff_oracle_puts_the_fall_at_the_point_of_no_return():
    env = CliffGrid()
    env.reset(Task(env="cliff-grid", params={"seed": 0}))  # start bottom-left, the cliff to the right
    path = [("up", {}), ("down", {}), ("right", {})]  # a wasted climb, back down, then over the edge
    assert env.first_mistake(path)[0] == 1
    assert env.last_recoverable(path) == 2
    assert env.steps_to_goal(path) is None and env.judge("right", {})[0] == "fatal"


def test_lava_key_grid_needs_the_key_before_the_door():
    env = LavaKeyGrid()
    env.reset(Task(env="lava-key-grid", params={"seed": 1}))
    door = next(cell for cell, tile in env.cells.items() if tile == "D")
    assert not env.passable(env.state, door)  # locked without the key
    key = next(cell for cell, tile in env.cells.items() if tile == "K")
    assert ("pickup", {}) in env.calls((*key, False, False))
    assert env.check("pickup", {}) is not None  # not on the key's cell at the start: refused in one line
    lava = next(cell for cell, tile in env.cells.items() if tile == "L")
    assert env.apply((lava[0], lava[1] - 1, True, True), ("right", {}))[1] == "dead"


def test_cave_quest_loses_the_goal_without_ending_when_the_lamp_goes_down_the_well():
    env = CaveQuest()
    env.reset(Task(env="cave-quest", params={"seed": 2}))
    room = env.lamp_room
    path = [("command", {"text": t}) for t in (f"go to the {room}", "take the lamp", "go to the hall",
                                                "drop the lamp down the well", "examine the walls")]  # fmt: skip
    for call in path:
        result = env.step(*call)
    assert not result.done  # the game goes on
    assert env.last_recoverable(path) == 3 and env.steps_to_goal(path) is None


def test_the_sim_reflector_estimates_the_steps_left_from_the_oracle():
    from pivotal.core.environments.live import open_live, release, run_step
    from pivotal.core.models.sim import _reflect

    task = Task(env="cave-quest", params={"seed": 0})
    live = open_live("sim-steps-left", task)
    try:
        room = live.env.lamp_room
        for index, text in enumerate(("examine the walls", f"go to the {room}", "take the lamp", "drink the potion")):
            run_step(live, "command", {"text": text}, f"k{index}")
        reflection = _reflect(live, live.env, random.Random(0), wrong=False)
    finally:
        release("sim-steps-left")
    assert (reflection["pivotal_step"], reflection["no_return_step"]) == (0, 3)
    assert (reflection["steps_left_at_pivotal"], reflection["steps_left_at_no_return"]) == (10, 8)


def test_the_gridworld_oracle_counts_the_steps_left():
    grid = GridWorld()
    grid.reset(Task(env="gridworld", params={"seed": 3}))
    start = grid.steps_to_goal([])
    assert start == len(_expert_path(grid)) and grid.steps_to_goal([("up", {})]) == start  # a wall: no move


def _expert_path(env) -> list:
    saved, path = env.snapshot(), []
    while (call := env.expert_action()) is not None:
        path.append(call)
        env.step(*call)
    env.restore(saved)
    return path


@pytest.mark.slow
def test_the_retry_bench_heads_each_table_with_its_budget(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_retry.py"), "--seeds", "4", "--configs", "best/fair",
         "--loop-detection", "on", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads((tmp_path / "retry.json").read_text())
    assert [t["budget"] for t in found["tables"]][0] == "fair"
    assert {r["budget"] for r in found["runs"]} == {"fair"} and len(found["runs"]) == 12  # first, full, best
    titles = [t["budget"] for t in found["tables"]]
    assert any("tasks whose first attempt failed" in t for t in titles) and any("perfect retry" in t for t in titles)
    assert "spent this share of full retry's steps" in (tmp_path / "retry.md").read_text()
    assert "### budget: fair" in (tmp_path / "retry.md").read_text() and "wall time" in done.stdout
    if "loop_detection" not in Context.field_names():
        assert "--loop-detection on ignored" in done.stdout


@pytest.mark.slow
def test_the_memory_and_retry_bench_pairs_memory_on_and_off_for_both_strategies(tmp_path):
    out = tmp_path / "retry_memory.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_retry_memory.py"), "--envs", "word-room", "--errors", "0.3",
         "--streams", "1", "--tasks", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(out.read_text())
    assert sorted({r["config"] for r in found["rows"]}) == ["full", "full+memory", "pivotal", "pivotal+memory"]
    assert all(c["all"]["tasks"] == 2 for c in found["comparisons"].values())
    assert "pivotal+memory vs pivotal" in done.stdout


@pytest.mark.slow
def test_the_retry_bounds_bench_checks_the_fair_budget_and_splits_the_steps(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_retry_bounds.py"), "--seeds", "2", "--offset", "100",
         "--heed", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads((tmp_path / "retry_bounds_100_heed1.0.json").read_text())
    assert found["compare"]["tasks"] == 6 and found["heed"] == 1.0
    for budget in found["budget"].values():
        assert budget["runs"] == 6 and budget["attempts_over_max_steps"] == 0 and budget["runs_over_total"] == 0
        assert budget["executed_is_attempt_steps"]
    steps = found["steps"]
    assert steps["full_first_attempts"] == steps["best_first_attempts"]  # same seeds, same first prompts
    assert steps["full_executed"] == steps["full_first_attempts"] + steps["full_retries"]
    assert "retry falls repeat an earlier fatal call" in done.stdout


def test_the_perfect_retry_floor_restarts_at_the_closest_state_on_the_path():
    """Three steps along the shortest path and a fall: the cheapest retry starts where the three
    steps led (the start's distance less three), not at the start or after a later detour.
    """
    bench = _bench_module()
    env = CliffGrid()
    env.reset(Task(env="cliff-grid", params={"seed": 0}))
    start = env.distance(env.state)
    path = [*_expert_path(env)[:3], ("left", {}), ("down", {})]
    steps = [{"action": name, "arguments": arguments} for name, arguments in path]
    assert bench.fewest_steps_after("cliff-grid", 0, steps) == start - 3
    first = {"stream": "s", "executed": 5, "status": "failure", "perfect_retry": start - 3}
    assert bench._perfect(first)["executed"] == 5 + start - 3 and bench._perfect(first)["status"] == "success"


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_retry", ROOT / "benchmarks" / "bench_retry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_best_restarts_at_the_recorded_state_closest_to_the_goal_that_still_fits():
    """Steps to the goal after steps 0-4: 5, 4, 6, 3, then out of reach."""
    trajectory = [{"index": i, "goal_steps_left": n} for i, n in enumerate([5, 4, 6, 3, None])]
    roomy, tight = Context(model="sim", max_steps=10), Context(model="sim", max_steps=6)
    assert closest_restart(trajectory, roomy) == 4  # 3 steps left after 4 kept: fits in 6
    assert closest_restart(trajectory, tight) == 2  # 3 > the 2 left after 4 kept; 4 fit after 2
    assert closest_restart([{"index": 0}], roomy) is None  # the environment did not say
    assert closest_restart(trajectory, Context(model="sim", max_steps=6, budget="new")) == 4  # kept steps free


@pytest.mark.parametrize("named", [(0, 1), (2, 2), (3, 1)])
def test_with_distances_best_restarts_at_the_closest_state_wherever_the_reflection_put_its_steps(named):
    """Issue 42: the reflection's point of no return (1 of 4, or not after its first mistake) no longer
    bounds the restart where the environment says how far the goal is: a state it gives a distance
    from is reachable by its own word, and an earlier restart threw away progress (bench_retry_floor:
    25 of 111 first restarts on the dev seeds were before the closest state, all of them so bounded).
    """
    trajectory = [{"index": i, "goal_steps_left": n} for i, n in enumerate([5, 4, 6, 3, None])]
    first, late = named
    reflections = [{"pivotal_step": first, "no_return_step": late}]
    assert _pivot_step(reflections, Context(model="sim", max_steps=10), trajectory) == 4
    # the named steps still decide where the distances say nothing that fits, and for the other rules
    assert _pivot_step(reflections, Context(model="sim", max_steps=3), trajectory) in (first, late)
    no_return = Context(model="sim", max_steps=10, pivot="no_return")
    assert _pivot_step(reflections, no_return, trajectory) == max(first, late)
