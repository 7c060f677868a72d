"""Every face ends a turn on its own, with a final message and a recorded reason: a critic that
refuses everything must not keep an agent asking its model for ever. Refunds are counted from the
tool's own ledger, model calls from the scripted model's own record.
"""

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from pivotal import PivotalCritic, create_pivotal_agent
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict

ASKED = 30
"""Tool calls the agent's model has in it: far more than any bound lets it make."""


@pytest.fixture
def paid():
    return []


@pytest.fixture
def tools(paid):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        paid.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's total."""
        paid.append(("lookup", order_id))
        return f"order {order_id}: total 20.00"

    return [refund, lookup_order]


def _agent(tools, calls, critic_verdict, **bounds):
    model = ScriptedChatModel(script={"agent": calls})
    critic = ScriptedChatModel(script={"Verdict": [critic_verdict]})
    middleware = PivotalCritic(critic, irreversible=["refund"], **bounds)
    return create_agent(model, tools, middleware=[middleware], checkpointer=InMemorySaver()), model


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_an_always_refusing_critic_ends_the_agents_turn_with_a_final_message(tools, paid, mode):
    calls = [tool_call("refund", order_id="A1", amount=20.0) for _ in range(ASKED)]
    agent, model = _agent(tools, calls, verdict("reject", 0.9, "the ticket asks for no refund"))
    ticket, config = {"messages": [("user", "Refund A1.")]}, {"configurable": {"thread_id": "t"}}
    result = agent.invoke(ticket, config) if mode == "sync" else await agent.ainvoke(ticket, config)
    assert paid == []
    assert len(model.prompts["agent"]) == 4  # two rounds, the call past them, the one told to stop
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and last.content.startswith("I stopped here: 4 tool calls were turned down")
    assert "max_refusals_per_turn 4" in result["pivotal_stop"] and "ticket asks for no refund" in result["pivotal_stop"]
    # a new turn on the thread starts with its own bounds
    again = agent.invoke({"messages": [("user", "Then look up A1.")]}, config)
    assert len(model.prompts["agent"]) == 8 and again["messages"][-1].content.startswith("I stopped here")


def test_a_turn_ends_after_its_model_calls_even_when_every_call_is_approved(tools, paid):
    calls = [tool_call("lookup_order", order_id=f"A{i}") for i in range(ASKED)]
    agent, model = _agent(tools, calls, verdict("approve"), max_model_calls_per_turn=5)
    result = agent.invoke({"messages": [("user", "Look up every order.")]}, {"configurable": {"thread_id": "t"}})
    assert len(model.prompts["agent"]) == 5 and len(paid) == 5
    assert result["pivotal_stop"] == "5 model calls in this turn (max_model_calls_per_turn 5)"
    assert result["messages"][-1].content.startswith("I stopped here: 5 model calls")


def test_the_refusal_bound_is_a_setting(tools, paid):
    calls = [tool_call("refund", order_id="A1", amount=20.0) for _ in range(ASKED)]
    agent, model = _agent(tools, calls, verdict("reject", 0.9, "no"), max_refusals_per_turn=2)
    result = agent.invoke({"messages": [("user", "Refund A1.")]}, {"configurable": {"thread_id": "t"}})
    assert len(model.prompts["agent"]) == 2 and paid == [] and "max_refusals_per_turn 2" in result["pivotal_stop"]


def test_the_graph_ends_an_always_refusing_critics_run_with_a_recorded_reason(tools, paid):
    """create_pivotal_agent: the graph's own bounds (max_critique_rounds per step, max_pivot_retries)."""
    refund = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0}, "thought": "refund it"}
    model = ScriptedChatModel(script={"Proposal": [refund], "Verdict": [verdict("reject", 0.9, "no refund")]})
    agent = create_pivotal_agent(model, tools, irreversible=["refund"], memory=False, max_pivot_retries=1,
                                 structured_retries=0)  # fmt: skip
    result = agent.invoke({"messages": [("user", "Refund A1.")]})
    assert paid == [] and result["status"] == "failure"
    assert "no acceptable action after 3 proposals" in result["reflections"][0]["failure"]
    proposals, verdicts = len(model.prompts["Proposal"]), len(model.prompts["Verdict"])
    assert (proposals, verdicts) == (6, 6)  # 3 proposals per attempt, 2 attempts
    assert isinstance(result["messages"][-1], AIMessage)
