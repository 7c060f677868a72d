"""Pivotal's experience store as LangChain agent middleware: lessons recalled before each model
call of a `create_agent` agent, and the run's lessons distilled, gated and written at its end.

Both halves are the graph's own node functions (recall, distill, dedup, gate, memory_writer), called with a
state built from the agent's messages: the same stores (Chroma, or the agent's LangGraph store),
scope, poisoning screen, redaction, dedup and utility tracking as a Pivotal run.
"""

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.typing import ContextT

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.models.factory import check_specs
from pivotal.core.state import Recalled, State, Step, add_counts
from pivotal.core.task import Task
from pivotal.graphs.blocking import run_blocking
from pivotal.memory.lesson import lessons_block
from pivotal.memory.policy.registry import check_memory
from pivotal.nodes.dedup import dedup
from pivotal.nodes.distill import distill
from pivotal.nodes.gate import gate
from pivotal.nodes.memory_writer import memory_writer
from pivotal.nodes.recall import recall

Outcome = Callable[[dict[str, Any]], bool | None]
"""The application's verdict on a finished run: True succeeded, False failed, None: learn nothing."""


class MemoryState(AgentState):
    pivotal_run: NotRequired[str]
    pivotal_lessons: NotRequired[list[Recalled]]
    """The lessons recalled for the next model call (the critic middleware shows them to its critic too)."""
    pivotal_recalled: NotRequired[list[str]]
    pivotal_memory: NotRequired[dict[str, Any]]
    """What the last run's end wrote: lesson ids written and retired, and the counters."""


class PivotalMemory(AgentMiddleware[MemoryState, ContextT]):
    """`create_agent(model, tools, middleware=[PivotalMemory("openai:gpt-4o-mini", family="support")])`.

    `model`: the distiller's and gate's model (a spec string or a chat model object). `family`:
    tasks of one family share lessons. `outcome(state)`: the application's check of a finished
    run; without one a run that ends with an answer counts as a success nothing verified (its
    lessons always meet the gate). Any other `Context` field (`store_path`, `store_url`,
    `recall`, `recall_k`, `lessons_namespace`, ...) as a keyword. The embedding model is checked
    here, as a Pivotal run checks it before its first action: found missing at the first lesson
    written, it would be found after the agent's tools had acted.
    """

    state_schema = MemoryState

    def __init__(
        self, model: str | BaseChatModel = "", *, family: str = "agent", outcome: Outcome | None = None, **context: Any
    ) -> None:
        super().__init__()
        check_specs(model)  # its form now; its key and endpoint when first used
        self.context = Context(lesson_model=model, **context)
        if self.context.memory:
            check_memory(self.context, open_now=False)  # the store opens at first use
        self.family = family
        self.outcome = outcome

    # --- start: a run id for provenance and per-run utility --------------------------------
    def before_agent(self, state: MemoryState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        return {"pivotal_run": uuid.uuid4().hex, "pivotal_recalled": [], "pivotal_lessons": []}

    async def abefore_agent(self, state: MemoryState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    # --- before each model call: recall ------------------------------------------------------
    def before_model(self, state: MemoryState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        return run_blocking(self.abefore_model, state, runtime)

    async def abefore_model(self, state: MemoryState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        found = await recall(self._state(state), Runtime(context=self.context, store=runtime.store))
        if not found:
            return None
        return {"pivotal_lessons": found["lessons"], "pivotal_recalled": found["recalled"]}

    def wrap_model_call(
        self, request: ModelRequest[ContextT], handler: Callable[[ModelRequest[ContextT]], ModelResponse]
    ) -> ModelResponse:
        return handler(self._with_lessons(request))

    async def awrap_model_call(
        self, request: ModelRequest[ContextT], handler: Callable[[ModelRequest[ContextT]], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(self._with_lessons(request))

    def _with_lessons(self, request: ModelRequest[ContextT]) -> ModelRequest[ContextT]:
        """The recalled lessons at the end of the system message, for this call only: the
        conversation and its checkpoints never keep them.
        """
        recalled: list[Recalled] = request.state.get("pivotal_lessons") or []  # type: ignore[assignment]
        lessons = lessons_block(recalled)
        if not lessons:
            return request
        block = prompts.render("agent_lessons", lessons=lessons)
        system = request.system_message.text if request.system_message else ""
        return request.override(system_message=SystemMessage(f"{system}\n\n{block}".strip()))

    # --- at the end: distill, dedup, gate, write -----------------------------------------------
    def after_agent(self, state: MemoryState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        return run_blocking(self.aafter_agent, state, runtime)

    async def aafter_agent(self, state: MemoryState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        judged = self.outcome(dict(state)) if self.outcome else _answered(state)
        if judged is None:
            return None
        run = self._state(state)
        run.update({"status": "success" if judged else "failure", "reason": "", "verified": self.outcome is not None})
        node_runtime = Runtime(context=self.context, store=runtime.store)
        totals: dict[str, Any] = {}
        for node in (distill, dedup, gate, memory_writer):
            update = await node(run, node_runtime)
            totals = add_counts(totals, {"counters": update.pop("counters", {}), "usage": update.pop("usage", {})})
            run.update(update)
        return {"pivotal_memory": {"written": run.get("written", []), "retired": run.get("retired", []), **totals}}

    def _state(self, state: MemoryState) -> State:
        """The graph's state for this run, as the nodes read it."""
        messages = state.get("messages") or []
        goal = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        observation = next((str(m.content) for m in reversed(messages) if isinstance(m, ToolMessage)), "") or goal
        task = Task(goal=goal[:2000], env=self.family, family=self.family)
        recalled = list(state.get("pivotal_recalled") or [])
        return {
            "run_id": state.get("pivotal_run") or _thread(),
            "task": task.model_dump(),
            "observation": observation,
            "first_observation": goal,
            "trajectory": _trajectory(messages, recalled),
            "recalled": recalled,
            "reflections": [],
            "candidates": [],
            "instance": "",
        }


def _answered(state: MemoryState) -> bool | None:
    """Without the application's check: an answer at the end is an (unverified) success."""
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage) and not last.tool_calls and last.text:
        return True
    return None


def _trajectory(messages: list[Any], recalled: list[str]) -> list[Step]:
    """The tool calls of the current run (since the last human message), each with its result."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1) + 1
    results = {m.tool_call_id: m for m in messages[start:] if isinstance(m, ToolMessage)}
    steps: list[Step] = []
    for message in messages[start:]:
        for call in getattr(message, "tool_calls", None) or []:
            result = results.get(call.get("id") or "")
            ok = result is not None and result.status != "error"
            steps.append(
                {
                    "index": len(steps),
                    "action": call["name"],
                    "arguments": call["args"],
                    "observation": str(result.content)[:4000] if result is not None else "",
                    "verdicts": [{"decision": "approve" if ok else "reject"}],
                    "lessons": recalled,
                    "error": not ok,
                }
            )
    return steps


def _thread() -> str:
    try:
        return str(get_config().get("configurable", {}).get("thread_id") or uuid.uuid4().hex)
    except RuntimeError:
        return uuid.uuid4().hex
