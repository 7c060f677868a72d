"""Lessons that transfer safely: a whole run's recipe stays with the maze that taught it until a
second maze teaches the same text; step lessons, matched by situation, apply everywhere.
"""

import pytest

from pivotal.core.context import Context
from pivotal.graphs import arun
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import close_stores, open_store
from pivotal.memory.policy.rules import NO_QUARANTINE

RECIPE = "This sequence of moves reached the goal: down, down, right, right."


def _lesson(text: str, *, instance: str, level: str = "task", run: str = "r1") -> Lesson:
    candidate = {"kind": "skill", "situation": "at the start", "text": text, "outcome": "success", "level": level}
    return Lesson.from_candidate(candidate, family="gridworld", run_id=run, model="sim", instance=instance)


def _recall(store, instance: str) -> list[str]:
    found = store.search("at the start", family="gridworld", k=3, min_similarity=0.0, instance=instance)
    return [r.lesson.text for r in found]


@pytest.fixture
def store(tmp_path):
    yield open_store(str(tmp_path / "store"))
    close_stores()


def test_a_task_lesson_is_recalled_only_in_the_instance_that_taught_it(store):
    store.add([_lesson(RECIPE, instance="maze-a")], dedup_similarity=0.9)
    assert _recall(store, "maze-a") == [RECIPE]
    assert _recall(store, "maze-b") == []


def test_a_step_lesson_applies_in_every_instance(store):
    text = "A hole below: moving down ends the attempt."
    store.add([_lesson(text, instance="maze-a", level="step")], dedup_similarity=0.9)
    assert _recall(store, "maze-b") == [text]


def test_the_same_text_taught_by_a_second_instance_makes_it_general(store):
    store.add([_lesson(RECIPE, instance="maze-a")], dedup_similarity=0.9)
    store.add([_lesson(RECIPE, instance="maze-b", run="r2")], dedup_similarity=0.9)
    (lesson,) = store.lessons(family="gridworld")
    assert lesson.evidence == 2 and lesson.scope == ""
    assert _recall(store, "maze-c") == [RECIPE]


def test_a_near_duplicate_from_another_instance_is_kept_apart(store):
    """Merging "down, down, right" from one maze into "down, down, left" from another made one
    maze's path look proven in all of them.
    """
    store.add([_lesson(RECIPE, instance="maze-a")], dedup_similarity=0.8)
    other = RECIPE.replace("right, right", "right, left")
    store.add([_lesson(other, instance="maze-b", run="r2")], dedup_similarity=0.8)
    assert sorted(lesson.scope for lesson in store.lessons(family="gridworld")) == ["maze-a", "maze-b"]
    assert _recall(store, "maze-b") == [other]


async def test_a_run_in_another_maze_does_not_recall_this_mazes_recipe(tmp_path):
    context = Context(model="sim", store_path=str(tmp_path / "store"), **NO_QUARANTINE)
    first = await arun({"env": "gridworld", "params": {"seed": 1}}, context)
    assert first.lessons["written"] == 1
    again = await arun({"env": "gridworld", "params": {"seed": 1}}, context)
    elsewhere = await arun({"env": "gridworld", "params": {"seed": 2}}, context)
    close_stores()
    assert again.lessons["recalled"] == 1
    assert elsewhere.lessons["recalled"] == 0


async def test_the_sim_actor_follows_a_recalled_recipe_only_in_its_own_maze(tmp_path):
    """bench_transfer's premise: an actor that is always wrong on its own solves the maze it has a
    recipe for, because recall surfaces the recipe there, and gains nothing in another maze.
    """
    store = str(tmp_path / "store")
    await arun({"env": "gridworld", "params": {"seed": 1}}, Context(model="sim", store_path=store, **NO_QUARANTINE))
    wrong = {"actor_model": "sim:error=1.0", "critic": False, "max_pivot_retries": 0, "store_path": store}
    here = await arun({"env": "gridworld", "params": {"seed": 1}}, Context(model="sim", **wrong))
    alone = await arun({"env": "gridworld", "params": {"seed": 1}}, Context(model="sim", **{**wrong, "memory": False}))
    elsewhere = await arun({"env": "gridworld", "params": {"seed": 2}}, Context(model="sim", **wrong))
    close_stores()
    assert here.status == "success"
    assert alone.status != "success" and elsewhere.status != "success"


@pytest.mark.slow
async def test_a_run_that_leaves_a_recipes_path_is_no_longer_shown_it(tmp_path):
    """Issue 42 item 3: a recipe's move for step k was taken from the state its own first k moves reach.
    A run that left the path (here the critic revises the recipe's first move and the always-wrong
    actor goes elsewhere) was shown it anyway, and followed it from the wrong square; a pivotal retry
    that restarted off the path walked back into the hole its attempt fell into, attempt after attempt.
    """
    store = str(tmp_path / "store")
    await arun({"env": "gridworld", "params": {"seed": 1}}, Context(model="sim", store_path=store, **NO_QUARANTINE))
    wrong = {"actor_model": "sim:error=1.0", "critic_model": "sim:error=1.0", "max_steps": 3, "store_path": store}
    wrong["loop_detection"] = "off"  # the attempt goes on where steps_to_goal says it cannot make it
    wrong["recall_min_similarity"] = 0.0  # recalled at every step, wherever the run is
    result = await arun(
        {"env": "gridworld", "params": {"seed": 1}}, Context(model="sim", max_pivot_retries=0, **wrong, **NO_QUARANTINE)
    )
    close_stores()
    (recipe,) = result.trajectory[0]["lessons"]  # at the start every recipe holds
    assert result.trajectory[0]["action"] != "right"  # the recipe's first move, revised away
    assert len(result.trajectory) > 1
    assert all(recipe not in step["lessons"] for step in result.trajectory[1:])
