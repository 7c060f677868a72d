"""An irreversible call's intent (middleware/nested.py `intend`) marks it in flight only while its tool
runs: a tool that pauses for a person itself withdraws it, so the resume runs it (once), where a
process killed during the tool leaves it standing (tests/test_promises.py row 12). Real SQLite files.
"""

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command, interrupt

from pivotal import PivotalCritic
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_an_irreversible_tool_that_asks_a_person_itself_runs_once_on_resume(tmp_path, mode):
    refunds = []

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order. Cannot be undone; the tool asks the cashier first."""
        if interrupt({"confirm": order_id}) != "yes":
            return "the cashier declined"
        refunds.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    model = ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1", amount=20.0), AIMessage("done")]})
    critic = PivotalCritic(ScriptedChatModel(script={"Verdict": [verdict("approve")]}), irreversible=["refund"])
    config = {"configurable": {"thread_id": "t"}}
    path = str(tmp_path / "checkpoints.sqlite")
    if mode == "sync":
        with SqliteSaver.from_conn_string(path) as saver:
            agent = create_agent(model, [refund], middleware=[critic], checkpointer=saver)
            assert agent.invoke({"messages": [("user", "refund A1")]}, config)["__interrupt__"]
        with SqliteSaver.from_conn_string(path) as saver:  # answered on a connection of its own, as elsewhere
            agent = create_agent(model, [refund], middleware=[critic], checkpointer=saver)
            result = agent.invoke(Command(resume="yes"), config)
    else:
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            agent = create_agent(model, [refund], middleware=[critic], checkpointer=saver)
            assert (await agent.ainvoke({"messages": [("user", "refund A1")]}, config))["__interrupt__"]
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            agent = create_agent(model, [refund], middleware=[critic], checkpointer=saver)
            result = await agent.ainvoke(Command(resume="yes"), config)
    assert refunds == [("A1", 20.0)]
    [entry] = result["pivotal_reviews"]
    assert entry["executed"] and entry["observation"] == "refunded 20.00 of A1"
