"""The Pivotal graph: all wiring lives here, and only here.

START → start → actor → critic ─approve→ [human_approval] → executor ─not done→ actor …
                  ↑        │ revise/reject (≤ max_critique_rounds, pre-check ≤ max_precheck_bounces)
                  └────────┘
        executor ─success→ distill → gate → memory_writer → respond → END
        executor/critic ─attempt failed→ reflector ─retry left→ pivot → actor …
                                                  └─give up→ distill → gate → memory_writer → respond → END
        executor ─irreversible action without this branch's review (a fork)→ critic, unrun

Two nodes' work is part of another node's entry (`_joined`), as it always followed it: recall is
the first part of the actor's (when the coming step is in a new situation, nodes/recall.py
`wanted`), so the checkpoint after the actor shows the lessons with the proposal they were shown
for; dedup the last part of distill's, so the gate, still a node of its own where a person can
pause, gets candidates already matched against the store. Each logs its own `node` event.

Nodes with nothing to do are passed by (graphs/routes.py): the lesson nodes when memory is off,
the gate when distill left no candidate (distill → memory_writer). Each node entered costs a
checkpoint write.

The actor/critic loop stays in this one graph (no subgraphs) so Studio shows every node
and a user can fork from any of them.
"""

import asyncio
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_TASK_ID
from langgraph._internal._runnable import RunnableCallable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime, get_runtime
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer, Command

from pivotal.core.context import Context, context_schema, refuse_loosening, run_context
from pivotal.core.environments import environment_names, make_environment
from pivotal.core.environments.base import check_approvals, check_names
from pivotal.core.errors import PivotalError
from pivotal.core.logs import logger
from pivotal.core.models.factory import check_specs
from pivotal.core.secrets import redact_tree, redacting
from pivotal.core.state import InputState, OutputState, State, add_counts
from pivotal.graphs import busy, routes
from pivotal.graphs.blocking import run_blocking
from pivotal.graphs.lease import invocation_lease
from pivotal.nodes.actor import actor
from pivotal.nodes.critic import critic
from pivotal.nodes.dedup import dedup
from pivotal.nodes.distill import distill
from pivotal.nodes.executor import executor
from pivotal.nodes.gate import gate
from pivotal.nodes.human_approval import human_approval
from pivotal.nodes.memory_writer import memory_writer
from pivotal.nodes.pivot import pivot
from pivotal.nodes.recall import recall, wanted as recall_wanted
from pivotal.nodes.reflector import reflector
from pivotal.nodes.respond import respond
from pivotal.nodes.start import start

NODES = {
    "start": start,
    "actor": actor,
    "critic": critic,
    "human_approval": human_approval,
    "executor": executor,
    "reflector": reflector,
    "pivot": pivot,
    "distill": distill,
    "gate": gate,
    "memory_writer": memory_writer,
    "respond": respond,
}


def build_graph(
    checkpointer: Checkpointer = None,
    *,
    context: Context | None = None,
    store: BaseStore | None = None,
    **compile_kwargs: Any,
):
    """Compile the graph; pass a checkpointer to keep per-step checkpoints (resume, Studio forks),
    a LangGraph store (`BaseStore`) to keep the lessons in (Context.lessons_backend).

    `context` is what the graph runs with when a caller passes none, or a parent graph's context
    that names no Context field (the graph embedded as a subgraph); by default Context() from
    PIVOTAL_* settings.
    A caller's context dict (Studio, the SDK) overrides only the keys it names. The checkpointer
    blanks secrets before every write from now on (`pivotal.redacting`): input, writes, resumes.
    `context`'s `require_approval_for` must name actions of its `default_env`, when that is registered.
    """
    _check_safety_names(context)
    if context is not None:
        check_specs(*(getattr(context, name) for name in Context.field_names() if name.endswith("model")))
    schema = context_schema(context)
    builder = StateGraph(State, context_schema=schema, input_schema=InputState, output_schema=OutputState)
    for name, node in NODES.items():
        builder.add_node(name, _logged(name, _joined(*JOINED[name]) if name in JOINED else node, context))
    finish = ["distill", "respond"]
    builder.add_edge(START, "start")
    builder.add_edge("start", "actor")
    builder.add_edge("actor", "critic")
    review = _routed(routes.after_review, context)
    builder.add_conditional_edges("critic", review, ["executor", "human_approval", "actor", "reflector"])
    builder.add_conditional_edges("human_approval", review, ["executor", "actor", "reflector"])
    after = [*finish, "reflector", "actor", "critic"]  # critic: an unreviewed irreversible action sent back
    builder.add_conditional_edges("executor", _routed(routes.after_executor, context), after)
    builder.add_conditional_edges("reflector", _routed(routes.after_reflector, context), [*finish, "pivot"])
    builder.add_edge("pivot", "actor")
    builder.add_conditional_edges("distill", _routed(routes.after_distill, context), ["gate", "memory_writer"])
    builder.add_edge("gate", "memory_writer")
    builder.add_edge("memory_writer", "respond")
    builder.add_edge("respond", END)
    graph = builder.compile(checkpointer=_saver(checkpointer), store=store, **{"name": "pivotal", **compile_kwargs})
    # invoked directly (invoke, astream, astream_events, Studio), a default node ceiling would end
    # a run after a few steps; the Context bounds are what end a run
    return PivotalGraph(**graph.__dict__).with_config(recursion_limit=DIRECT_RECURSION_LIMIT)


def _check_safety_names(context: Context | None) -> None:
    """A misspelt action in the graph's own `require_approval_for` would let the real one run unasked:
    refused here when its default environment is registered. A graph without one cannot be checked
    before a run (a batch may span environments: a name real in one is no action of another).
    """
    if context is not None and context.default_env in environment_names():
        specs = make_environment(context.default_env).describe_actions()
        actions = [spec.name for spec in specs]
        irreversible = [spec.name for spec in specs if spec.irreversible]
        check_approvals(context.require_approval_for, actions, what="action", irreversible=irreversible)
        check_names(
            "observe_only", [name for name in context.observed_actions() if name != "*"], actions, what="action"
        )


class PivotalGraph(CompiledStateGraph):
    """The compiled graph: its own node ceiling under `astream_events`, and its own keys as a node.

    LangChain's `astream_events` fills in its own default ceiling of 25 as if the caller had set
    it, which overrides the one bound with `with_config` (invoke and astream keep it); so a caller
    who sets none gets the graph's.

    As a node of a parent graph (LangGraph runs it with the parent's task in its config) it reads
    only the parent's `messages` and `pivotal_task`, and writes back only `messages` and
    `pivotal_result`: a parent's own `task`, `status`, `run_id`... are never read nor overwritten.
    The parent's ceiling (25 under the parent's `astream_events`) is not Pivotal's either: the
    Context bounds end its run there too.
    """

    def astream_events(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any):
        if not (config or {}).get("recursion_limit") and self.config:
            config = {**(config or {}), "recursion_limit": self._ceiling()}
        return super().astream_events(input, config, **kwargs)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not _as_node(config):
            return super().invoke(input, config, **kwargs)
        return _node_output(super().invoke(input, config, **self._node_keys(kwargs)))  # input: see stream

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not _as_node(config):
            return await super().ainvoke(input, config, **kwargs)  # through astream, which takes the lease
        return _node_output(await super().ainvoke(input, config, **self._node_keys(kwargs)))

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any):
        input = _redacted(input)  # invoke runs through here too
        _redacting_given(config)
        if not _as_node(config):
            return self._turn(self._own_saver(), input, config, kwargs)
        saver = ((config or {}).get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER)
        chunks = self._turn(saver, _node_input(input), self._node_config(config), self._node_keys(kwargs), node=True)
        return chunks if kwargs.get("stream_mode") else map(_node_output, chunks)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any):
        input = _redacted(input)  # ainvoke and astream_events run through here too
        _redacting_given(config)
        if not _as_node(config):
            return self._aturn(self._own_saver(), input, config, kwargs)
        saver = ((config or {}).get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER)
        chunks = self._aturn(saver, _node_input(input), self._node_config(config), self._node_keys(kwargs), node=True)
        return chunks if kwargs.get("stream_mode") else _node_outputs(chunks)

    def _turn(
        self,
        saver: BaseCheckpointSaver | None,
        input: Any,
        config: RunnableConfig | None,
        kwargs: dict[str, Any],
        node: bool = False,
    ) -> Iterator[Any]:
        """A sync invocation as one turn on its thread, under the agent's `double_text` (graphs/busy.py);
        as a parent's node, on the parent's thread.
        """
        if saver is None or busy.shared(saver):  # an async saver: LangGraph refuses it under sync calls
            yield from super().stream(input, config, **kwargs)
            return
        turn, config = run_blocking(busy.graph_arrival, saver, input, config, self._settings(kwargs), node)
        held = busy.hold(turn)
        try:
            yield from super().stream(input, config, **kwargs)
        finally:
            busy.let_go(held)
            if turn is not None:
                run_blocking(turn.release)

    async def _aturn(
        self,
        saver: BaseCheckpointSaver | None,
        input: Any,
        config: RunnableConfig | None,
        kwargs: dict[str, Any],
        node: bool = False,
    ) -> AsyncIterator[Any]:
        """An async invocation as one turn on its thread (graphs/busy.py), under the thread's lease
        (graphs/lease.py `invocation_lease`, not as a node: the parent's run holds it), taken after the
        turn's policy is applied.
        """
        turn, config = await busy.graph_arrival(saver, input, config, self._settings(kwargs), node)
        held = busy.hold(turn)
        keeper = asyncio.create_task(busy.keep(turn)) if turn is not None else None
        try:
            async with invocation_lease(None if node else saver, config):
                async for chunk in super().astream(input, config, **kwargs):
                    yield chunk
        finally:
            busy.let_go(held)
            if keeper is not None:
                keeper.cancel()
            if turn is not None:
                await turn.release()

    def _own_saver(self) -> BaseCheckpointSaver | None:
        """The graph's own checkpointer; None for `checkpointer=True`, which saves into its parent's checkpointer."""
        return self.checkpointer if isinstance(self.checkpointer, BaseCheckpointSaver) else None

    def _settings(self, kwargs: dict[str, Any]) -> Context:
        """The invocation's settings: its context's over the graph's own (for `double_text`)."""
        schema = self.context_schema
        own = schema() if isinstance(schema, type) and issubclass(schema, Context) else Context()
        return run_context(kwargs.get("context"), own) or own

    def _node_keys(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The standalone output keys and `pivotal_result`: the values a parent's call returns are cut
        down to NODE_OUTPUT afterwards, while the nodes' streamed updates stay as they are standalone
        (a parent streaming with `subgraphs=True` sees them).
        """
        if kwargs.get("output_keys") not in (None, self.output_channels):
            return kwargs
        return {**kwargs, "output_keys": [*self.output_channels, "pivotal_result"]}

    def _node_config(self, config: RunnableConfig | None) -> RunnableConfig:
        return {**(config or {}), "recursion_limit": self._ceiling()}

    def _ceiling(self) -> int:
        return (self.config or {}).get("recursion_limit", DIRECT_RECURSION_LIMIT)

    def get_context_jsonschema(self) -> dict[str, Any] | None:
        """The Context form Studio draws, with one change: the server keeps every key a caller sent.

        `langgraph dev` silently drops context keys its schema does not list (a debug log line), so
        a misspelt `{"modle": "sim"}` would run on the defaults; passed on, Context refuses it in one line.
        """
        schema = super().get_context_jsonschema()
        if schema and "properties" in schema:
            schema["properties"] = _EveryKey(schema["properties"])
        return schema


NODE_OUTPUT = ("messages", "pivotal_result")
"""What Pivotal writes back into a parent graph's state when it is one of the parent's nodes; it
reads the parent's `messages` (the last human message is the goal) and `pivotal_task`, if any."""


def _as_node(config: RunnableConfig | None) -> bool:
    """Run by a parent graph as one of its nodes: LangGraph passes the parent's task in the config
    (its own test for a nested run, `is_nested` in langgraph/pregel/_loop.py).
    """
    return CONFIG_KEY_TASK_ID in ((config or {}).get("configurable") or {})


def _redacted(input: object) -> Any:
    """The caller's input with secrets blanked before LangGraph saves it: it checkpoints the input as
    given (the `__start__` checkpoint and the one after it) before any node could blank it. A resume's
    reply is blanked by the node that reads it; a `Command`'s state update is blanked here.
    """
    if isinstance(input, Command):
        return dataclasses.replace(input, update=redact_tree(input.update)) if input.update is not None else input
    return redact_tree(input) if isinstance(input, dict) else input


def _saver(checkpointer: Checkpointer) -> Checkpointer:
    """The graph's checkpointer blanking secrets; LangGraph's other values pass as they are (None:
    none, True/False: a subgraph's use of its parent's), and anything else is refused by `redacting`.
    """
    return checkpointer if checkpointer is None or isinstance(checkpointer, bool) else redacting(checkpointer)


def _redacting_given(config: RunnableConfig | None) -> None:
    """A checkpointer handed in through the config (a parent graph's, the `langgraph dev` server's)
    blanks secrets from this run's writes on; the parent's own earlier writes need `pivotal.redacting`.
    """
    given = ((config or {}).get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER)
    if isinstance(given, BaseCheckpointSaver):
        redacting(given)


def _node_input(input: Any) -> Any:
    """From a parent's state, only what is Pivotal's; a resume or `None` passes as it is."""
    if not isinstance(input, dict):
        return input
    if not input.get("messages") and not input.get("pivotal_task"):
        raise PivotalError(
            "Pivotal as a node of a parent graph reads the parent's `messages` (the last human message is the "
            "goal) or `pivotal_task`; the parent's state has neither"
        )
    task = {"task": input["pivotal_task"]} if input.get("pivotal_task") else {}
    return {"messages": input.get("messages") or [], **task}


def _node_output(values: Any) -> Any:
    """Of the run's values, only what Pivotal writes into a parent's state."""
    if not isinstance(values, dict):
        return values
    return {key: value for key, value in values.items() if key in NODE_OUTPUT or key == "__interrupt__"}


async def _node_outputs(chunks: Any):
    async for chunk in chunks:
        yield _node_output(chunk)


class _EveryKey(dict):
    """Schema properties that answer yes to the server's `key in properties` filter."""

    def __contains__(self, key: object) -> bool:
        return True


DIRECT_RECURSION_LIMIT = 100_000
"""The graph's own node ceiling when a caller sets none; the runners set `recursion_limit(context)`."""


def nodes_per_step(context: Context) -> int:
    """The most nodes one environment step can run, given the wiring above and the critic's bounds.

    Per proposal actor (recall is part of its entry) + critic, at most p + c + 1 proposals (p
    pre-check bounces, c critic send-backs, then one more), then the executor: 2(p+c) + 3. When a
    person approves actions, each of the person's rejections (at most h) costs a proposal as well,
    and the h rejected proposals and the approved one each pass human_approval: 2(p+c) + 3h + 4. (With
    today's defaults p = h = c = max_critique_rounds.) Pinned against the critic's and the
    person's real decision rules in tests/test_bounds.py.
    """
    c, p = context.max_critique_rounds, context.precheck_bounces_allowed()
    if not context.require_approval_for:
        return 2 * (p + c) + 3
    return 2 * (p + c) + 3 * context.human_rejections_allowed() + 4


def recursion_limit(context: Context) -> int:
    """A ceiling the Context bounds can never reach, so only they end a run.

    Per attempt: max_steps steps, then reflector and pivot; per run: start, and distill (dedup is
    part of its entry), gate, memory_writer and respond once at the end.
    """
    per_attempt = context.max_steps * nodes_per_step(context) + 2
    return (context.max_pivot_retries + 1) * per_attempt + 5 + 1


def _context(runtime: Runtime[Any], default: Context | None, state: State | None = None) -> Context:
    """The run's Context: the caller's, else the graph's own (a caller that gave none); a parent
    graph's context (a dict, or its own type) is read for the Context fields it names (`run_context`).
    For a turn already under way, its saved settings (`run_settings`), so a `Command(resume=...)`
    or `invoke(None)` from any process goes on as the turn started.

    What a caller names is what its context sets apart from the graph's own defaults (Studio and the
    SDK always send a whole form of them): a name that repeats the saved value is fine, one that
    contradicts it is refused in one line before the node runs, so a paused decision stays unspent.
    A model object cannot be saved: the caller's (or the graph's) object of the same place is used,
    when it is the one the run paused with (`Context.allow_other_models` allows another).

    A turn that starts may tighten the graph's own safety settings, never loosen them; on a graph built
    with settings (a deployment), names in them must be actions of its default environment, as when it
    was built (a graph without settings may serve a batch over several environments).
    """
    given = run_context(runtime.context, default)
    saved = (state or {}).get("run_settings")
    if not saved:
        refuse_loosening(given, default)
        if default is not None and given is not None and given is not default:
            _check_safety_names(given)  # a deployment's run: a tightening that names no tool tightens nothing
        return given or default or Context()
    if given is not None and given.saved() == saved:
        return given  # the runners' path: the context they resumed with
    own = default or Context()
    named = _set_apart(given, own)
    named.setdefault("stream_roles", (given or own).stream_roles)  # unsaved: the graph's own unless named
    for slot, value in saved.items():  # a saved model object: given back by the caller or the graph
        if isinstance(value, dict) and "model_object" in value and slot not in named:
            named[slot] = getattr(given or own, slot, None)
    return Context.resumed(saved, named)


def _set_apart(given: Context | None, own: Context) -> dict[str, Any]:
    """The fields a caller's context sets apart from the graph's own defaults: what it named."""
    if given is None:
        return {}
    return {name: value for name in Context.field_names() if (value := getattr(given, name)) != getattr(own, name)}


def _routed(route, default: Context | None) -> RunnableCallable:
    """Sync and async alike, so `invoke` and `ainvoke` both route; the async twin keeps LangGraph
    from running a plain function in a worker thread (routes never wait).

    The route gets None for the Context outside a run: `update_state(as_node=...)` (a Studio edit)
    follows the node's edges with no runtime, and the run it resumes may have other settings.
    """

    def path(state: State) -> str:
        try:
            runtime = get_runtime(Context)
        except RuntimeError:  # no runnable context at all
            runtime = None
        return route(state, _context(runtime, default, state) if runtime is not None else None)

    async def apath(state: State) -> str:
        return path(state)

    return RunnableCallable(path, apath, name=route.__name__)


def _logged(name: str, node, default: Context | None) -> RunnableCallable:
    """One structured log event per node transition; a sync twin for `invoke` (graphs/blocking.py)."""

    @functools.wraps(node)
    async def run(state: State, runtime):
        if (turn := busy.running_turn()) is not None and await turn.stop_asked():
            raise turn.interrupted()  # a newer message stopped the turn: here, between two nodes
        context = _context(runtime, default, None if name == "start" else state)  # start opens a turn: the caller's
        if context is not runtime.context:
            runtime = runtime.override(context=context)
        started = time.perf_counter()
        update = await node(state, runtime)
        _log_node(name, state, update, started)
        return update

    def run_sync(state: State, runtime):
        return run_blocking(run, state, runtime)

    return RunnableCallable(run_sync, run, name=name, trace=False)


def _log_node(name: str, state: State, update: Any, started: float) -> None:
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


ADDED = ("counters", "usage")
"""The update keys LangGraph adds up (`add_counts`) rather than replaces; no other key the joined
nodes write has a reducer."""

Wanted = Callable[[State, Context], bool]


def _joined(*parts: tuple[str, Any, Wanted | None]) -> Any:
    """One node entry that does several nodes' work in order, each on the state the one before it
    left, where the work after a plain step always followed it: one checkpoint where each cost one
    of its own. A part with a `wanted` test runs only when it says so and logs its own `node` event;
    the first part is the entry's name (its event is `_logged`'s). The update is all of theirs.

    actor: recall first, when the coming step is in a new situation (nodes/recall.py `wanted`);
    as a node of its own it cost a checkpoint on nearly every step (gridworld's surroundings rarely
    repeat). distill: its candidates matched against the store (nodes/dedup.py) before the gate,
    which stays a node of its own, so a person can still pause before it or after it.
    """
    first = parts[0][1]

    @functools.wraps(first)
    async def run(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        update: dict[str, Any] = {}
        for name, node, wanted in parts:
            if wanted is not None and not wanted(state, runtime.context):
                continue
            started = time.perf_counter()
            done = dict(await node(state, runtime))
            if wanted is not None:
                _log_node(name, state, done, started)
            was: dict[str, Any] = dict(state)
            state = cast(State, {**was, **done, **{key: add_counts(was.get(key), done.get(key)) for key in ADDED}})
            added = {key: add_counts(update.get(key), done.get(key)) for key in ADDED if key in update or key in done}
            update = {**update, **done, **added}
        return update

    return run


def _has_candidates(state: State, context: Context) -> bool:
    return bool(state.get("candidates"))


JOINED: dict[str, tuple[tuple[str, Any, Wanted | None], ...]] = {
    "actor": (("recall", recall, recall_wanted), ("actor", actor, None)),
    "distill": (("distill", distill, None), ("dedup", dedup, _has_candidates)),
}
"""Nodes whose entry does another node's work too (`_joined`): recall and dedup have no node of their own."""
