"""Store the lessons the gate approved."""

import asyncio
from typing import Any

from langgraph.runtime import Runtime

from memory.lesson import Lesson
from memory.store import open_store
from pivotal.context import Context
from pivotal.state import State
from pivotal.task import Task


async def memory_writer(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    approved = state.get("approved_lessons", [])
    if not context.memory or not approved:
        return {}
    task = Task.model_validate(state["task"])
    lessons = [Lesson(kind=c["kind"], situation=c["situation"], text=c["text"], outcome=c["outcome"],
                      family=task.family, run_id=state["run_id"], model=context.model_for("lesson"))
               for c in approved]
    store = await asyncio.to_thread(open_store, context.store_path)
    written = await asyncio.to_thread(store.add, lessons)
    return {"written": written, "counters": {"lessons_written": len(written)}}
