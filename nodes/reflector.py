"""After a failed attempt: find the pivotal step (observer's view) and decide whether to retry.

An attempt that failed before acting (no proposal for the current step got past the pre-check and
critic, or the critic rejected the agent's own final answer) is put to the reflector too when no
verifier checks the environment's outcome: there the steps that led up to it are the likely mistake,
and the reflector's diagnosis and advice are what the retry has to go on. It may name the step that
was turned down (numbered after the executed ones) as the pivotal one. With a verifier such an
attempt keeps its plain reflection at the current step, as no executed step was wrong.
"""

import json
from typing import Any, cast

from langgraph.runtime import Runtime

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.environments.base import Environment
from pivotal.core.environments.live import attach
from pivotal.core.models.roles import ask_role
from pivotal.core.schemas import ReflectionReply, reflection_schema
from pivotal.core.state import (
    Candidate,
    Reflection,
    ReflectorUpdate,
    State,
    same_call,
    state_before,
    task_of,
    turn_counts,
)
from pivotal.memory.lesson import provenance
from pivotal.prompts import show


async def reflector(state: State, runtime: Runtime[Context]) -> ReflectorUpdate:
    context = runtime.context
    will_retry = context.retry != "none" and state.get("retries", 0) < context.max_pivot_retries
    will_retry = will_retry and not _total_spent(state, context)
    if not will_retry and not context.memory:
        return _give_up(state)  # a reflection would feed neither a retry nor a lesson
    task = task_of(state)
    live, replayed = await attach(state["run_id"], task, state["trajectory"], runtime.context.step_timeout)
    stuck = bool(state.get("stuck"))
    if stuck and not _answers_itself(live.env):
        return _stuck(state, context) if will_retry else {**_stuck(state, context), **_give_up(state)}
    trajectory = state["trajectory"]
    user = prompts.render(
        "reflector",
        task=task.goal,
        outcome=state["attempt_failed"],
        steps=show.steps(trajectory, context.max_observation_chars),
        turned_down=show.turned_down(len(trajectory), state.get("critiques", [])) if stuck else "",
        observation=show.final_observation(trajectory, state["observation"], context.max_observation_chars),
        reflections=show.reflections(state.get("reflections", [])),
    )
    last = len(trajectory) if stuck else max(len(trajectory) - 1, 0)
    fallback = ReflectionReply(
        pivotal_step=last,
        no_return_step=last,
        error_type="unknown",
        diagnosis="the reflector gave no valid reflection",
        advice="try a different action",
    )
    schema = reflection_schema(len(trajectory) + int(stuck))  # a turned-down step can be the pivotal one
    answer, updates = await ask_role(
        context,
        state,
        "reflector",
        schema,
        user=user,
        fallback=fallback,
        system=prompts.system("reflector_system"),
        world=live,
    )
    reflection = answer.value.model_dump()
    reflection.update(
        attempt=state.get("retries", 0),
        failure=state["attempt_failed"],
        failed_path=[[s["action"], s["arguments"]] for s in trajectory[: reflection["pivotal_step"] + 1]],
        attempt_path=[[s["action"], s["arguments"]] for s in trajectory],
        **_held(state, context),
    )
    drafts = reflection.pop("lesson_candidates")
    verified = state.get("verified", True)
    record = provenance.run_record(state, task.goal)
    candidates = [
        {
            **c,
            "outcome": "failure",
            "level": "step",
            "verified": verified,
            **provenance.traced(
                c, outcome="failure", verified=verified, failed_at=reflection["pivotal_step"], **record
            ),
        }
        for c in drafts
    ]
    candidates = candidates if context.memory else []
    updates["counters"]["replayed"] = replayed
    result: ReflectorUpdate = {
        "reflections": [*state.get("reflections", []), cast(Reflection, reflection)],
        "candidates": [*state.get("candidates", []), *cast(list[Candidate], candidates)],
        **updates,
    }
    return result if will_retry else {**result, **_give_up(state)}


def _held(state: State, context: Context) -> dict[str, Any]:
    """The reflection's `held_moves` where a retry may be shown them (`Context.reuse_moves`), else none:
    reflections and checkpoints stay as they were with it off.
    """
    return {} if context.reuse_moves == "off" else {"held_moves": moves_that_held(state)}


def moves_that_held(state: State) -> list[list[Any]]:
    """The attempt's steps its own record vouches for, as [index, state before, action, arguments]: the
    world changed (not a no-op, no tool error) and the step did not end the attempt, the critic approved
    the call where it judged it, the attempt never came back to the state the step left (a loop
    through it) and the step did not lead back to a state it had been in. No distance to the goal is
    read: an application's tools know none. A retry that stands in one of these states again is shown
    the move (`Context.reuse_moves`), so it needs fewer fresh decisions on ground the run covered.
    """
    trajectory = state["trajectory"]
    before = [state_before(state, step["index"]) for step in trajectory]
    held = []
    for n, step in enumerate(trajectory):
        here = before[n]
        if here is None or step.get("no_op") or step.get("error") or step.get("done"):
            continue
        if any(_same(later, here) for later in (s.get("state") for s in trajectory[n:])):
            continue  # the attempt came back to where this step left from: the step led nowhere for good
        if any(_same(step.get("state"), earlier) for earlier in before[: n + 1]):
            continue  # it led back to where the attempt had been: a loop's last step
        judged = [v for v in step.get("verdicts") or [] if v.get("source") in ("critic", "critic-advisory")]
        ran = [v for v in judged if same_call(v, step)]
        if ran and ran[-1].get("decision") != "approve":
            continue
        held.append([step["index"], here, step["action"], step.get("arguments") or {}])
    return held


def _same(one: Any, other: Any) -> bool:
    return json.dumps(one, sort_keys=True, default=str) == json.dumps(other, sort_keys=True, default=str)


def _total_spent(state: State, context: Context) -> bool:
    """The run's shared step total (budget "fair") is used up: a retry could not execute a step."""
    total = context.total_steps()
    return total is not None and int(turn_counts(state).get("executed", 0)) >= total


def _answers_itself(env: Environment) -> bool:
    """No verifier decides the outcome: the agent ends the task with its own answer (`finish`)."""
    return any(getattr(spec, "final", False) for spec in env.describe_actions())


def _stuck(state: State, context: Context) -> ReflectorUpdate:
    """No proposal for the current step got past the pre-check and critic: that is the failure, and
    with a verifier no executed step caused it, so the pivot is this step (everything done so far is
    kept) and no model is asked to blame a step that was fine.
    """
    here = len(state["trajectory"])
    reflection: Reflection = {
        "pivotal_step": here,
        "no_return_step": here,
        "error_type": "no_acceptable_action",
        "diagnosis": state["attempt_failed"],
        "advice": f"At step {here}, propose an action the pre-check and critic accept.",
        "attempt": state.get("retries", 0),
        "failure": state["attempt_failed"],
        "failed_path": [[s["action"], s["arguments"]] for s in state["trajectory"]],
        "attempt_path": [[s["action"], s["arguments"]] for s in state["trajectory"]],
    }
    if context.reuse_moves != "off":
        reflection["held_moves"] = moves_that_held(state)
    return {"reflections": [*state.get("reflections", []), reflection]}


def _give_up(state: State) -> ReflectorUpdate:
    return {"status": "failure", "reason": state["attempt_failed"]}
