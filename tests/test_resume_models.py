"""A run paused with one model object goes on only with that model: a `Command(resume=...)` from an
agent built with another (another model name, another server) is refused in one line that says how
to go on with it on purpose. Refunds are counted from the tool's own ledger.
"""

import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from pivotal import create_pivotal_agent
from pivotal.core.errors import PivotalError
from pivotal.testing.scripted import ScriptedChatModel, verdict

REFUND = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0}, "thought": "refund it"}
ANSWER = {"action": "finish", "arguments": {"answer": "Refunded 20.00 of A1."}, "thought": "done"}


class Named(ScriptedChatModel):
    """A scripted model with a model name, as a provider's chat model has."""

    model_name: str = ""


@pytest.fixture
def paid():
    return []


@pytest.fixture
def desk(paid, tmp_path):
    """An app that builds its agent with a model of a given name, in any process, on one SQLite file."""

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        paid.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    with SqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:

        def build(name: str, *, resumed: bool = False):
            """`resumed`: a process that goes on after the refund, whose model proposes what comes next."""
            proposals = [ANSWER] if resumed else [REFUND, ANSWER]
            model = Named(model_name=name, script={"Proposal": proposals, "Verdict": [verdict("approve")]})
            settings = {"memory": False, "max_pivot_retries": 0, "checkpointer": saver, "name": "resume-models"}
            return create_pivotal_agent(
                model, [refund], irreversible=["refund"], require_approval_for=["refund"], **settings
            )

        yield build


CONFIG = {"configurable": {"thread_id": "ticket-1"}}
TICKET = {"messages": [("user", "Refund 20.00 of order A1.")]}


def test_a_resume_with_another_model_object_is_refused_and_the_decision_stays_unspent(desk, paid):
    paused = desk("gpt-a").invoke(TICKET, CONFIG)
    assert paused["__interrupt__"][0].value["action"] == "refund"
    with pytest.raises(PivotalError) as refused:
        desk("gpt-b").invoke(Command(resume="approve"), CONFIG)
    message = str(refused.value)
    assert "model paused with test_resume_models.Named(model='gpt-a'" in message
    assert "the resume gives test_resume_models.Named(model='gpt-b'" in message
    assert "allow_other_models=True" in message and len(message.splitlines()) == 1
    assert paid == []
    done = desk("gpt-b", resumed=True).invoke(Command(resume="approve"), CONFIG, context={"allow_other_models": True})
    assert done["status"] == "success" and paid == [("A1", 20.0)]


def test_the_same_model_rebuilt_in_another_process_resumes(desk, paid):
    desk("gpt-a").invoke(TICKET, CONFIG)
    done = desk("gpt-a", resumed=True).invoke(Command(resume="approve"), CONFIG)
    assert done["status"] == "success" and paid == [("A1", 20.0)]


def test_an_identity_names_the_endpoint_without_secrets():
    from pivotal.core.context import model_identity  # here: the tests above also run on code without it

    one = ChatOpenAI(model="m", base_url="https://user:pw@a.example:8443/v1?key=s3cret", api_key="sk-app")
    other = ChatOpenAI(model="m", base_url="https://b.example/v1", api_key="sk-app")
    assert (
        model_identity(one)
        == "langchain_openai.chat_models.base.ChatOpenAI(model='m', endpoint='https://a.example:8443')"
    )
    assert model_identity(one) != model_identity(other)
    assert not any(secret in model_identity(one) for secret in ("pw", "s3cret", "sk-app", "user"))


def test_a_paused_approval_of_the_middleware_resumes_only_with_the_critic_it_paused_with(paid):
    """create_agent + PivotalCritic: the approval paused under one critic model; another refuses to go on."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from pivotal import PivotalCritic
    from pivotal.testing.scripted import tool_call

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        paid.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    saver = InMemorySaver()

    def build(critic_name: str, **settings):
        model = ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1", amount=20.0)]})
        critic = Named(model_name=critic_name, script={"Verdict": [verdict("approve")]})
        middleware = PivotalCritic(critic, irreversible=["refund"], require_approval_for=["refund"], **settings)
        return create_agent(model, [refund], middleware=[middleware], checkpointer=saver)

    paused = build("critic-a").invoke(TICKET, CONFIG)
    assert paused["__interrupt__"][0].value["action"] == "refund"
    with pytest.raises(PivotalError) as refused:
        build("critic-b").invoke(Command(resume={"type": "approve"}), CONFIG)
    message = str(refused.value)
    assert "critic_model paused with test_resume_models.Named(model='critic-a'" in message
    assert "allow_other_models=True in PivotalCritic(...)" in message and len(message.splitlines()) == 1
    assert paid == []
    build("critic-b", allow_other_models=True).invoke(Command(resume={"type": "approve"}), CONFIG)
    assert paid == [("A1", 20.0)]
