"""The once-guard keyed on the world: a side effect recorded as executed anywhere in a thread (any
branch, fork, process or earlier turn) never runs again unless a person re-approves it.

Counted from the world's side: the test's own tools write one ledger line per refund. Real SQLite
checkpoints; `create_agent` + `PivotalCritic` with scripted models, and `create_pivotal_agent` (the
support desk of examples/support_desk.py) on the loopback OpenAI-compatible server.
"""

import json
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from test_conversation import FIRST, clerk, refunds, support_desk

from pivotal import PivotalCritic
from pivotal.middleware import critic_counts
from pivotal.middleware.critic import REPLAYED
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict

ASK = "Refund order A1 in full, then email the customer."


def desk_tools(ledger: Path) -> list:
    """The app's tools: each refund and email that really happens is a line in the ledger."""

    def write(kind: str, order_id: str) -> None:
        with ledger.open("a") as out:
            out.write(json.dumps({"kind": kind, "order_id": order_id}) + "\n")

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's total."""
        return f"order {order_id}: total 20.00"

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        write("refund", order_id)
        return f"refunded {amount:.2f} of {order_id}"

    @tool
    def send_email(order_id: str, text: str) -> str:
        """Email the customer of an order."""
        write("email", order_id)
        return "sent"

    return [lookup_order, refund, send_email]


def ledger_of(ledger: Path, kind: str = "refund") -> list[str]:
    rows = [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
    return [row["order_id"] for row in rows if row["kind"] == kind]


def ticket() -> list:
    return [
        tool_call("lookup_order", order_id="A1"),
        tool_call("refund", order_id="A1", amount=20.0),
        tool_call("send_email", order_id="A1", text="Your refund is on its way."),
    ]


def agent(saver, ledger: Path, steps: list, critic: ScriptedChatModel, **rules):
    middleware = PivotalCritic(critic, irreversible=["refund"], **rules)
    model = ScriptedChatModel(script={"agent": list(steps)})
    return create_agent(model, desk_tools(ledger), middleware=[middleware], checkpointer=saver)


def approving() -> ScriptedChatModel:
    return ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95, "the order's total")]})


def critic_calls(critic: ScriptedChatModel) -> int:
    return len(critic.prompts.get("Verdict", []))


@pytest.fixture
def saver(tmp_path):
    connection = sqlite3.connect(str(tmp_path / "threads.sqlite"), check_same_thread=False)
    yield SqliteSaver(connection)
    connection.close()


# --- create_agent + PivotalCritic: forks ----------------------------------------------------------


def test_a_fork_from_every_checkpoint_of_a_finished_thread_refunds_no_more(saver, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    critic = approving()
    desk = agent(saver, ledger, ticket(), critic)
    config = {"configurable": {"thread_id": "ticket-1"}}
    desk.invoke({"messages": [("user", ASK)]}, config)
    assert ledger_of(ledger) == ["A1"] and critic_calls(critic) == 3
    history = list(desk.get_state_history(config))
    recorded = 0
    for snapshot in history:
        replayed = desk.invoke(None, snapshot.config)
        recorded += any(REPLAYED in str(m.content) for m in replayed["messages"][-3:])
        forked = desk.update_state(snapshot.config, None) if snapshot.next else None
        if forked:
            desk.invoke(None, forked)
        assert ledger_of(ledger) == ["A1"], f"a fork at {snapshot.next} refunded again"
    assert recorded >= 1  # the fork whose next step runs the pending refund: its recorded result, not run
    assert critic_calls(critic) == 3  # a fork re-running the review reads the verdict the thread recorded


async def test_a_fork_on_postgres_refunds_no_more(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    url = "postgresql://postgres@127.0.0.1:5432/test"
    try:
        await (await psycopg.AsyncConnection.connect(url, connect_timeout=3)).close()
    except Exception as error:  # noqa: BLE001 — no database here: nothing to test against
        pytest.skip(f"no PostgreSQL at {url}: {error}")
    ledger = tmp_path / "ledger.jsonl"
    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        await saver.setup()
        desk = agent(saver, ledger, ticket(), approving())
        config = {"configurable": {"thread_id": f"once-world-{uuid.uuid4().hex}"}}  # the database outlives tests
        await desk.ainvoke({"messages": [("user", ASK)]}, config)
        assert ledger_of(ledger) == ["A1"]
        async for snapshot in desk.aget_state_history(config):
            await desk.ainvoke(None, snapshot.config)
        assert ledger_of(ledger) == ["A1"]


# --- create_agent + PivotalCritic: an approval answered elsewhere ---------------------------------


def paused_at_the_refund(saver, ledger: Path, thread: str) -> tuple[ScriptedChatModel, dict]:
    critic = approving()
    desk = agent(saver, ledger, ticket(), critic, require_approval_for=["refund"])
    config = {"configurable": {"thread_id": thread}}
    paused = desk.invoke({"messages": [("user", ASK)]}, config)
    assert paused["__interrupt__"][0].value["name"] == "refund" and ledger_of(ledger) == []
    assert critic_calls(critic) == 2
    return critic, config


def test_a_reject_answered_where_no_approval_rule_is_set_is_honoured(saver, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    _, config = paused_at_the_refund(saver, ledger, "ticket-reject")
    elsewhere = approving()  # another PivotalCritic, without require_approval_for: as another process
    result = agent(saver, ledger, [], elsewhere).invoke(Command(resume={"type": "reject", "message": "no"}), config)
    assert ledger_of(ledger) == []
    assert critic_calls(elsewhere) == 0  # the pause's verdict came with it
    assert any("a person rejected refund" in str(m.content) for m in result["messages"])


def test_an_approval_answered_under_a_stricter_critic_is_kept_and_forks_refund_no_more(saver, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    first, config = paused_at_the_refund(saver, ledger, "ticket-approve")
    stricter = ScriptedChatModel(script={"Verdict": [verdict("reject", 0.99, "never refund")]})
    elsewhere = agent(saver, ledger, [], stricter)
    elsewhere.invoke(Command(resume={"type": "approve"}), config)
    assert ledger_of(ledger) == ["A1"] and critic_calls(stricter) == 0 and critic_calls(first) == 2
    for snapshot in list(elsewhere.get_state_history(config)):
        replayed = elsewhere.invoke(None, snapshot.config)
        while replayed.get("__interrupt__"):  # the pending refund, reached again: a repeat, asked about
            question = replayed["__interrupt__"][0].value
            assert "repeat" in question and '"repeat": true' in question["question"]
            replayed = elsewhere.invoke(Command(resume={"type": "approve"}), config)  # not a re-approval
        assert ledger_of(ledger) == ["A1"], f"a fork at {snapshot.next} refunded again"
    assert critic_calls(stricter) == 0


_ANSWER_ELSEWHERE = textwrap.dedent(
    """
    import json, sqlite3, sys
    sys.path.insert(0, sys.argv[3])
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command
    from pathlib import Path
    from test_once_world import agent
    from pivotal.testing.scripted import ScriptedChatModel, verdict

    saver = SqliteSaver(sqlite3.connect(sys.argv[1], check_same_thread=False))
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve")]})
    config = {"configurable": {"thread_id": "ticket-process"}}
    agent(saver, Path(sys.argv[2]), [], critic).invoke(Command(resume={"type": "reject"}), config)
    print("critic calls", len(critic.prompts.get("Verdict", [])))
    """
)


@pytest.mark.slow
def test_a_reject_answered_in_another_process_is_honoured(tmp_path):
    ledger, path = tmp_path / "ledger.jsonl", tmp_path / "threads.sqlite"
    connection = sqlite3.connect(str(path), check_same_thread=False)
    paused_at_the_refund(SqliteSaver(connection), ledger, "ticket-process")
    connection.close()
    done = subprocess.run(
        [sys.executable, "-c", _ANSWER_ELSEWHERE, str(path), str(ledger), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-3:] == ["critic", "calls", "0"]
    assert ledger_of(ledger) == []


# --- the same message twice on one thread -------------------------------------------------------


def test_the_same_message_twice_through_create_agent_refunds_once(saver, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    desk = agent(saver, ledger, [*ticket(), *ticket()], approving())
    config = {"configurable": {"thread_id": "ticket-twice"}}
    desk.invoke({"messages": [("user", ASK)]}, config)
    result = desk.invoke({"messages": [("user", ASK)]}, config)
    assert ledger_of(ledger) == ["A1"] and ledger_of(ledger, "email") == ["A1", "A1"]
    repeat = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "refund"][-1]
    assert "already ran in this thread" in repeat.content and repeat.status == "error"


async def test_the_same_message_twice_through_create_pivotal_agent_refunds_once(desk, tmp_path):
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    server, model, ledger = desk
    server.responder = clerk()
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "threads.sqlite")) as saver:
        agent = support_desk.support_agent(model, memory=False, require_approval_for=[], checkpointer=saver)
        config = {"configurable": {"thread_id": "ticket-twice"}}
        first = await agent.ainvoke({"messages": [HumanMessage(FIRST)]}, config)
        assert first["status"] == "success" and refunds(ledger) == ["A1"]
        second = await agent.ainvoke({"messages": [HumanMessage(FIRST)]}, config)
    assert refunds(ledger) == ["A1"]
    assert second["run_id"] != first["run_id"]  # a turn of its own, and still the refund ran once


# --- explicit re-approval ----------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "refunded"), [({"type": "approve", "repeat": True}, 2), ({"type": "approve"}, 1)])
def test_a_repeat_runs_again_only_when_a_person_re_approves_it(saver, tmp_path, reply, refunded):
    ledger = tmp_path / "ledger.jsonl"
    critic = approving()
    steps = [tool_call("refund", order_id="A1", amount=20.0), tool_call("refund", order_id="A1", amount=20.0)]
    desk = agent(saver, ledger, steps, critic, require_approval_for=["refund"])
    config = {"configurable": {"thread_id": "ticket-again"}}
    desk.invoke({"messages": [("user", ASK)]}, config)
    asked = desk.invoke(Command(resume={"type": "approve"}), config)
    assert ledger_of(ledger) == ["A1"]
    (pending,) = asked["__interrupt__"]
    assert "already ran in this thread" in pending.value["repeat"]
    result = desk.invoke(Command(resume=reply), config)
    assert ledger_of(ledger) == ["A1"] * refunded
    assert critic_calls(critic) == 1  # the repeat is the person's to allow, not the critic's
    if refunded == 1:
        assert "Only a person can run it again" in _refund_results(result)[-1].content
    assert critic_counts(result)["counters"]["human_approved"] == 2


def _refund_results(result: dict) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "refund"]


@pytest.mark.parametrize(
    ("reply", "refunded"), [({"decision": "approve", "repeat": True}, 2), ({"decision": "approve"}, 1)]
)
async def test_a_repeat_in_create_pivotal_agent_runs_again_only_when_a_person_re_approves_it(desk, reply, refunded):
    from langgraph.checkpoint.memory import InMemorySaver

    server, model, ledger = desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, checkpointer=InMemorySaver())  # refunds ask a person
    config = {"configurable": {"thread_id": "ticket-again"}}
    await agent.ainvoke({"messages": [HumanMessage(FIRST)]}, config)
    first = await agent.ainvoke(Command(resume="approve"), config)
    assert first["status"] == "success" and refunds(ledger) == ["A1"]
    asked = await agent.ainvoke({"messages": [HumanMessage(FIRST)]}, config)
    question = asked["__interrupt__"][0].value
    assert "already ran in this thread" in question["repeat"] and '"repeat": true' in question["question"]
    for _ in range(8):  # a plain approval is no re-approval: the actor is told, and may ask again
        asked = await agent.ainvoke(Command(resume=reply), config)
        if not asked.get("__interrupt__"):
            break
    assert refunds(ledger) == ["A1"] * refunded
    assert not asked.get("__interrupt__")


def test_only_a_persons_approval_that_says_repeat_re_approves_the_chosen_repeat():
    from pivotal.core.environments.once import reapproved
    from pivotal.nodes.human_approval import re_approved

    call = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20}}
    chosen = {**call, "review": "r1", "repeat": "refund with these arguments already ran in this thread"}
    guard = {**call, "decision": "reject", "source": "guard", "review": "r1"}
    person = {**call, "arguments": {"order_id": "A1", "amount": 20.0}, "decision": "approve", "source": "human"}
    assert reapproved(chosen, [guard, {**person, "repeat": chosen["repeat"]}])
    assert not reapproved(chosen, [guard, person])  # a plain approval
    assert not reapproved(chosen, [{**person, "repeat": "x"}, guard])  # before the review that chose it
    assert not reapproved(
        {**chosen, "arguments": {"order_id": "A1", "amount": 5.0}}, [guard, {**person, "repeat": "x"}]
    )
    assert re_approved({"type": "approve", "repeat": True}) and re_approved(
        {"decisions": [{"decision": "approve", "repeat": True}]}
    )
    assert not re_approved({"type": "approve"}) and not re_approved({"type": "reject", "repeat": True})
    assert not re_approved({"type": "approve", "repeat": "yes"})


# --- every tool call that ran, met again by a fork -------------------------------------------------


def test_a_fork_before_the_tools_node_sends_no_mail_again_and_counts_the_review_once(saver, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    desk = agent(saver, ledger, ticket(), approving())
    config = {"configurable": {"thread_id": "ticket-mail"}}
    first = desk.invoke({"messages": [("user", ASK)]}, config)
    assert ledger_of(ledger, "email") == ["A1"]
    mailing = next(s for s in desk.get_state_history(config) if s.next == ("tools",) and "send_email" in str(s.values))
    forked = desk.invoke(None, mailing.config)
    assert ledger_of(ledger, "email") == ["A1"]  # the world's side: one email
    result = next(m for m in reversed(forked["messages"]) if isinstance(m, ToolMessage))
    assert result.name == "send_email" and result.status != "error" and "sent" in str(result.content)
    assert critic_counts(forked)["counters"] == critic_counts(first)["counters"]


def test_the_graph_path_of_a_namespace_drops_its_task_ids():
    from pivotal.core.environments.once import graph_path

    assert graph_path("agent:1f0a|critic:9b2c") == "agent|critic"
    assert graph_path("agent:7e1d") == graph_path("agent:0c4f") == "agent"
    assert graph_path("") == ""


def test_a_call_whose_tool_raised_runs_again_on_a_fork(saver):
    tries = []

    @tool
    def send_email(order_id: str, text: str) -> str:
        """Email the customer of an order."""
        tries.append(order_id)
        raise ToolException("the mail server is down")

    send_email.handle_tool_error = True  # the model is told, status "error": nothing was sent
    model = ScriptedChatModel(script={"agent": [tool_call("send_email", order_id="A1", text="Refunded.")]})
    desk = create_agent(model, [send_email], middleware=[PivotalCritic(approving())], checkpointer=saver)
    config = {"configurable": {"thread_id": "ticket-down"}}
    desk.invoke({"messages": [("user", ASK)]}, config)
    mailing = next(s for s in desk.get_state_history(config) if s.next == ("tools",))
    desk.invoke(None, mailing.config)
    assert tries == ["A1", "A1"]  # it changed nothing the first time, so the fork tries it again


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_the_thread_record_reads_every_task_of_the_same_node_and_only_what_is_new(kind, tmp_path):
    """A fork or a second submit of a parent runs Pivotal's node as a new task (a namespace of its own):
    the record of one task's node reads the others' checkpoints too, not another node's, and a
    second read takes what was written since (InMemorySaver lists namespace by namespace).
    """
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER

    from pivotal.core.environments.once import REVIEWS, thread_record

    connection = sqlite3.connect(str(tmp_path / "record.sqlite"), check_same_thread=False)
    saver = InMemorySaver() if kind == "memory" else SqliteSaver(connection)

    def ran(namespace: str, call_id: str) -> None:
        checkpoint = {**empty_checkpoint(), "id": str(uuid6())}
        checkpoint["channel_values"] = {REVIEWS: [{"tool_call_id": call_id, "action": "send_email", "executed": True}]}
        checkpoint["channel_versions"] = {REVIEWS: "1"}
        config = {"configurable": {"thread_id": f"desk-{kind}", "checkpoint_ns": namespace}}
        saver.put(config, checkpoint, {}, {REVIEWS: "1"})

    ran("agent:first", "call-1")
    ran("other:x", "call-other")
    ran("agent:second", "call-2")
    node = {"configurable": {CONFIG_KEY_CHECKPOINTER: saver, "thread_id": f"desk-{kind}",
                             "checkpoint_ns": "agent:third|tools:t1"}}  # fmt: skip
    assert set((await thread_record(node)).ran) == {"call-1", "call-2"}
    ran("agent:second", "call-3")  # listed after agent:first, whose checkpoints are older
    assert set((await thread_record(node)).ran) == {"call-1", "call-2", "call-3"}
    connection.close()


async def test_an_intent_written_beside_a_checkpoint_already_read_is_in_the_next_read():
    """An irreversible call's intent goes beside the checkpoint its review had just read; the next read
    in the process went back only to newer checkpoints, so another turn here (a double text, under load)
    could review the same refund before the step's checkpoint held it.
    """
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER

    from pivotal.core.environments.once import REVIEWS, WRITTEN, put_beside, thread_record

    saver = InMemorySaver()
    checkpoint = {**empty_checkpoint(), "id": str(uuid6())}
    saver.put({"configurable": {"thread_id": "desk", "checkpoint_ns": ""}}, checkpoint, {}, {})
    node = {"configurable": {CONFIG_KEY_CHECKPOINTER: saver, "thread_id": "desk", "checkpoint_ns": "tools:t1",
                             "checkpoint_id": checkpoint["id"]}}  # fmt: skip
    assert not (await thread_record(node)).in_flight()  # read: the checkpoint is this process's newest
    intent = {"tool_call_id": "refund-1", "action": "refund", "arguments": {"order_id": "A1"}, "executed": True,
              "in_flight": True}  # fmt: skip
    await put_beside(node, [(REVIEWS, [intent])], f"{WRITTEN}intent:refund-1:x")
    assert set((await thread_record(node)).in_flight()) == {"refund-1"}


async def test_a_turn_that_waited_for_another_reads_the_intent_another_process_wrote_beside_a_read_checkpoint():
    """Another process's intent beside a checkpoint this process had read (its `put_beside` forgets
    nothing here): a turn that waited for, or stopped, the turn that wrote it reads the thread whole,
    so the refund in flight there is not reviewed as new (a double text in another process).
    """
    import asyncio

    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER

    from pivotal.core.environments.once import REVIEWS, WRITTEN, thread_record
    from pivotal.graphs.busy import arrive, board_for

    saver = InMemorySaver()
    checkpoint = {**empty_checkpoint(), "id": str(uuid6())}
    at = saver.put({"configurable": {"thread_id": "desk2", "checkpoint_ns": ""}}, checkpoint, {}, {})
    node = {"configurable": {CONFIG_KEY_CHECKPOINTER: saver, "thread_id": "desk2", "checkpoint_ns": "tools:t1",
                             "checkpoint_id": checkpoint["id"]}}  # fmt: skip
    assert not (await thread_record(node)).in_flight()
    board = await board_for(saver)
    assert await board.claim("desk2", "other-process|turn-1", 30)  # the other turn holds the thread
    intent = {"tool_call_id": "refund-9", "action": "refund", "arguments": {"order_id": "A1"}, "executed": True,
              "in_flight": True}  # fmt: skip
    saver.put_writes(at, [(REVIEWS, [intent])], f"{WRITTEN}intent:refund-9:x")  # as that process writes it
    waiting = asyncio.create_task(
        arrive(board, "desk2", "this-process|turn-2", said="m@1", policy="interrupt", window=0, ttl=30)
    )
    await asyncio.sleep(0.2)
    await board.release("desk2", "other-process|turn-1")  # the other turn stopped
    await asyncio.wait_for(waiting, 10)
    assert set((await thread_record(node)).in_flight()) == {"refund-9"}


# --- the command line's re-approval ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "refunded"), [(["--repeat"], 2), ([], 1)], ids=["repeat", "plain"])
def test_pivotal_resume_repeat_re_approves_a_repeat_and_a_plain_approval_does_not(tmp_path, capsys, flags, refunded):
    """`pivotal resume --decision approve --repeat` is the person's explicit re-approval of a repeat."""
    from pivotal.cli.main import main

    def cli(*args: str) -> dict:
        code = main([*args, "--checkpoints", str(tmp_path / "cp.sqlite"), "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        return json.loads(out)

    ledger = tmp_path / "ledger.jsonl"

    def refunds() -> int:  # pivotal.testing.ledger_env's ledger: one line per call that ran
        return [json.loads(line)["kind"] for line in ledger.read_text().splitlines()].count("refund")

    cli("run", "--env", "support-desk-forgetful", "--param", f"ledger={ledger}", "--param", "mistake=email",
        "--model", "sim", "--no-memory", "--require-approval-for", "refund", "--thread-id", "T",
        "--plugin", "pivotal.testing.ledger_env")  # fmt: skip
    asked = cli("resume", "T", "--decision", "approve")  # the refund; then the email bounces and it is proposed again
    assert refunds() == 1 and "already ran in this thread" in asked["interrupt"]["repeat"]
    cli("resume", "T", "--decision", "approve", *flags)
    assert refunds() == refunded


def test_pivotal_resume_repeat_with_a_rejection_is_refused_in_one_line(tmp_path, capsys):
    from pivotal.cli.main import main

    code = main(["resume", "T", "--decision", "reject", "--repeat", "--checkpoints", str(tmp_path / "cp.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--repeat" in err and "--decision approve" in err
