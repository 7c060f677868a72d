"""Put the approved lessons that fit the current situation in front of the actor and critic."""

import asyncio
from typing import Any

from langgraph.runtime import Runtime

from pivotal.core.context import Context
from pivotal.core.environments.live import lookup
from pivotal.core.state import Recalled, RecallUpdate, State, Step, task_of
from pivotal.memory.lesson import owner_of, screened
from pivotal.memory.lesson.provenance import off_the_recipe
from pivotal.memory.policy.registry import lesson_store, opened_lesson_store
from pivotal.memory.policy.store import ExperienceStore
from pivotal.prompts import clip


async def recall(state: State, runtime: Runtime[Context]) -> RecallUpdate:
    context = runtime.context
    if not wanted(state, context):
        return {}
    task = task_of(state)
    if context.recall == "step":
        query = situation(state["run_id"], state["observation"])
    else:
        query = f"{task.goal}\n{first_line(state['first_observation'])}"
    store = opened_lesson_store(context, runtime.store)
    if store is None:
        store = await asyncio.to_thread(lesson_store, context, runtime.store)
    ask: dict[str, Any] = {
        "family": task.family,
        "k": context.recall_k,
        "min_similarity": context.recall_min_similarity,
        "instance": state.get("instance", ""),
        "owner": owner_of(context.lessons_namespace),
    }
    found = store.kept(query, **ask)  # situations repeat: most steps need no thread
    if found is None:
        found = await asyncio.to_thread(store.search, query, **ask)
    lessons, refused = _screened([r.recalled(clip) for r in found])
    if refused:  # retired, they leave the search: it is asked once more for the ones behind them
        await asyncio.to_thread(_retire, store, refused, ask["owner"])
        found = await asyncio.to_thread(store.search, query, **ask)
        lessons, more = _screened([r.recalled(clip) for r in found])
        refused.update(more)
        if more:
            await asyncio.to_thread(_retire, store, more, ask["owner"])
    lessons = _still_on_the_path(lessons, state.get("trajectory") or [])
    recalled = list(dict.fromkeys([*state.get("recalled", []), *(lesson["id"] for lesson in lessons)]))
    update: RecallUpdate = {"lessons": lessons, "recalled": recalled, "recall_key": recall_key(state, context)}
    if refused:
        update["counters"] = {"lessons_retired": len(refused), "lessons_refused_at_recall": len(refused)}
    return update


def _screened(found: list[Recalled]) -> tuple[list[Recalled], dict[str, str]]:
    """The recalled lessons that pass the poisoning screen, and why each other one failed.

    A lesson stored before a pattern of the screen existed is recalled like any other, so what
    reaches a prompt meets the screen here too. It reads the lesson as the prompt would, clipped:
    a lesson stored before the length cap (1 MB, say) is no hostile one for its length, and its
    clipped middle never reaches a prompt; its head and tail are screened like any lesson's.
    """
    refused = {lesson["id"]: why for lesson in found if (why := screened(lesson, capped=False))}
    return [lesson for lesson in found if lesson["id"] not in refused], refused


def _still_on_the_path(lessons: list[Recalled], trajectory: list[Step]) -> list[Recalled]:
    """Leaves out a recalled recipe (a solved run's moves) the run has left: its next move was taken
    from another state (memory.lesson.provenance.off_the_recipe). Not retired: it still holds from
    the start, for the next run or a retry that goes back to its path.
    """
    calls = [(step["action"], step.get("arguments") or {}) for step in trajectory]
    return [lesson for lesson in lessons if not off_the_recipe(lesson, calls)]


def _retire(store: ExperienceStore, refused: dict[str, str], owner: str) -> None:
    """Retired, with the screen's reason, so `pivotal lessons` shows why it left and no later run recalls it."""
    for lesson_id, why in refused.items():
        store.retire([lesson_id], f"poisoning screen at recall: {why}", owner=owner)


def wanted(state: State, context: Context) -> bool:
    """Whether this step has anything to recall; the actor's node entry recalls first only then.

    Step recall: not when the run is still in the situation its lessons were recalled for (a
    corridor walked step by step, a wall bumped into again, a proposal the critic sent back). The
    lessons in state are that situation's answer, and recalling again would only repeat the query.
    A lesson another run stores meanwhile is recalled at the next new situation. Task-start recall:
    once per run, before its first proposal; the lessons found then stay for the whole run.
    """
    if not context.memory or context.recall == "off":
        return False
    if context.recall == "task" and (state.get("trajectory") or state.get("retries")):
        return False
    return state.get("recall_key") != recall_key(state, context)


def recall_key(state: State, context: Context | None = None) -> str:
    """What a step's lessons are recalled for: the run (a new turn recalls afresh) and the situation
    (step recall), or the run alone (task-start recall).
    """
    run_id = state.get("run_id", "")
    if context is not None and context.recall == "task":
        return f"{run_id}\n"
    return f"{run_id}\n{situation(run_id, state.get('observation', ''))}"


SITUATION_CHARS = 240


def situation(run_id: str, observation: str) -> str:
    """What step recall embeds: the environment's own `situation()` when it has one (the built-in
    ones describe the agent's surroundings in a few words), else the observation's first line.

    Not the whole observation: maps and legends make it ~4x slower to embed than one line (embedding
    cost grows with every token) and match short lessons no better.
    """
    live = lookup(run_id)
    describe = getattr(live.env, "situation", None) if live is not None else None
    if callable(describe):
        try:
            return str(describe())[:SITUATION_CHARS]
        except Exception:  # noqa: BLE001 — an optional helper of the application's: recall goes on without it
            pass
    return first_line(observation)


def first_line(observation: str) -> str:
    first = next((line.strip() for line in observation.splitlines() if line.strip()), "")
    return first[:SITUATION_CHARS]
