"""No secret in any byte of a checkpoint file, on every surface: the graph through the runner,
`create_pivotal_agent`, `create_agent` with `PivotalCritic` over `pivotal.redacting(saver)`, and a
parent graph holding Pivotal as a node.

Two canaries: the value of a secret-named variable (`SUPPORT_SERVICE_KEY`, no known shape) and an
`sk-…` key no variable holds. Each is planted in the goal, the tool's arguments (a model reply),
the tool's output, the model's final words, a person's resume reason and an approval edit. The proof
is the raw bytes of the SQLite file (both tables, and the write-ahead log), counted from disk.
"""

import dataclasses
import json
import re
import traceback
import uuid
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, Interrupt, Send
from test_secrets_at_source import POSTGRES, postgres_bytes

import pivotal
from pivotal import Context, PivotalCritic, aresume, arun, create_pivotal_agent
from pivotal.core.secrets import MARK, RedactingSerializer, redact_tree
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict

SERVICE_KEY = "svc-canary-0042-zeta-77"
"""The value of SUPPORT_SERVICE_KEY: only its variable's name gives it away."""
SK_KEY = "sk-canary" + "Qz9" * 8
"""An OpenAI-shaped key no variable holds: only its shape gives it away."""
CANARIES = (SERVICE_KEY, SK_KEY)
GOAL = f"Refund 20.00 of order A1 (service key {SERVICE_KEY}, deploy key {SK_KEY})."
EDITED = {"order_id": "A1", "amount": 20.0, "note": f"edited {SK_KEY} {SERVICE_KEY}"}
EDIT = {"type": "edit", "edited_action": {"name": "refund", "args": EDITED}}
REJECT = {"decision": "reject", "reason": f"not yet, check {SERVICE_KEY} and {SK_KEY} first"}
APPROVE = {"decision": "approve", "reason": f"ok, approved with {SERVICE_KEY} / {SK_KEY}"}


@pytest.fixture
def canary_env(monkeypatch):
    monkeypatch.setenv("SUPPORT_SERVICE_KEY", SERVICE_KEY)


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def refund(ledger):
    @tool
    def refund(order_id: str, amount: float, note: str = "") -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        with ledger.open("a") as out:
            out.write(json.dumps({"order_id": order_id, "amount": amount}) + "\n")
        return f"refunded {amount:.2f} of {order_id} via {SERVICE_KEY}; receipt signed with {SK_KEY}"

    return refund


def refunds(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def leaked(folder: Path) -> dict[str, int]:
    """How often each canary appears in the raw bytes of every SQLite file (and its log) in `folder`."""
    blob = b"".join(f.read_bytes() for f in sorted(folder.glob("*.sqlite*")))
    assert blob
    return {key: blob.count(key.encode()) + blob.count(key.encode().hex().encode()) for key in CANARIES}


NONE = dict.fromkeys(CANARIES, 0)


def graph_model() -> ScriptedChatModel:
    """The actor: a refund whose arguments and thought carry both keys (twice: a person turns the
    first down), then a final answer quoting them; the critic approves every proposal.
    """
    proposal = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0, "note": f"use {SK_KEY}"},
                "thought": f"the service key {SERVICE_KEY} allows it"}  # fmt: skip
    answer = {"action": "finish", "arguments": {"answer": f"Refunded A1 with {SK_KEY} / {SERVICE_KEY}."},
              "thought": "done"}  # fmt: skip
    return ScriptedChatModel(script={"Proposal": [proposal, proposal, answer], "Verdict": [verdict("approve")]})


def desk_agent(refund, name: str, **kwargs):
    return create_pivotal_agent(graph_model(), [refund], irreversible=["refund"], require_approval_for=["refund"],
                                memory=False, max_steps=4, max_pivot_retries=0, name=name, **kwargs)  # fmt: skip


async def test_the_graph_through_the_runner_checkpoints_no_canary(canary_env, refund, ledger, tmp_path):
    """`arun`/`aresume` open the checkpoints themselves: a person's edit and reason reach `__resume__`."""
    desk_agent(refund, "redaction-desk-runner")
    path = str(tmp_path / "runs.sqlite")
    context = Context(model=graph_model(), require_approval_for=["refund"], memory=False, max_steps=4,
                      max_pivot_retries=0, default_env="redaction-desk-runner")  # fmt: skip
    paused = await arun(GOAL, context, checkpoint_path=path, thread_id="ticket-r")
    assert paused.status == "interrupted" and refunds(ledger) == 0
    again = await aresume("ticket-r", EDIT, context, checkpoint_path=path)  # an edit is no approval in the graph
    assert again.status == "interrupted" and refunds(ledger) == 0
    final = await aresume("ticket-r", APPROVE, context, checkpoint_path=path)
    assert final.status == "success" and refunds(ledger) == 1
    assert leaked(tmp_path) == NONE


async def test_a_resume_reason_reaches_no_postgres_write(canary_env, refund, ledger):
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    desk_agent(refund, "redaction-desk-postgres")
    thread = f"ticket-pg-{uuid.uuid4().hex[:8]}"
    context = Context(model=graph_model(), require_approval_for=["refund"], memory=False, max_steps=4,
                      max_pivot_retries=0, default_env="redaction-desk-postgres")  # fmt: skip
    paused = await arun(GOAL, context, checkpoint_path=POSTGRES, thread_id=thread)
    assert paused.status == "interrupted"
    await aresume(thread, EDIT, context, checkpoint_path=POSTGRES)
    final = await aresume(thread, APPROVE, context, checkpoint_path=POSTGRES)
    assert final.status == "success" and refunds(ledger) == 1
    blob = postgres_bytes(thread)
    assert {key: blob.count(key.encode()) + blob.count(key.encode().hex().encode()) for key in CANARIES} == NONE


async def test_create_pivotal_agent_checkpoints_no_canary(canary_env, refund, ledger, tmp_path):
    config = {"configurable": {"thread_id": "ticket-a"}}
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        agent = desk_agent(refund, "redaction-desk-agent", checkpointer=saver)
        paused = await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
        assert paused["__interrupt__"] and refunds(ledger) == 0
        await agent.ainvoke(Command(resume=REJECT), config)
        final = await agent.ainvoke(Command(resume=APPROVE), config)
        assert final["status"] == "success" and refunds(ledger) == 1
        assert MARK in final["answer"]
        history = [snapshot async for snapshot in agent.aget_state_history(config)]
    assert len(history) > 10  # read back through the wrapped serializer, every checkpoint
    assert leaked(tmp_path) == NONE


async def test_create_agent_with_the_critic_over_a_redacting_saver_checkpoints_no_canary(
    canary_env, refund, ledger, tmp_path
):
    call = tool_call("refund", order_id="A1", amount=20.0, note=f"use {SK_KEY}")
    call.content = f"Refunding with the service key {SERVICE_KEY}."
    model = ScriptedChatModel(
        script={"agent": [call, tool_call("refund", order_id="A1", amount=20.0), AIMessage(f"Done: {SK_KEY}.")]}
    )
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95, "the order's total")]})
    middleware = PivotalCritic(critic, irreversible=["refund"], require_approval_for=["refund"], tools=[refund])
    config = {"configurable": {"thread_id": "ticket-c"}}
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "app.sqlite")) as saver:
        agent = create_agent(model, [refund], middleware=[middleware], checkpointer=pivotal.redacting(saver))
        paused = await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
        assert paused["__interrupt__"] and refunds(ledger) == 0
        await agent.ainvoke(Command(resume={"type": "reject", "message": REJECT["reason"]}), config)
        final = await agent.ainvoke(Command(resume=EDIT), config)
        assert refunds(ledger) == 1
        reviews = final["pivotal_reviews"]
    assert [r["executed"] for r in reviews] == [False, True] and MARK in reviews[-1]["observation"]
    assert leaked(tmp_path) == NONE


async def test_a_parent_graph_holding_pivotal_as_a_node_checkpoints_no_canary(canary_env, refund, ledger, tmp_path):
    agent = desk_agent(refund, "redaction-desk-parent")
    parent = StateGraph(MessagesState)
    parent.add_node("desk", agent)
    parent.add_edge(START, "desk")
    config = {"configurable": {"thread_id": "ticket-p"}}
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "parent.sqlite")) as saver:
        app = parent.compile(checkpointer=pivotal.redacting(saver))
        paused = await app.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
        assert paused["__interrupt__"] and refunds(ledger) == 0
        await app.ainvoke(Command(resume=REJECT), config)
        final = await app.ainvoke(Command(resume=APPROVE), config)
    assert refunds(ledger) == 1 and MARK in final["messages"][-1].content
    assert leaked(tmp_path) == NONE


@pytest.fixture
def check_fraud():
    @tool
    def check_fraud(order_id: str) -> str:
        """Check an order's fraud signals."""
        raise RuntimeError(f"fraud service refused api_key={SK_KEY} service key {SERVICE_KEY}")

    return check_fraud


async def test_a_tool_error_under_the_critic_over_a_redacting_saver_checkpoints_no_canary(
    canary_env, check_fraud, tmp_path
):
    """The tool's exception leaves the critic blanked, and LangGraph writes it as an `__error__` pending
    write: no key in either, and the thread still reads back the failed task's error.
    """
    model = ScriptedChatModel(script={"agent": [tool_call("check_fraud", order_id="A1")]})
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve")]})
    middleware = PivotalCritic(critic, irreversible=[], tools=[check_fraud])
    config = {"configurable": {"thread_id": "ticket-e"}}
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "app.sqlite")) as saver:
        agent = create_agent(model, [check_fraud], middleware=[middleware], checkpointer=pivotal.redacting(saver))
        with pytest.raises(RuntimeError, match=re.escape(f"api_key={MARK}")) as raised:  # the critic blanks it
            await agent.ainvoke({"messages": [HumanMessage("Check order A1 for fraud.")]}, config)
        errors = [task.error for task in (await agent.aget_state(config)).tasks if task.error]
    assert [str(error) for error in errors] == [
        f"RuntimeError('fraud service refused api_key={MARK} service key {MARK}')"
    ]
    assert type(raised.value) is RuntimeError
    assert not any(key in "".join(traceback.format_exception(raised.value)) for key in CANARIES)
    assert leaked(tmp_path) == NONE


async def test_a_parent_graph_node_error_over_a_redacting_saver_checkpoints_no_canary(canary_env, tmp_path):
    def failing(state: MessagesState) -> dict:
        raise ValueError(f"upstream said token={SK_KEY}")

    parent = StateGraph(MessagesState)
    parent.add_node("failing", failing)
    parent.add_edge(START, "failing")
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "parent.sqlite")) as saver:
        app = parent.compile(checkpointer=pivotal.redacting(saver))
        with pytest.raises(ValueError, match=SK_KEY):
            await app.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "ticket-pe"}})
    assert leaked(tmp_path) == NONE


# --- the serializer itself ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Frozen:
    text: str
    count: int = 0


def test_what_it_writes_reads_back_with_its_types_and_only_the_secrets_blanked(canary_env):
    serde = RedactingSerializer(JsonPlusSerializer())
    value = {
        "messages": [HumanMessage(f"key {SK_KEY}", id="m1"), AIMessage("fine", id="m2")],
        "interrupts": [Interrupt(value={"reason": SERVICE_KEY}, id="i1")],
        "send": Send("node", {"arg": SK_KEY}),
        "frozen": Frozen(f"x {SERVICE_KEY}", 3),
        "command": Command(resume={"reason": SERVICE_KEY}),
        "numbers": (1, 2.5, None, True),
    }
    kind, blob = serde.dumps_typed(value)
    assert not any(key.encode() in blob for key in CANARIES)
    back = serde.loads_typed((kind, blob))
    assert isinstance(back["messages"][0], HumanMessage) and back["messages"][0].content == f"key {MARK}"
    assert back["messages"][1] == value["messages"][1]
    assert isinstance(back["interrupts"][0], Interrupt) and back["interrupts"][0].value == {"reason": MARK}
    assert isinstance(back["send"], Send) and back["send"].arg == {"arg": MARK}
    assert back["frozen"] == Frozen(f"x {MARK}", 3) and back["command"].resume == {"reason": MARK}
    assert back["numbers"] == [1, 2.5, None, True]  # msgpack's own: a tuple reads back as a list
    assert value["messages"][0].content == f"key {SK_KEY}"  # the caller's own objects are not changed


def test_redacting_wraps_once_and_returns_the_same_saver():
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    assert pivotal.redacting(saver) is saver and isinstance(saver.serde, RedactingSerializer)
    inner = saver.serde.serde
    assert pivotal.redacting(saver).serde.serde is inner  # not wrapped twice
    with pytest.raises(pivotal.PivotalError, match="^checkpointer must be a LangGraph checkpointer"):
        pivotal.redacting(None)  # handed back, it looked covered


class KeywordOnlyError(Exception):
    """An SDK's error: made with a keyword-only argument, keeping a body of its own."""

    def __init__(self, message: str, *, body: dict) -> None:
        super().__init__(message)
        self.body = body


def test_an_exception_is_written_redacted_and_keeps_its_type(canary_env):
    """LangGraph writes a failed task's exception as it is: its arguments, attributes, notes and
    causes are blanked, in a copy of its own type; the caller's exception keeps its text.
    """
    error = KeywordOnlyError(f"auth failed api_key={SK_KEY}", body={"key": SERVICE_KEY})
    error.add_note(f"retried with {SK_KEY}")
    error.__cause__ = ValueError(f"token {SERVICE_KEY}")
    serde = RedactingSerializer(JsonPlusSerializer())
    for value in (error, {"err": error}, [ValueError(f"token {SERVICE_KEY}")]):
        kind, blob = serde.dumps_typed(value)
        assert not any(key.encode() in blob for key in CANARIES), value
    assert serde.loads_typed(serde.dumps_typed(error)) == f"KeywordOnlyError('auth failed api_key={MARK}')"
    clean = redact_tree(error)
    assert (
        type(clean) is KeywordOnlyError and clean.body == {"key": MARK} and clean.__notes__ == [f"retried with {MARK}"]
    )
    assert str(clean.__cause__) == f"token {MARK}" and str(error) == f"auth failed api_key={SK_KEY}"
    plain = RuntimeError("nothing secret here")
    assert redact_tree(plain) is plain


def test_an_exception_showing_a_secret_it_does_not_hold_is_written_as_its_text_redacted(canary_env):
    class Shows(Exception):
        def __str__(self) -> str:
            return f"computed {SK_KEY}"

    assert redact_tree(Shows("plain")) == "Shows('plain')"


def test_a_remembered_text_is_blanked_once_a_key_holding_it_is_set_and_the_memory_stays_bounded(monkeypatch):
    """Every checkpoint write walks the whole state again, so texts are remembered per set of secret
    values: a text remembered clean is blanked as soon as a variable set later holds it, the same
    object comes back while nothing changed, and the memory never grows past its bound.
    """
    from pivotal.core import secrets

    said = f"the caller's code is {SERVICE_KEY}-later"
    state = {"steps": [{"observation": said, "n": 1}], "goal": ("reach", said)}
    monkeypatch.delenv("SUPPORT_SERVICE_KEY", raising=False)
    assert redact_tree(state) is state  # remembered clean, and nothing copied
    monkeypatch.setenv("LATER_API_KEY", f"{SERVICE_KEY}-later")
    clean = redact_tree(state)
    assert clean["steps"][0] == {"observation": f"the caller's code is {MARK}", "n": 1}
    assert clean["goal"] == ("reach", f"the caller's code is {MARK}") and state["steps"][0]["observation"] == said
    walker = secrets._walker(tuple(secrets.secret_values()))
    texts = [f"observation {i}" for i in range(secrets.MEMO_TEXTS + 10)]
    assert redact_tree(texts) is texts
    assert 0 < len(walker.texts) <= secrets.MEMO_TEXTS
