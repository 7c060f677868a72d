"""An irreversible action runs once per run, and only on a review given in this branch of the thread.

Two rules, both deterministic, so no model's judgement can talk its way past them:

- the repeat rule (`repeat_reason`): an irreversible call that already ran in this run and was
  not compensated is not run again, whoever approves it. Two calls are the same when their
  arguments are (numbers compared as numbers), or, where the action declares `once_key`, when
  those arguments are. An action declared `repeatable`, or named in the task's `allow_repeat`,
  may repeat. The critic applies it before any model is asked; the executor applies it again.
- the review rule (`unreviewed`): the executor runs an irreversible call only with the approval the
  critic gave it in this branch, for exactly these arguments, with the person's approval where
  `require_approval_for` asks for one, and never with an approval an earlier execution spent. A
  fork or replay (`update_state(..., as_node="critic")`, Studio) skips the critic; what it hands
  the executor goes back to the critic instead.

What ran lives in the world, not in a branch: a fork at or before a refund starts from a state in
which the refund never happened, yet the money is gone. So for an environment whose world a fork
does not put back (`rewind` compensate or forward: tools), the executed history is every
checkpoint of the thread for this run, all branches; only an environment that restores its world
(`snapshot`, `replay`) is judged by its branch's own trajectory.
"""

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER
from langgraph.config import get_config

from pivotal.core.environments.base import ActionSpec, Environment, rewind_mode
from pivotal.core.state import Critique, Proposal, State, Step

Call = tuple[str, dict[str, Any]]


def repeat_reason(
    env: Environment,
    action: str,
    arguments: dict[str, Any],
    done: Iterable[Call],
    *,
    allow: Iterable[str] = (),
) -> str | None:
    """Why this call may not run (it repeats an executed, uncompensated irreversible call), or None.

    `done`: the executed, uncompensated (action, arguments) calls of this run (`executed_calls`);
    `allow`: action names the task lets repeat (`Task.allow_repeat`; "*" for all).
    """
    spec = _spec(env, action)
    allowed = set(allow)
    if spec is None or not spec.irreversible or spec.repeatable or action in allowed or "*" in allowed:
        return None
    key = _key(spec, arguments)
    if not any(name == action and _key(spec, given) == key for name, given in done):
        return None
    same = f"the same {', '.join(spec.once_key)}" if spec.once_key else "these arguments"
    return (
        f"{action} with {same} already ran in this run and was not undone; an irreversible action runs "
        "once: take it as done and propose the next step (a task may allow repeats: allow_repeat)"
    )


def irreversible(env: Environment, action: str | None) -> bool:
    spec = _spec(env, action or "")
    return spec is not None and spec.irreversible


def needs_person(wanted: Iterable[str], env: Environment, proposal: Proposal) -> bool:
    """Whether `require_approval_for` asks a person before this action runs."""
    wanted = set(wanted)
    action = proposal.get("action")
    return bool(wanted) and (
        "*" in wanted or action in wanted or ("irreversible" in wanted and irreversible(env, action))
    )


def unreviewed(chosen: Proposal, critiques: list[Critique], person: bool, spent: set[str]) -> str:
    """Why the chosen action lacks the review a first run gives it, or "" when it has it.

    `person`: a person's approval is needed too; `spent`: the reviews executed steps used up.
    """
    review = chosen.get("review")
    found = next((i for i, c in enumerate(critiques) if review and c.get("review") == review), None)
    if found is None:
        return "it was not reviewed in this branch"
    if not _same(critiques[found], chosen):
        return "it was edited after its review"
    if review in spent:
        return "its approval was used up by an earlier execution (a fork or replay)"
    if person and not any(
        c["source"] == "human" and c["decision"] == "approve" and _same(c, chosen) for c in critiques[found + 1 :]
    ):
        return "no person approved it"
    return ""


async def executed(env: Environment, state: State) -> tuple[list[Call], set[str]]:
    """The run's executed, uncompensated calls (the `done` of `repeat_reason`) and the reviews spent.

    Read from the thread's checkpoints, every branch, when a fork shares this environment's world;
    from this branch's trajectory when the environment puts its world back.
    """
    trajectories = [state.get("trajectory") or []]
    if rewind_mode(env) not in ("snapshot", "replay"):
        trajectories += await _thread_trajectories(state.get("run_id", ""))
    return executed_calls(trajectories), _spent(trajectories)


def executed_calls(trajectories: Iterable[list[Step]]) -> list[Call]:
    """Each executed step once (branches share their prefix), less those a compensating step undid."""
    calls: dict[str, Call] = {}
    undone: set[str] = set()
    for trajectory in trajectories:
        ids = {step["index"]: _step_id(step) for step in trajectory}
        for step in trajectory:
            if not step.get("error"):  # the tool raised: the world did not change
                calls.setdefault(ids[step["index"]], (step["action"], step.get("arguments") or {}))
            if (undid := step.get("compensates")) is not None and undid in ids:
                undone.add(ids[undid])
    return [call for ident, call in calls.items() if ident not in undone]


def _spent(trajectories: Iterable[list[Step]]) -> set[str]:
    return {step["review"] for trajectory in trajectories for step in trajectory if step.get("review")}


def _step_id(step: Step) -> str:
    """A step the same in every branch that shares it: its review, else the checkpoint it ran from."""
    return step.get("review") or f"{step.get('checkpoint_id')}:{step['index']}"


async def _thread_trajectories(run_id: str) -> list[list[Step]]:
    """The trajectory of every checkpoint of this thread (and namespace) that belongs to this run."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a graph: no thread to read
        return []
    saver, thread = configurable.get(CONFIG_KEY_CHECKPOINTER), configurable.get("thread_id")
    if saver is None or thread is None:
        return []
    # a node's own namespace is its graph's plus "|node:task" (where a subgraph of it would checkpoint)
    graph_ns = "|".join(str(configurable.get("checkpoint_ns", "")).split("|")[:-1])
    query = {"configurable": {"thread_id": thread, "checkpoint_ns": graph_ns}}
    try:
        values = [item.checkpoint["channel_values"] async for item in saver.alist(query)]
    except NotImplementedError:  # a synchronous saver (SqliteSaver)
        values = await asyncio.to_thread(lambda: [item.checkpoint["channel_values"] for item in saver.list(query)])
    return [v.get("trajectory") or [] for v in values if isinstance(v, Mapping) and v.get("run_id") == run_id]


def _spec(env: Environment, action: str) -> ActionSpec | None:
    return next((spec for spec in env.describe_actions() if spec.name == action), None)


def _same(critique: Critique, chosen: Proposal) -> bool:
    return critique.get("action") == chosen.get("action") and _canonical(critique.get("arguments") or {}) == _canonical(
        chosen.get("arguments") or {}
    )


def _key(spec: ActionSpec, arguments: dict[str, Any]) -> str:
    named = {name: arguments.get(name) for name in spec.once_key} if spec.once_key else arguments
    return _canonical(named)


def _canonical(value: Any) -> str:
    """One text per value: keys sorted, 20 and 20.0 alike (a model writes either)."""
    return json.dumps(_numbers(value), sort_keys=True, default=str)


def _numbers(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_numbers(v) for v in value]
    return value
