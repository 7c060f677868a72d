"""Pause for a person before an action the context says needs one (`require_approval_for`).

A node of its own, after the critic, because `interrupt()` re-runs its node from the top on
resume: here that repeats nothing but the question, never a paid critic call. A replay or fork
that reaches a step this run already executed, with the same call, asks no one: the executor takes
that step as done (`executed_step`), so there is nothing left to approve.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypeAlias

from langgraph.runtime import Runtime
from langgraph.types import interrupt
from typing_extensions import TypedDict

from pivotal.core.context import Context
from pivotal.core.environments import require_environment
from pivotal.core.environments.live import attach
from pivotal.core.environments.once import executed_step, step_key
from pivotal.core.secrets import redact
from pivotal.core.state import ApprovalUpdate, Critique, Proposal, State, task_of

if TYPE_CHECKING:  # LangChain's agent middleware loads only where an agent uses it (0.3 s)
    from langchain.agents.middleware.human_in_the_loop import Decision, HITLResponse

QUESTION = 'Approve this action? Resume with {"decision": "approve" | "reject", "reason": "..."}.'
AGAIN = 'Only a person can run it again: answer {"type": "approve", "repeat": true}'
"""Asked when the call repeats an executed irreversible one (the once-guard's reason comes first)."""


class ApprovalRequest(TypedDict):
    """What the graph's pause shows a person (the interrupt's value)."""

    question: str
    repeat: NotRequired[str]
    """The once-guard's reason, when the call repeats an executed irreversible one."""
    action: str
    arguments: dict[str, Any]
    thought: str
    critic: str
    """The critic's diagnosis of the call."""
    step: int


class PersonDecision(TypedDict, total=False):
    """Pivotal's own form of a reply (or a bare word: "approve", "no")."""

    decision: str
    reason: str
    repeat: bool
    """True re-approves a call that repeats an executed irreversible one."""


Reply: TypeAlias = "str | PersonDecision | Decision | HITLResponse"
"""What a resume may send: Pivotal's decision, or LangChain's HumanInTheLoopMiddleware `Decision`
(`{"type": "approve"}`, `{"type": "reject", "message": ...}`, `{"type": "edit", "edited_action": ...}`)
alone or as the one decision of a `HITLResponse` (`{"decisions": [...]}`); anything else is read too,
as a rejection."""


@dataclass(frozen=True)
class PersonSaid:
    """A reply to a pause, read once (`person_said`): the graph and the middleware act on this, never
    on the raw reply.
    """

    decision: Literal["approve", "reject"]
    reason: str
    """The person's words (secrets blanked), or why the reply was read as a rejection."""
    repeat: bool = False
    """An explicit re-approval of a repeat: an approval that says `"repeat": true`."""
    edited: dict[str, Any] | None = None
    """LangChain's `edit`: the arguments the person wrote. The middleware runs the call with them;
    the graph, whose calls a person approves or rejects, reads it as a rejection (`decision`)."""


async def human_approval(state: State, runtime: Runtime[Context]) -> ApprovalUpdate:
    chosen = state["chosen"] or {}
    critiques = state.get("critiques", [])
    task = task_of(state)
    # before the reply is read: a resume where the action cannot run leaves the decision unspent
    require_environment(task.env)
    live, _ = await attach(state["run_id"], task, state["trajectory"], runtime.context.step_timeout)
    if await executed_step(live.env, state, step_key(state), chosen):
        return {"chosen": {**chosen, "needs_approval": False}}
    repeat = chosen.get("repeat", "")
    request: ApprovalRequest = {
        "question": f"{repeat}. {AGAIN}" if repeat else QUESTION,
        "action": chosen.get("action", ""),
        "arguments": chosen.get("arguments") or {},
        "thought": chosen.get("thought", ""),
        "critic": (critiques[-1].get("diagnosis", "") if critiques else ""),
        "step": len(state.get("trajectory", [])),
    }
    if repeat:
        request["repeat"] = repeat
    said = person_said(interrupt(request))
    decision, reason = said.decision, said.reason
    if repeat and decision == "approve" and not said.repeat:
        decision, reason = "reject", f"approved, but not as a repeat: {AGAIN}"
    verdict: Critique = {
        "action": chosen.get("action", ""),
        "arguments": chosen.get("arguments") or {},
        "thought": chosen.get("thought", ""),
        "decision": decision,
        "confidence": 1.0,
        "diagnosis": f"human: {reason}" if reason else "human",
        "revision": "" if decision == "approve" else (reason or "a person rejected this action; propose another"),
        "source": "human",
        **({"repeat": repeat} if repeat and decision == "approve" else {}),
    }
    return after_person(chosen, critiques, verdict, runtime.context.human_rejections_allowed())


def after_person(chosen: Proposal, critiques: list[Critique], verdict: Critique, allowed: int) -> ApprovalUpdate:
    """An approval lets the chosen action run; a rejection sends the actor back, at most `allowed` times a step."""
    if verdict["decision"] == "approve":
        return {
            "critiques": [*critiques, verdict],
            "chosen": {**chosen, "needs_approval": False},
            "counters": {"human_approved": 1},
        }
    rejected = sum(c["source"] == "human" for c in critiques) + 1
    failed = (
        ""
        if rejected <= allowed
        else f"a person rejected {rejected} proposed actions at this step ({verdict['revision']})"
    )
    return {
        "critiques": [*critiques, verdict],
        "chosen": None,
        "attempt_failed": failed,
        "counters": {"human_rejected": 1},
    }


def person_said(given: "Reply | object") -> PersonSaid:
    """A reply (`Reply`) read in the one place that reads replies: anything but a clear approval is a
    rejection, as a pause must never fail open. LangChain's decisions are read too, so one reviewing UI
    answers both the graph and the middleware; more than one decision is no clear approval.
    """
    reply: Any = {"decision": given} if isinstance(given, str) else given
    if isinstance(reply, dict) and isinstance(reply.get("decisions"), list) and len(reply["decisions"]) == 1:
        reply = reply["decisions"][0]
    if not isinstance(reply, dict):
        return PersonSaid("reject", redact(f"unreadable reply {reply!r}"[:300]))
    decision = str(reply.get("decision", reply.get("type", ""))).strip().lower()
    reason = redact(str(reply.get("reason", reply.get("message", ""))).strip())  # a person's words enter the state here
    action = (reply.get("edited_action") or {}) if reply.get("type") == "edit" else None
    edited = dict(action.get("args") or {}) if isinstance(action, dict) else None
    if decision in ("approve", "approved", "yes", "y"):
        return PersonSaid("approve", reason, repeat=reply.get("repeat") is True)
    why = reason if decision in ("reject", "rejected", "no", "n") else f"unreadable decision {decision!r}"
    return PersonSaid("reject", why, edited=edited)


def re_approved(reply: object) -> bool:
    """A person's explicit re-approval of a repeat (`person_said(reply).repeat`); a plain approval never is one."""
    return person_said(reply).repeat


def read_reply(reply: object) -> tuple[Literal["approve", "reject"], str]:
    """The decision and reason of a reply (`person_said`)."""
    said = person_said(reply)
    return said.decision, said.reason
