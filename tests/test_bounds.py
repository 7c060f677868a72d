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
            critique = {
                "action": "a",
                "arguments": {},
                "thought": "",
                "decision": decision,
                "confidence": 1.0,
                "diagnosis": "",
                "revision": "",
                "source": source,
            }
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
        after = after_person(chosen, critiques, reply, context.max_critique_rounds)
        if after["attempt_failed"]:
            longest = max(longest, nodes)
        else:
            propose(after["critiques"], nodes)

    propose([], 1)  # recall
    return longest


@pytest.mark.parametrize("rounds", [1, 2, 3])
@pytest.mark.parametrize("approvals", [[], ["*"]])
@pytest.mark.parametrize("exhausted", ["execute_best", "fail"])
def test_nodes_per_step_is_the_worst_case_exactly(rounds, approvals, exhausted):
    context = Context(
        model="sim", max_critique_rounds=rounds, require_approval_for=approvals, on_critique_exhausted=exhausted
    )
    assert nodes_per_step(context) == worst_step(context)


def test_the_run_ceiling_covers_every_attempt_at_its_worst():
    context = Context(model="sim", max_steps=20, max_critique_rounds=2, max_pivot_retries=2)
    start, end, per_attempt_extra = 1, 5, 2  # start; distill, dedup, gate, memory_writer, respond; reflector, pivot
    worst_run = start + 3 * (20 * worst_step(context) + per_attempt_extra) + end
    assert recursion_limit(context) > worst_run
