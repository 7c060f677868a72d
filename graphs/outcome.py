"""`result(output)`: what any face of Pivotal returned, as one typed result.

An application gets dicts back from `invoke`, `ainvoke` and `stream`, shaped by the face it used:
the graph's state (`build_graph`, `create_pivotal_agent`), a `create_agent` agent's state with the
critic's and the lessons' keys (`PivotalCritic`, `PivotalMemory`), or a parent graph's state with
`pivotal_result` in it. Each face keeps what it keeps; this reads every one of them into the same
`Result`, so an app reads `result.answer` instead of keys it must know by face.

The keys are read by name: the agent's state shapes live in `pivotal.middleware`, a layer above.
"""

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.types import GraphOutput
from pydantic import BaseModel, Field

from pivotal.core.errors import PivotalError
from pivotal.core.state import add_counts, turn_counts

Face = Literal["graph", "agent", "node"]


class StepRecord(BaseModel):
    """One tool call or action that ran in the world (or, `replayed`, whose recorded result a fork reused)."""

    index: int
    action: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    observation: str = Field("", description="what it returned (not kept in a parent's `pivotal_result`)")
    error: bool = Field(False, description="it raised: nothing changed")
    replayed: bool = Field(False, description="a fork met a call that had run: its recorded result, nothing ran")


class ReviewRecord(BaseModel):
    """One verdict on one proposed call: the pre-check's, the once-guard's, the critic's or a person's."""

    action: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    decision: str = Field(description="approve, revise or reject")
    source: str = Field("", description="who decided: precheck, guard, critic, critic-advisory, human, ...")
    confidence: float | None = None
    diagnosis: str = ""
    executed: bool = Field(False, description="the call it judged then ran")


class LessonRecord(BaseModel):
    """A lesson this run recalled, or drafted and the gate approved or rejected."""

    use: Literal["recalled", "approved", "rejected"]
    id: str = ""
    kind: str = ""
    text: str = ""


class Usage(BaseModel):
    """Model calls and tokens, in all and per role (actor, critic, ..., `agent` for an agent's own model)."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    by_role: dict[str, dict[str, float]] = Field(default_factory=dict)


class Result(BaseModel):
    """What one run (one turn of a thread) came to, read from whichever face ran it (`face`)."""

    face: Face
    status: Literal["success", "failure", "interrupted", "running"]
    answer: str = Field("", description="the final answer (a failed run: empty; see reason)")
    reason: str = ""
    verified: bool = Field(False, description="True only when something other than the agent checked success")
    run_id: str = ""
    steps: list[StepRecord] = Field(default_factory=list)
    reviews: list[ReviewRecord] = Field(default_factory=list)
    approvals: list[ReviewRecord] = Field(default_factory=list, description="the reviews a person gave")
    lessons: list[LessonRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    retries: int = 0
    interrupts: list[Any] = Field(default_factory=list, description="status interrupted: what a person is asked")


def result(output: object) -> Result:
    """The typed result of any output of `invoke`/`ainvoke`, or the last value of `stream`/`astream`.

    The graph's values (or its last `updates` chunk), a `create_agent` agent's state, a parent graph's
    state holding `pivotal_result`; a chunk streamed with several modes or with subgraphs
    (`(mode, value)`, `(namespace, value)`, `(namespace, mode, value)`) is read for its value.
    Anything else is refused in one line.
    """
    values = _value(output)
    interrupts = [getattr(i, "value", i) for i in values.get("__interrupt__") or ()]
    if "trajectory" in values or ("run_id" in values and "status" in values):
        found = _from_graph(values)
    elif isinstance(values.get("pivotal_result"), Mapping):
        found = _from_node(values["pivotal_result"])
    elif "messages" in values:
        found = _from_agent(values)
    elif interrupts:
        found = Result(face="graph", status="interrupted")
    else:
        raise PivotalError(
            f"result() reads what a Pivotal graph, agent or parent graph returned; this has none of their keys "
            f"({', '.join(map(str, list(values)[:6])) or 'empty'}): pass the value invoke or stream gave"
        )
    if interrupts:
        found = found.model_copy(update={"status": "interrupted", "interrupts": interrupts})
    return found


def _value(output: object) -> Mapping[str, Any]:
    """The state (or update) inside what a call returned."""
    if isinstance(output, tuple) and output and isinstance(output[-1], Mapping):
        output = output[-1]  # (mode, value), (namespace, value), (namespace, mode, value)
    if isinstance(output, GraphOutput):  # invoke(..., version="v2")
        output = _with_interrupts(output.value, output.interrupts)
    elif isinstance(output, Mapping) and {"type", "ns", "data"} <= output.keys():  # stream(..., version="v2")
        output = _with_interrupts(output["data"], output.get("interrupts") or ())
    if not isinstance(output, Mapping):
        raise PivotalError(
            f"result() takes the dict that invoke or stream returned, not {type(output).__name__}; "
            "pass the output itself (with stream, its last value)"
        )
    if len(output) == 1 and not _known(output):  # an `updates` chunk: {node: its update}
        (inner,) = output.values()
        if isinstance(inner, Mapping):
            return inner
    return output


def _with_interrupts(values: object, interrupts: tuple[Any, ...]) -> Any:
    return {**values, "__interrupt__": interrupts} if interrupts and isinstance(values, Mapping) else values


def _known(values: Mapping[str, Any]) -> bool:
    return any(key in values for key in ("messages", "pivotal_result", "trajectory", "status", "__interrupt__"))


def _from_graph(values: Mapping[str, Any]) -> Result:
    trajectory = values.get("trajectory") or []
    steps = [
        StepRecord(index=s.get("index", i), action=s["action"], arguments=s.get("arguments") or {},
                   observation=s.get("observation", ""), error=bool(s.get("error")))
        for i, s in enumerate(trajectory)
    ]  # fmt: skip
    reviews = [
        _review(verdict, executed=place == len(step.get("verdicts") or []) - 1)  # the last one chose what ran
        for step in trajectory
        for place, verdict in enumerate(step.get("verdicts") or [])
    ]
    lessons = [LessonRecord(use="recalled", id=i) for i in values.get("recalled") or []]
    lessons += [
        LessonRecord(use="approved" if c.get("verdict") == "approve" else "rejected", kind=c.get("kind", ""),
                     text=c.get("text", ""))
        for c in values.get("candidates") or [] if c.get("verdict")
    ]  # fmt: skip
    return Result(
        face="graph",
        **_ending(values),
        steps=steps,
        reviews=reviews,
        approvals=[r for r in reviews if r.source == "human"],
        lessons=lessons,
    )


def _ending(values: Mapping[str, Any]) -> dict[str, Any]:
    """How a run ended, read alike from the graph's state and a parent's `pivotal_result`."""
    status = values.get("status") or "running"
    return {
        "status": status,
        "answer": str(values.get("answer") or "") if status == "success" else "",
        "reason": str(values.get("reason") or ""),
        "verified": status == "success" and values.get("verified", True) is not False,
        "run_id": str(values.get("run_id") or ""),
        "usage": _usage(turn_counts(values, "usage")),
        "retries": int(values.get("retries") or 0),
    }


def _from_node(outcome: Mapping[str, Any]) -> Result:
    """A parent's `pivotal_result`: the outcome, the actions that ran and the usage; no observations or verdicts."""
    steps = [
        StepRecord(index=i, action=a, arguments=args or {}) for i, (a, args) in enumerate(outcome.get("actions") or [])
    ]
    return Result(face="node", **_ending(outcome), steps=steps)


def _from_agent(values: Mapping[str, Any]) -> Result:
    """A `create_agent` agent's turn: the messages since the user's last one, joined with the critic's
    reviews (`pivotal_reviews`) and the lessons' keys (`pivotal_lessons`, `pivotal_memory`).
    """
    turn = _turn(values.get("messages") or [])
    calls = [call for message in turn if isinstance(message, AIMessage) for call in message.tool_calls]
    ids = {call.get("id") for call in calls}
    entries = [e for e in values.get("pivotal_reviews") or [] if e.get("tool_call_id") in ids]
    reviews = [_review(e, executed=bool(e.get("executed"))) for e in entries if e.get("source") != "replay"]
    last = turn[-1] if turn else None
    answer = last.text if isinstance(last, AIMessage) and not last.tool_calls else ""
    stop = str(values.get("pivotal_stop") or "")
    status = "failure" if stop else "success" if answer else "running"
    return Result(
        face="agent",
        status=status,
        answer=answer if status == "success" else "",
        reason=stop,
        verified=False,
        run_id=str(values.get("pivotal_run") or ""),
        steps=_agent_steps(calls, entries, {m.tool_call_id: m for m in turn if isinstance(m, ToolMessage)}),
        reviews=reviews,
        approvals=[r for r in reviews if r.source == "human"],
        lessons=_agent_lessons(values),
        usage=_usage(_agent_usage(turn, entries, values.get("pivotal_memory") or {})),
    )


def _agent_steps(
    calls: list[Any], entries: list[Mapping[str, Any]], answers: Mapping[str, ToolMessage]
) -> list[StepRecord]:
    """The calls that ran: approved (or unreviewed) and answered; one whose tool raised is a step with
    `error`, as in the graph. A call the critic or a person sent back never ran: no step.
    """
    reviewed = {entry.get("tool_call_id"): entry for entry in entries}
    steps: list[StepRecord] = []
    for call in calls:
        entry, answer = reviewed.get(call.get("id")), answers.get(call.get("id") or "")
        if entry is not None and entry.get("decision") != "approve":
            continue  # sent back
        if answer is None and not (entry or {}).get("executed"):
            continue  # not run (yet)
        ran = bool(entry.get("executed")) if entry is not None else answer is not None and answer.status != "error"
        said = (entry or {}).get("observation") or (answer.content if answer is not None else "")
        steps.append(StepRecord(index=len(steps), action=call["name"], arguments=call.get("args") or {},
                                observation=str(said), error=not ran,
                                replayed=bool(entry and entry.get("replayed"))))  # fmt: skip
    return steps


def _turn(messages: list[BaseMessage]) -> list[BaseMessage]:
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    return list(messages[start + 1 :])


def _agent_usage(turn: list[BaseMessage], entries: Iterable[Mapping[str, Any]], memory: Mapping[str, Any]) -> dict:
    """The agent's own model (from its replies' usage), the critic's reviews and the lesson roles."""
    usage: dict[str, Any] = {}
    for message in turn:
        tokens = getattr(message, "usage_metadata", None) if isinstance(message, AIMessage) else None
        if tokens:
            agent = {
                "calls": 1,
                "input_tokens": tokens.get("input_tokens", 0),
                "output_tokens": tokens.get("output_tokens", 0),
            }
            usage = add_counts(usage, {"agent": agent})
    for entry in entries:
        usage = add_counts(usage, entry.get("usage") or {})
    return add_counts(usage, memory.get("usage") or {})


def _agent_lessons(values: Mapping[str, Any]) -> list[LessonRecord]:
    recalled = [
        LessonRecord(use="recalled", id=lesson.get("id", ""), kind=lesson.get("kind", ""), text=lesson.get("text", ""))
        for lesson in values.get("pivotal_lessons") or []
    ]
    written = [LessonRecord(use="approved", id=i) for i in (values.get("pivotal_memory") or {}).get("written") or []]
    return recalled + written


def _review(verdict: Mapping[str, Any], *, executed: bool) -> ReviewRecord:
    confidence = verdict.get("confidence")
    return ReviewRecord(
        action=str(verdict.get("action") or ""),
        arguments=verdict.get("arguments") or {},
        decision=str(verdict.get("decision") or ""),
        source=str(verdict.get("source") or ""),
        confidence=float(confidence) if isinstance(confidence, int | float) else None,
        diagnosis=str(verdict.get("diagnosis") or ""),
        executed=executed,
    )


def _usage(by_role: Mapping[str, Any]) -> Usage:
    roles = {role: dict(numbers) for role, numbers in by_role.items() if isinstance(numbers, Mapping)}
    return Usage(
        llm_calls=int(sum(r.get("calls", 0) for r in roles.values())),
        input_tokens=int(sum(r.get("input_tokens", 0) for r in roles.values())),
        output_tokens=int(sum(r.get("output_tokens", 0) for r in roles.values())),
        by_role=roles,
    )
