"""What one run did, as the run API, a batch's results file and `pivotal run --json` report it.

Shaped from the graph's final values alone (and the run's retry settings), so a result reads the same
whether the run ended here, ended before a crash and was read back, or paused for a person.
"""

import time
from typing import Any

from pydantic import BaseModel, Field

from pivotal.core.context import Context
from pivotal.core.secrets import redact, redact_tree
from pivotal.core.state import turn_counts
from pivotal.core.task import Task
from pivotal.graphs.lease import ThreadBusy

ENDED = ("success", "failure")
"""Statuses of a run that is over: nothing of it is left to run."""


class RunResult(BaseModel):
    """What one run did: outcome, cost and where to find it in the checkpointer."""

    status: str
    reason: str
    task: dict[str, Any]
    thread_id: str
    run_id: str
    steps: int = Field(description="environment steps run, all attempts: executed + replayed")
    executed: int = Field(description="environment steps run on the actor's decision, all attempts")
    replayed: int = Field(description="steps re-applied without any LLM call to restore state")
    trajectory_length: int = Field(description="steps in the final trajectory (kept prefix plus new steps)")
    llm_calls: int
    revisits: int = Field(0, description="steps that put the world back as it was after an earlier step (circles)")
    no_ops: int = Field(0, description="steps that left the world as it was (a bump into a wall, a look at nothing)")
    repeats: int = Field(0, description="proposals of a call already proposed from the same state in that attempt")
    critic: dict[str, int]
    retries: dict[str, Any]
    lessons: dict[str, int]
    usage: dict[str, dict[str, float]]
    trajectory: list[dict[str, Any]]
    reflections: list[dict[str, Any]]
    wall_s: float
    started_at: float = Field(0.0, description="Unix time this process started (or resumed) the run")
    finished_at: float = Field(0.0, description="Unix time it ended")
    error: str = Field("", description="status 'error': what raised, in one line; the batch went on")
    interrupt: dict[str, Any] | None = Field(
        None, description="status 'interrupted': the action awaiting a person; continue with resume(thread_id, reply)"
    )
    answer: str = Field("", description="the agent's final answer, when the environment takes one (finish)")
    verified: bool = Field(True, description="False: the agent declared success and nothing checked it")
    at_least_once: list[int] = Field(
        default_factory=list,
        description=(
            "steps that were in flight when an earlier process stopped and ran again on resume in an "
            "environment without step_once: their action may have happened twice"
        ),
    )

    @classmethod
    def from_error(cls, task: Task, thread_id: str, exc: BaseException, started_at: float) -> "RunResult":
        reason = redact(" ".join(f"{type(exc).__name__}: {exc}".split())[:500])
        return cls(
            status="error",
            reason=reason,
            error=reason,
            task=redact_tree(task.model_dump()),
            thread_id=thread_id,
            run_id="",
            steps=0,
            executed=0,
            replayed=0,
            trajectory_length=0,
            llm_calls=0,
            critic={},
            retries={},
            lessons={},
            usage={},
            trajectory=[],
            reflections=[],
            wall_s=round(time.time() - started_at, 3),
            started_at=started_at,
            finished_at=time.time(),
        )

    @classmethod
    def skipped(cls, task: Task, thread_id: str, why: str) -> "RunResult":
        """Another process owns the thread, or finished and reported it: this one ran nothing."""
        return cls.from_error(task, thread_id, ThreadBusy(why), time.time()).model_copy(
            update={"status": "skipped", "reason": why, "error": ""}
        )


def summarise(
    final: dict[str, Any], context: Context, thread_id: str, wall_s: float, started_at: float = 0.0
) -> RunResult:
    """The graph's final values (with `__interrupt__` when it paused) as a `RunResult`, secrets blanked."""
    paused = [item.value for item in final.get("__interrupt__") or []]
    final = redact_tree({k: v for k, v in final.items() if k != "__interrupt__"})  # keys echoed by tools stay out
    counters = turn_counts(final)  # the thread's add up over its turns: a result counts its own
    trajectory = final.get("trajectory") or []
    return RunResult(
        status="interrupted" if paused else final.get("status", "failure"),
        reason="waiting for a person to approve an action" if paused else final.get("reason", ""),
        interrupt=redact_tree(paused[0]) if paused else None,
        answer=final.get("answer") or "",
        verified=final.get("verified", True) is not False,
        task=final["task"],
        thread_id=thread_id,
        run_id=final["run_id"],
        steps=int(counters.get("executed", 0)) + int(counters.get("replayed", 0)),
        executed=int(counters.get("executed", 0)),
        replayed=int(counters.get("replayed", 0)),
        trajectory_length=len(trajectory),
        llm_calls=int(counters.get("llm_calls", 0)),
        revisits=int(counters.get("revisits", 0)),
        no_ops=int(counters.get("no_ops", 0)),
        repeats=int(counters.get("repeats", 0)),
        critic={
            k: int(counters.get(k, 0))
            for k in ("approved", "revised", "rejected", "prechecked", "human_approved", "human_rejected")
        },
        retries={
            "strategy": context.retry,
            "budget": context.budget,
            "pivot": context.pivot,
            "count": int(final.get("retries", 0)),
            "kept_steps": int(counters.get("kept_steps", 0)),
            "replayed_steps": int(counters.get("replayed", 0)),
        },
        lessons={
            "recalled": len(final.get("recalled") or []),
            "candidates": len(final.get("candidates") or []),
            "approved": len(final.get("approved_lessons") or []),
            **{k: int(counters.get(f"lessons_{k}", 0)) for k in ("written", "merged", "scored", "retired")},
        },
        usage=turn_counts(final, "usage"),
        trajectory=trajectory,
        reflections=final.get("reflections") or [],
        wall_s=round(wall_s, 3),
        started_at=started_at,
        finished_at=time.time(),
    )
