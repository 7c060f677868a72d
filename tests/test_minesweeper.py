"""Minesweeper: seeded boards, a sound constraint-propagation oracle, a mine that ends the attempt,
exact snapshots, a pivotal retry that keeps the cleared part of the board, and a `sim` actor whose
errors pick wrong cells.
"""

import random

import pytest

from pivotal.core.context import Context
from pivotal.core.environments import check_action, make_environment, register_environment
from pivotal.core.environments.live import open_live, release
from pivotal.core.environments.minesweeper import Minesweeper
from pivotal.core.errors import PivotalError
from pivotal.core.models.sim import _answer, _wrong_arguments
from pivotal.core.models.world import given
from pivotal.core.task import Task
from pivotal.graphs import arun


class SchemaOnlyMinesweeper(Minesweeper):
    """Without the plausible-mistake hook, so the sim falls back to drawing from the schema."""

    wrong_action = None


register_environment("minesweeper-schema-only", SchemaOnlyMinesweeper)


def _board(**params) -> Minesweeper:
    env = make_environment("minesweeper")
    env.reset(Task(env="minesweeper", params=params))
    return env


def _mine(env: Minesweeper) -> dict:
    row, col = min(env.mines)
    return {"row": row, "col": col}


def test_a_seed_gives_the_same_board_and_another_seed_another():
    first, again, other = _board(seed=3), _board(seed=3), _board(seed=4)
    assert first.mines == again.mines and first.render("x") == again.render("x")
    assert first.mines != other.mines
    assert len(first.mines) == 5 and first.revealed and not first.revealed & first.mines


def test_the_oracle_is_sound_and_clears_every_board_that_needs_no_guess():
    """50 boards as seeded (guesses allowed): every cell the oracle proves safe is safe, every cell it
    proves a mine is one, and the expert alone clears each board on which it never had to guess.
    """
    cleared, needed_guess, failed_without_guess = 0, 0, []
    for seed in range(50):
        env, guessed = _board(seed=seed, guess_free=False), False
        while True:
            safe, mines = env._deduce()
            assert not safe & env.mines and mines <= env.mines
            guessed = guessed or not safe
            result = env.step(*env.expert_action())
            if result.done:
                break
        cleared += result.success
        needed_guess += guessed
        if not guessed and not result.success:
            failed_without_guess.append(seed)
    assert failed_without_guess == []
    assert needed_guess > 0  # the count is about something: some boards do need a guess
    assert cleared >= 50 - needed_guess
    print(f"oracle cleared {cleared}/50 seeded boards; {needed_guess} needed a guess")


@pytest.mark.parametrize("shape", [{}, {"rows": 8, "cols": 8, "mines": 10}])
def test_default_boards_are_guess_free_and_the_expert_clears_them(shape):
    for seed in range(10):
        env = _board(seed=seed, **shape)
        while not (result := env.step(*env.expert_action())).done:
            assert env._deduce()[0], f"seed {seed}: the oracle had to guess on a guess-free board"
        assert result.success, f"seed {seed}"


def test_revealing_a_mine_ends_the_attempt_as_failure_and_is_the_blamed_step():
    env = _board(seed=1)
    steps = [env.expert_action()]
    env.step(*steps[0])
    assert env.judge("reveal", _mine(env))[0] == "fatal"
    result = env.step("reveal", _mine(env))
    steps.append(("reveal", _mine(env)))
    assert result.done and not result.success and "a mine" in result.observation
    assert env.step(*steps[0]).done  # nothing more happens after the explosion
    index, reason = env.first_mistake(steps)
    assert index == 1 and "hits a mine" in reason
    assert env.last_recoverable(steps) == 1


def test_a_gamble_while_a_safe_cell_is_proven_is_poor():
    env = _board(seed=2)
    safe, _ = env._deduce()
    gambles = [c for c in env._hidden() if c not in safe and c not in env.mines]
    assert safe and gambles
    quality, reason = env.judge("reveal", {"row": gambles[0][0], "col": gambles[0][1]})
    assert quality == "poor" and "gamble" in reason and "certainly safe" in reason
    assert env.judge(*env.expert_action())[0] == "good"


def test_snapshot_restore_gives_back_the_same_future_in_a_fresh_environment():
    env = _board(seed=5)
    env.step(*env.expert_action())
    saved = env.snapshot()
    after = [env.step(*env.expert_action()).observation for _ in range(2)]
    fresh = _board(seed=5)  # another process: reset, then restore the checkpointed snapshot
    fresh.restore(saved)
    assert [fresh.step(*fresh.expert_action()).observation for _ in range(2)] == after
    assert fresh.state_key() == env.state_key()


def test_precheck_refuses_cells_off_the_board_and_revealed_ones_in_one_line():
    env = _board(seed=0)
    row, col = next(iter(env.revealed))
    off = check_action(env, "reveal", {"row": 6, "col": 0})
    again = check_action(env, "reveal", {"row": row, "col": col})
    assert off == "row 6, col 0 is outside the 6x6 board; rows run 0-5, cols 0-5"
    assert again == f"row {row}, col {col} is already revealed; pick a hidden cell (#)"
    assert "missing col" in check_action(env, "reveal", {"row": 1})
    assert check_action(env, "reveal", {"row": 6, "col": 0}).count("\n") == 0


def test_a_board_too_small_for_its_mines_is_one_line():
    with pytest.raises(PivotalError, match=r"30 mines do not fit a 6x6 board .* at most 27 \(--param mines=N\)"):
        _board(mines=30)


def test_situation_names_the_neighbourhood_without_coordinates():
    situation = _board(seed=0).situation()
    assert situation.startswith("last reveal shows ") and "row" not in situation
    assert all(f"{d}=" in situation for d in ("n", "ne", "e", "se", "s", "sw", "w", "nw"))


async def test_pivotal_retry_keeps_the_cleared_board_and_recovers():
    """Measured: with this sim seed and no retry, a wrong reveal hits a mine and the game is lost;
    the pivotal retry goes back to just before that reveal and clears the board with fewer
    executed steps than starting over.
    """
    task = {"env": "minesweeper", "params": {"seed": 1}}
    shape = dict(model="sim:error=0.3,seed=3", memory=False, max_steps=20, max_pivot_retries=2)
    none = await arun(task, Context(retry="none", **shape), checkpoint_path=":memory:")
    pivotal = await arun(task, Context(retry="pivotal", **shape), checkpoint_path=":memory:")
    full = await arun(task, Context(retry="full", **shape), checkpoint_path=":memory:")
    assert none.status == "failure" and "a mine" in none.reason
    assert pivotal.status == "success" and pivotal.retries["count"] >= 1
    assert pivotal.retries["kept_steps"] > 0
    assert pivotal.executed < full.executed


async def test_sim_errors_pick_wrong_cells_at_about_the_error_rate():
    """Through the graph: every proposal the critic or pre-check saw, against the expert's move in the
    state it was made in (replayed in a fresh board). Without retries no proposal is cut away.
    """
    wrong = total = 0
    for seed in range(8):
        task = {"env": "minesweeper", "params": {"seed": seed}}
        context = Context(model=f"sim:error=0.3,seed={seed}", retry="none", memory=False, max_steps=20)
        result = await arun(task, context, checkpoint_path=":memory:")
        board = _board(seed=seed)
        for step in result.trajectory:
            expert = board.expert_action()
            for verdict in step["verdicts"]:
                total += 1
                if (verdict["action"], verdict["arguments"]) != expert:
                    wrong += 1
                    assert verdict["action"] == "reveal"
                    cell = (verdict["arguments"]["row"], verdict["arguments"]["col"])
                    assert cell in board._hidden() and cell not in board._deduce()[0]
            board.step(step["action"], step["arguments"])
    assert total >= 60
    print(f"{wrong} of {total} proposals were wrong cells")
    assert 0.2 <= wrong / total <= 0.4, (wrong, total)


def test_without_the_hook_wrong_arguments_are_drawn_from_the_schema_within_bounds():
    live = open_live("minesweeper-schema-run", Task(env="minesweeper-schema-only", params={"seed": 0}))
    try:
        expert = live.env.expert_action()
        with given(live):
            picks = [_answer("actor", {}, random.Random(i), 0.3, {}) for i in range(400)]
    finally:
        release("minesweeper-schema-run")
    wrong = [p for p in picks if (p["action"], p["arguments"]) != expert]
    assert all(p["action"] == "reveal" for p in picks)
    assert all(0 <= p["arguments"]["row"] <= 5 and 0 <= p["arguments"]["col"] <= 5 for p in wrong)
    assert len({(p["arguments"]["row"], p["arguments"]["col"]) for p in wrong}) > 10
    assert 0.24 <= len(wrong) / len(picks) <= 0.36, len(wrong)


def test_wrong_arguments_follow_the_schema_and_differ_under_the_experts_own_action():
    schema = {
        "properties": {
            "colour": {"enum": ["red", "green", "blue"]},
            "loud": {"type": "boolean"},
            "text": {"type": "string"},
            "count": {"type": "integer"},
        },
        "required": ["colour", "text"],
    }
    expert = {"colour": "red", "text": "hello", "count": 3}
    same = [_wrong_arguments(schema, expert, random.Random(i), True) for i in range(200)]
    assert all(d != expert and set(d) == {"colour", "text", "count"} for d in same)  # optional `loud` not invented
    assert {d["colour"] for d in same} == {"red", "green", "blue"}
    assert all(-2 <= d["count"] <= 8 for d in same)
    assert any(d["text"] != "hello" for d in same)
    # under another action name a string keeps the expert's value: delete the path it should have written
    assert all(_wrong_arguments(schema, expert, random.Random(i), False)["text"] == "hello" for i in range(50))
