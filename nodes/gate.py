"""Approval gate for lessons: deterministic poisoning screen, the optional model screen, then a
critic-style verdict per new lesson.
"""

from collections.abc import Mapping
from typing import Any, cast

from langgraph.runtime import Runtime

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.models.roles import ask_role
from pivotal.core.schemas import LessonVerdict, ScreenVerdict
from pivotal.core.state import Candidate, LessonUpdate, Spent, State, add_counts, add_spent, task_of
from pivotal.core.task import Task
from pivotal.memory.lesson import rendered, screened
from pivotal.prompts import show


async def gate(state: State, runtime: Runtime[Context]) -> LessonUpdate:
    context = runtime.context
    candidates = state.get("candidates", [])
    if not context.memory or not candidates:
        return {}
    task = task_of(state)
    reviewed: list[Candidate] = []
    totals: Spent = {"counters": {}, "usage": {}}
    for candidate in candidates:
        verdict, updates = await _review(state, context, task, candidate)
        totals = add_spent(totals, updates)
        totals["counters"] = add_counts(
            totals["counters"], {("lessons_approved" if verdict.decision == "approve" else "lessons_rejected"): 1}
        )
        reviewed.append({**candidate, "verdict": verdict.decision, "verdict_reason": verdict.reason})
    approved = [c for c in reviewed if c["verdict"] == "approve"]
    return {"approved_lessons": approved, "candidates": reviewed, **totals}


async def _review(state: State, context: Context, task: Task, candidate: Candidate) -> tuple[LessonVerdict, Spent]:
    problem = screened(candidate)
    if problem:
        return LessonVerdict(decision="reject", reason=f"poisoning screen: {problem}"), {}
    if candidate.get("duplicate_of"):
        return LessonVerdict(
            decision="approve",
            reason=(
                f"duplicate of stored lesson {candidate['duplicate_of']} (similarity {candidate['similarity']}): "
                "adds evidence, its gated text stays"
            ),
        ), {}
    if context.model_screen:
        refused, updates = await model_screen(context, state, candidate)
        if refused is not None:
            return LessonVerdict(decision="reject", reason=f"model screen: {refused}"), updates
    else:
        updates = Spent()
    user = prompts.render(
        "gate",
        task=task.goal,
        outcome=candidate["outcome"] if candidate.get("verified", True) else f"{candidate['outcome']} (NOT VERIFIED)",
        steps=show.steps(state["trajectory"], context.max_observation_chars),
        lesson=rendered(candidate),
    )
    answer, asked = await ask_role(
        context,
        state,
        "gate",
        LessonVerdict,
        user=user,
        system=prompts.system("gate_system"),
        fallback=LessonVerdict(decision="reject", reason="the gate gave no valid verdict"),
    )
    return answer.value, add_spent(updates, asked)


async def model_screen(
    context: Context, state: Mapping[str, Any], draft: Mapping[str, Any]
) -> tuple[str | None, Spent]:
    """Why the critic's model reads this lesson as an order no task gave, or None; with the call's
    counters. A second screen measured apart from the rule screen (benchmarks/bench_screen.py): it
    reads paraphrases and languages no pattern names, and a small model misreads much. A model
    that gives no valid answer refuses nothing: the rule screen and the gate still stand.
    """
    answer, updates = await ask_role(
        context,
        cast(State, state),
        "screen",
        ScreenVerdict,
        user=prompts.render("screen", lesson=rendered(draft)),
        system=prompts.system("screen_system"),
        fallback=ScreenVerdict(decision="advice", reason="the model screen gave no valid verdict"),
    )
    refused = (answer.value.reason or "reads as an order no task gave") if answer.value.decision == "order" else None
    return refused, updates
