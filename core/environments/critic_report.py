"""What an observe-only critic would have done, weighed against what then happened: per tool, how
often it would have blocked a call that turned out fine, and how often it let through one that
turned out bad, so a team turns enforcement on tool by tool from evidence (docs/observe.md).

Read from a thread's checkpoints, every branch and every namespace (a Pivotal graph run as a
parent's node too), on both faces: the graph's record (`critic_observed`, with the trajectory, the
person's verdicts and the run's outcome) and a `create_agent` agent's (`pivotal_verdicts` with
`pivotal_reviews`). A call turned out bad when its tool failed (raised or answered an error), a
person rejected or edited it, the reflector named its step the attempt's pivotal mistake, its run
ended in failure, or its run's lessons were revoked later (`revoked_runs`: the runs a team took back
with `pivotal lessons revoke --run`, which keeps no record of its own). It turned out fine when it ran
without error and, on the graph, its run succeeded; until then it is pending.
"""

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from pydantic import BaseModel

from pivotal.core.environments.once import REVIEWS, VERDICTS, step_key, verdict_key
from pivotal.core.errors import PivotalError
from pivotal.core.state import Observation, State, same_call

Outcome = Literal["fine", "failed", "rejected", "edited", "blamed", "task_failed", "revoked", "pending"]
BAD: frozenset[str] = frozenset({"failed", "rejected", "edited", "blamed", "task_failed", "revoked"})


class WatchedCall(BaseModel):
    """One call the critic watched: what it said, and what became of the call."""

    thread_id: str
    action: str
    arguments: dict[str, Any]
    decision: str
    would_block: bool
    diagnosis: str = ""
    outcome: Outcome
    run_id: str = ""
    review: str = ""
    """The review id (the graph) or tool call id (an agent) the record is keyed by."""


class ToolFigures(BaseModel):
    """One tool's figures; `would_block_but_fine` are false alarms, `let_through_but_bad` misses."""

    reviewed: int = 0
    would_block: int = 0
    would_block_but_fine: int = 0
    would_block_and_bad: int = 0
    let_through_and_fine: int = 0
    let_through_but_bad: int = 0
    pending: int = 0

    def add(self, call: WatchedCall) -> None:
        self.reviewed += 1
        self.would_block += call.would_block
        if call.outcome == "pending":
            self.pending += 1
        elif call.would_block:
            self.would_block_and_bad += call.outcome in BAD
            self.would_block_but_fine += call.outcome not in BAD
        else:
            self.let_through_but_bad += call.outcome in BAD
            self.let_through_and_fine += call.outcome not in BAD


class CriticReport(BaseModel):
    threads: int
    tools: dict[str, ToolFigures]
    calls: list[WatchedCall]


def critic_report(
    source: object, threads: Iterable[str] | None = None, *, revoked_runs: Iterable[str] = ()
) -> CriticReport:
    """Per tool figures over these threads (every thread of the checkpointer when None).

    `source`: a compiled graph or agent (its checkpointer is read) or a checkpointer itself. Inside a
    running event loop, or with an async saver, await `acritic_report` instead.
    """
    return asyncio.run(acritic_report(source, threads, revoked_runs=revoked_runs))


async def acritic_report(
    source: object, threads: Iterable[str] | None = None, *, revoked_runs: Iterable[str] = ()
) -> CriticReport:
    saver = checkpointer_of(source)
    wanted = list(dict.fromkeys(threads)) if threads is not None else await thread_ids(saver)
    revoked = set(revoked_runs)
    calls = []
    for thread in wanted:
        record = _Thread()
        for _, state, _ in await checkpoints(saver, {"configurable": {"thread_id": thread}}):
            record.add(state)
        calls += [*record.graph_calls(thread, revoked), *record.agent_calls(thread)]
    tools: dict[str, ToolFigures] = {}
    for call in calls:
        tools.setdefault(call.action, ToolFigures()).add(call)
    return CriticReport(threads=len(wanted), tools=dict(sorted(tools.items())), calls=calls)


def checkpointer_of(source: object) -> BaseCheckpointSaver:
    """A graph's checkpointer, or the checkpointer given; one line when there is none to read."""
    saver = getattr(source, "checkpointer", None) or source
    if not callable(getattr(saver, "alist", None)):
        raise PivotalError(
            f"reading a thread needs its checkpoints: pass a graph built with a checkpointer, or the "
            f"checkpointer itself (got {type(source).__name__})"
        )
    return cast(BaseCheckpointSaver, saver)


async def checkpoints(
    saver: BaseCheckpointSaver, query: RunnableConfig | None
) -> list[tuple[str, dict[str, Any], CheckpointTuple]]:
    """(checkpoint id, channel values, the checkpoint tuple) of what `query` lists, every namespace,
    oldest first; a synchronous saver (SqliteSaver) is read in a thread.
    """
    try:
        found = [item async for item in saver.alist(query)]
    except NotImplementedError:
        found = await asyncio.to_thread(lambda: list(saver.list(query)))
    found.sort(key=lambda item: item.checkpoint["id"])
    return [(item.checkpoint["id"], dict(item.checkpoint.get("channel_values") or {}), item) for item in found]


async def thread_ids(saver: BaseCheckpointSaver) -> list[str]:
    seen: dict[str, None] = {}
    for _, _, item in await checkpoints(saver, None):
        seen.setdefault(str(item.config["configurable"]["thread_id"]), None)
    return list(seen)


@dataclass
class _Thread:
    """What a thread's checkpoints hold that a watched call's outcome is read from."""

    observed: dict[str, Observation] = field(default_factory=dict)
    ran: dict[str, bool] = field(default_factory=dict)
    """Review id → whether its step raised (the graph)."""
    person: dict[str, str] = field(default_factory=dict)
    """Review id, or step key and call, → the person's decision after the watched verdict."""
    status: dict[str, str] = field(default_factory=dict)
    """Run id → how it ended (success, failure), the newest checkpoint's word."""
    blamed: set[str] = field(default_factory=set)
    """Step keys a reflection named the attempt's pivotal mistake."""
    agent: dict[str, Observation] = field(default_factory=dict)
    """An agent's watched verdicts by tool call id."""
    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """An agent's review entries by tool call id."""

    def add(self, state: dict[str, Any]) -> None:
        for entry in state.get("critic_observed") or []:
            self.observed.setdefault(entry.get("review", ""), entry)
        run = str(state.get("run_id") or "")
        for step in state.get("trajectory") or []:
            if step.get("review"):
                self.ran[step["review"]] = self.ran.get(step["review"], False) or bool(step.get("error"))
            self._people(step.get("verdicts") or [], step.get("key", ""))
        self._people(state.get("critiques") or [], step_key(cast(State, state)))
        for turn in state.get("turns") or []:
            if turn.get("run_id") and turn.get("status") in ("success", "failure"):
                self.status[turn["run_id"]] = turn["status"]
        if run and state.get("status") in ("success", "failure"):
            self.status[run] = state["status"]
        for reflection in state.get("reflections") or []:
            self.blamed.add(f"{run}:{reflection.get('attempt', 0)}:{reflection.get('pivotal_step', -1)}")
        for ruling in (state.get(VERDICTS) or {}).values():
            if isinstance(ruling, Mapping) and ruling.get("observed"):
                self.agent.setdefault(ruling["observed"].get("tool_call_id", ""), ruling["observed"])
        for entry in state.get(REVIEWS) or []:
            known = self.entries.setdefault(entry.get("tool_call_id") or "", [])
            if entry not in known:
                known.append(entry)

    def _people(self, critiques: list[dict[str, Any]], key: str) -> None:
        """A person's verdict that follows a watched one on the same call, in one step's critiques."""
        for i, critique in enumerate(critiques):
            if critique.get("source") != "observe":
                continue
            said = next((c for c in critiques[i + 1 :] if c.get("source") == "human" and same_call(c, critique)), None)
            if said is not None:
                decision = str(said.get("decision"))
                self.person[_place(key, critique)] = decision
                if critique.get("review"):
                    self.person[critique["review"]] = decision

    def graph_calls(self, thread: str, revoked: set[str]) -> list[WatchedCall]:
        calls = []
        for review, seen in self.observed.items():
            run = seen.get("run_id", "")
            person = self.person.get(review) or self.person.get(_place(seen.get("key", ""), seen))
            if self.ran.get(review):
                outcome: Outcome = "failed"
            elif person == "reject":
                outcome = "rejected"
            elif review in self.ran and seen.get("key", "") in self.blamed:
                outcome = "blamed"
            elif run in revoked:
                outcome = "revoked"
            elif self.status.get(run) == "failure":
                outcome = "task_failed"
            elif review in self.ran and self.status.get(run) == "success":
                outcome = "fine"
            else:
                outcome = "pending"
            calls.append(_call(thread, seen, outcome, review))
        return calls

    def agent_calls(self, thread: str) -> list[WatchedCall]:
        calls = []
        for call_id, seen in self.agent.items():
            entries = self.entries.get(call_id) or []
            if any(e.get("source") == "human" and e.get("decision") != "approve" for e in entries):
                outcome: Outcome = "rejected"
            elif any(e.get("source") == "human" and "edited" in str(e.get("diagnosis")) for e in entries):
                outcome = "edited"
            elif any(e.get("executed") for e in entries):
                outcome = "fine"
            elif any(e.get("decision") == "approve" and "observation" in e for e in entries):
                outcome = "failed"  # it was run and answered an error
            else:
                outcome = "pending"
            calls.append(_call(thread, seen, outcome, call_id))
        return calls


def _call(thread: str, seen: Observation, outcome: Outcome, review: str) -> WatchedCall:
    return WatchedCall(
        thread_id=thread,
        action=seen.get("action", ""),
        arguments=dict(seen.get("arguments") or {}),
        decision=seen.get("decision", ""),
        would_block=bool(seen.get("would_block")),
        diagnosis=seen.get("diagnosis", ""),
        outcome=outcome,
        run_id=seen.get("run_id", ""),
        review=review,
    )


def _place(key: str, call: Mapping[str, Any]) -> str:
    return f"{key}|{verdict_key('', str(call.get('action')), call.get('arguments') or {})}"
