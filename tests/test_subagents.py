"""Agents that a tool runs, under the outer agent's `PivotalCritic`: work handed to Deep Agents' built-in
`task` sub-agent, to a `create_agent` agent invoked in a tool's body, or to a compiled subgraph used as
a tool runs under the same rules as the outer agent's own calls (reviewed, approvals asked and resumed
from the top, the once-guard kept over the outer thread), with nothing added to the inner agent
(middleware/nested.py), or with the same critic given to it too (the earlier recipe, still valid).
Every review, the inner agent's and a tool's that returns its own Command (`write_todos`), is
recorded and counted once. Side effects are counted from the ledgers the tools write; checkpoints
are real SQLite.
"""

import pytest
from deepagents import create_deep_agent
from deepagents.middleware.subagents import GENERAL_PURPOSE_SUBAGENT
from langchain.agents import create_agent
from langchain.agents.middleware import TodoListMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
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


@pytest.fixture(params=["inherited", "recipe"])
def how(request):
    """`inherited`: the critic on the main agent only, the default sub-agent as Deep Agents builds it;
    `recipe`: the same `PivotalCritic` given to the sub-agent too.
    """
    return request.param


def _desk(tools, saver, model, critic, how="inherited"):
    recipe = {"subagents": [{**GENERAL_PURPOSE_SUBAGENT, "middleware": [critic]}]} if how == "recipe" else {}
    return create_deep_agent(model=model, tools=tools, middleware=[critic], checkpointer=saver, **recipe)


def _actions(result):
    return [(r["action"], r["decision"], r["source"]) for r in result["pivotal_reviews"]]


def _once_each(result):
    ids = [r["tool_call_id"] for r in result["pivotal_reviews"]]
    assert len(ids) == len(set(ids)), f"a review recorded twice: {ids}"


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_ticket_handed_to_task_is_reviewed_paused_and_refunded_once_on_approval(tools, ledger, tmp_path, mode,
                                                                                       how):  # fmt: skip
    model = ScriptedChatModel(script={"agent": _delegation()})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95, "the order's total")]})
    critic = PivotalCritic(judge, irreversible=["refund"], require_approval_for=["refund"])
    config = {"configurable": {"thread_id": "ticket-1"}}
    path = str(tmp_path / "checkpoints.sqlite")
    if mode == "sync":
        with SqliteSaver.from_conn_string(path) as saver:
            agent = _desk(tools, saver, model, critic, how)
            paused = agent.invoke({"messages": [("user", TICKET)]}, config)
            (pending,) = paused["__interrupt__"]
            assert pending.value["name"] == "refund" and ledger["refund"] == []
        with SqliteSaver.from_conn_string(path) as saver:  # answered by a newly built agent, as another process
            again = PivotalCritic(judge, irreversible=["refund"], require_approval_for=["refund"])
            result = _desk(tools, saver, model, again, how).invoke(Command(resume={"type": "approve"}), config)
    else:
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            agent = _desk(tools, saver, model, critic, how)
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


def test_the_ticket_sent_twice_refunds_once_and_the_second_delegation_runs_its_lookup_again(tools, ledger, tmp_path,
                                                                                            how):  # fmt: skip
    """The second delegation is a new turn of the sub-agent, not a fork of the first: its lookup runs
    again (the same place in a fresh sub-agent is not the same call), its refund is refused by the
    once-guard, which sees the refund the first sub-agent made.
    """
    model = ScriptedChatModel(script={"agent": [*_delegation(), *_delegation()]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95)]})
    critic = PivotalCritic(judge, irreversible=["refund"])
    config = {"configurable": {"thread_id": "ticket-2"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent = _desk(tools, saver, model, critic, how)
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
    tools, ledger, tmp_path, how
):
    model = ScriptedChatModel(script={"agent": [*_delegation(), *_delegation()]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95)]})
    critic = PivotalCritic(judge, irreversible=["refund"], require_approval_for=["refund"])
    config = {"configurable": {"thread_id": "ticket-3"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent = _desk(tools, saver, model, critic, how)
        for _ in range(2):
            paused = agent.invoke({"messages": [("user", TICKET)]}, config)
            (pending,) = paused["__interrupt__"]
            result = agent.invoke(Command(resume={"type": "approve"}), config)
    assert "already ran in this thread" in pending.value["repeat"]
    assert ledger["refund"] == [("A1", 20.0)]
    assert [r["decision"] for r in result["pivotal_reviews"] if r["action"] == "refund"] == ["approve", "reject"]
    _once_each(result)
    assert critic_counts(result)["counters"]["human_approved"] == 2


# --- agents inside a tool of the application's own: no critic of their own --------------------------


def _inner_agents(tools, model):
    """Two ways an app runs an agent in a tool: a `create_agent` agent invoked in the tool's body, and
    a compiled subgraph of its own (a model node and a `ToolNode`) invoked the same way.
    """
    agent = create_agent(model, tools)

    def call_model(state: MessagesState):
        return {"messages": [model.bind_tools(tools).invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return {"create_agent": agent, "subgraph": graph.compile()}


@pytest.fixture(params=["create_agent", "subgraph"])
def inner(request):
    return request.param


def _app(tools, model, critic, inner, saver):
    runs = _inner_agents(tools, model)[inner]

    @tool
    def handle_ticket(description: str) -> str:
        """Hand a ticket to the desk's own agent, which looks the order up and refunds it."""
        final = runs.invoke({"messages": [HumanMessage(description)]})
        return str(final["messages"][-1].content)

    return create_agent(model, [handle_ticket, *tools], middleware=[critic], checkpointer=saver)


def _handed() -> list[AIMessage]:
    return [tool_call("handle_ticket", description=TICKET), *_delegation()[1:]]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_an_agent_run_in_a_tool_body_is_reviewed_paused_from_the_top_and_refunds_once(tools, ledger, tmp_path,
                                                                                           inner, mode):  # fmt: skip
    model = ScriptedChatModel(script={"agent": [*_handed(), *_handed()]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95)]})
    config = {"configurable": {"thread_id": "ticket-4"}}

    def critic():
        return PivotalCritic(judge, irreversible=["refund"], require_approval_for=["refund"])

    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        if mode == "sync":
            paused = _app(tools, model, critic(), inner, saver).invoke({"messages": [("user", TICKET)]}, config)
            assert paused["__interrupt__"][0].value["name"] == "refund" and ledger["refund"] == []
            result = _app(tools, model, critic(), inner, saver).invoke(Command(resume={"type": "approve"}), config)
        else:
            async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "async.sqlite")) as asaver:
                app = _app(tools, model, critic(), inner, asaver)
                paused = await app.ainvoke({"messages": [("user", TICKET)]}, config)
                assert paused["__interrupt__"][0].value["name"] == "refund" and ledger["refund"] == []
                result = await app.ainvoke(Command(resume={"type": "approve"}), config)
    assert ledger == {"refund": [("A1", 20.0)], "lookup_order": ["A1"]}
    assert _actions(result) == [
        ("lookup_order", "approve", "critic"),
        ("refund", "approve", "human"),
        ("handle_ticket", "approve", "critic"),
    ]
    _once_each(result)
    counts = critic_counts(result)["counters"]
    assert counts["llm_calls"] == len(judge.prompts["Verdict"]) == 3 and counts["human_approved"] == 1


def test_a_refusal_inside_reaches_the_inner_agent_which_goes_on_and_nothing_refunds(tools, ledger, tmp_path, inner):
    """The critic rejects the inner refund: the inner agent reads "Not run: ..." as the tool's error
    result (its tools node answers a `ToolInvocationError` so), and finishes without it.
    """
    model = ScriptedChatModel(script={"agent": _handed()})
    judge = ScriptedChatModel(
        script={"Verdict": [verdict("approve"), verdict("approve"), verdict("reject", 0.9, "no refunds today")]}
    )
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        app = _app(tools, model, PivotalCritic(judge, irreversible=["refund"]), inner, saver)
        result = app.invoke({"messages": [("user", TICKET)]}, {"configurable": {"thread_id": "ticket-5"}})
    assert ledger == {"refund": [], "lookup_order": ["A1"]}
    assert _actions(result) == [
        ("lookup_order", "approve", "critic"),
        ("refund", "reject", "critic"),
        ("handle_ticket", "approve", "critic"),
    ]
    inner_prompts = model.prompts["agent"][3]  # the inner agent's model, after the refusal
    assert any("Not run" in str(m.content) and "no refunds today" in str(m.content) for m in inner_prompts)


def test_a_second_ticket_handed_to_an_inner_agent_is_refused_by_the_outer_threads_once_guard(tools, ledger, tmp_path):
    model = ScriptedChatModel(script={"agent": [*_handed(), *_handed()]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95)]})
    config = {"configurable": {"thread_id": "ticket-6"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        app = _app(tools, model, PivotalCritic(judge, irreversible=["refund"]), "create_agent", saver)
        app.invoke({"messages": [("user", TICKET)]}, config)
        result = app.invoke({"messages": [("user", TICKET)]}, config)
    assert ledger["refund"] == [("A1", 20.0)]
    assert [r["decision"] for r in result["pivotal_reviews"] if r["action"] == "refund"] == ["approve", "reject"]
    _once_each(result)
