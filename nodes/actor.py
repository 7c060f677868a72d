"""Propose the next action."""

from langgraph.runtime import Runtime

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.environments.live import attach
from pivotal.core.models.roles import ask_role
from pivotal.core.schemas import NO_PROPOSAL, proposal_schema
from pivotal.core.secrets import redact
from pivotal.core.state import ActorUpdate, Critique, Proposal, Reflection, State, Step, task_of
from pivotal.memory.lesson import lessons_block
from pivotal.prompts import show


async def actor(state: State, runtime: Runtime[Context]) -> ActorUpdate:
    context = runtime.context
    task = task_of(state)
    live, replayed = await attach(state["run_id"], task, state["trajectory"], runtime.context.step_timeout)
    if state.get("compensations"):
        return _compensate(state["compensations"], replayed)
    reflections = state.get("reflections", [])
    specs = live.env.describe_actions()
    names = _still_open(
        [s.name for s in specs],
        state.get("critiques", []),
        _pivotal_mistakes(state["trajectory"], reflections),
    )
    schema = proposal_schema({s.name: s.parameters for s in specs if s.name in names})
    user = prompts.render(
        "actor",
        task=task.goal,
        actions=show.actions(specs),
        earlier_turns=show.earlier_turns(state.get("turns", [])),
        history=show.history(state["trajectory"]),
        repeats=show.repeats(state, loops=context.loop_detection != "off"),
        observation=state["observation"],
        lessons=lessons_block(state.get("lessons", [])),
        reflections=show.reflections(reflections),
        held_here=show.held(state, context.reuse_moves, context.retry),
        critiques=show.critiques(state.get("critiques", [])),
    )
    answer, updates = await ask_role(
        context,
        state,
        "actor",
        schema,
        system=prompts.system("step_system"),
        user=user,
        fallback=NO_PROPOSAL,
        metadata={"pivotal_named": [r.get("failed_path") or [] for r in reflections]} if reflections else None,
        world=live,
    )
    chosen = answer.value.chosen()
    proposal: Proposal = {
        "action": chosen["action"],
        "arguments": chosen["arguments"],
        "thought": chosen["thought"],
        "error": redact(answer.error) if answer.fallback else "",  # a provider's error can echo the key it was sent
    }
    updates["counters"]["replayed"] = replayed
    return {"proposal": proposal, **updates}


def _compensate(queue: list[Proposal], replayed: int) -> ActorUpdate:
    """A pivot's undo actions come first, without an LLM call; the critic still reviews each."""
    proposal: Proposal = {**queue[0], "error": ""}
    return {"proposal": proposal, "compensations": queue[1:], "counters": {"replayed": replayed}}


def _still_open(names: list[str], critiques: list[Critique], mistakes: set[str]) -> list[str]:
    """Drop argument-free actions already ruled out here from the schema's choices.

    Ruled out: rejected for this step, or the action a reflection named as the pivotal
    mistake from this very state. Small models re-propose the same action even after reading
    why it was wrong (greedy decoding makes a retry repeat the failed attempt); taking it out
    of the JSON-schema enum makes them pick something else.
    """
    rejected = {c["action"] for c in critiques if c["decision"] == "reject" and not c.get("arguments")}
    return [name for name in names if name not in rejected | mistakes] or names


def _pivotal_mistakes(trajectory: list[Step], reflections: list[Reflection]) -> set[str]:
    """Argument-free actions that were the pivotal mistake after exactly the current path."""
    path = [[step["action"], step["arguments"]] for step in trajectory]
    mistakes = set()
    for reflection in reflections:
        failed = reflection.get("failed_path") or []
        if len(failed) == len(path) + 1 and failed[:-1] == path and not failed[-1][1]:
            mistakes.add(failed[-1][0])
    return mistakes
