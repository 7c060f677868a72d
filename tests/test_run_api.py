"""The run API runs an application's own graph too (`arun(..., graph=agent)`): the task runs with the
graph's tools, settings and checkpointer, a context may tighten them but never loosen them, and the
checkpoints are the graph's own. Counted from the world's side (the refunds the tool wrote).
"""

import json
import sqlite3

import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from pivotal import Context, aresume, arun, create_pivotal_agent, run, run_batch
from pivotal.core.environments.base import RewindWarning
from pivotal.core.errors import PivotalError
from pivotal.testing.loopback_provider import loopback
from pivotal.testing.promise_desk import clerk_responder, desk_tools, ledger_kinds


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "ledger.jsonl"


def refund_tool(ledger):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        with ledger.open("a") as out:
            out.write(json.dumps({"kind": "refund", "order_id": order_id}) + "\n")
        return f"refunded {amount} of {order_id}"

    return refund


@pytest.fixture
def desk(ledger):
    return create_pivotal_agent("sim", [refund_tool(ledger)], max_steps=2, max_pivot_retries=0, retry="none",
                                memory=False, checkpointer=InMemorySaver(), name="run-api-desk")  # fmt: skip


def refunds(ledger) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


async def test_a_task_runs_on_the_applications_graph_with_its_settings_and_checkpointer(desk):
    result = await arun("refund order A1", graph=desk, thread_id="ticket-1")
    assert result.status in ("success", "failure"), result.error
    assert result.task["env"] == "run-api-desk"  # the agent's tools, named by the agent
    assert result.retries["strategy"] == "none"  # the agent's own settings, not Context()'s
    saved = await desk.aget_state({"configurable": {"thread_id": "ticket-1"}})
    assert saved.values["run_id"] == result.run_id  # kept in the agent's own checkpointer
    assert saved.values["run_settings"]["max_steps"] == 2


async def test_a_context_may_tighten_the_graphs_settings(desk):
    result = await arun("refund order A1", Context(model="sim", max_steps=1, max_pivot_retries=0, memory=False,
                                                   retry="none", default_env="run-api-desk"), graph=desk)  # fmt: skip
    assert result.status in ("success", "failure"), result.error
    assert result.executed <= 1


async def test_a_context_that_loosens_the_graphs_settings_is_refused_before_any_action(desk, ledger):
    looser = Context(model="sim", max_steps=50, memory=False, default_env="run-api-desk")
    with pytest.raises(PivotalError, match="loosens this deployment's max_steps") as refused:
        await arun("refund order A1", looser, graph=desk)
    assert len(str(refused.value).splitlines()) == 1
    with pytest.raises(PivotalError, match="loosens"):
        await run_batch(["refund order A1"], looser, graph=desk)
    assert refunds(ledger) == 0


async def test_the_graphs_checkpoints_are_its_own(desk, tmp_path):
    with pytest.raises(PivotalError, match="not both"):
        await arun("refund order A1", graph=desk, checkpoint_path=str(tmp_path / "other.sqlite"))
    assert not (tmp_path / "other.sqlite").exists()


async def test_a_batch_runs_on_the_applications_graph(desk):
    results = await run_batch(["refund order A1", "refund order B2"], graph=desk, thread_prefix="desk")
    assert [r.thread_id for r in results] == ["desk:0", "desk:1"]
    assert all(r.task["env"] == "run-api-desk" for r in results)
    for r in results:
        saved = await desk.aget_state({"configurable": {"thread_id": r.thread_id}})
        assert saved.values["run_id"] == r.run_id


def test_a_graph_over_a_saver_without_async_methods_is_refused_in_one_line(ledger, tmp_path):
    """`run(goal, graph=agent)` over LangGraph's `SqliteSaver` failed at the first checkpoint with
    LangGraph's NotImplementedError; now one line names the async twin, and no tool ran.
    """
    saver = SqliteSaver(sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False))
    agent = create_pivotal_agent(
        "sim", [refund_tool(ledger)], memory=False, checkpointer=saver, name="run-api-sync-desk"
    )
    with pytest.raises(PivotalError, match="AsyncSqliteSaver") as refused:
        run("refund order A1", graph=agent)
    assert len(str(refused.value).splitlines()) == 1
    assert refunds(ledger) == 0


async def test_a_pause_on_an_applications_graph_resumes_there_with_its_model_object_and_refunds_once(tmp_path):
    """The app's model is a `ChatOpenAI` object, which a thread cannot save: `aresume(..., graph=agent)`
    told the caller to pass the model again though the graph it was given holds it. Now the resume takes
    it from the graph. Counted on the ledger, each phase on a new agent over the same SQLite file.
    """
    ledger, checkpoints = tmp_path / "ledger.jsonl", str(tmp_path / "app.sqlite")
    with loopback() as server:
        server.responder = clerk_responder()

        def agent(saver: AsyncSqliteSaver):
            model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
            tools = desk_tools(ledger)
            return create_pivotal_agent(model, tools, irreversible=["refund"], require_approval_for=["refund"],
                                        memory=False, checkpointer=saver, name="resume-desk")  # fmt: skip

        async with AsyncSqliteSaver.from_conn_string(checkpoints) as saver:
            with pytest.warns(RewindWarning, match="compensations") as notice:  # a replay would refund again
                paused = await arun("Refund order A1.", graph=agent(saver), thread_id="ticket-9")
        assert "replay" not in str(notice[0].message).replace("never a replay", "")
        assert paused.status == "interrupted" and paused.interrupt["action"] == "refund"
        assert ledger_kinds(ledger) == ["lookup"]
        async with AsyncSqliteSaver.from_conn_string(checkpoints) as saver:
            done = await aresume("ticket-9", {"decision": "approve", "reason": "checked"}, graph=agent(saver))
        assert done.status == "success", done.reason
        assert ledger_kinds(ledger).count("refund") == 1
        async with AsyncSqliteSaver.from_conn_string(checkpoints) as saver:
            with pytest.raises(PivotalError, match="waiting"):
                await aresume("ticket-9", {"decision": "approve", "reason": "again"}, graph=agent(saver))
    assert ledger_kinds(ledger).count("refund") == 1


async def test_a_finished_thread_reads_the_same_task_back_and_opens_a_new_turn_for_another(tmp_path):
    """`arun(goal, graph=agent, thread_id=t)` on a thread whose turn had finished returned that turn's
    result for any goal: a chat app's next message through the run API was never answered. The same
    task asked again is still read back (no second refund); another task is a new turn on the thread.
    """
    ledger = tmp_path / "ledger.jsonl"
    with loopback() as server:
        server.responder = clerk_responder()
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        agent = create_pivotal_agent(model, desk_tools(ledger), irreversible=["refund"], memory=False,
                                     checkpointer=InMemorySaver(), name="turns-desk")  # fmt: skip
        first = await arun("Refund order A1.", graph=agent, thread_id="chat")
        again = await arun("Refund order A1.", graph=agent, thread_id="chat")
        assert first.status == again.status == "success" and again.run_id == first.run_id
        assert ledger_kinds(ledger) == ["lookup", "refund", "email"]
        second = await arun("Refund order B2.", graph=agent, thread_id="chat")
    assert second.status == "success" and second.run_id != first.run_id
    assert second.task["goal"] == "Refund order B2." and second.executed == first.executed  # its own steps
    orders = [json.loads(line).get("order_id") for line in ledger.read_text().splitlines()]
    assert orders.count("B2") == 2 and orders.count("A1") == 2  # B2's lookup and refund; A1's never again


async def test_another_task_on_a_thread_that_waits_for_a_person_is_refused_in_one_line(tmp_path):
    """It was met with the waiting turn's pause, as if that refund were the new task's."""
    ledger = tmp_path / "ledger.jsonl"
    with loopback() as server:
        server.responder = clerk_responder()
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        saver, tools = InMemorySaver(), desk_tools(ledger)
        agent = create_pivotal_agent(model, tools, irreversible=["refund"], require_approval_for=["refund"],
                                     memory=False, checkpointer=saver, name="wait-desk")  # fmt: skip
        paused = await arun("Refund order A1.", graph=agent, thread_id="chat")
        assert paused.status == "interrupted"
        with pytest.raises(PivotalError, match="waits for a person") as refused:
            await arun("Refund order B2.", graph=agent, thread_id="chat")
        assert len(str(refused.value).splitlines()) == 1
        again = await arun("Refund order A1.", graph=agent, thread_id="chat")  # the same task: still its pause
    assert again.status == "interrupted" and again.interrupt["arguments"]["order_id"] == "A1"
    assert ledger_kinds(ledger) == ["lookup"]


async def test_a_graph_built_without_a_checkpointer_runs_its_task_once(tmp_path):
    """`arun(goal, graph=agent)` on an agent built with no checkpointer (as an app does that keeps no
    threads) failed inside LangGraph after the first node with `AttributeError: 'AsyncPregelLoop' object
    has no attribute '_put_checkpoint_fut'` (the runner asked for `durability="sync"`, which needs a
    checkpointer). Now the task runs to its end: one refund in the ledger, through the real openai SDK.
    """
    ledger = tmp_path / "ledger.jsonl"
    with loopback() as server:
        server.responder = clerk_responder()
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        agent = create_pivotal_agent(model, desk_tools(ledger), irreversible=["refund"], memory=False,
                                     name="no-saver-desk")  # fmt: skip
        assert agent.checkpointer is None
        done = await arun("Refund order A1.", graph=agent)
        batch = await run_batch(["Refund order B2."], graph=agent)
    assert done.status == "success", done.reason
    assert batch[0].status == "success", batch[0].reason or batch[0].error
    assert ledger_kinds(ledger) == ["lookup", "refund", "email"] * 2


async def test_a_whole_context_beside_an_agent_runs_the_agents_own_tools(tmp_path):
    """`arun(goal, Context(model=..., require_approval_for=["refund"]), graph=agent)` ran the goal in
    gridworld (the default environment of a Context that names none), so every proposal of the agent's
    tools was refused as no gridworld action. A whole Context that names no environment now runs the
    agent's own: the refund waits for the person, then runs once. SQLite file, real openai SDK.
    """
    ledger = tmp_path / "ledger.jsonl"
    with loopback() as server:
        server.responder = clerk_responder()
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "app.sqlite")) as saver:
            agent = create_pivotal_agent(model, desk_tools(ledger), irreversible=["refund"], memory=False,
                                         checkpointer=saver, name="whole-context-desk")  # fmt: skip
            tighter = Context(model=model, memory=False, require_approval_for=["refund"])
            paused = await arun("Refund order A1.", tighter, graph=agent, thread_id="ticket-w")
            assert paused.task["env"] == "whole-context-desk"
            assert paused.status == "interrupted" and paused.interrupt["action"] == "refund", paused.reason
            done = await aresume("ticket-w", {"decision": "approve"}, graph=agent)
    assert done.status == "success", done.reason
    assert ledger_kinds(ledger) == ["lookup", "refund", "email"]
