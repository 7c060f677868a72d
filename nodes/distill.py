"""Collect lesson candidates from the finished run: skills from a success, guardrails from reflections."""

from typing import cast

from langgraph.runtime import Runtime

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.environments.live import lookup
from pivotal.core.models.roles import ask_role
from pivotal.core.schemas import LessonDrafts
from pivotal.core.state import Candidate, LessonUpdate, State, task_of
from pivotal.memory.lesson import provenance
from pivotal.prompts import show


async def distill(state: State, runtime: Runtime[Context]) -> LessonUpdate:
    context = runtime.context
    if not context.memory or state.get("status") != "success":
        return {}  # failure candidates already came from the reflector
    task = task_of(state)
    user = prompts.render(
        "distiller",
        task=task.goal,
        outcome=f"success: {state.get('reason', '')}",
        steps=show.steps(state["trajectory"], context.max_observation_chars),
        reflections=show.reflections(state.get("reflections", [])),
    )
    answer, updates = await ask_role(
        context,
        state,
        "distiller",
        LessonDrafts,
        user=user,
        fallback=LessonDrafts(),
        system=prompts.system("distiller_system"),
        metadata={"pivotal_outcome": "success"},
        world=lookup(state["run_id"]),
    )
    verified = state.get("verified", True)
    drafts = [
        {
            **lesson.model_dump(),
            "outcome": "success",
            "level": "task",
            "verified": verified,
            **provenance.traced(
                lesson.model_dump(), outcome="success", verified=verified, **provenance.run_record(state, task.goal)
            ),
        }
        for lesson in answer.value.lessons
    ]
    return {"candidates": [*state.get("candidates", []), *cast(list[Candidate], drafts)], **updates}
