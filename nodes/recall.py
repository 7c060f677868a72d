"""Put the approved lessons that fit the current situation in front of the actor and critic."""

import asyncio
from typing import Any

from langgraph.runtime import Runtime

from memory.screen import MAX_LESSON_CHARS
from memory.store import open_store
from pivotal.context import Context
from pivotal.state import State
from pivotal.task import Task
from prompts import bounded


async def recall(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    if not context.memory or context.recall == "off":
        return {}
    if context.recall == "task" and (state.get("trajectory") or state.get("retries")):
        return {}  # task-start recall: the lessons found at the start stay for the whole run
    task = Task.model_validate(state["task"])
    query = state["observation"] if context.recall == "step" else f"{task.goal}\n{state['first_observation']}"
    store = await asyncio.to_thread(open_store, context.store_path, context.store_url)
    found = await asyncio.to_thread(
        store.search, query, family=task.family, k=context.recall_k, min_similarity=context.recall_min_similarity
    )
    lessons = [
        {
            "id": r.id,
            "kind": r.lesson.kind,
            # a lesson stored before the length cap would fill every prompt and checkpoint of the run
            "situation": bounded(r.lesson.situation, MAX_LESSON_CHARS),
            "text": bounded(r.lesson.text, MAX_LESSON_CHARS),
            "similarity": round(r.similarity, 3),
        }
        for r in found
    ]
    recalled = list(dict.fromkeys([*state.get("recalled", []), *(lesson["id"] for lesson in lessons)]))
    return {"lessons": lessons, "recalled": recalled}
