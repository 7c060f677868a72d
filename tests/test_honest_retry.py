"""Issue 32, items 4-7: a run says when its retries cannot rewind, `pivotal envs` shows how each
environment goes back, lessons follow the kind of task an environment names, a long pre-check
reason keeps the command the actor meant, and the `sim` actor's mistakes in a one-action
environment are legal as well as illegal, so the critic is tested too.
"""

import json
import random

import pytest

import pivotal.testing.plugin_envs  # noqa: F401 — registers forward-grid, kinds-grid, word-room
from pivotal.cli.main import main
from pivotal.core.context import Context
from pivotal.core.environments import check_action, make_environment
from pivotal.core.environments.base import REASON_CHARS, RewindWarning
from pivotal.core.environments.live import open_live, release
from pivotal.core.errors import PivotalError
from pivotal.core.models.factory import make_model
from pivotal.core.models.sim import _answer
from pivotal.core.models.world import given
from pivotal.core.task import Task
from pivotal.graphs import arun, run
from pivotal.graphs.checks import rewind_notice
from pivotal.memory.policy.registry import close_stores
from pivotal.memory.policy.rules import NO_QUARANTINE
from pivotal.nodes.start import _family
from pivotal.testing.cli import finish
from pivotal.testing.plugin_envs import PLAN

PLUGIN = ("--plugin", "pivotal.testing.plugin_envs")
SIM_RUN = ("--model", "sim:error=0.6,seed=3", "--no-memory", "--checkpoints", ":memory:", "--max-steps", "4")


@pytest.mark.slow
# --- 4. honest rewinds -----------------------------------------------------------------------
def test_a_run_whose_environment_cannot_go_back_says_so_once_as_it_starts(tmp_path):
    code, out, err = finish("run", *PLUGIN, "--env", "forward-grid", *SIM_RUN, "--retry", "full", cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("task ") and "(forward-grid)" in lines[0]  # the run started: its reset worked
    assert lines[1].startswith("note: forward-grid cannot go back (rewind: forward), so --retry full rewinds nothing")
    assert "pivotal and full retry behave alike" in lines[1]
    assert sum("cannot go back" in line for line in lines) == 1


def test_the_notice_comes_only_when_a_retry_was_asked_for_and_cannot_rewind():
    assert rewind_notice({"env": "forward-grid"}, Context(retry="pivotal")).startswith("note: forward-grid")
    assert rewind_notice({"env": "forward-grid"}, Context(retry="none")) == ""
    assert rewind_notice({"env": "forward-grid"}, Context(max_pivot_retries=0)) == ""
    assert rewind_notice({"env": "gridworld"}, Context(retry="full")) == ""


def test_pivotal_envs_shows_each_environments_rewind_mode_and_parameters(capsys):
    assert main(["envs", *PLUGIN]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "rewind snapshot" in rows["gridworld"] and "params: seed=0 size=6 walls=0.15 holes=0.12" in rows["gridworld"]
    assert "rewind forward" in rows["forward-grid"] and "cannot go back" in rows["forward-grid"]
    assert "rows=6 cols=6 mines=5" in rows["minesweeper"]
    assert "params: none declared" in rows["word-room"]
    assert rows["gridworld"].endswith("ends hopeless attempts (steps_to_goal)")  # it knows the steps left
    assert "steps_to_goal" not in rows["minesweeper"]


# --- 5. families that follow the task ----------------------------------------------------------
async def test_lessons_stay_within_the_kind_of_task_the_environment_names(tmp_path):
    """The same maze under one environment name, two kinds of task: a recipe learnt in kind a is
    recalled in kind a again, never in kind b (under the name alone it was recalled in both).
    """
    context = Context(model="sim", store_path=str(tmp_path / "store"), **NO_QUARANTINE)
    first = await arun({"env": "kinds-grid", "params": {"seed": 1, "kind": "a"}}, context)
    again = await arun({"env": "kinds-grid", "params": {"seed": 1, "kind": "a"}}, context)
    other = await arun({"env": "kinds-grid", "params": {"seed": 1, "kind": "b"}}, context)
    named = await arun({"env": "kinds-grid", "family": "mine", "params": {"seed": 1, "kind": "a"}}, context)
    close_stores()
    assert first.lessons["written"] == 1 and first.task["family"] == "kinds-grid/a"
    assert again.lessons["recalled"] == 1
    assert other.task["family"] == "kinds-grid/b" and other.lessons["recalled"] == 0
    assert named.task["family"] == "mine"  # a family the task names wins over the hint


@pytest.mark.slow
async def test_a_plugin_without_family_keeps_lessons_per_task_kind_by_its_params(tmp_path):
    """word-room has no `family()`: two games under its name (`game=a`, `game=b`) get a family each
    from the task's parameters, so a recipe learnt in game a is recalled in a again and leaks 0 lessons
    into b; tasks that differ only by seed stay one family.
    """
    context = Context(model="sim", store_path=str(tmp_path / "store"), **NO_QUARANTINE)  # recalled from the next run
    first = await arun({"env": "word-room", "params": {"game": "a"}}, context)
    again = await arun({"env": "word-room", "params": {"game": "a", "seed": 4}}, context)
    other = await arun({"env": "word-room", "params": {"game": "b"}}, context)
    close_stores()
    assert first.lessons["written"] >= 1 and first.task["family"] == "word-room/game-a"
    assert again.task["family"] == "word-room/game-a" and again.lessons["recalled"] >= 1
    assert other.task["family"] == "word-room/game-b" and other.lessons["recalled"] == 0


def test_the_kind_by_params_leaves_out_the_seed_and_stays_a_clean_label():
    assert _family(Task(env="adventure", params={"seed": 3}), object()) == "adventure"
    assert _family(Task(env="adventure", params={"game": "zork.v1", "seed": 3}), object()) == "adventure/game-zork-v1"
    long = _family(Task(env="adventure", params={"notes": "x" * 200}), object())
    assert len(long) <= len("adventure/") + 60 and long != _family(
        Task(env="adventure", params={"notes": "x" * 199}), object()
    )


class _Hinted:
    def __init__(self, kind):
        self.kind = kind

    def family(self):
        return self.kind


def test_a_family_hint_is_cleaned_for_the_stores_and_a_bad_one_is_one_line():
    assert _family(Task(env="adventure"), _Hinted("zork.v1 easy")) == "adventure/zork-v1-easy"
    assert _family(Task(env="adventure"), _Hinted("")) == "adventure"
    with pytest.raises(PivotalError, match=r"environment 'adventure': family\(\) returned int; return a str"):
        _family(Task(env="adventure"), _Hinted(3))


# --- 6. pre-check reasons that keep their use --------------------------------------------------
def _room():
    env = make_environment("word-room")
    env.reset(Task(env="word-room"))
    return env


def test_a_long_list_of_legal_commands_is_ranked_so_the_meant_one_survives():
    env = _room()
    assert len(env.check("command", {"text": "unlock the cellar door"})) > REASON_CHARS  # listed last, past the cut
    reason = check_action(env, "command", {"text": "unlock the cellar door"})
    assert len(reason) <= REASON_CHARS
    assert reason.startswith(
        "there is no 'unlock the cellar door' here; the commands that work here: unlock cellar door,"
    )
    assert reason.endswith("more not shown)")


async def test_the_actor_reads_the_ranked_reason_in_its_critique():
    """Through the graph: an actor that mistypes the plan's first command ('take brass lamp7') is
    told the command it meant first; cut at the limit, the list ended before it.
    """
    wrong = Context(model="sim", actor_model="sim:error=1.0,legal=0", memory=False, max_steps=1, max_pivot_retries=0)
    result = await arun({"env": "word-room"}, wrong)
    assert result.critic["prechecked"] >= 1
    assert "the commands that work here: take brass lamp, " in result.reason


def test_a_short_reason_is_left_as_it_was():
    env = make_environment("gridworld")
    env.reset(Task(env="gridworld"))
    assert check_action(env, "jump", {}) == "unknown action 'jump'; choose one of: up, down, left, right"


# --- 7. an honest sim for one-action environments -------------------------------------------
def _picks(legal: float, n: int = 400) -> list[dict]:
    live = open_live("word-room-sim", Task(env="word-room"))
    try:
        with given(live):
            return [_answer("actor", {}, random.Random(i), 1.0, {}, legal=legal) for i in range(n)]
    finally:
        release("word-room-sim")


def test_the_sim_actors_mistakes_in_a_one_action_environment_mix_legal_and_illegal_calls():
    """Before, every mistake was the expert's text with a digit added ('take brass lamp7'): never
    legal, so the pre-check caught them all and the critic judged none.
    """
    env = _room()
    picks = _picks(0.5)
    legal = [p for p in picks if check_action(env, p["action"], p["arguments"]) is None]
    assert all(p["arguments"]["text"] != PLAN[0] for p in picks)  # every one is a mistake
    assert 0.4 <= len(legal) / len(picks) <= 0.6, len(legal)
    assert len({p["arguments"]["text"] for p in legal}) > 10
    assert not [p for p in _picks(0.0, 50) if check_action(env, p["action"], p["arguments"]) is None]


def test_the_legal_share_is_a_sim_option():
    assert make_model("sim:legal=0.2").legal == 0.2
    with pytest.raises(Exception, match="legal must be between 0 and 1"):
        make_model("sim:legal=2")


@pytest.mark.slow
def test_the_notice_reaches_batches_and_scripts(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"env": env, "params": {"seed": n}}) + "\n" for n, env in
                             enumerate(["forward-grid", "gridworld", "forward-grid"])))  # fmt: skip
    code, out, err = finish("batch", str(tasks), "--out", str(tmp_path / "r.jsonl"), *PLUGIN, *SIM_RUN, cwd=tmp_path)
    assert code == 0, err
    assert sum("cannot go back" in line for line in out.splitlines()) == 1  # once for the environment, not per task
    assert out.startswith("note: forward-grid cannot go back") and "cannot go back" not in err
    with pytest.warns(RewindWarning, match="forward-grid cannot go back"):
        run({"env": "forward-grid", "params": {"seed": 1}}, Context(model="sim", memory=False, max_steps=4))
