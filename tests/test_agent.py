"""Pivotal inside an application: the support-desk example (examples/support_desk.py) on a local
OpenAI-compatible server, through the real `openai` SDK: chat messages in and out, no verifier,
a person approving the refund, the critic reviewing the final answer, and the agent as a subgraph.

Tests on `recorded_desk` replay that server's recorded answers (tests/cassettes/test_agent/) with no
server; the event-loop tests keep the live server (`desk`), as only real connections show a client
bound to a closed loop.
"""

import asyncio
import importlib.util
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from pivotal.testing.loopback_provider import generic_responder

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("support_desk", ROOT / "examples" / "support_desk.py")
support_desk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(support_desk)

ANSWER = "Refunded 20.00 of order A1 and emailed the customer."


def clerk(reject_first_answer: bool = False):
    """A model that works the ticket as a capable LLM would: read the progress, take the next step."""
    rejected = []

    def respond(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
        prompt = "\n".join(str(m.get("content")) for m in messages)
        done = re.search(r"<progress>(.*?)</progress>", prompt, re.S).group(1) if "<progress>" in prompt else ""
        if schema_name == "Proposal":
            for action, arguments in (
                ("lookup_order", {"order_id": "A1"}),
                ("refund", {"order_id": "A1", "amount": 20.0}),
                ("send_email", {"order_id": "A1", "text": "Your refund of 20.00 is on its way."}),
            ):
                if f":{action}(" not in done:
                    return {"action": action, "arguments": arguments, "thought": "next step of the ticket"}
            return {"action": "finish", "arguments": {"answer": ANSWER}, "thought": "the ticket is resolved"}
        if schema_name == "Verdict" and "<proposal>\nfinish" in prompt and reject_first_answer and not rejected:
            rejected.append(True)
            return {"decision": "reject", "confidence": 0.9, "diagnosis": "the answer does not say when the money "
                    "arrives", "revision": "say when the refund arrives"}  # fmt: skip
        return generic_responder(schema_name, schema, messages)

    return respond


def entries(ledger: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, ledger.read_text().splitlines()) if e["kind"] == kind] if ledger.exists() else []


async def test_a_chat_asks_a_person_before_the_refund_and_ends_with_the_reviewed_answer(recorded_desk):
    server, model, ledger = recorded_desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ticket-1"}}
    paused = await agent.ainvoke({"messages": [HumanMessage("Please refund order A1 and tell me.")]}, config)
    assert paused["__interrupt__"][0].value["action"] == "refund" and entries(ledger, "refund") == []
    final = await agent.ainvoke(Command(resume={"decision": "approve", "reason": "policy ok"}), config)
    assert final["status"] == "success" and final["verified"] is False and final["answer"] == ANSWER
    assert isinstance(final["messages"][-1], AIMessage) and final["messages"][-1].content == ANSWER
    assert len(entries(ledger, "refund")) == 1 and len(entries(ledger, "email")) == 1
    finish = final["trajectory"][-1]
    assert finish["action"] == "finish" and finish["verdicts"][-1]["source"] == "critic"


async def test_a_final_answer_the_critic_rejects_is_a_failed_attempt_that_goes_forward(recorded_desk):
    server, model, ledger = recorded_desk
    server.responder = clerk(reject_first_answer=True)
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[])
    final = await agent.ainvoke({"messages": [HumanMessage("Refund A1, please.")]})
    assert final["status"] == "success" and final["retries"] == 1
    assert final["reflections"][0]["failure"].startswith("the critic rejected the final answer")
    assert final["reflections"][0]["rewind"] == "forward"
    assert len(entries(ledger, "refund")) == 1  # the retry went on from the real state


class ParentContext:
    """A parent application's own context type: the agent keeps its own settings under it."""

    user = "ann"


async def test_the_agent_is_a_subgraph_of_a_chat_app_that_streams_updates(recorded_desk):
    server, model, ledger = recorded_desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[])

    async def greet(state: MessagesState) -> dict:
        return {"messages": [AIMessage("Let me look into that.")]}

    parent = StateGraph(MessagesState, context_schema=ParentContext)
    parent.add_node("greet", greet)
    parent.add_node("desk", agent)
    parent.add_edge(START, "greet")
    parent.add_edge("greet", "desk")
    app = parent.compile()
    seen, reply = set(), None
    async for _, update in app.astream({"messages": [HumanMessage("Refund A1.")]}, context=ParentContext(),
                                       stream_mode="updates", subgraphs=True):  # fmt: skip
        seen |= set(update)
        reply = update["desk"]["messages"][-1] if "desk" in update else reply
    assert {"greet", "desk", "actor", "critic", "executor", "respond"} <= seen  # the agent's own nodes streamed
    assert reply.content == ANSWER and len(entries(ledger, "refund")) == 1


@pytest.mark.slow
async def test_two_dozen_invocations_share_one_event_loop(desk):
    """Embedded in a server: concurrent tickets in one loop, each on its own world and thread."""
    server, model, ledger = desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[])
    finals = await asyncio.gather(*(agent.ainvoke({"messages": [HumanMessage(f"Refund A1, ticket {i}.")]})
                                    for i in range(24)))  # fmt: skip
    assert [f["status"] for f in finals] == ["success"] * 24
    assert len(entries(ledger, "refund")) == 24 and len({f["run_id"] for f in finals}) == 24


# Sync calls: the same ticket through invoke / stream / batch, with a sync checkpointer as a sync app has.


@contextmanager
def sync_saver(kind: str, folder: Path) -> Iterator[Any]:
    if kind == "memory":
        yield InMemorySaver()
        return
    with SqliteSaver.from_conn_string(str(folder / "checkpoints.sqlite")) as saver:
        yield saver


@pytest.mark.parametrize("saver", ["memory", "sqlite"])
def test_invoke_asks_a_person_before_the_refund_and_resumes_like_ainvoke(recorded_desk, saver):
    server, model, ledger = recorded_desk
    server.responder = clerk()
    with sync_saver(saver, ledger.parent) as checkpointer:
        agent = support_desk.support_agent(model, memory=False, checkpointer=checkpointer)
        config = {"configurable": {"thread_id": "ticket-1"}}
        paused = agent.invoke({"messages": [HumanMessage("Please refund order A1 and tell me.")]}, config)
        assert paused["__interrupt__"][0].value["action"] == "refund" and entries(ledger, "refund") == []
        final = agent.invoke(Command(resume={"decision": "approve", "reason": "policy ok"}), config)
    assert final["status"] == "success" and final["verified"] is False and final["answer"] == ANSWER
    assert isinstance(final["messages"][-1], AIMessage) and final["messages"][-1].content == ANSWER
    assert len(entries(ledger, "refund")) == 1 and len(entries(ledger, "email")) == 1


async def test_invoke_works_inside_a_running_event_loop(desk):
    """As in a notebook cell: the caller's loop is running, and a sync call blocks it until the run ends."""
    server, model, ledger = desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[])
    final = agent.invoke({"messages": [HumanMessage("Refund A1.")]})
    assert final["status"] == "success" and final["answer"] == ANSWER and len(entries(ledger, "refund")) == 1


def test_stream_and_batch_run_each_ticket_once(recorded_desk):
    server, model, ledger = recorded_desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[])
    nodes = [node for chunk in agent.stream({"messages": [HumanMessage("Refund A1.")]}) for node in chunk]
    assert {"start", "actor", "critic", "executor", "respond"} <= set(nodes) and len(entries(ledger, "refund")) == 1
    finals = agent.batch([{"messages": [HumanMessage(f"Refund A1, ticket {i}.")]} for i in range(3)])
    assert [f["status"] for f in finals] == ["success"] * 3 and len(entries(ledger, "refund")) == 4


# A parent graph with keys of its own that Pivotal also uses internally (`task`, `status`).


class Desk(MessagesState):
    task: str
    status: str
    pivotal_result: dict


def desk_app(agent: Any, checkpointer: Any = None) -> Any:
    parent = StateGraph(Desk)
    parent.add_node("agent", agent)
    parent.add_edge(START, "agent")
    return parent.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("saver", ["memory", "sqlite"])
def test_a_sync_parent_keeps_its_own_task_and_status(recorded_desk, saver):
    server, model, ledger = recorded_desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False)
    with sync_saver(saver, ledger.parent) as checkpointer:
        app = desk_app(agent, checkpointer)
        config = {"configurable": {"thread_id": "ticket-1"}}
        ticket = {"messages": [HumanMessage("Refund A1.")], "task": "triage", "status": "open"}
        goals = [
            update["start"]["task"]["goal"]
            for _, update in app.stream(ticket, config, stream_mode="updates", subgraphs=True)
            if "start" in update
        ]
        assert goals == ["Refund A1."] and entries(ledger, "refund") == []  # waits for the person
        final = app.invoke(Command(resume={"decision": "approve", "reason": "ok"}), config)
    assert final["task"] == "triage" and final["status"] == "open"
    assert final["pivotal_result"]["status"] == "success" and final["pivotal_result"]["answer"] == ANSWER
    assert final["messages"][-1].content == ANSWER and len(entries(ledger, "refund")) == 1


async def test_an_async_parent_keeps_its_own_task_and_status_and_may_name_the_task(recorded_desk):
    server, model, ledger = recorded_desk
    server.responder = clerk()
    app = desk_app(support_desk.support_agent(model, memory=False, require_approval_for=[]))

    class Explicit(Desk):
        pivotal_task: str

    final = await app.ainvoke({"messages": [HumanMessage("Refund A1.")], "task": "triage", "status": "open"})
    assert (final["task"], final["status"], final["pivotal_result"]["status"]) == ("triage", "open", "success")
    parent = StateGraph(Explicit)
    parent.add_node("agent", support_desk.support_agent(model, memory=False, require_approval_for=[]))
    parent.add_edge(START, "agent")
    goals = [
        update["start"]["task"]["goal"]
        async for _, update in parent.compile().astream(
            {"messages": [], "pivotal_task": "Refund A1.", "task": "triage"}, stream_mode="updates", subgraphs=True
        )
        if "start" in update
    ]
    assert goals == ["Refund A1."] and len(entries(ledger, "refund")) == 2
