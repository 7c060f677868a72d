"""Write the approved lessons, score the lessons this run recalled, and keep the store bounded."""

import asyncio
import json
from typing import Any, cast

from langgraph.config import get_config
from langgraph.runtime import Runtime

from pivotal.core.context import Context, model_label
from pivotal.core.secrets import redact, secret_values
from pivotal.core.state import Candidate, LessonUpdate, State, task_of
from pivotal.memory.lesson import Lesson, owner_of, provenance, redacted
from pivotal.memory.lesson.ledger import digest
from pivotal.memory.policy import rules as policy
from pivotal.memory.policy.registry import lesson_store
from pivotal.memory.policy.store import ExperienceStore, Written


async def memory_writer(state: State, runtime: Runtime[Context]) -> LessonUpdate:
    context = runtime.context
    if not context.memory:
        return {}
    task = task_of(state)
    store = await asyncio.to_thread(lesson_store, context, runtime.store)
    written, scored, retired = await asyncio.to_thread(_commit, store, state, context, task.family)
    inserted = {w.id for w in written if not w.merged}
    merged = {w.id for w in written if w.merged} - inserted  # a lesson counts once per run, however often hit
    return {
        "written": sorted(inserted | merged),
        "retired": retired,
        "counters": {
            "lessons_written": len(inserted),
            "lessons_merged": len(merged),
            "lessons_scored": len(scored),
            "lessons_retired": len(retired),
        },
    }


def _commit(
    store: ExperienceStore, state: State, context: Context, family: str
) -> tuple[list[Written], list[Lesson], list[str]]:
    """The run's lessons written, the lessons it recalled scored, weak ones retired: one store batch,
    so Chroma sees one upsert and one update instead of one call per step of this list.
    """
    with store.batch():
        written = _write(store, state, context, family)
        scored = store.record_outcome(
            state["run_id"], family, recall_usage(state), success=state.get("status") == "success"
        )
        retired = store.enforce_limits(
            owner=owner_of(context.lessons_namespace),
            floor=context.utility_floor,
            scored=scored,
            min_retrievals=context.min_recalls_to_retire,
            cap=context.max_lessons,
        )
    return written, scored, retired


def _write(store: ExperienceStore, state: State, context: Context, family: str) -> list[Written]:
    """New lessons may improve a stored text; known ones (no gate call) only add evidence."""
    model = model_label(context.model_for("distiller"))
    owner, source = owner_of(context.lessons_namespace), trajectory_digest(state)
    # a model wrote the draft: it may quote a key from its prompt or its own error, and the store
    # keeps lessons for good and recalls them into every later prompt
    values = secret_values()
    approved = [_traced(redacted(c, values), values) for c in state.get("approved_lessons", [])]
    # each new lesson waits in quarantine until independent runs agree (memory/policy/rules.py)
    witness = policy.witness(
        owner, _thread() or state["run_id"], str(cast(dict[str, Any], state["task"]).get("id", ""))
    )
    drafts = [
        (
            bool(c.get("duplicate_of")),
            policy.quarantined(
                Lesson.from_candidate(
                    c,
                    family=family,
                    run_id=state["run_id"],
                    model=model,
                    instance=state.get("instance", ""),
                    owner=owner,
                    digest=source,
                ),
                witness_key=witness,
                confirmations=context.confirmations(),
            ),
        )
        for c in approved
    ]
    new = [lesson for duplicate, lesson in drafts if not duplicate]
    known = [lesson for duplicate, lesson in drafts if duplicate]
    written = store.add(new, dedup_similarity=context.dedup_similarity)
    return written + store.add(known, dedup_similarity=context.dedup_similarity, keep_text=True)


def _traced(candidate: Candidate, values: list[str]) -> Candidate:
    """The candidate's advice as composed from its run's trusted record, a secret in an argument
    blanked; a candidate that reached the writer untraced gets none (all its words the model's).
    """
    if "provenance" not in candidate:
        return cast(Candidate, {**candidate, **provenance.untraced(candidate)})
    return cast(Candidate, {**candidate, "advice": redact(candidate.get("advice", ""), values)})


def _thread() -> str:
    """The run's thread, when it has one: runs of one thread and task are one witness."""
    try:
        return str((get_config().get("configurable") or {}).get("thread_id") or "")
    except RuntimeError:  # called outside a graph run (a test, a script)
        return ""


def trajectory_digest(state: State) -> str:
    """The lineage's hash of what the run's lessons were distilled from: its goal and steps."""
    steps = [[s.get("action"), s.get("arguments"), s.get("observation")] for s in state.get("trajectory", [])]
    return digest(json.dumps([state.get("task"), steps], sort_keys=True, default=str))


def recall_usage(state: State) -> dict[str, tuple[int, int]]:
    """Per recalled lesson: steps of the final path it was shown for, and how many of those the
    critic approved. Lessons recalled only on steps a pivot cut away still count as recalled.
    """
    usage = {lesson_id: (0, 0) for lesson_id in state.get("recalled", [])}
    for step in state.get("trajectory", []):
        verdicts = step.get("verdicts") or []
        approved = int(bool(verdicts) and verdicts[-1]["decision"] == "approve")
        for lesson_id in step.get("lessons") or []:
            shown, ok = usage.get(lesson_id, (0, 0))
            usage[lesson_id] = (shown + 1, ok + approved)
    return usage
