"""Open the run: read the task (or the last human message of a chat), create and reset the environment."""

import asyncio
import hashlib
import uuid
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.runtime import Runtime

from pivotal.core.context import Context
from pivotal.core.environments.live import in_env_thread, open_live, state_of
from pivotal.core.errors import PivotalError
from pivotal.core.models.reachability import check_models
from pivotal.core.secrets import redact_tree
from pivotal.core.state import State
from pivotal.core.task import parse_task
from pivotal.memory.backend import uses_graph_store
from pivotal.memory.store import check_memory
from pivotal.prompts import SEE_MORE, clip


async def start(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    await preflight(runtime.context, runtime.store)
    task = parse_task(state.get("task") or _last_question(state.get("messages") or []), runtime.context.default_env)
    run_id = state.get("run_id") or uuid.uuid4().hex
    live = await in_env_thread(open_live, run_id, task, timeout=runtime.context.step_timeout, what=f"{task.env}: reset")
    if not task.goal:
        task.goal = getattr(live.env, "default_goal", "")
    if not task.goal:
        raise PivotalError(f"the task for {task.env} has no goal; give it one (Task(goal=...) or --goal)")
    observation = clip(
        live.first_observation, runtime.context.max_observation_chars, hint=SEE_MORE
    )  # open_live redacted it
    return {
        "task": task.model_dump(),
        "run_id": run_id,
        "run_settings": state.get("run_settings") or runtime.context.saved(),  # a resume anywhere keeps them
        "status": "running",
        "reason": "",
        "observation": observation,
        "first_observation": observation,
        "instance": _instance(live.env),
        "initial_state": redact_tree(state_of(live.env, live.initial)),
        "trajectory": [],
        "critiques": [],
        "reflections": [],
        "retries": 0,
        "lessons": [],
        "recalled": [],
        "candidates": [],
        "approved_lessons": [],
        "written": [],
        "retired": [],
        "attempt_failed": "",
        "proposal": None,
        "chosen": None,
        "attempt_start": 0,
        "compensations": [],
        "answer": "",
        "verified": True,
    }


def _instance(env: Any) -> str:
    """A short id of the world the environment's `instance()` describes ("" when it has none)."""
    describe = getattr(env, "instance", None)
    return hashlib.sha256(str(describe()).encode()).hexdigest()[:16] if callable(describe) else ""


def _last_question(messages: list[AnyMessage]) -> str | None:
    """A chat caller's goal: the last human message."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return str(message.text)
    return None


async def preflight(context: Context, store: Any) -> None:
    """What the run needs after its actions (lesson models, the store, its embedding model), checked
    before the first one: a direct `invoke` has no runner to check it (graphs/runner.py `preflight`).
    Checked once per process and setting: a batch's thousandth task costs no connect and no thread.
    """
    graph_store = context.memory and uses_graph_store(context, store)
    key = (repr(context), graph_store)
    if key in _checked:
        return
    await asyncio.to_thread(_preflight, context, graph_store)
    _checked.add(key)


def _preflight(context: Context, graph_store: bool) -> None:
    check_models(context)
    if context.memory:
        check_memory(context.store_path, context.store_url, chroma=not graph_store)


_checked: set[tuple[str, bool]] = set()
