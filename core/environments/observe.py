"""An observe-only critic: it reviews every call of the actions it watches (`Context.observe_only`),
records what it would have done, and lets the call through as if there were no critic.

Only the critic's own blocking is switched off: its reject, its send-back for a revision, its safe
fallback when the model fails, and the rule that an irreversible call needs a confident approval.
Whatever does not depend on a model's judgement still holds, on every face: the deterministic
pre-check (an unknown action or invalid arguments cannot run anyway), the once-guard (an irreversible
call runs once per thread) and `require_approval_for` (a person is asked). So a run in observe mode
executes what the same run with `critic=False` executes, call for call, and the record says which of
those calls the critic would have stopped (`pivotal.core.environments.critic_report`).
"""

from typing import Any

from pivotal.core.context import Context
from pivotal.core.schemas import Verdict
from pivotal.core.state import Observed, VerdictSource

WATCHED: frozenset[str] = frozenset({"critic", "critic-advisory", "critic-fallback"})
"""The verdict sources that are the critic's judgement: the ones observe mode records instead of enforcing."""
LET_THROUGH = "observe only: the critic's verdict is recorded, not enforced"


def watch(
    context: Context, action: str | None, verdict: Verdict, source: VerdictSource
) -> tuple[Verdict, VerdictSource, Observed | None]:
    """The verdict to enforce, its source, and what the critic said when it only watches this action.

    A verdict from the pre-check, the once-guard or an empty actor reply is enforced as it is (None):
    observe mode changes only the critic's blocking.
    """
    if source not in WATCHED or not context.observes(action):
        return verdict, source, None
    observed: Observed = {
        "decision": verdict.decision,
        "confidence": verdict.confidence,
        "diagnosis": verdict.diagnosis,
        "revision": verdict.revision,
        "source": source,
        "would_block": verdict.decision != "approve",
    }
    return Verdict(decision="approve", confidence=1.0, diagnosis=LET_THROUGH), "observe", observed


def observed_counts(observed: Observed | None) -> dict[str, Any]:
    """The run's counters for one watched review: reviews recorded, and those it would have blocked."""
    if observed is None:
        return {}
    return {"observed": 1, "would_block": int(bool(observed.get("would_block")))}
