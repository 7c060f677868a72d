"""Busy threads and double texts (graphs/busy.py, middleware/busy.py): a message that arrives while a
turn runs on its thread, or that repeats the one just handled, follows the agent's `double_text`
policy on both faces, and whatever the policy the refund the running turn made is never made again.

The support desk of pivotal/testing/promise_desk.py, its refund held open on a gate so the second
message really arrives while the first turn runs; side effects counted from the desk's ledger.
Two concurrent `ainvoke` on one thread, in one process (in memory, and on a real SQLite file, whose
board is the database's), and in two processes (slow).
"""

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from pivotal import Context, PivotalCritic, PivotalError, create_pivotal_agent
from pivotal.graphs.busy import DoubleTextRejected, TurnInterrupted, board_for, owner_token
from pivotal.graphs.lease import ThreadBusy, _machine
from pivotal.testing.cli import json_output
from pivotal.testing.loopback_provider import loopback
from pivotal.testing.promise_desk import ClerkChatModel, clerk_responder, desk_tools, ledger_kinds

GOAL = "Please refund order A1 in full and email the customer."
AGAIN = "Please refund order A1 in full and email the customer, thanks."
POLICIES = ["reject", "enqueue", "interrupt", "rollback"]
FACES = [pytest.param("pivotal_agent", marks=pytest.mark.slow), "middleware"]
"""Pivotal's graph runs ~9 model calls a turn on the loopback server: over a second a test, so slow."""
SETTINGS = {"memory": False, "max_steps": 8, "max_pivot_retries": 1}


@pytest.fixture(scope="module")
def server():
    with loopback() as running:
        running.responder = clerk_responder()
        yield running


def gated(tools: list[BaseTool], gate: Any) -> list[BaseTool]:
    """The desk's tools, the refund made (its ledger line written) and then held until `gate` opens
    (a `threading.Event`, or anything with its `wait`).
    """
    lookup, refund, email = tools

    def slow_refund(order_id: str, amount: float) -> str:
        done = refund.invoke({"order_id": order_id, "amount": amount})
        assert gate.wait(300), "the test never opened the gate"
        return done

    return [lookup, StructuredTool.from_function(slow_refund, name="refund", description=refund.description), email]


def build(face: str, url: str, tools: list[BaseTool], saver: Any, **settings: Any) -> Any:
    actor = ChatOpenAI(model="clerk", base_url=url, api_key="local", max_retries=0)
    if face == "pivotal_agent":
        return create_pivotal_agent(actor, tools, irreversible=["refund"], critic_model=actor, checkpointer=saver,
                                    **SETTINGS, **settings)  # fmt: skip
    critic = PivotalCritic(actor, irreversible=["refund"], **settings)
    return create_agent(ClerkChatModel(), tools, middleware=[critic], checkpointer=saver)


def count(ledger: Path, kind: str) -> int:
    return ledger_kinds(ledger).count(kind)


def texts(values: dict[str, Any], kind: type) -> list[str]:
    return [str(m.content) for m in values.get("messages") or [] if isinstance(m, kind)]


@asynccontextmanager
async def checkpointer(kind: str, folder: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """In memory (this process's board), or a real SQLite file or Postgres database (the database's board)."""
    if kind == "memory":
        yield InMemorySaver()
    elif kind == "sqlite":
        async with AsyncSqliteSaver.from_conn_string(str(folder / "threads.sqlite")) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(request.getfixturevalue("postgres")) as saver:
            await saver.setup()
            yield saver


def refund_shown(values: dict[str, Any]) -> bool:
    """Whether the conversation shows the first turn's refund: its tool result (`create_agent`), or the
    stopped turn among the thread's earlier turns (Pivotal's graph).
    """
    stopped = [t for t in values.get("turns") or [] if t.get("status") == "interrupted"]
    return any("refunded 20.00" in text for text in texts(values, ToolMessage)) or any(
        action == "refund" for turn in stopped for action, _ in turn.get("actions") or []
    )


async def until(check: Callable[[], bool], what: str, seconds: float = 10) -> None:
    for _ in range(int(seconds * 100)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def arrived(second: asyncio.Task, policy: str, saver: Any, config: dict[str, Any]) -> None:
    """Until the second message met the running turn: refused, or asking it to stop; waiting leaves no
    mark, so a queued message is given 0.3 s (in-process, it arrives in milliseconds).
    """
    board = await board_for(saver)
    thread = config["configurable"]["thread_id"]
    if policy == "reject":
        await until(second.done, "the refusal")
    elif policy == "enqueue":
        await asyncio.sleep(0.3)
    else:
        for _ in range(1000):
            if (await board.read(thread)).stop == policy:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the second message never asked the running turn to stop")


async def outcome(task: asyncio.Task) -> Any:
    try:
        return await task
    except Exception as raised:  # noqa: BLE001 — the outcome under test
        return raised


# --- a message while a turn runs, on both faces ---------------------------------------------------


@pytest.mark.parametrize(
    "saver_kind",
    ["memory", pytest.param("sqlite", marks=pytest.mark.slow), pytest.param("postgres", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("face", FACES)
async def test_a_message_sent_while_a_turn_runs_follows_the_policy_and_refunds_once(
    face, policy, saver_kind, server, tmp_path, request
):
    ledger, gate = tmp_path / "ledger.jsonl", threading.Event()
    config = {"configurable": {"thread_id": f"ticket-{face}-{policy}-{saver_kind}"}}
    async with checkpointer(saver_kind, tmp_path, request) as saver:
        agent = build(face, server.base_url_openai, gated(desk_tools(ledger), gate), saver, double_text=policy)
        first = asyncio.create_task(agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config))
        await until(lambda: count(ledger, "refund") == 1, "the first turn's refund")
        second = asyncio.create_task(agent.ainvoke({"messages": [HumanMessage(AGAIN)]}, config))
        await arrived(second, policy, saver, config)
        gate.set()
        first_done, second_done = await outcome(first), await outcome(second)
        head = (await agent.aget_state(config)).values
    assert count(ledger, "refund") == 1, f"{policy}: {ledger_kinds(ledger)}"
    if policy == "reject":
        assert isinstance(second_done, DoubleTextRejected) and isinstance(second_done, ThreadBusy)
        assert "busy" in str(second_done) and "\n" not in str(second_done)
        assert AGAIN not in texts(head, HumanMessage)  # refused before it touched the thread
        assert count(ledger, "email") == 1 and not isinstance(first_done, Exception)
        return
    assert not isinstance(second_done, Exception), second_done
    said = texts(second_done, HumanMessage)
    if policy == "enqueue":  # after the first turn, on top of its final reply
        assert not isinstance(first_done, Exception), first_done
        assert said == [GOAL, AGAIN] and texts(first_done, AIMessage)[-1] in texts(second_done, AIMessage)
    else:
        assert isinstance(first_done, TurnInterrupted) and "\n" not in str(first_done)
        assert policy in str(first_done)
        if policy == "interrupt":  # what the stopped turn did stays in the conversation
            assert said == [GOAL, AGAIN] and refund_shown(second_done)
        else:  # rollback: the stopped turn's message is gone; its refund stays made, and is not made again
            assert said == [AGAIN] and not refund_shown(second_done)
        assert count(ledger, "email") == 1  # the stopped turn had not reached it; the new one sent it once
    assert texts(head, HumanMessage) == said


@pytest.mark.parametrize("face", FACES)
async def test_the_same_message_sent_again_under_rollback_takes_the_stopped_turns_calls_as_done(face, server, tmp_path):
    """A double-clicked send while the turn runs, under rollback: the stopped turn taken again, so the
    lookup it made is read back, not made again (under `ainvoke` the middleware recorded an async call's
    place inside itself, and the repeat's calls met no place they had run at).
    """
    ledger, gate = tmp_path / "ledger.jsonl", threading.Event()
    config = {"configurable": {"thread_id": f"twice-{face}"}}
    agent = build(
        face, server.base_url_openai, gated(desk_tools(ledger), gate), InMemorySaver(), double_text="rollback"
    )
    first = asyncio.create_task(agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config))
    await until(lambda: count(ledger, "refund") == 1, "the first turn's refund")
    second = asyncio.create_task(agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config))
    await arrived(second, "rollback", agent.checkpointer, config)
    gate.set()
    await outcome(first)
    assert not isinstance(done := await outcome(second), Exception), done
    assert ledger_kinds(ledger).count("lookup") == 1, ledger_kinds(ledger)
    assert (count(ledger, "refund"), count(ledger, "email")) == (1, 1), ledger_kinds(ledger)


# --- a repeat of the message just handled ----------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("face", FACES)
async def test_the_same_message_sent_again_right_after_is_a_double_text(face, policy, server, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    config = {"configurable": {"thread_id": f"click-{face}-{policy}"}}
    agent = build(face, server.base_url_openai, desk_tools(ledger), InMemorySaver(), double_text=policy)
    await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
    try:
        again = await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)  # a double-clicked send
    except DoubleTextRejected as refused:
        again = {"refused": str(refused)}
    assert count(ledger, "refund") == 1
    if policy == "reject":
        assert "repeats the one that opened its last turn" in again["refused"]
        if face == "pivotal_agent":  # refused before it touched the thread (under create_agent: see below)
            assert texts((await agent.aget_state(config)).values, HumanMessage) == [GOAL]
    else:  # a turn of its own, after the one it repeats: the refund is not made again
        assert texts(again, HumanMessage) == [GOAL, GOAL]
    # a different message, or the same one outside the window, is no double text
    later = build(face, server.base_url_openai, desk_tools(ledger), agent.checkpointer, double_text=policy,
                  repeat_window_s=0)  # fmt: skip
    await later.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
    assert count(ledger, "refund") == 1


async def test_a_rejected_message_leaves_no_trace_in_the_next_turn_under_the_middleware(server, tmp_path):
    """Under `create_agent` the refused message entered a branch before the critic saw it: the next turn drops it."""
    ledger = tmp_path / "ledger.jsonl"
    config = {"configurable": {"thread_id": "dropped"}}
    agent = build("middleware", server.base_url_openai, desk_tools(ledger), InMemorySaver(), double_text="reject")
    await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
    with pytest.raises(DoubleTextRejected):
        await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
    final = await agent.ainvoke({"messages": [HumanMessage("Thanks, is that all done?")]}, config)
    assert texts(final, HumanMessage) == [GOAL, "Thanks, is that all done?"]


async def test_a_tool_that_outlasts_the_lease_keeps_its_turn_holding_the_thread(server, tmp_path, monkeypatch):
    """Under the middleware the hold is renewed while the refund runs: three leases later, still busy."""
    monkeypatch.setenv("PIVOTAL_LEASE_S", "0.2")
    ledger, gate = tmp_path / "ledger.jsonl", threading.Event()
    config = {"configurable": {"thread_id": "long-refund"}}
    agent = build("middleware", server.base_url_openai, gated(desk_tools(ledger), gate), InMemorySaver(),
                  double_text="reject")  # fmt: skip
    first = asyncio.create_task(agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config))
    await until(lambda: count(ledger, "refund") == 1, "the refund")
    await asyncio.sleep(0.6)
    with pytest.raises(DoubleTextRejected):
        await agent.ainvoke({"messages": [HumanMessage(AGAIN)]}, config)
    gate.set()
    await first
    assert count(ledger, "refund") == 1


# --- sync invoke, in threads -------------------------------------------------------------------


@pytest.mark.parametrize("face", FACES)
def test_two_threads_invoking_one_conversation_take_turns(face, server, tmp_path):
    """Sync `invoke` from two threads (two request handlers): the second waits (enqueue), one refund."""
    ledger, gate = tmp_path / "ledger.jsonl", threading.Event()
    config = {"configurable": {"thread_id": "sync"}}
    agent = build(face, server.base_url_openai, gated(desk_tools(ledger), gate), InMemorySaver())
    done: dict[str, Any] = {}

    def ask(name: str, text: str) -> None:
        done[name] = agent.invoke({"messages": [HumanMessage(text)]}, config)

    first = threading.Thread(target=ask, args=("first", GOAL))
    first.start()
    asyncio.run(until(lambda: count(ledger, "refund") == 1, "the refund"))
    second = threading.Thread(target=ask, args=("second", AGAIN))
    second.start()
    second.join(0.5)  # it waits: the first turn holds the thread until its refund returns
    assert second.is_alive()
    gate.set()
    first.join(30)
    second.join(30)
    assert count(ledger, "refund") == 1
    assert texts(done["second"], HumanMessage) == [GOAL, AGAIN]


# --- settings ------------------------------------------------------------------------------------


def test_a_misspelt_policy_is_refused_in_one_line():
    with pytest.raises(PivotalError, match="double_text must be one of reject, enqueue, interrupt, rollback"):
        Context(double_text="queue")
    with pytest.raises(PivotalError, match="double_text"):
        PivotalCritic("sim", double_text="queue")
    with pytest.raises(PivotalError, match="repeat_window_s"):
        Context(repeat_window_s=-1)


async def test_the_board_frees_a_turn_whose_process_is_gone(tmp_path):
    """A turn held by a process killed -9 on this machine does not keep the thread busy."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "threads.sqlite")) as saver:
        board = await board_for(saver)
        owner = f"{_machine()}|{int(gone.stdout)}|turn"
        assert await board.claim("t", owner, 60.0)
        row = await board.read("t")
        assert row.owner == owner and row.left > 0 and not row.running()
        assert await board.claim("t", owner_token(), 60.0)


# --- two processes --------------------------------------------------------------------------------


class FileGate:
    """A gate another process opens by creating a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def wait(self, timeout: float) -> bool:
        for _ in range(int(timeout * 100)):
            if self.path.exists():
                return True
            threading.Event().wait(0.01)
        return False


WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    sys.path.insert(0, {tests!r})
    import test_double_text as t

    face, policy, text, folder, url = sys.argv[1:6]
    folder = Path(folder)

    async def main():
        async with AsyncSqliteSaver.from_conn_string(str(folder / "threads.sqlite")) as saver:
            tools = t.gated(t.desk_tools(folder / "ledger.jsonl"), t.FileGate(folder / "open"))
            agent = t.build(face, url, tools, saver, double_text=policy)
            try:
                config = {{"configurable": {{"thread_id": "x"}}}}
                done = await agent.ainvoke({{"messages": [HumanMessage(text)]}}, config)
                print(json.dumps({{"said": t.texts(done, HumanMessage)}}))
            except Exception as raised:
                print(json.dumps({{"raised": type(raised).__name__, "message": str(raised)}}))

    asyncio.run(main())
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("face", ["pivotal_agent", "middleware"])
@pytest.mark.parametrize("policy", ["reject", "interrupt"])
def test_a_message_in_another_process_meets_the_running_turn(policy, face, server, tmp_path):
    """Two processes on one SQLite file: the second's message sees the first's turn through the database."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(tests=str(Path(__file__).parent)))
    ledger = tmp_path / "ledger.jsonl"

    def start(text: str) -> subprocess.Popen:
        args = [sys.executable, str(script), face, policy, text, str(tmp_path), server.base_url_openai]
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finished(process: subprocess.Popen) -> Any:
        out, err = process.communicate(timeout=120)
        return json_output(subprocess.CompletedProcess(process.args, process.returncode, out, err))

    def stop_asked() -> bool:
        with sqlite3.connect(tmp_path / "threads.sqlite") as db:
            row = db.execute("SELECT stop FROM pivotal_turns WHERE thread_id = 'x'").fetchone()
        return bool(row and row[0])

    first = start(GOAL)
    asyncio.run(until(lambda: count(ledger, "refund") == 1 or first.poll() is not None, "the first refund", 60))
    second = start(AGAIN)
    if policy == "reject":
        second_done = finished(second)
        (tmp_path / "open").touch()
    else:
        asyncio.run(until(stop_asked, "the second process to ask the first to stop", 60))
        (tmp_path / "open").touch()
        second_done = finished(second)
    first_done = finished(first)
    assert count(ledger, "refund") == 1, ledger_kinds(ledger)
    if policy == "reject":
        assert second_done.get("raised") == "DoubleTextRejected", second_done
        assert first_done.get("said") == [GOAL]
    else:
        assert first_done.get("raised") == "TurnInterrupted", first_done
        assert second_done.get("said") == [GOAL, AGAIN]


async def test_a_fork_of_the_turn_just_handled_is_no_repeat(server, tmp_path):
    """Under `reject`, re-running the last turn from its own checkpoints (a fork) is the same message, not a repeat."""
    ledger = tmp_path / "ledger.jsonl"
    config = {"configurable": {"thread_id": "fork"}}
    agent = build("middleware", server.base_url_openai, desk_tools(ledger), InMemorySaver(), double_text="reject")
    await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
    for snapshot in [snapshot async for snapshot in agent.aget_state_history(config)]:
        await agent.ainvoke(None, snapshot.config)  # a fork from before the input was refused as a repeat
    assert count(ledger, "refund") == 1


async def test_a_turn_waiting_for_a_person_does_not_hold_its_thread(server, tmp_path):
    """Paused for approval, the turn is not running: under `reject` the next message is not refused as busy."""
    ledger = tmp_path / "ledger.jsonl"
    config = {"configurable": {"thread_id": "paused"}}
    agent = build("middleware", server.base_url_openai, desk_tools(ledger), InMemorySaver(), double_text="reject",
                  require_approval_for=["refund"])  # fmt: skip
    paused = await agent.ainvoke({"messages": [HumanMessage(GOAL)]}, config)
    assert paused.get("__interrupt__") and count(ledger, "refund") == 0
    await asyncio.sleep(0.05)  # the release is a task of this loop
    later = await agent.ainvoke({"messages": [HumanMessage("Actually, what is the order's total?")]}, config)
    assert texts(later, HumanMessage)[-1] == "Actually, what is the order's total?"


def test_a_call_claimed_in_one_turn_stays_claimed_until_the_threads_record_holds_it(tmp_path):
    """The critic's claim on a refund that ran in this turn's state alone (its step's checkpoint not yet
    written: a turn stopped by a newer message) still stops the refund in another turn of the thread,
    which goes on from another branch; once a checkpoint holds the call, the record counts it instead.
    """
    from types import SimpleNamespace

    from pivotal.core.environments.once import REVIEWS, ThreadRecord

    critic = PivotalCritic("openai:gpt-4o-mini", irreversible=["refund"], tools=desk_tools(tmp_path / "l.jsonl"))
    refund = {"name": "refund", "args": {"order_id": "A1", "amount": 120.0}, "type": "tool_call"}
    config = {"configurable": {"thread_id": "t1"}}

    def request(call_id: str, reviews: list[dict[str, Any]]) -> Any:
        call = {**refund, "id": call_id}
        runtime = SimpleNamespace(config=config)
        return SimpleNamespace(tool_call=call, tool=None, state={REVIEWS: reviews}, runtime=runtime)

    nothing_yet = ThreadRecord(saver=object())  # a checkpointed thread whose record does not hold the refund yet
    first = request("call-1", [])
    assert critic._claim(first, nothing_yet, critic._env(), again=False) is None
    ran = {"tool_call_id": "call-1", "action": "refund", "arguments": refund["args"], "executed": True}
    later_in_first = request("call-2", [ran])
    assert critic._repeat(later_in_first, nothing_yet, critic._env())  # the first turn counts its own refund
    other_turn = request("call-3", [])
    assert critic._repeat(other_turn, nothing_yet, critic._env()), "the claim was dropped before the record held it"

    held = ThreadRecord(saver=object())
    held.add({REVIEWS: [ran]})
    assert critic._repeat(other_turn, held, critic._env())
    assert "call-1" not in critic._claims["t1"]  # counted from the record now
