"""Put the approved lessons that fit the current situation in front of the actor and critic."""

import asyncio
from typing import Any

from langgraph.runtime import Runtime

from pivotal.core.context import Context
from pivotal.core.environments.live import lookup
from pivotal.core.state import Recalled, State
from pivotal.core.task import Task
from pivotal.memory.backend import lesson_store, opened_lesson_store
from pivotal.memory.lesson import owner_of
from pivotal.memory.screen import MAX_LESSON_CHARS
from pivotal.prompts import clip


async def recall(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    if not wanted(state, context):
        return {}
    task = Task.model_validate(state["task"])
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
    lessons: list[Recalled] = [
        {
            "id": r.id,
            "kind": r.lesson.kind,
            # a lesson stored before the length cap would fill every prompt and checkpoint of the run
            "situation": clip(r.lesson.situation, MAX_LESSON_CHARS),
            "text": clip(r.lesson.text, MAX_LESSON_CHARS),
            "similarity": round(r.similarity, 3),
        }
        for r in found
    ]
    recalled = list(dict.fromkeys([*state.get("recalled", []), *(lesson["id"] for lesson in lessons)]))
    return {"lessons": lessons, "recalled": recalled}


def wanted(state: State, context: Context) -> bool:
    """Whether this step has anything to recall; the graph does not enter the node otherwise."""
    if not context.memory or context.recall == "off":
        return False
    # task-start recall: the lessons found at the start stay for the whole run
    return context.recall == "step" or not (state.get("trajectory") or state.get("retries"))


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
