"""An irreversible action runs once per thread, and only on a review given in this branch of it.

Two rules, both deterministic, so no model's judgement can talk its way past them:

- the repeat rule (`repeat_reason`): an irreversible call that already ran in this thread (any
  turn, any branch) and was not compensated is not run again on any model's approval; only a person
  asked about the repeat can re-approve it as one (`reapproved`). Two calls are the same when their
  arguments are (numbers compared as numbers), or, where the action declares `once_key`, when
  those arguments are. An action declared `repeatable`, or named in the task's `allow_repeat`,
  may repeat. The critic applies it before any model is asked; the executor applies it again.
- the review rule (`unreviewed`): the executor runs an irreversible call only with the approval the
  critic gave it in this branch, for exactly these arguments, with the person's approval where
  `require_approval_for` asks for one, and never with an approval an earlier execution spent. A
  fork or replay (`update_state(..., as_node="critic")`, Studio) skips the critic; what it hands
  the executor goes back to the critic instead.

What ran lives in the world, not in a branch: a fork at or before a refund starts from a state in
which the refund never happened, yet the money is gone. So for an environment whose world a fork
does not put back (`rewind` compensate or forward: tools), the executed history is every
checkpoint of the thread, all branches and all turns (runs); only an environment that restores its
world (`snapshot`, `replay`) is judged by its branch's own trajectory. The `create_agent` middleware
reads the same checkpoints for its own record (`thread_record`), so one guard keyed on the world
serves every face. A graph run as a parent's node checkpoints under a namespace per task, and a fork
or a second submit of the parent is a new task: the record reads every task of the node (`graph_path`).
"""

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.config import get_config, get_store
from langgraph.constants import CONFIG_KEY_CHECKPOINTER

from pivotal.core.environments.base import ActionSpec, Environment, Idempotent, rewind_mode
from pivotal.core.environments.tools import FINISH
from pivotal.core.secrets import redact_tree
from pivotal.core.state import Critique, Proposal, State, Step, same_call

Call = tuple[str, dict[str, Any]]


def repeat_reason(
    env: Environment,
    action: str,
    arguments: dict[str, Any],
    done: Iterable[Call],
    *,
    allow: Iterable[str] = (),
) -> str | None:
    """Why this call may not run (it repeats an executed, uncompensated irreversible call), or None.

    `done`: the executed, uncompensated (action, arguments) calls of this thread (`executed_calls`);
    `allow`: action names the task lets repeat (`Task.allow_repeat`; "*" for all).
    """
    spec = _spec(env, action)
    allowed = set(allow)
    if spec is None or not spec.irreversible or spec.repeatable or action in allowed or "*" in allowed:
        return None
    key = _key(spec, arguments)
    if not any(name == action and _key(spec, given) == key for name, given in done):
        return None
    same = f"the same {', '.join(spec.once_key)}" if spec.once_key else "these arguments"
    return (
        f"{action} with {same} already ran in this thread and was not undone; an irreversible action runs "
        "once: take it as done and propose the next step (a task may allow repeats: allow_repeat)"
    )


def irreversible(env: Environment, action: str | None) -> bool:
    spec = _spec(env, action or "")
    return spec is not None and spec.irreversible


def needs_person(wanted: Iterable[str], env: Environment, proposal: Proposal) -> bool:
    """Whether `require_approval_for` asks a person before this action runs."""
    wanted = set(wanted)
    action = proposal.get("action")
    return bool(wanted) and (
        "*" in wanted or action in wanted or ("irreversible" in wanted and irreversible(env, action))
    )


def unreviewed(chosen: Proposal, critiques: list[Critique], person: bool, spent: set[str]) -> str:
    """Why the chosen action lacks the review a first run gives it, or "" when it has it.

    `person`: a person's approval is needed too; `spent`: the reviews executed steps used up.
    """
    review = chosen.get("review")
    found = _reviewed_at(chosen, critiques)
    if found is None:
        return "it was not reviewed in this branch"
    if not _same(critiques[found], chosen):
        return "it was edited after its review"
    if review in spent:
        return "its approval was used up by an earlier execution (a fork or replay)"
    if person and not any(
        c["source"] == "human" and c["decision"] == "approve" and _same(c, chosen) for c in critiques[found + 1 :]
    ):
        return "no person approved it"
    return ""


def reapproved(chosen: Proposal, critiques: list[Critique]) -> bool:
    """Whether a person re-approved this repeat of an executed call after the review that chose it
    (`{"decision": "approve", "repeat": true}`): the one way a repeat runs without `allow_repeat`.
    """
    found = _reviewed_at(chosen, critiques)
    return (
        bool(chosen.get("repeat"))
        and found is not None
        and any(
            c["source"] == "human" and c["decision"] == "approve" and c.get("repeat") and _same(c, chosen)
            for c in critiques[found + 1 :]
        )
    )


def _reviewed_at(chosen: Proposal, critiques: list[Critique]) -> int | None:
    """Where in this step's critiques the review that chose this action stands."""
    review = chosen.get("review")
    return next((i for i, c in enumerate(critiques) if review and c.get("review") == review), None)


async def executed(env: Environment, state: State) -> tuple[list[Call], set[str]]:
    """The executed, uncompensated calls (the `done` of `repeat_reason`) and the reviews spent.

    Read from the thread's checkpoints, every branch and every turn, when a fork shares this
    environment's world; from this branch's trajectory when the environment puts its world back.
    """
    seen = Seen()
    seen.add(state.get("trajectory") or [])
    if rewind_mode(env) in ("snapshot", "replay"):
        return seen.calls(), set(seen.spent)
    record = await thread_record()
    seen.merge(record.seen)
    # the note of this very step, in an environment that acts once per key, is the step in flight that
    # `step_once` recognises on resume (docs/side-effects.md, the one step in flight): not a repeat
    own = step_key(state) if isinstance(env, Idempotent) else None
    noted = await started_calls(record)
    started = [call for key, call in noted.items() if not _ended(seen, key, call) and key != own]
    return seen.calls() + started, set(seen.spent)


def _ended(seen: "Seen", key: str, call: Call) -> bool:
    """Whether a checkpointed step is this started call's end: its key, with this action and these
    arguments. The key alone is not enough: after a run stopped during the call, its step is sent back
    and the next step checkpointed under the same key may be another call (the email after the refund).
    """
    return bool(seen.ran(key, {"action": call[0], "arguments": redact_tree(call[1])}))


STARTED = ("pivotal", "started")
"""The run's store namespace (then the thread id) of the irreversible calls an executor started.

A checkpoint records a step once its tool returned; a run stopped during the tool (the `langgraph dev`
server's `multitask_strategy` interrupt or rollback cancels a run wherever it is, and a rollback then
deletes the run's checkpoints) leaves a call that ran in the world and in no checkpoint. The executor
notes each irreversible call in the run's store (the server's, under `langgraph dev`) before its tool
runs, and forgets it when the tool raised (it changed nothing); a note whose step no checkpoint holds
counts as executed. Without a store there is no note, and the checkpoints are the record.
"""


def _started_at() -> tuple[Any, tuple[str, ...] | None]:
    """The run's store and this thread's namespace in it, or (None, None) outside a run or without one."""
    try:
        store, thread = get_store(), (get_config().get("configurable") or {}).get("thread_id")
    except (RuntimeError, KeyError, AttributeError):  # outside a run, or a run without LangGraph's runtime
        return None, None
    return (store, (*STARTED, str(thread))) if store is not None and thread is not None else (None, None)


def beside(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where the outer call's checkpoint is: the thread, the node's graph namespace, its checkpoint."""
    configurable = config.get("configurable") or {}
    namespace = "|".join(str(configurable.get("checkpoint_ns", "")).split("|")[:-1])
    checkpoint = (configurable.get("checkpoint_map") or {}).get(namespace) or configurable.get("checkpoint_id")
    if configurable.get("thread_id") is None or not checkpoint:
        return None
    return {"configurable": {"thread_id": configurable["thread_id"], "checkpoint_ns": namespace,
                             "checkpoint_id": checkpoint}}  # fmt: skip


async def put_beside(config: Mapping[str, Any], writes: list[tuple[str, Any]], task: str) -> None:
    saver, at = (config.get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER), beside(config)
    if saver is None or at is None:
        return
    try:
        await saver.aput_writes(at, writes, task)
    except NotImplementedError:  # a synchronous saver (SqliteSaver)
        await asyncio.to_thread(saver.put_writes, at, writes, task)
    # A read of this process may have taken `at` already, and the next goes back only to newer checkpoints
    # (`_reads`): until the step's own checkpoint held the call, another turn here did not see this intent.
    read_whole_next(str(at["configurable"]["thread_id"]))


async def note_started(key: str, action: str, arguments: dict[str, Any]) -> None:
    """Before an irreversible call's tool runs: the call, under its step key (secrets blanked), in the
    run's store and beside the executor's checkpoint. A process killed during the tool (kill -9) leaves
    the note and no checkpointed step; a server's rollback deletes the checkpoints and leaves the store's.
    """
    call = {"key": key, "action": action, "arguments": redact_tree(arguments)}
    store, namespace = _started_at()
    if store is not None and namespace is not None:
        await store.aput(namespace, key, {"action": call["action"], "arguments": call["arguments"]}, index=False)
    await _note_beside(call, started=True)


async def forget_started(key: str) -> None:
    """The call's tool raised: the world is unchanged, and the call may run again."""
    store, namespace = _started_at()
    if store is not None and namespace is not None:
        await store.adelete(namespace, key)
    await _note_beside({"key": key}, started=False)


async def _note_beside(call: dict[str, Any], *, started: bool) -> None:
    try:
        config = get_config()
    except RuntimeError:  # outside a run: no thread to note it in
        return
    task = f"{WRITTEN}started:{call['key']}:{uuid.uuid4().hex[:12]}"  # one per note: Postgres keeps the first writes
    await put_beside(config, [(STARTED_STEPS, [{**call, "started": started}])], task)


async def started_calls(record: "ThreadRecord") -> dict[str, Call]:
    """The irreversible calls this thread's executors started, by step key (`note_started`): beside
    the checkpoints (`record`) and in the run's store.
    """
    found: dict[str, Call] = dict(record.started_steps())
    store, namespace = _started_at()
    if store is None or namespace is None:
        return found
    offset = 0
    while len(batch := await store.asearch(namespace, limit=100, offset=offset)) > 0:
        found.update({item.key: (item.value["action"], item.value.get("arguments") or {}) for item in batch})
        offset += len(batch)
        if len(batch) < 100:
            break
    return found


def step_key(state: State) -> str:
    """The idempotency key of the step the state is at: its run, attempt and index."""
    return f"{state.get('run_id', '')}:{state.get('retries', 0)}:{len(state.get('trajectory') or [])}"


async def executed_step(env: Environment, state: State, key: str, chosen: Proposal) -> Step | None:
    """The step this call already is, when a replay or fork of the thread reaches it again: executed in
    this run under the same key (attempt and index), with the same action and arguments, in a world
    the fork shares. Taken as done, its tool does not run twice; None when the call is a new one.
    A step that ended the task is one too (an email that closed the ticket is not sent again by a
    fork before it); only the answer (`finish`, which changes nothing) is written again, and a step
    that a compensating step undid runs again.
    """
    if rewind_mode(env) in ("snapshot", "replay"):
        return None  # the world was put back with the branch: the step is to be run
    # the key names the run: another turn's step is never this one; an undone step is to be done again
    step = (await thread_record()).seen.standing(key, chosen)
    return None if step is None or answers(step) else step  # the answer is the reply's own


def answers(step: Mapping[str, Any]) -> bool:
    """The step is the run's answer (`finish`): it ends the task and touches nothing, so it is run again."""
    return bool(step.get("done")) and step.get("action") == FINISH


def executed_calls(trajectories: Iterable[list[Step]]) -> list[Call]:
    """Each executed step once (branches share their prefix), less those a compensating step undid."""
    seen = Seen()
    for trajectory in trajectories:
        seen.add(trajectory)
    return seen.calls()


@dataclass
class Seen:
    """What the trajectories read so far executed: each step once by its id (branches share their
    prefix), the steps a compensating step undid, and the reviews executions spent. Kept per thread
    and run between reads, so a read takes only the checkpoints written since the last one.
    """

    done: dict[str, Call] = field(default_factory=dict)
    undone: set[str] = field(default_factory=set)
    spent: set[str] = field(default_factory=set)
    steps: dict[str, dict[str, Step]] = field(default_factory=dict)
    """The executed steps by their idempotency key (`Step.key`), then by id: branches may run different
    calls under one key (a fork's model proposes anew), and each of them ran in the world."""

    def add(self, trajectory: list[Step]) -> None:
        ids = {step["index"]: step_id(step) for step in trajectory}
        for step in trajectory:
            if not step.get("error"):  # the tool raised: the world did not change
                self.done.setdefault(ids[step["index"]], (step["action"], step.get("arguments") or {}))
                if step.get("key"):
                    self.steps.setdefault(step["key"], {}).setdefault(ids[step["index"]], step)
            if (undid := step.get("compensates")) is not None and undid in ids:
                self.undone.add(ids[undid])
            if step.get("review"):
                self.spent.add(step["review"])

    def merge(self, other: "Seen") -> None:
        for ident, call in other.done.items():
            self.done.setdefault(ident, call)
        for key, steps in other.steps.items():
            kept = self.steps.setdefault(key, {})
            for ident, step in steps.items():
                kept.setdefault(ident, step)
        self.undone |= other.undone
        self.spent |= other.spent

    def calls(self) -> list[Call]:
        return [call for ident, call in self.done.items() if ident not in self.undone]

    def ran(self, key: str, call: Mapping[str, Any]) -> list[Step]:
        """The steps that ran `call` (an action and its arguments) under `key`, in any branch."""
        return [step for step in self.steps.get(key, {}).values() if same_call(step, call)]

    def standing(self, key: str, call: Mapping[str, Any]) -> Step | None:
        """The step that ran `call` under `key` and that no compensating step undid, if any."""
        return next((step for step in self.ran(key, call) if step_id(step) not in self.undone), None)


def step_id(step: Step) -> str:
    """A step the same in every branch that shares it: its review, else the checkpoint it ran from."""
    return step.get("review") or f"{step.get('checkpoint_id')}:{step['index']}"


WRITTEN = "pivotal:"
"""The task id prefix of the writes the middleware puts beside a checkpoint itself (`put_writes`): an
irreversible call's intent before its tool runs, the reviews a paused delegation made. No task of
the graph has such an id, so LangGraph passes over them; the thread's record reads them."""
REVIEWS = "pivotal_reviews"
"""The `create_agent` middleware's record of each reviewed tool call (`executed` when it ran)."""
STARTED_STEPS = "pivotal_started"
"""The graph executor's notes beside its checkpoint (`note_started`): no channel of the graph, so
LangGraph passes over them; the thread's record reads them."""
VERDICTS = "pivotal_verdicts"
"""The middleware's verdicts, written when the model proposed the calls, by `verdict_key`."""


@dataclass
class ThreadRecord:
    """What a thread's checkpoints read so far hold, every branch and every turn: the graph's
    executed steps (`seen`), and a `create_agent` agent's executed tool calls and verdicts.
    """

    saver: BaseCheckpointSaver | None
    newest: str = ""
    seen: Seen = field(default_factory=Seen)
    ran: dict[str, Call] = field(default_factory=dict)
    """The middleware's executed tool calls by tool call id, oldest first."""
    observations: dict[str, str] = field(default_factory=dict)
    """What each of those calls returned (as recorded: clipped, secrets blanked), by tool call id."""
    places: dict[str, list[str]] = field(default_factory=dict)
    """Those calls by their place in their turn (the middleware's `step`: turn, reply, call), as tool
    call ids: a fork that re-runs the model meets the same call again under a new id, and branches may
    have run different calls at one place (a fork's model proposing anew), each of them in the world."""
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The middleware's irreversible calls written down just before their tool ran (`WRITTEN`), by id."""
    settled: set[str] = field(default_factory=set)
    """The calls whose review a checkpoint holds: ran, or not; an intent of one of them is no news."""
    starts: dict[str, int] = field(default_factory=dict)
    """Per call: intents less withdrawals (its tool paused for a person: it runs again on resume)."""
    steps_started: dict[str, tuple[int, Call]] = field(default_factory=dict)
    """The graph executor's irreversible calls by step key: notes less withdrawals (the tool raised), the call."""

    def started_steps(self) -> dict[str, Call]:
        """The graph's irreversible steps whose tool started and did not raise, checkpointed or not."""
        return {key: call for key, (count, call) in self.steps_started.items() if count > 0}

    def in_flight(self) -> dict[str, dict[str, Any]]:
        """The irreversible calls whose tool started and whose end no checkpoint holds: a process
        stopped (kill -9) while they ran. They may have acted, so they are taken as run, never run again.
        """
        return {i: entry for i, entry in self.intents.items() if self.starts.get(i, 0) > 0 and i not in self.settled}

    def written(self, writes: Iterable[Any]) -> None:
        """Pivotal's own writes beside a checkpoint (`WRITTEN`): the intents and their withdrawals, and
        the reviews a delegation kept at a pause.
        """
        for task, channel, value in writes:
            if str(task).startswith(WRITTEN) and channel == STARTED_STEPS:
                self._step_noted(value or [])
            if not str(task).startswith(WRITTEN) or channel != REVIEWS:
                continue
            for entry in value or []:
                call_id = entry.get("tool_call_id") or ""
                if entry.get("in_flight") is not None:
                    self.intents.setdefault(call_id, entry)
                    self.starts[call_id] = self.starts.get(call_id, 0) + (1 if entry["in_flight"] else -1)
                else:
                    self.add({REVIEWS: [entry]})

    def _step_noted(self, notes: list[dict[str, Any]]) -> None:
        for note in notes:
            count, call = self.steps_started.get(note["key"], (0, ("", {})))
            if note.get("started"):
                call = (note["action"], note.get("arguments") or {})
            self.steps_started[note["key"]] = (count + (1 if note.get("started") else -1), call)

    def add(self, values: object) -> None:
        if not isinstance(values, Mapping):
            return
        if values.get("run_id"):  # a Pivotal graph's state
            self.seen.add(values.get("trajectory") or [])
        for entry in values.get(REVIEWS) or []:
            self.settled.add(entry.get("tool_call_id") or "")
            if entry.get("executed"):
                call_id = entry.get("tool_call_id") or ""
                self.ran.setdefault(call_id, (entry["action"], entry.get("arguments") or {}))
                self.observations.setdefault(call_id, str(entry.get("observation") or ""))
                if entry.get("step") and call_id not in (here := self.places.setdefault(entry["step"], [])):
                    here.append(call_id)
        for key, verdict in (values.get(VERDICTS) or {}).items():
            self.verdicts.setdefault(key, verdict)


def verdict_key(call_id: str, action: str, arguments: dict[str, Any]) -> str:
    """One model reply's call, whatever branch replays it: its id, tool and canonical arguments."""
    return _canonical([call_id, action, arguments])


_reads: dict[tuple[int, str, str], ThreadRecord] = {}
"""Per (checkpointer, thread, graph path): checkpoint ids are time-ordered and a checkpoint never
changes, so each read goes back only to the newest one read before (a long conversation, or a thread
forked many times, would otherwise be read whole at every irreversible proposal)."""


def read_whole_next(thread: str) -> None:
    """The next read of `thread` goes back to its first checkpoint. A turn that waited for another (or
    stopped it) must see what that turn wrote beside a checkpoint this process had read already: an
    intent another process put there (`put_beside` forgets only its own process's reads).
    """
    for key in [key for key in _reads if key[1] == thread]:
        _reads.pop(key, None)


async def thread_record(config: Mapping[str, Any] | None = None) -> ThreadRecord:
    """What every checkpoint of this thread holds, all branches and turns, for this graph: its own
    namespace, or for a subgraph every task's namespace of the same path (`graph_path`).

    `config`: the node's config (a tool's `runtime.config`); else the running node's own. Outside a
    graph, or without a checkpointer, the record is empty: there is no thread to read.
    """
    if config is None:
        try:
            config = get_config()
        except RuntimeError:
            return ThreadRecord(None)
    configurable = config.get("configurable") or {}
    saver: BaseCheckpointSaver | None = configurable.get(CONFIG_KEY_CHECKPOINTER)
    thread = configurable.get("thread_id")
    if saver is None or thread is None:
        return ThreadRecord(None)
    # a node's own namespace is its graph's plus "|node:task" (where a subgraph of it would checkpoint)
    path = graph_path("|".join(str(configurable.get("checkpoint_ns", "")).split("|")[:-1]))
    key = (id(saver), str(thread), path)
    read = _reads.get(key)
    if read is None or read.saver is not saver:
        if len(_reads) > 4096:
            _reads.clear()
        read = _reads[key] = ThreadRecord(saver)
    # the root graph is one namespace; a subgraph's tasks (a fork or a new submit of the parent runs the
    # node as a new task) have one each, so the listing takes every namespace and keeps this path's
    query: RunnableConfig = {"configurable": {"thread_id": thread, **({} if path else {"checkpoint_ns": ""})}}
    listing = _Listing(path, read.newest, ordered=not path or type(saver).__name__ in _NEWEST_FIRST)
    try:
        newer = await _newer(saver, query, listing)
    except NotImplementedError:  # a synchronous saver (SqliteSaver)
        newer = await asyncio.to_thread(_newer_sync, saver, query, listing)
    for checkpoint_id, values, writes in sorted(newer, key=lambda found: found[0]):  # oldest first
        read.add(values)
        read.written(writes)
        read.newest = max(read.newest, checkpoint_id)
    return read


def graph_path(namespace: str) -> str:
    """A checkpoint namespace without its task ids (`agent:abc|x:def` → `agent|x`): the same node of
    the same graph in every task that ran it, so every run of the node in the thread counts.
    """
    return "|".join(part.split(":")[0] for part in namespace.split("|")) if namespace else ""


_NEWEST_FIRST = {"SqliteSaver", "AsyncSqliteSaver", "PostgresSaver", "AsyncPostgresSaver"}
"""Savers whose listing of a whole thread is newest first across namespaces (`ORDER BY checkpoint_id
DESC`); InMemorySaver lists namespace by namespace, so an unknown saver's listing is read to its end."""


@dataclass
class _Listing:
    """Which listed checkpoints a read takes: this graph path's, newer than the last read's newest."""

    path: str
    newest: str
    ordered: bool

    def take(self, item: CheckpointTuple) -> bool | None:
        """True to take the checkpoint, False to skip it, None: nothing newer follows."""
        if item.checkpoint["id"] <= self.newest:
            return None if self.ordered else False
        return graph_path(str(item.config["configurable"].get("checkpoint_ns", ""))) == self.path


@contextlib.asynccontextmanager
async def closed_listing(
    saver: BaseCheckpointSaver, query: RunnableConfig, limit: int | None = None
) -> AsyncIterator[AsyncIterator[CheckpointTuple]]:
    """A saver's listing, closed as soon as its reader is done: it holds the saver's lock until then."""
    items = saver.alist(query, limit=limit)
    try:
        yield items
    finally:
        if (close := getattr(items, "aclose", None)) is not None:
            await close()


async def _newer(
    saver: BaseCheckpointSaver, query: RunnableConfig, listing: _Listing
) -> list[tuple[str, Any, list[Any]]]:
    """The checkpoints `listing` takes, newest first; the listing is closed at once (it holds the saver's lock)."""
    found = []
    async with closed_listing(saver, query) as items:
        async for item in items:
            if (take := listing.take(item)) is None:
                break
            if take:
                found.append((item.checkpoint["id"], item.checkpoint["channel_values"], _pivotal_writes(item)))
    return found


def _newer_sync(
    saver: BaseCheckpointSaver, query: RunnableConfig, listing: _Listing
) -> list[tuple[str, Any, list[Any]]]:
    """As `_newer`; SqliteSaver's listing holds its lock too, closed here, not whenever it is collected."""
    found = []
    items = saver.list(query)
    try:
        for item in items:
            if (take := listing.take(item)) is None:
                break
            if take:
                found.append((item.checkpoint["id"], item.checkpoint["channel_values"], _pivotal_writes(item)))
    finally:
        if (close := getattr(items, "close", None)) is not None:
            close()
    return found


def _pivotal_writes(item: CheckpointTuple) -> list[Any]:
    return [w for w in getattr(item, "pending_writes", None) or [] if str(w[0]).startswith(WRITTEN)]


def _spec(env: Environment, action: str) -> ActionSpec | None:
    return next((spec for spec in env.describe_actions() if spec.name == action), None)


def _same(critique: Critique, chosen: Proposal) -> bool:
    return critique.get("action") == chosen.get("action") and _canonical(critique.get("arguments") or {}) == _canonical(
        chosen.get("arguments") or {}
    )


def _key(spec: ActionSpec, arguments: dict[str, Any]) -> str:
    named = {name: arguments.get(name) for name in spec.once_key} if spec.once_key else arguments
    return _canonical(named)


def _canonical(value: object) -> str:
    """One text per value: keys sorted, 20 and 20.0 alike (a model writes either), secrets blanked
    (a call read back from a checkpoint holds "[redacted]" where the live one held the key: the same call).
    """
    return json.dumps(_numbers(redact_tree(value)), sort_keys=True, default=str)


def _numbers(value: object) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_numbers(v) for v in value]
    return value
