"""Pivotal inside an application: the support-desk example (examples/support_desk.py) on a local
OpenAI-compatible server, through the real `openai` SDK: chat messages in and out, no verifier,
a person approving the refund, the critic reviewing the final answer, and the agent as a subgraph.
"""

import asyncio
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from pivotal.testing.loopback_provider import generic_responder, loopback

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


@pytest.fixture
def desk(tmp_path, monkeypatch):
    monkeypatch.setenv("SUPPORT_LEDGER", str(tmp_path / "ledger.jsonl"))
    with loopback() as server:
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        yield server, model, tmp_path / "ledger.jsonl"


def entries(ledger: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, ledger.read_text().splitlines()) if e["kind"] == kind] if ledger.exists() else []


async def test_a_chat_asks_a_person_before_the_refund_and_ends_with_the_reviewed_answer(desk):
    server, model, ledger = desk
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


async def test_a_final_answer_the_critic_rejects_is_a_failed_attempt_that_goes_forward(desk):
    server, model, ledger = desk
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


async def test_the_agent_is_a_subgraph_of_a_chat_app_that_streams_updates(desk):
    server, model, ledger = desk
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


async def test_two_dozen_invocations_share_one_event_loop(desk):
    """Embedded in a server: concurrent tickets in one loop, each on its own world and thread."""
    server, model, ledger = desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[])
    finals = await asyncio.gather(*(agent.ainvoke({"messages": [HumanMessage(f"Refund A1, ticket {i}.")]})
                                    for i in range(24)))  # fmt: skip
    assert [f["status"] for f in finals] == ["success"] * 24
    assert len(entries(ledger, "refund")) == 24 and len({f["run_id"] for f in finals}) == 24
