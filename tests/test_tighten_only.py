"""A deployment's safety settings are locked: a run's context (Studio, the SDK, `invoke(context=...)`)
may tighten them, never loosen them. Refunds are counted from the tool's own ledger.
"""

import pytest
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from pivotal import create_pivotal_agent
from pivotal.core.context import SAFETY_FIELDS, Context
from pivotal.core.errors import PivotalError
from pivotal.testing.scripted import ScriptedChatModel, verdict

REFUND = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0}, "thought": "refund it"}
ANSWER = {"action": "finish", "arguments": {"answer": "Refunded 20.00 of A1."}, "thought": "done"}
TICKET = {"messages": [("user", "Refund 20.00 of order A1.")]}


@pytest.fixture
def paid():
    return []


@pytest.fixture
def desk(paid):
    """A support desk whose deployment asks a person before every refund."""

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        paid.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    model = ScriptedChatModel(script={"Proposal": [REFUND, ANSWER], "Verdict": [verdict("approve")]})
    settings = {"memory": False, "max_steps": 4, "max_pivot_retries": 0, "checkpointer": InMemorySaver()}
    agent = create_pivotal_agent(model, [refund], irreversible=["refund"], require_approval_for=["refund"], **settings)
    return agent, model


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ({"require_approval_for": []}, "require_approval_for"),
        ({"require_approval_for": ["lookup_order"]}, "require_approval_for"),
        ({"require_approval_for": ["irreversible"]}, "require_approval_for"),  # which names it covers is the env's
        ({"critic": False}, "critic"),
        ({"precheck": False}, "precheck"),
        ({"critic_veto": False}, "critic_veto"),
        ({"max_steps": 40}, "max_steps"),
        ({"max_critique_rounds": 9}, "max_critique_rounds"),
        ({"max_precheck_bounces": 9}, "max_precheck_bounces"),
    ],
)
def test_a_run_context_that_loosens_a_safety_setting_is_refused_in_one_line_and_nothing_runs(
    desk, paid, context, field
):
    agent, _ = desk
    with pytest.raises(PivotalError) as refused:
        agent.invoke(TICKET, {"configurable": {"thread_id": "t"}}, context=context)
    message = str(refused.value)
    assert f"context {field} " in message and f"loosens this deployment's {field}" in message
    assert len(message.splitlines()) == 1
    assert paid == []


def test_the_message_names_the_deployments_value(desk):
    agent, _ = desk
    with pytest.raises(PivotalError, match=r"require_approval_for \[\] loosens this deployment's "
                       r"require_approval_for \['refund'\]"):  # fmt: skip
        agent.invoke(TICKET, {"configurable": {"thread_id": "t"}}, context={"require_approval_for": []})


def test_a_whole_context_counts_where_it_differs(desk, paid):
    agent, model = desk
    whole = Context(model=model, memory=False, max_steps=4, max_pivot_retries=0, default_env="")
    with pytest.raises(PivotalError, match="require_approval_for"):
        agent.invoke(TICKET, {"configurable": {"thread_id": "t"}}, context=whole)
    assert paid == []


@pytest.mark.parametrize(
    "context",
    [{"require_approval_for": ["*"]}, {"require_approval_for": ["refund", "irreversible"]}, {"max_steps": 3},
     {"max_critique_rounds": 1, "on_critique_exhausted": "fail"}, {}],
)  # fmt: skip
def test_a_run_context_may_tighten_and_the_refund_still_waits_for_the_person(desk, paid, context):
    agent, _ = desk
    config = {"configurable": {"thread_id": "t"}}
    paused = agent.invoke(TICKET, config, context=context)
    assert paused["__interrupt__"][0].value["action"] == "refund" and paid == []
    done = agent.invoke(Command(resume="approve"), config, context=context)
    if "__interrupt__" in done:  # "*": the final answer waits for the person too
        done = agent.invoke(Command(resume="approve"), config, context=context)
    assert done["status"] == "success" and paid == [("A1", 20.0)]


def test_a_graph_built_without_a_context_locks_nothing():
    """`build_graph()` has no deployment settings: the runners and benches pass whole contexts."""
    assert Context(critic=False, require_approval_for=[]).loosened(Context(critic=False)) == ""
    assert Context(critic=True).loosened(Context(critic=False)) == ""  # turning the critic on tightens


def test_the_safety_fields_are_documented():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    section = page.split("## Tighten-only", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{name}`" in section for name in SAFETY_FIELDS)
