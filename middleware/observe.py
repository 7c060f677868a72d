"""`PivotalCritic(..., observe_only=...)`: the critic reviews every call of the watched tools and lets
each through, its verdict kept in the ruling the agent's state records (`pivotal_verdicts`) and the
run's counts (`critic_counts`: `observed`, `would_block`). The rules are the graph's
(`pivotal.core.environments.observe`): the pre-check, the once-guard and approvals still hold.
"""

from collections.abc import Mapping
from typing import Any

from pivotal.core.context import Context
from pivotal.core.environments.observe import observed_counts, watch
from pivotal.core.schemas import Verdict
from pivotal.core.state import Observation, VerdictSource, add_counts


def watched(
    context: Context, call: Mapping[str, Any], verdict: Verdict, source: VerdictSource
) -> tuple[Verdict, VerdictSource, Observation | None]:
    """The verdict the tool wrapper enforces and, when the critic only watches this tool, what it said."""
    verdict, source, observed = watch(context, call["name"], verdict, source)
    if observed is None:
        return verdict, source, None
    record: Observation = {
        **observed,
        "action": call["name"],
        "arguments": dict(call.get("args") or {}),
        "tool_call_id": call.get("id") or "",
    }
    return verdict, source, record


def noted(ruling: Any, observed: Observation | None) -> Any:
    """The ruling with the watched verdict beside it, and its counts."""
    if observed is None:
        return ruling
    return {**ruling, "observed": observed, "counters": add_counts(ruling.get("counters"), observed_counts(observed))}
