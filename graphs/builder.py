"""The Pivotal graph: all wiring lives here, and only here.

START → start → recall → actor → critic ─approve→ [human_approval] → executor ─not done→ recall …
                           ↑         │ revise/reject (≤ max_critique_rounds, pre-check ≤ max_precheck_bounces)
                           └─────────┘
        executor ─success→ distill → dedup → gate → memory_writer → respond → END
        executor/critic ─attempt failed→ reflector ─retry left→ pivot → recall …
                                                  └─give up→ distill → dedup → gate → memory_writer → respond → END

Nodes with nothing to do are passed by (graphs/routes.py): recall when there is nothing to
recall (memory off, or task-start recall after the first step), the lesson nodes when memory
is off. Each node entered costs a checkpoint write.

The actor/critic loop stays in this one graph (no subgraphs) so Studio shows every node
and a user can fork from any of them.
"""

import functools
import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime, get_runtime

from pivotal.core.context import Context
from pivotal.core.logs import logger
from pivotal.core.state import InputState, OutputState, State
from pivotal.graphs import routes
from pivotal.nodes.actor import actor
from pivotal.nodes.critic import critic
from pivotal.nodes.dedup import dedup
from pivotal.nodes.distill import distill
from pivotal.nodes.executor import executor
from pivotal.nodes.gate import gate
from pivotal.nodes.human_approval import human_approval
from pivotal.nodes.memory_writer import memory_writer
from pivotal.nodes.pivot import pivot
from pivotal.nodes.recall import recall
from pivotal.nodes.reflector import reflector
from pivotal.nodes.respond import respond
from pivotal.nodes.start import start

NODES = {
    "start": start,
    "recall": recall,
    "actor": actor,
    "critic": critic,
    "human_approval": human_approval,
    "executor": executor,
    "reflector": reflector,
    "pivot": pivot,
    "distill": distill,
    "dedup": dedup,
    "gate": gate,
    "memory_writer": memory_writer,
    "respond": respond,
}


def build_graph(checkpointer: Any = None, *, context: Context | None = None, store: Any = None, **compile_kwargs: Any):
    """Compile the graph; pass a checkpointer to keep per-step checkpoints (resume, Studio forks),
    a LangGraph store (`BaseStore`) to keep the lessons in (Context.lessons_backend).

    `context` is what the graph runs with when a caller passes none, or passes a parent graph's
    own context (the graph embedded as a subgraph); by default Context() from PIVOTAL_* settings.
    """
    builder = StateGraph(State, context_schema=Context, input_schema=InputState, output_schema=OutputState)
    for name, node in NODES.items():
        builder.add_node(name, _logged(name, node, context))
    step = ["recall", "actor"]
    finish = ["distill", "respond"]
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", _routed(routes.next_step, context), step)
    builder.add_edge("recall", "actor")
    builder.add_edge("actor", "critic")
    review = _routed(routes.after_review, context)
    builder.add_conditional_edges("critic", review, ["executor", "human_approval", "actor", "reflector"])
    builder.add_conditional_edges("human_approval", review, ["executor", "actor", "reflector"])
    builder.add_conditional_edges("executor", _routed(routes.after_executor, context), [*finish, "reflector", *step])
    builder.add_conditional_edges("reflector", _routed(routes.after_reflector, context), [*finish, "pivot"])
    builder.add_conditional_edges("pivot", _routed(routes.next_step, context), step)
    builder.add_edge("distill", "dedup")
    builder.add_edge("dedup", "gate")
    builder.add_edge("gate", "memory_writer")
    builder.add_edge("memory_writer", "respond")
    builder.add_edge("respond", END)
    graph = builder.compile(checkpointer=checkpointer, store=store, **{"name": "pivotal", **compile_kwargs})
    # invoked directly (invoke, astream, astream_events, Studio), a default node ceiling would end
    # a run after a few steps; the Context bounds are what end a run
    return PivotalGraph(**graph.__dict__).with_config(recursion_limit=DIRECT_RECURSION_LIMIT)


class PivotalGraph(CompiledStateGraph):
    """The compiled graph, keeping its own node ceiling under `astream_events` too.

    LangChain's `astream_events` fills in its own default ceiling of 25 as if the caller had set
    it, which overrides the one bound with `with_config` (invoke and astream keep it); so a caller
    who sets none gets the graph's.
    """

    def astream_events(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any):
        if not (config or {}).get("recursion_limit") and self.config:
            config = {**(config or {}), "recursion_limit": self.config.get("recursion_limit", DIRECT_RECURSION_LIMIT)}
        return super().astream_events(input, config, **kwargs)


DIRECT_RECURSION_LIMIT = 100_000
"""The graph's own node ceiling when a caller sets none; the runners set `recursion_limit(context)`."""


def nodes_per_step(context: Context) -> int:
    """The most nodes one environment step can run, given the wiring above and the critic's bounds.

    recall, then per proposal actor + critic, at most p + c + 1 proposals (p pre-check bounces,
    c critic send-backs, then one more), then the executor: 2(p+c) + 4. When a person approves
    actions, each of the person's rejections (at most h) costs a proposal as well, and the h
    rejected proposals and the approved one each pass human_approval: 2(p+c) + 3h + 5. (With
    today's defaults p = h = c = max_critique_rounds.) Pinned against the critic's and the
    person's real decision rules in tests/test_bounds.py.
    """
    c, p = context.max_critique_rounds, context.precheck_bounces_allowed()
    if not context.require_approval_for:
        return 2 * (p + c) + 4
    return 2 * (p + c) + 3 * context.human_rejections_allowed() + 5


def recursion_limit(context: Context) -> int:
    """A ceiling the Context bounds can never reach, so only they end a run.

    Per attempt: max_steps steps, then reflector and pivot; per run: start, and distill, dedup,
    gate, memory_writer and respond once at the end.
    """
    per_attempt = context.max_steps * nodes_per_step(context) + 2
    return (context.max_pivot_retries + 1) * per_attempt + 6 + 1


def _context(runtime: Runtime[Any], default: Context | None) -> Context:
    """The run's Context; the graph's own when the caller gave none, or a parent graph's own context."""
    return runtime.context if isinstance(runtime.context, Context) else default or Context()


def _routed(route, default: Context | None):
    """Async although routes never wait: LangGraph runs a plain function in a worker thread.

    The route gets None for the Context outside a run: `update_state(as_node=...)` (a Studio edit)
    follows the node's edges with no runtime, and the run it resumes may have other settings.
    """

    async def path(state: State) -> str:
        try:
            runtime = get_runtime(Context)
        except RuntimeError:  # no runnable context at all
            runtime = None
        return route(state, _context(runtime, default) if runtime is not None else None)

    path.__name__ = path.__qualname__ = route.__name__
    return path


def _logged(name: str, node, default: Context | None):
    """One structured log event per node transition."""

    @functools.wraps(node)
    async def run(state: State, runtime):
        if not isinstance(runtime.context, Context):
            runtime = runtime.override(context=_context(runtime, default))
        started = time.perf_counter()
        update = await node(state, runtime)
        usage = (update.get("usage") or {}).values()
        logger().info(
            "node",
            node=name,
            run_id=state.get("run_id") or update.get("run_id"),
            task_id=task.get("id") if isinstance(task := state.get("task"), dict) else None,
            step=len(update.get("trajectory", state.get("trajectory", [])) or []),
            verdict=(update.get("critiques") or [{}])[-1].get("decision") if name == "critic" else None,
            latency_ms=round((time.perf_counter() - started) * 1000, 2),
            tokens=sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in usage),
        )
        return update

    return run
