"""Run the chosen action in the environment and record the step.

An irreversible action runs only on a review given in this branch for exactly these arguments
(and a person's approval where one is required), which no earlier execution used up, and never as
a repeat of one that already ran (`pivotal.core.environments.once`). A fork or replay that hands
the executor such an action without that review (`update_state(..., as_node="critic")`, Studio)
has it sent back to the critic: the review a first run needs, never a second execution.

A replay or fork that reaches a step this run already executed, with the same call, takes that
step as done with its recorded result (`executed_step`): time travel re-runs the nodes, not the tools.
"""

import json
from typing import Any, cast

from langgraph.config import get_config
from langgraph.runtime import Runtime

from pivotal.core.context import Context
from pivotal.core.environments import Environment, StepResult
from pivotal.core.environments.base import GOAL_STEPS
from pivotal.core.environments.live import attach, in_env_thread, run_step
from pivotal.core.environments.once import (
    executed,
    executed_step,
    forget_started,
    irreversible,
    needs_person,
    note_started,
    reapproved,
    repeat_reason,
    step_key,
    unreviewed,
)
from pivotal.core.logs import logger
from pivotal.core.state import (
    Critique,
    ExecutorUpdate,
    Proposal,
    State,
    Step,
    same_call,
    state_before,
    task_of,
    turn_counts,
)
from pivotal.core.task import Task
from pivotal.prompts import SEE_MORE, clip


async def executor(state: State, runtime: Runtime[Context]) -> ExecutorUpdate:
    context = runtime.context
    task = task_of(state)
    live, replayed = await attach(state["run_id"], task, state["trajectory"], context.step_timeout)
    chosen = state["chosen"] or {}
    key = step_key(state)
    earlier = await executed_step(live.env, state, key, chosen)
    if earlier is not None:
        result, snapshot = _as_done(state, earlier)
    elif irreversible(live.env, chosen.get("action")) and (why := await _not_cleared(state, context, task, live.env)):
        return _send_back(state, chosen, why)
    else:
        what = f"{task.env}: step {chosen['action']}"
        noted = irreversible(live.env, chosen.get("action"))
        if noted:  # a run cancelled during the tool leaves this note, and no checkpoint (core/environments/once.py)
            await note_started(key, chosen["action"], chosen.get("arguments") or {})
        result, snapshot = await in_env_thread(
            run_step,
            live,
            chosen["action"],
            chosen.get("arguments") or {},
            key,
            timeout=context.step_timeout,
            what=what,
        )
        if noted and result.info.get("error"):
            await forget_started(key)
    observation = clip(result.observation, context.max_observation_chars, hint=SEE_MORE)  # run_step redacted it
    step: Step = {
        "index": len(state["trajectory"]),
        "action": chosen["action"],
        "arguments": chosen.get("arguments") or {},
        "thought": chosen.get("thought", ""),
        "verdicts": [_kept(c) for c in state.get("critiques", [])],
        "observation": observation,
        "done": result.done,
        "success": result.success,
        "snapshot": snapshot,
        "checkpoint_id": _checkpoint_id(),
        "lessons": [lesson["id"] for lesson in state.get("lessons", [])],
        "error": bool(result.info.get("error")),
        "compensates": chosen.get("compensates"),
        "review": chosen.get("review", ""),
        "key": key,
    }
    step["state"] = result.info.get("state")
    if GOAL_STEPS in result.info:
        step["goal_steps_left"] = result.info[GOAL_STEPS]
    step["revisit_of"] = _revisit(state, step)
    step["no_op"], step["repeat_of"] = not result.done and _no_op(state, step), _repeat_of(state, step)
    trajectory = [*state["trajectory"], step]
    attempt_steps = len(trajectory) - state.get("attempt_start", 0)
    update: ExecutorUpdate = {
        "trajectory": trajectory,
        "observation": observation,
        "proposal": None,
        "chosen": None,
        "critiques": [],
        "counters": {
            "executed": int(earlier is None),
            "reused": int(earlier is not None),
            "replayed": replayed,
            "revisits": int(step["revisit_of"] is not None),
            "no_ops": int(step["no_op"]),
        },
    }
    if "answer" in result.info:
        update["answer"] = str(result.info["answer"])
    if result.success:
        verified = result.info.get("verified", True) is not False
        said = f"goal reached in {len(trajectory)} steps"
        said = said if verified else f"the agent answered after {len(trajectory)} steps (not verified)"
        update.update({"status": "success", "verified": verified, "reason": said})
    elif result.done:
        update["attempt_failed"] = f"the environment ended the task at step {step['index']}: {_first_line(observation)}"
    elif why := context.budget_spent(attempt_steps, _executed(state) + 1):
        update["attempt_failed"] = why
    elif why := _out_of_reach(context, result.info, attempt_steps, _executed(state) + 1):
        update["attempt_failed"] = why
    elif context.loop_detection == "end" and (circle := _circling(trajectory[state.get("attempt_start", 0) :])):
        update["attempt_failed"] = (
            f"going in circles: steps {', '.join(map(str, circle))} each returned to the same state"
        )
    return update


def _as_done(state: State, earlier: Step) -> tuple[StepResult, dict[str, Any] | None]:
    """A replay's or fork's step that already ran in the world: its recorded result, no tool run."""
    logger().info("step_reused", run_id=state.get("run_id"), action=earlier["action"], index=earlier["index"])
    info = {"state": earlier.get("state"), **({"error": True} if earlier.get("error") else {})}
    if "goal_steps_left" in earlier:
        info[GOAL_STEPS] = earlier["goal_steps_left"]  # so the replay ends the attempt where the run did
    result = StepResult(
        earlier.get("observation", ""), done=bool(earlier.get("done")), success=bool(earlier.get("success")), info=info
    )
    return result, earlier.get("snapshot")  # a step that ended the task ends it again, as it did


async def _not_cleared(state: State, context: Context, task: Task, env: Environment) -> str:
    """Why the chosen irreversible action may not run now, or "" when it may."""
    chosen = state["chosen"] or {}
    done, spent = await executed(env, state)
    person = needs_person(context.require_approval_for, env, chosen)
    critiques = state.get("critiques", [])
    if why := unreviewed(chosen, critiques, person, spent):
        return why
    if reapproved(chosen, critiques):
        return ""
    return repeat_reason(env, chosen["action"], chosen.get("arguments") or {}, done, allow=task.allow_repeat) or ""


def _send_back(state: State, chosen: Proposal, why: str) -> ExecutorUpdate:
    """To the critic (graphs/routes.py), as the proposal of this step: reviewed like a first run's."""
    proposal: Proposal = {
        "action": chosen["action"],
        "arguments": chosen.get("arguments") or {},
        "thought": chosen.get("thought", ""),
        "compensates": chosen.get("compensates"),
    }
    note: Critique = {
        **proposal,
        "decision": "revise",
        "confidence": 1.0,
        "diagnosis": f"not executed, sent back for review: {why}",
        "revision": "review it as a new proposal",
        "source": "guard",
    }
    logger().info("sent_back", run_id=state.get("run_id"), action=chosen["action"], why=why)
    return {"proposal": proposal, "chosen": None, "critiques": [note], "counters": {"sent_back": 1}}


def _executed(state: State) -> int:
    """This turn's executed steps: the thread's counters add up over its turns."""
    return int(turn_counts(state).get("executed", 0))


def _out_of_reach(context: Context, info: dict[str, Any], attempt_steps: int, executed: int) -> str:
    """Why this attempt cannot succeed any more, or "": the environment says the goal is out of reach
    from here, or needs more steps than the attempt's budget has left (`steps_to_goal`, a lower
    bound). The only certain way an attempt goes nowhere: its steps are saved for the retry, and no
    success is lost. Off with loop detection; environments that cannot say are never ended here.
    """
    if context.loop_detection == "off" or GOAL_STEPS not in info:
        return ""
    left = info[GOAL_STEPS]
    if left is None:
        return "the goal is out of reach from here (by steps_to_goal)"
    room = context.steps_left(attempt_steps, executed)
    if left <= room:
        return ""
    return f"the goal needs at least {left} more steps and this attempt has {room} left (by steps_to_goal)"


LOOP_LIMIT = 2
"""Returns to one state that end an attempt under `loop_detection="end"`. Not the default: an agent
that oscillates may still find the way within its budget, and ending it there cost pivotal retry a
tenth of its successes (issue 32); the default only warns (`pivotal.prompts.show.loops_here`)."""


def _revisit(state: State, step: Step) -> int | None:
    """The earlier step of this attempt after which the world was exactly as it is now (-1: as at
    the start), or None. Known only where the environment can say what its state is (`state_of`).
    """
    if step.get("state") is None:
        return None
    start = state.get("attempt_start", 0)
    earlier = [(-1, state.get("initial_state"))] if start == 0 else []
    earlier += [(s["index"], s.get("state")) for s in state["trajectory"][start:]]
    if earlier and earlier[-1][1] == step["state"]:
        return None  # nothing changed (a bump into a wall): the observation says so, it is no circle
    return next((index for index, seen in reversed(earlier) if seen == step["state"]), None)


def _no_op(state: State, step: Step) -> bool:
    """Whether the step changed nothing: the world's state as before it; for an environment that
    reports no state, the same call saw the same observation earlier in this attempt. A step that
    ended the task changed that (a snapshot need not say so).
    """
    if step.get("state") is not None:
        return step["state"] == state_before(state, step["index"])
    return _repeat_of(state, step) is not None


def _repeat_of(state: State, step: Step) -> int | None:
    """The first earlier step of this attempt that made this call from the state this one started in
    (without states: that made this call and saw what this one saw).
    """
    here = state_before(state, step["index"])
    for earlier in state["trajectory"][state.get("attempt_start", 0) :]:
        if not same_call(earlier, step):
            continue
        if here is None and step.get("state") is None and earlier["observation"] == step["observation"]:
            return earlier["index"]
        if here is not None and state_before(state, earlier["index"]) == here:
            return earlier["index"]
    return None


def _circling(attempt: list[Step]) -> list[int] | None:
    """The steps that returned to one state, once there have been LOOP_LIMIT returns to it."""
    returns: dict[str, list[int]] = {}
    for step in attempt:
        if step.get("revisit_of") is not None:
            seen = returns.setdefault(json.dumps(step["state"], sort_keys=True, default=str), [])
            seen.append(step["index"])
            if len(seen) >= LOOP_LIMIT:
                return seen
    return None


VERDICT_KEYS = ("action", "arguments", "decision", "confidence", "diagnosis", "source")
"""What a step keeps of each verdict on it: what was judged and how, not the advice."""


def _kept(critique: Critique) -> Critique:
    """Every key present (None where the verdict had none, e.g. an empty actor reply's action)."""
    return cast(Critique, {key: critique.get(key) for key in VERDICT_KEYS})


def _checkpoint_id() -> str | None:
    """The checkpoint this node started from: forking from it re-decides this step."""
    try:
        return get_config()["configurable"].get("checkpoint_map", {}).get("")
    except RuntimeError:
        return None


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0][:200]
