"""The run's node ceiling against the worst case the critic's and the person's real rules allow."""

import pytest

from pivotal.core.context import Context
from pivotal.graphs.builder import nodes_per_step, recursion_limit
from pivotal.nodes.critic import _decide
from pivotal.nodes.human_approval import after_person

VERDICTS = [("precheck", "reject"), ("critic", "approve"), ("critic", "revise"), ("critic", "reject")]


def worst_step(context: Context) -> int:
    """Nodes of the longest step: every sequence of verdicts (and a person's replies), explored."""
    person = bool(context.require_approval_for)
    longest = 0

    def propose(critiques: list, nodes: int) -> None:
        nonlocal longest
        for source, decision in VERDICTS:
            critique = _critique(source, decision)
            judged, spent = [*critiques, critique], nodes + 2  # actor + critic
            chosen, failed = _decide(judged, context)
            if failed:
                longest = max(longest, spent)  # to the reflector
            elif chosen is None:
                propose(judged, spent)
            elif not person:
                longest = max(longest, spent + 1)  # executor
            else:
                ask(chosen, judged, critique, spent + 1)  # human_approval

    def ask(chosen: dict, critiques: list, critique: dict, nodes: int) -> None:
        nonlocal longest
        longest = max(longest, nodes + 1)  # approved: executor
        reply = {**critique, "decision": "reject", "source": "human", "revision": "no"}
        after = after_person(chosen, critiques, reply, context.human_rejections_allowed())
        if after["attempt_failed"]:
            longest = max(longest, nodes)
        else:
            propose(after["critiques"], nodes)

    propose([], 0)  # recall is part of the actor's entry: no node of its own
    return longest


@pytest.mark.parametrize(
    "bounds",
    [
        {"max_critique_rounds": 1},
        {"max_critique_rounds": 2},
        {"max_critique_rounds": 3},
        {"max_critique_rounds": 1, "max_precheck_bounces": 3, "max_human_rejections": 2},
        {"max_critique_rounds": 3, "max_precheck_bounces": 1, "max_human_rejections": 1},
        {"max_critique_rounds": 2, "max_precheck_bounces": 2, "max_human_rejections": 4},
    ],
)
@pytest.mark.parametrize("approvals", [[], ["*"]])
@pytest.mark.parametrize("exhausted", ["execute_best", "fail"])
def test_nodes_per_step_is_the_worst_case_exactly(bounds, approvals, exhausted):
    context = Context(model="sim", require_approval_for=approvals, on_critique_exhausted=exhausted, **bounds)
    assert nodes_per_step(context) == worst_step(context)


def _critique(source: str, decision: str) -> dict:
    return {
        "action": "a",
        "arguments": {},
        "thought": "",
        "decision": decision,
        "confidence": 1.0,
        "diagnosis": "",
        "revision": "",
        "source": source,
    }


def _send_backs(context: Context, source: str, decision: str) -> int:
    """How many times in a row `source` sends the actor back before the step's loop ends."""
    critiques: list = []
    while True:
        critiques.append(_critique(source, decision))
        chosen, failed = _decide(critiques, context)
        if chosen is not None or failed:
            return len(critiques) - 1


def _rejections(context: Context) -> int:
    """How many of a person's rejections in a row send the actor back before the attempt fails."""
    critiques: list = []
    while True:
        approved = _critique("critic", "approve")
        after = after_person(
            approved, [*critiques, approved], _critique("human", "reject"), context.human_rejections_allowed()
        )
        if after["attempt_failed"]:
            return len(critiques) // 2
        critiques = after["critiques"]


def test_each_bound_limits_its_own_loop():
    context = Context(model="sim", max_critique_rounds=1, max_precheck_bounces=3, max_human_rejections=2)
    assert _send_backs(context, "critic", "revise") == 1
    assert _send_backs(context, "precheck", "reject") == 3
    assert _rejections(context) == 2
    alike = Context(model="sim", max_critique_rounds=2)  # unset: as many as the critic's
    assert _send_backs(alike, "critic", "revise") == _send_backs(alike, "precheck", "reject") == _rejections(alike) == 2


def test_the_run_ceiling_covers_every_attempt_at_its_worst():
    context = Context(model="sim", max_steps=20, max_critique_rounds=2, max_pivot_retries=2)
    start, end, per_attempt_extra = (
        1,
        4,
        2,
    )  # start; distill (with dedup), gate, memory_writer, respond; reflector, pivot
    worst_run = start + 3 * (20 * worst_step(context) + per_attempt_extra) + end
    assert recursion_limit(context) > worst_run
