"""Loop detection (issue 32): steps that change nothing and calls repeated from one state are counted
and named to the actor and critic; only a certain no-op is sent back (while the step has bounces
left), and no loop ends an attempt; one the environment says can no longer reach the goal ends at once.
"""

from typing import Any

import pytest
from structlog.testing import capture_logs

from pivotal import Context
from pivotal.core.environments import ActionSpec, StepResult, register_environment
from pivotal.graphs import arun
from pivotal.graphs.builder import build_graph
from pivotal.graphs.checkpointer import open_checkpointer
from pivotal.testing.scripted import ScriptedChatModel


class DarkRoom:
    """`look` changes nothing, `light` lights the lamp, `leave` wins once it is lit; deterministic
    (snapshot/restore), and every executed call is logged.
    """

    log: list[str] = []

    def reset(self, task: Any) -> str:
        self.lit = False
        return "A dark room."

    def describe_actions(self) -> list[ActionSpec]:
        place = {"type": "object", "properties": {"place": {"type": "string"}}, "required": ["place"]}
        return [
            ActionSpec("look", "look around"),
            ActionSpec("light", "light the lamp"),
            ActionSpec("leave", "go"),
            ActionSpec("search", "search a place", place),
        ]

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        DarkRoom.log.append(name)
        if name == "light":
            self.lit = True
            return StepResult("The lamp is lit.")
        if name == "leave" and self.lit:
            return StepResult("You are out.", done=True, success=True)
        return StepResult("It is too dark to see anything.")

    def snapshot(self) -> dict[str, Any]:
        return {"lit": self.lit}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.lit = bool(snapshot["lit"])


class Corridor:
    """Cells 0..3, start at 1, the goal at 3; 0 is a dead end, so getting out of it means going back
    through a state already visited.
    """

    def reset(self, task: Any) -> str:
        self.at = 1
        return "You are at 1."

    def describe_actions(self) -> list[ActionSpec]:
        return [ActionSpec("left", "one cell left"), ActionSpec("right", "one cell right")]

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        self.at = max(0, self.at + (1 if name == "right" else -1))
        return StepResult(f"You are at {self.at}.", done=self.at == 3, success=self.at == 3)

    def snapshot(self) -> dict[str, Any]:
        return {"at": self.at}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.at = int(snapshot["at"])


register_environment("dark-room", DarkRoom)
register_environment("corridor", Corridor)


def _actor(*actions: str) -> ScriptedChatModel:
    return ScriptedChatModel(script={"Proposal": [{"action": name, "thought": ""} for name in actions]})


def _context(model: ScriptedChatModel, **changes: Any) -> Context:
    fields: dict[str, Any] = {"critic": False, "memory": False, "max_pivot_retries": 0, "max_steps": 8, **changes}
    return Context(model=model, **fields)


def _actor_prompts(model: ScriptedChatModel) -> list[str]:
    return [str(messages[-1].content) for messages in model.prompts["Proposal"]]


async def test_a_no_op_is_counted_named_to_the_actor_and_not_run_again():
    DarkRoom.log = []
    model = _actor("look", "look", "light", "leave")
    result = await arun({"env": "dark-room", "goal": "Get out."}, _context(model), checkpoint_path=":memory:")

    assert result.status == "success"
    assert DarkRoom.log == ["look", "light", "leave"]  # the second look was sent back, not run
    assert result.no_ops == 1 and result.trajectory[0]["no_op"] is True
    assert result.critic["prechecked"] == 1 and result.repeats == 1
    second = _actor_prompts(model)[1]
    assert "step 0 `look` changed nothing" in second
    bounce = result.trajectory[1]["verdicts"][0]
    assert bounce["source"] == "precheck" and "changed nothing from this same state" in bounce["diagnosis"]


async def test_off_shows_no_warning_and_sends_nothing_back():
    DarkRoom.log = []
    model = _actor("look", "look", "light", "leave")
    context = _context(model, loop_detection="off")
    result = await arun({"env": "dark-room", "goal": "Get out."}, context, checkpoint_path=":memory:")

    assert DarkRoom.log == ["look", "look", "light", "leave"]
    assert result.no_ops == 2 and result.critic["prechecked"] == 0  # still counted
    assert not any("changed nothing" in prompt for prompt in _actor_prompts(model))


async def test_a_way_back_through_visited_states_is_warned_of_never_ended_or_sent_back():
    """Out of the dead end only through cell 1 again: the old rule ended this attempt at the second
    return; now each return is a line in the prompt and the agent gets out.
    """
    model = _actor("left", "right", "left", "right", "right", "right")
    result = await arun({"env": "corridor", "goal": "Reach 3."}, _context(model), checkpoint_path=":memory:")

    assert result.status == "success"
    assert [s["action"] for s in result.trajectory] == ["left", "right", "left", "right", "right", "right"]
    assert result.revisits == 3 and result.critic["prechecked"] == 0
    assert "step 1 `right` led back to where you started" in _actor_prompts(model)[3]  # at 0 again

    ended = await arun(
        {"env": "corridor", "goal": "Reach 3."},
        _context(_actor("left", "right", "left", "right", "right", "right"), loop_detection="end"),
        checkpoint_path=":memory:",
    )
    assert ended.status == "failure" and ended.reason.startswith("going in circles")


async def test_a_no_op_is_sent_back_only_while_bounces_are_left_and_never_ends_the_attempt():
    """An actor that proposes nothing but the call that changed nothing: each step sends it back as
    often as the pre-check may, then lets it through, so the step budget ends the attempt, never loop
    detection (its send-backs ending attempts as stuck measured costing success).
    """
    DarkRoom.log = []
    search = {"call": {"action": "search", "arguments": {"place": "floor"}}, "thought": ""}
    model = ScriptedChatModel(script={"Proposal": [search]})  # repeated: a scripted role repeats its last reply
    context = _context(model, max_precheck_bounces=2)
    result = await arun({"env": "dark-room", "goal": "Get out."}, context, checkpoint_path=":memory:")

    assert DarkRoom.log == ["search"] * 8
    assert result.status == "failure" and "step budget of 8 spent" in result.reason
    bounces = [sum(v["source"] == "precheck" for v in step["verdicts"]) for step in result.trajectory]
    assert bounces == [0] + [2] * 7


class Echo:
    """A world that reports no state (no snapshot, no state_key): a no-op is the same call seeing the same."""

    log: list[str] = []

    def reset(self, task: Any) -> str:
        return "A cave."

    def describe_actions(self) -> list[ActionSpec]:
        return [ActionSpec("shout", "shout"), ActionSpec("leave", "go")]

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        Echo.log.append(name)
        return StepResult("Out.", done=True, success=True) if name == "leave" else StepResult("Echo.")


register_environment("echo-cave", Echo)


async def test_without_states_a_same_call_seeing_the_same_is_a_no_op_named_but_not_sent_back():
    """Not knowing the world's state, the repeat is not certain to change nothing: only a warning."""
    Echo.log = []
    model = _actor("shout", "shout", "shout", "leave")
    result = await arun({"env": "echo-cave", "goal": "Get out."}, _context(model), checkpoint_path=":memory:")

    assert Echo.log == ["shout", "shout", "shout", "leave"] and result.critic["prechecked"] == 0
    assert result.no_ops == 2 and result.repeats == 0  # repeats need a known state across steps
    assert "step 2 `shout` changed nothing; it was also step 1" in _actor_prompts(model)[3]


class Well:
    """Three `walk`s reach the exit; `drop` loses the lamp down the well, after which the exit can
    never be reached, yet the game goes on (as in a text adventure). Knows the steps left.
    """

    log: list[str] = []
    broken = ""

    def reset(self, task: Any) -> str:
        self.walked, self.lost = 0, False
        return "At the well."

    def describe_actions(self) -> list[ActionSpec]:
        return [ActionSpec("walk", "walk on"), ActionSpec("drop", "drop the lamp"), ActionSpec("wait", "wait")]

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        Well.log.append(name)
        self.lost = self.lost or name == "drop"
        self.walked += name == "walk"
        won = self.walked >= 3 and not self.lost
        return StepResult("Out." if won else "Dark corridor.", done=won, success=won)

    def steps_to_goal(self, actions: list[tuple[str, dict[str, Any]]]) -> int | None:
        if Well.broken == "raises":
            raise ValueError("no map")
        if Well.broken == "words":
            return "far"  # type: ignore[return-value]  (an app's hook returning what is not a number)
        names = [name for name, _ in actions]
        return None if "drop" in names else max(3 - names.count("walk"), 0)


register_environment("well", Well)


async def _escape(*actions: str, **changes: Any):
    Well.log = []
    return await arun(
        {"env": "well", "goal": "Get out."}, _context(_actor(*actions), **changes), checkpoint_path=":memory:"
    )


async def test_an_attempt_the_environment_says_cannot_reach_the_goal_ends_at_once():
    """After `drop` the goal is out of reach: the attempt ends there, the rest of its budget unspent;
    with loop detection off it walks on to the end of its budget.
    """
    result = await _escape("walk", "drop", "walk")
    assert Well.log == ["walk", "drop"]
    assert result.status == "failure" and result.reason == "the goal is out of reach from here (by steps_to_goal)"

    walked_on = await _escape("walk", "drop", "walk", loop_detection="off")
    assert len(Well.log) == 8 and "step budget of 8 spent" in walked_on.reason


async def test_an_attempt_ends_once_the_goal_needs_more_steps_than_its_budget_has_left():
    """Three walks needed, four steps of budget: one wait still fits, the second does not."""
    result = await _escape("wait", "wait", "walk", "walk", "walk", max_steps=4, precheck=False)
    assert Well.log == ["wait", "wait"]
    assert result.reason == "the goal needs at least 3 more steps and this attempt has 2 left (by steps_to_goal)"

    fits = await _escape("wait", "walk", "walk", "walk", max_steps=4)
    assert fits.status == "success" and Well.log == ["wait", "walk", "walk", "walk"]


@pytest.mark.parametrize(("broken", "error"), [("raises", "ValueError: no map"), ("words", "ValueError: invalid")])
async def test_a_steps_to_goal_that_fails_is_logged_once_and_the_run_goes_on(broken, error):
    Well.broken = broken
    try:
        with capture_logs() as logs:
            result = await _escape("walk", "drop", "walk")
    finally:
        Well.broken = ""
    assert len(Well.log) == 8 and "step budget of 8 spent" in result.reason
    failed = [entry for entry in logs if entry["event"] == "steps_to_goal_failed"]
    assert len(failed) == 1 and failed[0]["error"].startswith(error)  # once, not at every step


async def test_a_replay_ends_the_attempt_where_the_run_did_without_running_the_step_again(tmp_path):
    """Time travel re-runs the nodes after a checkpoint; the executor takes `drop` as done from its
    record, and the record's steps-to-goal ends the attempt there again, as in the first run.
    """
    path = str(tmp_path / "runs.sqlite")
    context = _context(_actor("walk", "drop", "walk"))
    Well.log = []
    first = await arun({"env": "well", "goal": "Get out."}, context, checkpoint_path=path)
    assert Well.log == ["walk", "drop"] and first.trajectory[1]["goal_steps_left"] is None
    config = {"configurable": {"thread_id": first.thread_id}}
    async with open_checkpointer(path) as saver:
        graph = build_graph(checkpointer=saver)
        history = [snapshot async for snapshot in graph.aget_state_history(config)]
        [before_drop] = [s for s in history if s.next == ("executor",) and len(s.values["trajectory"]) == 1]
        replayed = await graph.ainvoke(None, before_drop.config, context=_context(_actor("walk")))
    assert Well.log == ["walk", "drop"]  # nothing ran again
    assert len(replayed["trajectory"]) == 2 and replayed["reason"] == first.reason
