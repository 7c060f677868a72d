"""Approval gate for lessons: deterministic poisoning screen, then a critic-style verdict per new lesson."""

from typing import Any

from langgraph.runtime import Runtime

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.models.roles import ask_role
from pivotal.core.schemas import LessonVerdict
from pivotal.core.state import Candidate, State, add_counts
from pivotal.core.task import Task
from pivotal.memory.lesson import rendered, screened
from pivotal.prompts import show


async def gate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    candidates = state.get("candidates", [])
    if not context.memory or not candidates:
        return {}
    task = Task.model_validate(state["task"])
    reviewed: list[Candidate] = []
    totals: dict[str, dict[str, Any]] = {"counters": {}, "usage": {}}
    for candidate in candidates:
        verdict, updates = await _review(state, context, task, candidate)
        totals = {key: add_counts(totals[key], updates.get(key)) for key in totals}
        totals["counters"] = add_counts(
            totals["counters"], {("lessons_approved" if verdict.decision == "approve" else "lessons_rejected"): 1}
        )
        reviewed.append({**candidate, "verdict": verdict.decision, "verdict_reason": verdict.reason})
    approved = [c for c in reviewed if c["verdict"] == "approve"]
    return {"approved_lessons": approved, "candidates": reviewed, **totals}


async def _review(
    state: State, context: Context, task: Task, candidate: Candidate
) -> tuple[LessonVerdict, dict[str, Any]]:
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
    user = prompts.render(
        "gate",
        task=task.goal,
        outcome=candidate["outcome"] if candidate.get("verified", True) else f"{candidate['outcome']} (NOT VERIFIED)",
        steps=show.steps(state["trajectory"], context.max_observation_chars),
        lesson=rendered(candidate),
    )
    answer, updates = await ask_role(
        context,
        state,
        "gate",
        LessonVerdict,
        user=user,
        system=prompts.system("gate_system"),
        fallback=LessonVerdict(decision="reject", reason="the gate gave no valid verdict"),
    )
    return answer.value, updates
