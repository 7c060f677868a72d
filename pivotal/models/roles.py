"""Which model plays which role, and the bookkeeping every role call shares."""

import asyncio
from typing import Any, TypeVar

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel

from pivotal.context import Context
from pivotal.models.factory import make_model
from pivotal.models.structured import Answer, ask

T = TypeVar("T", bound=BaseModel)

ROLE_MODEL = {"actor": "actor", "critic": "critic", "reflector": "reflector", "distiller": "lesson", "gate": "lesson"}


async def ask_role(
    context: Context,
    state: dict[str, Any],
    role: str,
    schema: type[T],
    *,
    system: str,
    user: str,
    fallback: T,
    metadata: dict[str, Any] | None = None,
) -> tuple[Answer[T], dict[str, Any]]:
    """The answer, plus the counters/usage deltas the calling node returns."""
    spec = context.model_for(ROLE_MODEL[role])  # type: ignore[arg-type]
    loop_key = id(asyncio.get_running_loop())
    model = await asyncio.to_thread(make_model, spec, context.local_threads, loop_key)
    backup = (
        await asyncio.to_thread(make_model, context.fallback_model, context.local_threads, loop_key)
        if context.fallback_model
        else None
    )
    answer = await ask(
        model,
        schema,
        [SystemMessage(system), HumanMessage(user)],
        role=role,
        backup=backup,
        fallback=fallback,
        retries=context.structured_retries,
        metadata={"pivotal_run": state["run_id"], "pivotal_model": spec, **(metadata or {})},
    )
    usage = answer.usage
    updates = {"counters": {"llm_calls": usage["calls"], "fallbacks": usage["fallbacks"]}, "usage": {role: usage}}
    return answer, updates
