"""Match each lesson candidate against the store before the gate, so a lesson already known
costs no gate call: it only adds evidence to the stored one, whose text was gated already.
"""

import asyncio

from langgraph.runtime import Runtime

from pivotal.core.context import Context, model_label
from pivotal.core.state import Candidate, LessonUpdate, State, task_of
from pivotal.memory.lesson import Lesson, better_text, owner_of
from pivotal.memory.policy.registry import lesson_store


async def dedup(state: State, runtime: Runtime[Context]) -> LessonUpdate:
    context = runtime.context
    candidates = state.get("candidates", [])
    if not context.memory or not candidates:
        return {}
    task = task_of(state)
    store = await asyncio.to_thread(lesson_store, context, runtime.store)
    marked: list[Candidate] = []
    for candidate in candidates:
        lesson = Lesson.from_candidate(
            candidate,
            family=task.family,
            run_id=state["run_id"],
            model=model_label(context.model_for("distiller")),
            instance=state.get("instance", ""),
            owner=owner_of(context.lessons_namespace),
        )
        match = await asyncio.to_thread(store.duplicate, lesson, context.dedup_similarity)
        # a more specific text is worth a gate call: the merge may then keep it
        # and a lesson from an outcome nothing checked always meets the gate (an agent judging itself
        # is how wrong runs get stored as successes)
        # and an imported lesson still pending was never gated: this run's text is, and confirms it
        known = (
            match is not None
            and not better_text(lesson.text, match.lesson.text)
            and lesson.verified
            and not (match.lesson.status == "pending" and match.lesson.origin == "import")
        )
        marked.append(
            {
                **candidate,
                "duplicate_of": match.lesson.id if match is not None and known else "",
                "similarity": round(match.similarity, 3) if match else 0.0,
            }
        )
    return {"candidates": marked}
