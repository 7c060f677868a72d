"""Human in the loop: `require_approval_for` pauses before execution with `interrupt()`."""

import pytest
from langchain_core.tools import tool

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.tools import ToolEnvironment
from pivotal.core.errors import PivotalError
from pivotal.graphs import aresume, arun
from pivotal.nodes.human_approval import read_reply

TASK = {"env": "gridworld", "params": {"seed": 1}}


@pytest.fixture
def every_move(tmp_path):
    return {
        "context": Context(model="sim", memory=False, require_approval_for=["*"]),
        "checkpoint_path": str(tmp_path / "cp.sqlite"),
    }


async def test_a_run_pauses_before_executing_and_an_approval_executes_it(every_move):
    paused = await arun(TASK, **every_move)
    assert paused.status == "interrupted" and paused.trajectory_length == 0  # nothing ran yet
    action = paused.interrupt["action"]
    assert action and "Approve this action?" in paused.interrupt["question"]

    after = await aresume(paused.thread_id, {"decision": "approve", "reason": "looks right"}, **every_move)
    assert after.status == "interrupted" and after.trajectory_length == 1
    step = after.trajectory[0]
    assert step["action"] == action and step["verdicts"][-1]["source"] == "human"
    assert after.critic["human_approved"] == 1


async def test_a_rejection_never_executes_and_sends_the_actor_back(every_move):
    paused = await arun(TASK, **every_move)
    after = await aresume(paused.thread_id, {"decision": "reject", "reason": "not that way"}, **every_move)
    assert after.status == "interrupted" and after.trajectory_length == 0
    assert after.critic["human_rejected"] == 1


async def test_max_human_rejections_bounds_a_persons_rejections_per_step(tmp_path):
    settings = {
        "context": Context(
            model="sim",
            memory=False,
            require_approval_for=["*"],
            max_critique_rounds=3,
            max_human_rejections=1,
            max_pivot_retries=0,
        ),
        "checkpoint_path": str(tmp_path / "cp.sqlite"),
    }
    paused = await arun(TASK, **settings)
    again = await aresume(paused.thread_id, {"decision": "reject"}, **settings)
    assert again.status == "interrupted"  # the first rejection sends the actor back
    done = await aresume(again.thread_id, {"decision": "reject"}, **settings)
    assert done.status == "failure" and done.trajectory_length == 0
    assert done.critic["human_rejected"] == 2 and "a person rejected 2 proposed actions" in done.reason


async def test_resuming_a_thread_that_is_not_paused_is_a_clear_error(every_move):
    with pytest.raises(PivotalError, match="not waiting for approval"):
        await aresume("no-such-thread", "approve", **every_move)


@tool
def archive() -> str:
    """Archive the old records (reversible)."""
    return "archived"


@tool
def purge() -> str:
    """Delete the archived records for good."""
    return "purged"


async def test_irreversible_mode_pauses_only_for_actions_the_environment_marks(tmp_path):
    register_environment(
        "records",
        lambda: ToolEnvironment(
            [archive, purge],
            lambda task, made: True if any(c["tool"] == "purge" for c in made) else None,
            intro="Clean up the records.",
            irreversible=["purge"],
        ),
    )
    options = {
        "context": Context(model="sim", memory=False, critic=False, require_approval_for=["irreversible"], max_steps=6),
        "checkpoint_path": str(tmp_path / "cp.sqlite"),
    }
    result = await arun({"goal": "clean up", "env": "records"}, **options)
    while result.status == "interrupted":
        assert result.interrupt["action"] == "purge"
        result = await aresume(result.thread_id, "approve", **options)
    assert result.status == "success" and result.trajectory[-1]["action"] == "purge"
    assert result.trajectory[-1]["verdicts"][-1]["source"] == "human" and result.critic["human_approved"] == 1
    assert all(step["verdicts"][-1]["source"] != "human" for step in result.trajectory if step["action"] == "archive")


@pytest.mark.parametrize(
    "reply,expected",
    [
        ("approve", "approve"),
        ({"decision": "Approve", "reason": "ok"}, "approve"),
        ("no", "reject"),
        ({"decision": "maybe"}, "reject"),
        (42, "reject"),
        ({}, "reject"),
    ],
)
def test_anything_but_a_clear_approval_is_a_rejection(reply, expected):
    assert read_reply(reply)[0] == expected
