"""A critic that cannot give a verdict runs nothing, and its refusal says what failed: the HTTP status
and the server, a timeout, a refused connection, an unreadable reply with what it said. Through the
real `openai` SDK against the loopback provider; refunds are counted from the tool's own ledger.
"""

import socket
import uuid
from collections.abc import Iterator

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from pivotal import PivotalCritic, create_pivotal_agent
from pivotal.testing.loopback_provider import Loopback, loopback
from pivotal.testing.scripted import ScriptedChatModel, tool_call


@pytest.fixture
def server() -> Iterator[Loopback]:
    with loopback() as provider:
        yield provider


@pytest.fixture
def paid():
    return []


@pytest.fixture
def refund(paid):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        paid.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    return refund


def critic_at(base_url: str) -> ChatOpenAI:
    return ChatOpenAI(model="critic", base_url=base_url, api_key="k", max_retries=0, timeout=0.5)


def refusal(critic: ChatOpenAI, refund) -> str:
    """What the agent's model is told when its refund is sent back."""
    agent = create_agent(ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1", amount=20.0)]}),
                         [refund], middleware=[PivotalCritic(critic, irreversible=["refund"])])  # fmt: skip
    thread = {"configurable": {"thread_id": uuid.uuid4().hex}}  # a timed-out critic is not asked again in a thread
    result = agent.invoke({"messages": [("user", "Refund A1.")]}, thread)
    [sent_back] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert sent_back.status == "error" and len(sent_back.content.splitlines()) == 1
    return sent_back.content


def port_of(server: Loopback) -> str:
    return server.root_url.removeprefix("http://")


def test_an_http_error_is_named_with_its_status_and_server(server, refund, paid):
    server.faults.extend([("500",)] * 9)
    text = refusal(critic_at(server.base_url_openai), refund)
    assert "the critic gave no valid verdict, so nothing was run: HTTP 500 from " + port_of(server) in text
    assert paid == []


@pytest.mark.parametrize("fault", ["truncated", "invalid"])
def test_an_unreadable_reply_is_named_with_what_it_said(server, refund, paid, fault):
    server.faults.extend([(fault,)] * 9)
    text = refusal(critic_at(server.base_url_openai), refund)
    assert "the critic gave no valid verdict, so nothing was run: unreadable reply (" in text
    assert ('\'{"decision": "approve"' if fault == "truncated" else "not-one-of-the-choices") in text
    assert paid == []


def test_a_timeout_is_named_with_the_server(server, refund, paid):
    server.faults.extend([("timeout", 3)] * 9)
    text = refusal(critic_at(server.base_url_openai), refund)
    assert "nothing was run: timed out waiting for " + port_of(server) in text
    assert paid == []


def test_a_dead_port_is_named(refund, paid):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed on leaving: nothing listens there
    text = refusal(critic_at(f"http://127.0.0.1:{port}/v1"), refund)
    assert f"nothing was run: no connection to 127.0.0.1:{port}" in text
    assert paid == []


def test_the_graph_records_the_same_reason(server, refund, paid):
    server.faults.extend([("500",)] * 99)
    proposal = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0}, "thought": "refund it"}
    actor = ScriptedChatModel(script={"Proposal": [proposal]})
    critic = critic_at(server.base_url_openai)
    settings = {"memory": False, "max_pivot_retries": 0, "max_critique_rounds": 1}
    agent = create_pivotal_agent(actor, [refund], irreversible=["refund"], critic_model=critic, **settings)
    result = agent.invoke({"messages": [("user", "Refund A1.")]})
    assert paid == [] and result["status"] == "failure"
    assert "HTTP 500 from " + port_of(server) in result["reason"], result["reason"]
