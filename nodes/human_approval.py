"""Pause for a person before an action the context says needs one (`require_approval_for`).

A node of its own, after the critic, because `interrupt()` re-runs its node from the top on
resume: here that repeats nothing but the question, never a paid critic call. A replay or fork
that reaches a step this run already executed, with the same call, asks no one: the executor takes
that step as done (`executed_step`), so there is nothing left to approve.
"""

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from pivotal.core.context import Context
from pivotal.core.environments import require_environment
from pivotal.core.environments.live import attach
from pivotal.core.environments.once import executed_step, step_key
from pivotal.core.secrets import redact
from pivotal.core.state import ApprovalUpdate, Critique, Proposal, State, task_of

QUESTION = 'Approve this action? Resume with {"decision": "approve" | "reject", "reason": "..."}.'
AGAIN = 'Only a person can run it again: answer {"type": "approve", "repeat": true}'
"""Asked when the call repeats an executed irreversible one (the once-guard's reason comes first)."""


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
    reply = interrupt(
        {
            "question": f"{repeat}. {AGAIN}" if repeat else QUESTION,
            **({"repeat": repeat} if repeat else {}),
            "action": chosen.get("action"),
            "arguments": chosen.get("arguments") or {},
            "thought": chosen.get("thought", ""),
            "critic": (critiques[-1].get("diagnosis", "") if critiques else ""),
            "step": len(state.get("trajectory", [])),
        }
    )
    decision, reason = read_reply(reply)
    if repeat and decision == "approve" and not re_approved(reply):
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


def re_approved(reply: Any) -> bool:
    """A person's explicit re-approval of a repeat: an approval that says `"repeat": true` (alone or
    as the one decision in `{"decisions": [...]}`); a plain approval never is one.
    """
    if isinstance(reply, dict) and isinstance(reply.get("decisions"), list) and len(reply["decisions"]) == 1:
        reply = reply["decisions"][0]
    return isinstance(reply, dict) and reply.get("repeat") is True and read_reply(reply)[0] == "approve"


def read_reply(reply: Any) -> tuple[Literal["approve", "reject"], str]:
    """Anything but a clear approval is a rejection: a pause must never fail open.

    Also reads LangChain's HumanInTheLoopMiddleware decisions (`{"type": "approve"}`, `{"type":
    "reject", "message": ...}`, or one of them in `{"decisions": [...]}`), so one reviewing UI
    answers both; an `edit` is not an approval here (the middleware reads it, pivotal.middleware).
    """
    if isinstance(reply, str):
        reply = {"decision": reply}
    if isinstance(reply, dict) and isinstance(reply.get("decisions"), list) and len(reply["decisions"]) == 1:
        reply = reply["decisions"][0]
    if not isinstance(reply, dict):
        return "reject", redact(f"unreadable reply {reply!r}"[:300])
    decision = str(reply.get("decision", reply.get("type", ""))).strip().lower()
    reason = redact(str(reply.get("reason", reply.get("message", ""))).strip())  # a person's words enter the state here
    if decision in ("approve", "approved", "yes", "y"):
        return "approve", reason
    return "reject", reason if decision in ("reject", "rejected", "no", "n") else f"unreadable decision {decision!r}"
