"""A deployment's safety settings are locked: a run's context (Studio, the SDK, `invoke(context=...)`)
may tighten them, never loosen them. Refunds are counted from the tool's own ledger.
"""

from dataclasses import dataclass, field

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from pivotal import PivotalCritic, ToolEnvironment, build_graph, create_pivotal_agent
from pivotal.core.context import SAFETY_FIELDS, Context
from pivotal.core.environments import register_environment
from pivotal.core.errors import PivotalError
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict

REFUND = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0}, "thought": "refund it"}
ANSWER = {"action": "finish", "arguments": {"answer": "Refunded 20.00 of A1."}, "thought": "done"}
TICKET = {"messages": [("user", "Refund 20.00 of order A1.")]}


@pytest.fixture
def paid():
    return []


def refund_tool(paid: list):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        paid.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    return refund


def desk_agent(paid: list, checkpointer=None):
    """A support desk whose deployment asks a person before every refund."""
    model = ScriptedChatModel(script={"Proposal": [REFUND, ANSWER], "Verdict": [verdict("approve")]})
    settings = {"memory": False, "max_steps": 4, "max_pivot_retries": 0, "checkpointer": checkpointer}
    agent = create_pivotal_agent(
        model, [refund_tool(paid)], irreversible=["refund"], require_approval_for=["refund"], **settings
    )
    return agent, model


@pytest.fixture
def desk(paid):
    return desk_agent(paid, InMemorySaver())


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


# --- the graph's own safety names are checked when it is built ----------------------------------


def test_a_graphs_own_require_approval_for_names_actions_of_its_default_environment(paid):
    register_environment("tighten-desk", lambda: ToolEnvironment([refund_tool(paid)], irreversible=["refund"]))
    with pytest.raises(PivotalError, match=r"require_approval_for names 'refnd', which is no action here: "
                       r"did you mean 'refund'\?") as refused:  # fmt: skip
        build_graph(context=Context(default_env="tighten-desk", require_approval_for=["refnd"]))
    assert "\n" not in str(refused.value)
    build_graph(context=Context(default_env="tighten-desk", require_approval_for=["refund", "irreversible", "*"]))


def test_a_graph_whose_context_names_no_registered_environment_is_not_checked_when_built():
    """A batch may span environments: a name that is one environment's action is no other's."""
    build_graph(context=Context(require_approval_for=["refnd"]))
    build_graph(context=Context(default_env="registered-later", require_approval_for=["refnd"]))


# --- a `create_agent` agent with PivotalCritic: the same rule over the run's context ------------


@dataclass
class Shop:
    """An application's own context type, with one field named like a Context field."""

    tenant: str = "acme"
    require_approval_for: list[str] = field(default_factory=list)


def guarded(paid: list, checkpointer, **settings):
    """A `create_agent` agent whose model asks for one refund, under a critic that approves it."""
    model = ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1", amount=20.0)]})
    judge = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95, "the order's total")]})
    guard = PivotalCritic(judge, irreversible=["refund"], **settings)
    return create_agent(model, [refund_tool(paid)], middleware=[guard], checkpointer=checkpointer), model


@pytest.mark.parametrize(
    ("context", "setting"),
    [
        ({"require_approval_for": []}, "require_approval_for"),
        (Shop(require_approval_for=[]), "require_approval_for"),
        (Context(), "require_approval_for"),  # a whole Context: its safety settings count
        ({"critic": False}, "critic"),
        ({"max_critique_rounds": 9}, "max_critique_rounds"),
        ({"max_refusals_per_turn": 40}, "max_refusals_per_turn"),
    ],
    ids=["dict", "own-type", "whole-context", "critic", "rounds", "refusals"],
)
def test_a_middleware_run_context_that_loosens_is_refused_before_the_model_is_asked(paid, tmp_path, context, setting):
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent, model = guarded(paid, saver, require_approval_for=["refund"])
        with pytest.raises(PivotalError) as refused:
            agent.invoke(TICKET, {"configurable": {"thread_id": "t"}}, context=context)
    message = str(refused.value)
    assert f"context {setting} " in message and f"loosens this deployment's {setting}" in message
    assert "\n" not in message and paid == [] and model.prompts == {}


@pytest.mark.parametrize(
    "context",
    [{"require_approval_for": ["refund"]}, Shop(require_approval_for=["irreversible"])],
    ids=["dict", "own-type"],
)
def test_a_middleware_run_context_may_tighten_and_its_rules_are_recorded_with_the_verdict(paid, tmp_path, context):
    """The critic asks no person of its own; the run's context asks one before the refund. The rules
    recorded with the verdict are the run's, so the resume (without the context) still asks.
    """
    config = {"configurable": {"thread_id": "t"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent, _ = guarded(paid, saver)
        paused = agent.invoke(TICKET, config, context=context)
        assert paused["__interrupt__"][0].value["name"] == "refund" and paid == []
        [ruling] = agent.get_state(config).values["pivotal_verdicts"].values()
        assert ruling["rules"]["require_approval_for"] == context_approvals(context)
        agent.invoke(Command(resume="approve"), config)
    assert paid == [("A1", 20.0)]


def test_a_middleware_resume_whose_context_loosens_is_refused_and_the_decision_stays_unspent(paid, tmp_path):
    config = {"configurable": {"thread_id": "t"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        agent, _ = guarded(paid, saver, require_approval_for=["refund"])
        assert agent.invoke(TICKET, config)["__interrupt__"] and paid == []
        with pytest.raises(PivotalError, match="context require_approval_for"):
            agent.invoke(Command(resume="approve"), config, context={"require_approval_for": []})
        assert paid == []
        agent.invoke(Command(resume="approve"), config)
    assert paid == [("A1", 20.0)]


def context_approvals(context) -> list[str]:
    return context["require_approval_for"] if isinstance(context, dict) else context.require_approval_for


# --- Pivotal's graph as a node of a parent graph: the parent's context reaches it -----------------


class Triage(MessagesState):
    pivotal_result: dict


def parent_app(paid: list, checkpointer, context_schema=None):
    agent, _ = desk_agent(paid)
    app = StateGraph(Triage, context_schema=context_schema)
    app.add_node("agent", agent)
    app.add_edge(START, "agent")
    return app.compile(checkpointer=checkpointer)


@pytest.mark.parametrize(
    ("schema", "context"),
    [(None, {"require_approval_for": [], "tenant": "acme"}), (Shop, {"require_approval_for": []})],
    ids=["dict", "parents-own-type"],
)
def test_a_parents_context_that_loosens_pivotals_settings_is_refused(paid, tmp_path, schema, context):
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        app = parent_app(paid, saver, schema)
        with pytest.raises(PivotalError, match=r"context require_approval_for \[\] loosens this deployment's"):
            app.invoke(TICKET, {"configurable": {"thread_id": "t"}}, context=context)
    assert paid == []


@pytest.mark.parametrize(
    "context", [{"tenant": "acme"}, {"tenant": "acme", "require_approval_for": ["refund", "irreversible"]}]
)
def test_a_parents_own_keys_are_ignored_and_a_tightening_one_applies(paid, tmp_path, context):
    config = {"configurable": {"thread_id": "t"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        app = parent_app(paid, saver)
        paused = app.invoke(TICKET, config, context=context)
        assert paused["__interrupt__"][0].value["action"] == "refund" and paid == []
        done = app.invoke(Command(resume="approve"), config, context=context)
    assert done["pivotal_result"]["status"] == "success" and paid == [("A1", 20.0)]


def test_a_whole_context_that_names_no_environment_runs_the_agents_own_tools(tmp_path):
    """`agent.invoke(ticket, config, context=Context(model=..., require_approval_for=["refund"]))` ran the
    ticket in gridworld, the default of a Context that names no environment: the agent's tools were no
    actions there and the run failed. The agent's own environment stays: the refund waits for the person,
    then runs once. A real SQLite file and the real openai SDK on a loopback server.
    """
    from langchain_openai import ChatOpenAI

    from pivotal.testing.loopback_provider import loopback
    from pivotal.testing.promise_desk import clerk_responder, desk_tools, ledger_kinds

    ledger = tmp_path / "ledger.jsonl"
    with loopback() as server, SqliteSaver.from_conn_string(str(tmp_path / "app.sqlite")) as saver:
        server.responder = clerk_responder()
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        agent = create_pivotal_agent(model, desk_tools(ledger), irreversible=["refund"], memory=False,
                                     checkpointer=saver, name="whole-context-invoke-desk")  # fmt: skip
        whole = Context(model=model, memory=False, require_approval_for=["refund"])
        config = {"configurable": {"thread_id": "t"}}
        paused = agent.invoke({"messages": [("user", "Refund order A1.")]}, config, context=whole)
        assert paused.get("__interrupt__"), paused.get("reason")
        assert paused["__interrupt__"][0].value["action"] == "refund" and ledger_kinds(ledger) == ["lookup"]
        done = agent.invoke(Command(resume="approve"), config, context=whole)
    assert done["status"] == "success", done.get("reason")
    assert ledger_kinds(ledger) == ["lookup", "refund", "email"]
