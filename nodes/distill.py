"""Collect lesson candidates from the finished run: skills from a success, guardrails from reflections."""

from typing import Any

from langgraph.runtime import Runtime

import prompts
from pivotal.context import Context
from pivotal.models.roles import ask_role
from pivotal.schemas import LessonDrafts
from pivotal.state import State
from pivotal.task import Task
from prompts import data as show


async def distill(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    if not context.memory or state.get("status") != "success":
        return {}  # failure candidates already came from the reflector
    task = Task.model_validate(state["task"])
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
    )
    verified = state.get("verified", True)
    drafts = [
        {**lesson.model_dump(), "outcome": "success", "level": "task", "verified": verified}
        for lesson in answer.value.lessons
    ]
    return {"candidates": [*state.get("candidates", []), *drafts], **updates}
