"""A Deep Agents agent under `PivotalCritic`: work handed to the built-in `task` sub-agent runs under the
same rules as the main agent's own calls (reviewed, approvals asked, the once-guard kept), and every
review, the sub-agent's and a tool's that returns its own Command (`write_todos`), is recorded and
counted once. Side effects are counted from the ledgers the tools write; checkpoints are real SQLite.
"""

import pytest
from deepagents import create_deep_agent
from deepagents.middleware.subagents import GENERAL_PURPOSE_SUBAGENT
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from pivotal import PivotalCritic
from pivotal.middleware import critic_counts
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict

TICKET = "Refund order A1: 20.00, the parcel never arrived."


@pytest.fixture
def ledger():
    return {"refund": [], "lookup_order": []}


@pytest.fixture
def tools(ledger):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        ledger["refund"].append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's total."""
        ledger["lookup_order"].append(order_id)
        return f"order {order_id}: total 20.00"

    return [refund, lookup_order]


def _delegation() -> list[AIMessage]:
    """The main agent hands the ticket to `task`; the sub-agent looks the order up, refunds, reports."""
    return [
        tool_call("task", description=TICKET, subagent_type="general-purpose"),
        tool_call("lookup_order", order_id="A1"),
        tool_call("refund", order_id="A1", amount=20.0),
        AIMessage("refunded 20.00 of A1"),
        AIMessage("done: the sub-agent refunded A1"),
    ]


def _desk(tools, saver, model, critic):
    """The documented recipe: the same `PivotalCritic` on the main agent and on its sub-agent."""
    return create_deep_agent(
        model=model,
        tools=tools,
        middleware=[critic],
        subagents=[{**GENERAL_PURPOSE_SUBAGENT, "middleware": [critic]}],
        checkpointer=saver,
    )


def _actions(result):
    return [(r["action"], r["decision"], r["source"]) for r in result["pivotal_reviews"]]


def _once_each(result):
    ids = [r["tool_call_id"] for r in result["pivotal_reviews"]]
    assert len(ids) == len(set(ids)), f"a review recorded twice: {ids}"


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_ticket_handed_to_task_is_reviewed_paused_and_refunded_once_on_approval(tools, ledger, tmp_path, mode):
    model = ScriptedChatModel(script={"agent": _delegation()})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95, "the order's total")]})
    critic = PivotalCritic(judge, irreversible=["refund"], require_approval_for=["refund"])
    config = {"configurable": {"thread_id": "ticket-1"}}
    path = str(tmp_path / "checkpoints.sqlite")
    if mode == "sync":
        with SqliteSaver.from_conn_string(path) as saver:
            agent = _desk(tools, saver, model, critic)
            paused = agent.invoke({"messages": [("user", TICKET)]}, config)
            (pending,) = paused["__interrupt__"]
            assert pending.value["name"] == "refund" and ledger["refund"] == []
        with SqliteSaver.from_conn_string(path) as saver:  # answered by a newly built agent, as another process
            again = PivotalCritic(judge, irreversible=["refund"], require_approval_for=["refund"])
            result = _desk(tools, saver, model, again).invoke(Command(resume={"type": "approve"}), config)
    else:
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            agent = _desk(tools, saver, model, critic)
            paused = await agent.ainvoke({"messages": [("user", TICKET)]}, config)
            (pending,) = paused["__interrupt__"]
            assert pending.value["name"] == "refund" and ledger["refund"] == []
            result = await agent.ainvoke(Command(resume={"type": "approve"}), config)
    assert ledger == {"refund": [("A1", 20.0)], "lookup_order": ["A1"]}
    assert _actions(result) == [
        ("lookup_order", "approve", "critic"),
        ("refund", "approve", "human"),
        ("task", "approve", "critic"),
    ]
    _once_each(result)
    counts = critic_counts(result)["counters"]
    assert counts["approved"] == 3 and counts["llm_calls"] == len(judge.prompts["Verdict"]) == 3
    assert counts["human_approved"] == 1


def test_the_ticket_sent_twice_refunds_once_and_the_second_delegation_runs_its_lookup_again(tools, ledger, tmp_path):
    """The second delegation is a new turn of the sub-agent, not a fork of the first: its lookup runs
    again (the same place in a fresh sub-agent is not the same call), its refund is refused by the
    once-guard, which sees the refund the first sub-agent made.
    """
    model = ScriptedChatModel(script={"agent": [*_delegation(), *_delegation()]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95)]})
    critic = PivotalCritic(judge, irreversible=["refund"])
    config = {"configurable": {"thread_id": "ticket-2"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent = _desk(tools, saver, model, critic)
        agent.invoke({"messages": [("user", TICKET)]}, config)
        result = agent.invoke({"messages": [("user", TICKET)]}, config)
    assert ledger == {"refund": [("A1", 20.0)], "lookup_order": ["A1", "A1"]}
    second = _actions(result)[3:]
    assert second == [
        ("lookup_order", "approve", "critic"),
        ("refund", "reject", "precheck"),
        ("task", "approve", "critic"),
    ]
    _once_each(result)
    counts = critic_counts(result)["counters"]
    assert counts["llm_calls"] == len(judge.prompts["Verdict"]) == 5  # the refused repeat cost no critic call
    assert counts["approved"] == 5 and counts["rejected"] == 1


@pytest.mark.parametrize(
    ("call", "key", "shown"),
    [
        (tool_call("write_todos", todos=[{"content": "refund A1", "status": "pending"}]), "todos", "refund A1"),
        (tool_call("write_file", file_path="/notes.md", content="A1: refund 20.00"), "files", "/notes.md"),
    ],
    ids=["write_todos", "write_file"],
)
def test_a_tool_that_returns_its_own_command_is_recorded(tools, tmp_path, call, key, shown):
    """`write_todos` (LangChain's TodoListMiddleware) answers with a Command (its todos and its message):
    the review is merged into it, so it is counted. Deep Agents' `write_file` gets its state update from
    its own middleware, around the critic's: recorded as any tool's.
    """
    model = ScriptedChatModel(script={"agent": [call, AIMessage("noted")]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95)]})
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent = create_deep_agent(
            model=model, tools=tools, middleware=[TodoListMiddleware(), PivotalCritic(judge)], checkpointer=saver
        )
        result = agent.invoke({"messages": [("user", "Note the refund of A1.")]}, {"configurable": {"thread_id": "t"}})
    assert result[key]
    (entry,) = result["pivotal_reviews"]
    assert entry["action"] == call.tool_calls[0]["name"] and entry["executed"] and shown in entry["observation"]
    assert critic_counts(result)["counters"]["approved"] == len(judge.prompts["Verdict"]) == 1


def test_the_ticket_sent_twice_under_approval_asks_about_the_repeat_and_a_plain_approval_refunds_nothing(
    tools, ledger, tmp_path
):
    model = ScriptedChatModel(script={"agent": [*_delegation(), *_delegation()]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95)]})
    critic = PivotalCritic(judge, irreversible=["refund"], require_approval_for=["refund"])
    config = {"configurable": {"thread_id": "ticket-3"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent = _desk(tools, saver, model, critic)
        for _ in range(2):
            paused = agent.invoke({"messages": [("user", TICKET)]}, config)
            (pending,) = paused["__interrupt__"]
            result = agent.invoke(Command(resume={"type": "approve"}), config)
    assert "already ran in this thread" in pending.value["repeat"]
    assert ledger["refund"] == [("A1", 20.0)]
    assert [r["decision"] for r in result["pivotal_reviews"] if r["action"] == "refund"] == ["approve", "reject"]
    _once_each(result)
    assert critic_counts(result)["counters"]["human_approved"] == 2
