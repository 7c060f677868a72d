"""Propose the next action."""

from typing import Any

from langgraph.runtime import Runtime

import prompts
from pivotal import prompt_data as show
from pivotal.context import Context
from pivotal.environments.live import attach
from pivotal.models.roles import ask_role
from pivotal.schemas import Proposal, proposal_schema
from pivotal.state import State
from pivotal.task import Task


async def actor(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    task = Task.model_validate(state["task"])
    live, replayed = await attach(state["run_id"], task, state["trajectory"])
    specs = live.env.describe_actions()
    names = _still_open([s.name for s in specs], state.get("critiques", []))
    schema = proposal_schema(names, any(s.parameters.get("properties") for s in specs))
    user = prompts.render(
        "actor", task=task.goal, actions=show.actions(specs), history=show.history(state["trajectory"]),
        observation=state["observation"], lessons=show.lessons(state.get("lessons", [])),
        reflections=show.reflections(state.get("reflections", [])),
        critiques=show.critiques(state.get("critiques", [])))
    answer, updates = await ask_role(
        context, state, "actor", schema, system=prompts.render("actor_system", data_rule=prompts.template("data_rule")),
        user=user, fallback=Proposal.model_construct(action="", arguments={}, thought=""))
    proposal = {"action": answer.value.action, "arguments": dict(answer.value.arguments or {}),
                "thought": answer.value.thought, "error": answer.error if answer.fallback else ""}
    updates["counters"]["replayed"] = replayed
    return {"proposal": proposal, **updates}


def _still_open(names: list[str], critiques: list[dict[str, Any]]) -> list[str]:
    """Drop argument-free actions already rejected for this step from the schema's choices.

    Small models re-propose the same action even after reading the rejection; taking it
    out of the JSON-schema enum makes the re-proposal pick something else.
    """
    rejected = {c["action"] for c in critiques if c["decision"] == "reject" and not c.get("arguments")}
    return [name for name in names if name not in rejected] or names
