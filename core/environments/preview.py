"""What a fork would do to the world, before it runs: each side effect recorded after the fork point,
and whether the fork would skip it, refuse it, ask a person first, or run it again.

LangGraph's time travel (Studio's fork, `invoke(None, config)` from an earlier checkpoint,
`update_state` then `invoke`) re-runs every node after the chosen checkpoint, tools included. What
stops a side effect from happening twice is the once-guard (pivotal.core.environments.once), and
it decides each call from the thread's checkpoints alone. This module reads the same checkpoints and
applies the same rules without running anything:

- the graph (`build_graph`, `create_pivotal_agent`): a step the fork reaches again under the same
  idempotency key with the same call is taken as done (`executed_step`): **skip**, a step that ended
  the task too. The answer (`finish`), a step a compensating step undid, or one that raised is run
  again: an irreversible one that already ran is a repeat, which the once-guard **refuses** unless
  `require_approval_for` names it, when a person is **asked** to re-approve it; any other is **run**
  (after the person, where one is asked).
  An environment that puts its world back with the branch (`snapshot`, `replay`) runs it again in there.
- a `create_agent` agent with `PivotalCritic`: a call that ran, met again at the same place of its turn
  (or under the same tool call id), gets its recorded result (`_executed`): **skip**. A call whose tool
  failed changed nothing and is **run** again (**ask**, where its recorded rules want a person).

Each answer assumes the fork proposes the call again as the first run did; a model that proposes
something else makes a new call, which the critic reviews and the once-guard still holds to once.
A graph run as a parent graph's node checkpoints in a namespace of its own: preview the namespace.
"""

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.checkpoint.base import CheckpointTuple
from pydantic import BaseModel

from pivotal.core.environments import make_environment
from pivotal.core.environments.base import ActionSpec, Environment, rewind_mode
from pivotal.core.environments.critic_report import checkpointer_of, checkpoints
from pivotal.core.environments.once import (
    REVIEWS,
    Seen,
    ThreadRecord,
    answers,
    irreversible,
    needs_person,
    repeat_reason,
)
from pivotal.core.errors import PivotalError
from pivotal.core.state import Proposal

Fate = Literal["skip", "refuse", "ask", "run"]
"""skip: its recorded result is used, nothing runs; refuse: the once-guard turns the repeat down;
ask: a person is asked first (it runs on their approval); run: it runs again."""


class PreviewedCall(BaseModel):
    action: str
    arguments: dict[str, Any]
    fate: Fate
    why: str
    recorded_at: str
    """The checkpoint that first held the call as executed (or failed)."""
    failed: bool = False
    """The tool raised or answered an error when it ran: the world did not change."""


class ForkPreview(BaseModel):
    thread_id: str
    checkpoint_id: str
    next: list[str] | None
    """The nodes the fork starts with (empty: the checkpoint ends its thread, nothing would run;
    None: only a checkpointer was given, which cannot say)."""
    calls: list[PreviewedCall]

    def fates(self) -> list[tuple[str, Fate]]:
        return [(call.action, call.fate) for call in self.calls]


def fork_preview(source: object, config: Mapping[str, Any] | str) -> ForkPreview:
    """What forking a thread at `config` would do to each side effect recorded after it.

    `source`: the compiled graph or agent, or its checkpointer, with `config` a snapshot's config
    (thread_id and checkpoint_id; without a checkpoint_id, the thread's latest); or a thread's history
    as a list (`graph.get_state_history(...)`, or a LangGraph server's `client.threads.get_history(...)`,
    which is how Studio's threads are read), with `config` the checkpoint id or a config naming it.
    Await `afork_preview` inside an event loop.
    """
    return asyncio.run(afork_preview(source, config))


async def afork_preview(source: object, config: Mapping[str, Any] | str) -> ForkPreview:
    configurable = {"checkpoint_id": config} if isinstance(config, str) else dict(config.get("configurable") or {})
    if isinstance(source, list | tuple):
        listed = [_from_history(state) for state in source]
        thread = configurable.get("thread_id") or next((c.thread for c in listed), "")
    else:
        thread = configurable.get("thread_id")
        if thread is None:
            raise PivotalError(
                "fork_preview needs the thread: pass a snapshot's config ({'configurable': {'thread_id': ...}})"
            )
        found = await checkpoints(checkpointer_of(source), {"configurable": {"thread_id": thread}})
        listed = [_from_saver(item) for _, _, item in found]
    namespace = str(configurable.get("checkpoint_ns", ""))
    listed = sorted((c for c in listed if c.namespace == namespace), key=lambda c: c.id)
    if not listed:
        raise PivotalError(f"thread {thread!r} has no checkpoints here: check the thread id and where it is kept")
    wanted = configurable.get("checkpoint_id") or listed[-1].id
    at = next((c for c in listed if c.id == wanted), None)
    if at is None:
        raise PivotalError(f"thread {thread!r} has no checkpoint {wanted!r}: take one from its history")
    after = _descendants(listed, wanted)
    if at.edited and at.parent:  # a state edit (`update_state`, Studio's edit) branches off its parent:
        after |= _descendants(listed, at.parent) - {wanted}  # what the parent went on to do is ahead of it
    later = [(c.id, c.values) for c in listed if c.id in after]
    everything = [(c.id, c.values) for c in listed]
    if any(state.get("run_id") or state.get("trajectory") for _, state in [*later, (wanted, at.values)]):
        calls = _graph_calls(at.values, later, everything)
    else:
        calls = _agent_calls(at.values, later, everything)
    shown = at.next if at.next is not None else await _next(source, at.config)
    return ForkPreview(thread_id=str(thread), checkpoint_id=wanted, next=shown, calls=calls)


@dataclass
class _Checkpoint:
    """One checkpoint of the thread, however it was read."""

    id: str
    parent: str | None
    values: dict[str, Any]
    namespace: str
    thread: str
    config: dict[str, Any]
    next: list[str] | None = None
    edited: bool = False
    """Written by `update_state` (a state edit before a fork), not by a node."""


def _from_saver(item: CheckpointTuple) -> _Checkpoint:
    configurable = item.config["configurable"]
    parent = ((item.parent_config or {}).get("configurable") or {}).get("checkpoint_id")
    values = dict(item.checkpoint.get("channel_values") or {})
    namespace = str(configurable.get("checkpoint_ns", ""))
    edited = (item.metadata or {}).get("source") == "update"
    return _Checkpoint(item.checkpoint["id"], parent, values, namespace, str(configurable["thread_id"]),
                       dict(item.config), edited=edited)  # fmt: skip


def _from_history(state: Any) -> _Checkpoint:
    """A `StateSnapshot`, or a LangGraph server's thread state (a dict: values, next, checkpoint, parent_checkpoint)."""
    if isinstance(state, Mapping):
        own, parent = state.get("checkpoint") or {}, state.get("parent_checkpoint") or {}
        config = {"configurable": dict(own)}
        values, shown, metadata = state.get("values"), state.get("next"), state.get("metadata")
    else:
        config, values, shown, metadata = dict(state.config), state.values, state.next, state.metadata
        parent = (getattr(state, "parent_config", None) or {}).get("configurable") or {}
        own = config.get("configurable") or {}
    if not isinstance(values, Mapping) or not own.get("checkpoint_id"):
        raise PivotalError(
            "a history entry must be a state snapshot (graph.get_state_history) or a server's thread state "
            f"(client.threads.get_history), not {type(state).__name__}"
        )
    return _Checkpoint(str(own["checkpoint_id"]), parent.get("checkpoint_id"), dict(values),
                       str(own.get("checkpoint_ns", "")), str(own.get("thread_id", "")), config,
                       list(shown) if shown is not None else None,
                       edited=(metadata or {}).get("source") == "update")  # fmt: skip


async def _next(source: object, config: Mapping[str, Any]) -> list[str] | None:
    """The nodes the fork starts with, as the graph says (None: only a checkpointer was given)."""
    aget_state, get_state = getattr(source, "aget_state", None), getattr(source, "get_state", None)
    if not callable(aget_state) or not callable(get_state):
        return None
    try:
        return list((await aget_state(config)).next)
    except NotImplementedError:  # a synchronous saver
        return list(get_state(config).next)


def _descendants(listed: list[_Checkpoint], root: str) -> set[str]:
    """The checkpoints written after `root` in the branches that go through it."""
    children: dict[str, list[str]] = {}
    for checkpoint in listed:
        if checkpoint.parent:
            children.setdefault(checkpoint.parent, []).append(checkpoint.id)
    found: set[str] = set()
    todo = list(children.get(root, []))
    while todo:
        cid = todo.pop()
        if cid not in found:
            found.add(cid)
            todo += children.get(cid, [])
    return found


# --- the graph ---------------------------------------------------------------------------------


def _graph_calls(
    fork_state: dict[str, Any], later: list[tuple[str, dict[str, Any]]], everything: list[tuple[str, dict[str, Any]]]
) -> list[PreviewedCall]:
    task = fork_state.get("task") or next((s["task"] for _, s in later if s.get("task")), None)
    if not isinstance(task, Mapping):
        return []
    env = make_environment(str(task.get("env", "gridworld")))
    finals = {spec.name for spec in env.describe_actions() if spec.final}
    thread = Seen()
    for _, state in everything:
        thread.add(state.get("trajectory") or [])
    settings: dict[str, Any] = fork_state.get("run_settings") or next(
        (s["run_settings"] for _, s in later if s.get("run_settings")), {}
    )
    wanted = list(settings.get("require_approval_for") or [])
    had = {_ident(step) for step in fork_state.get("trajectory") or []}
    seen: set[tuple[str, ...]] = set()
    calls = []
    for cid, state in later:
        for step in state.get("trajectory") or []:
            ident = _ident(step)
            if ident in had or ident in seen or step["action"] in finals:
                continue
            seen.add(ident)
            fate, why = _graph_fate(env, thread, step, wanted, list(task.get("allow_repeat") or []))
            calls.append(_previewed(step, fate, why, cid, bool(step.get("error"))))
    return calls


def _graph_fate(
    env: Environment, thread: Seen, step: dict[str, Any], wanted: list[str], allow: list[str]
) -> tuple[Fate, str]:
    if rewind_mode(env) in ("snapshot", "replay"):
        return "run", "the environment puts its world back with the branch: the step runs again in it"
    proposal: Proposal = {"action": step["action"], "arguments": step.get("arguments") or {}}
    key = step.get("key") or ""
    recorded = thread.standing(key, step)
    undone = recorded is None and bool(thread.ran(key, step))
    if recorded is not None and not answers(recorded):
        return "skip", "executed in this run under the same step key: its recorded result is used"
    person = needs_person(wanted, env, proposal)
    why = _again(step, undone)
    if irreversible(env, step["action"]):
        repeat = repeat_reason(env, step["action"], proposal["arguments"], thread.calls(), allow=allow)
        if repeat and person:
            return "ask", f"{why}; a repeat of an irreversible call: a person is asked to re-approve it"
        if repeat:
            return "refuse", f"{why}; the once-guard refuses the repeat of an irreversible call"
    if person:
        return "ask", f"{why}: it runs again once a person approves it (require_approval_for)"
    return "run", f"{why}: it runs again"


def _again(step: Mapping[str, Any], undone: bool) -> str:
    """Why a recorded step is not taken as done."""
    if step.get("error"):
        return "it raised, so nothing changed"
    if answers(step):
        return "it is the run's answer (finish), written again"
    return "a compensating step undid it" if undone else "it is not this run's step at this key"


def _ident(step: Mapping[str, Any]) -> tuple[str, ...]:
    """A step the same in every branch that holds it: its key and call (a reused step has a new review)."""
    key = step.get("key") or f"{step.get('checkpoint_id')}:{step.get('index')}"
    return (key, *_call(step))


# --- a create_agent agent ----------------------------------------------------------------------


def _agent_calls(
    fork_state: dict[str, Any], later: list[tuple[str, dict[str, Any]]], everything: list[tuple[str, dict[str, Any]]]
) -> list[PreviewedCall]:
    had = {entry.get("tool_call_id") for entry in fork_state.get(REVIEWS) or []}
    thread = ThreadRecord(None)
    for _, state in everything:
        thread.add(state)
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for cid, state in later:
        for entry in state.get(REVIEWS) or []:
            call_id = entry.get("tool_call_id") or ""
            if call_id in had or entry.get("replayed") or not (entry.get("executed") or _failed(entry)):
                continue
            known = found.get(call_id)
            if known is None or (entry.get("executed") and not known[1].get("executed")):
                found[call_id] = (known[0] if known else cid, entry)  # a run of it in any branch is what counts
    return [_agent_call(thread, call_id, entry, cid) for call_id, (cid, entry) in found.items()]


def _agent_call(thread: ThreadRecord, call_id: str, entry: dict[str, Any], recorded_at: str) -> PreviewedCall:
    """As the tool wrapper decides (`_executed`): a call that ran in the thread, by its id or at its place."""
    earlier = thread.places.get(entry.get("step") or "", [])
    if call_id in thread.ran or any(_call_of(thread.ran.get(e)) == _call(entry) for e in earlier):
        why = "it ran in this thread: met again (its id, or its place in its turn), its recorded result is returned"
        return _previewed(entry, "skip", why, recorded_at, _failed(entry))
    rules = _rules(thread.verdicts, call_id)
    called: Proposal = {"action": entry["action"], "arguments": entry.get("arguments") or {}}
    person = needs_person(rules.get("require_approval_for") or [], _Named(rules), called)  # type: ignore[arg-type]
    why = "its tool failed, so nothing changed: " + (
        "it runs again once a person approves it" if person else "it runs again"
    )
    return _previewed(entry, "ask" if person else "run", why, recorded_at, True)


def _call_of(ran: tuple[str, dict[str, Any]] | None) -> tuple[str, str] | None:
    return None if ran is None else _call({"action": ran[0], "arguments": ran[1]})


def _failed(entry: Mapping[str, Any]) -> bool:
    """Let through and run, but its tool answered an error: the world did not change."""
    return not entry.get("executed") and entry.get("decision") == "approve" and "observation" in entry


def _rules(verdicts: Mapping[str, Any], call_id: str) -> dict[str, Any]:
    """The rules the call's verdict was given under (its verdict key starts with its call id)."""
    for key, ruling in verdicts.items():
        if key.startswith(f'["{call_id}",') and isinstance(ruling, Mapping):
            return dict(ruling.get("rules") or {})
    return {}


class _Named:
    """The actions a verdict's rules name irreversible, as an environment describes them to `needs_person`."""

    def __init__(self, rules: Mapping[str, Any]) -> None:
        self.specs = [ActionSpec(name, "", irreversible=True) for name in rules.get("irreversible") or []]

    def describe_actions(self) -> list[Any]:
        return self.specs


# --- both ----------------------------------------------------------------------------------------


def _call(step: Mapping[str, Any]) -> tuple[str, str]:
    return str(step.get("action")), json.dumps(step.get("arguments") or {}, sort_keys=True, default=str)


def _previewed(step: Mapping[str, Any], fate: Fate, why: str, recorded_at: str, failed: bool) -> PreviewedCall:
    return PreviewedCall(
        action=str(step.get("action")),
        arguments=dict(step.get("arguments") or {}),
        fate=fate,
        why=why,
        recorded_at=recorded_at,
        failed=failed,
    )
