"""Replaying a finished conversation from any of its checkpoints repeats nothing in the world.

A three-turn support-desk thread (examples/support_desk.py) on a real SQLite checkpointer, its model a
real `ChatOpenAI` on the loopback OpenAI-compatible server. Every checkpoint of the thread is then
replayed (`invoke(None, {"thread_id", "checkpoint_id"})`) and forked (`update_state` then
`invoke(None, ...)`); a turn's input checkpoint (`next` is `__start__` or `start`) goes through the
turn again. Each run is bounded (`asyncio.wait_for`), so a stall fails the test instead of hanging it,
and the side effects are counted from the ledger the tools write, not from the results.
"""

import asyncio
import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from test_conversation import FIRST, SECOND, THIRD, clerk, support_desk

BOUND_S = 60
"""Far above a replay's run time (well under a second): only a stall reaches it."""


def world(ledger: Path) -> Counter:
    """What the tools did to the world: one ledger line per refund or email that really happened."""
    rows = [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
    return Counter((row["kind"], row["order_id"]) for row in rows)


def turn_inputs(history) -> list:
    return [snap for snap in history if snap.next and snap.next[0] in ("__start__", "start")]


@pytest.mark.slow
async def test_replaying_a_sync_thread_from_every_checkpoint_repeats_no_side_effect(desk, tmp_path):
    """The user's way: sync `invoke` on a SqliteSaver, as an app without an event loop does."""
    server, model, ledger = desk
    server.responder = clerk()
    saver = SqliteSaver(sqlite3.connect(str(tmp_path / "threads.sqlite"), check_same_thread=False))
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[], checkpointer=saver)
    thread = {"configurable": {"thread_id": "desk-1"}}

    def call(payload, config):
        return asyncio.wait_for(asyncio.to_thread(agent.invoke, payload, config), BOUND_S)

    for text in (FIRST, SECOND, THIRD):
        assert (await call({"messages": [HumanMessage(text)]}, thread))["status"] == "success"
    done = world(ledger)
    assert done == {("refund", "A1"): 1, ("email", "A1"): 1, ("refund", "B2"): 1, ("email", "B2"): 1}
    history = list(agent.get_state_history(thread))
    assert len(turn_inputs(history)) == 6
    for snap in history:
        replayed = await call(None, snap.config)
        assert replayed.get("status") in ("success", None), (snap.next, replayed.get("reason"))
        assert world(ledger) == done, f"replaying {snap.next} repeated a side effect"
    for snap in history:
        if snap.next and snap.next != ("__start__",):  # an input checkpoint has no node's values to fork
            forked = agent.update_state(snap.config, None)
            await call(None, forked)
            assert world(ledger) == done, f"forking {snap.next} repeated a side effect"


@pytest.mark.slow
async def test_replaying_an_async_thread_with_approvals_asks_no_one_and_repeats_no_side_effect(desk, tmp_path):
    """Refunds wait for a person; a replay reaches each refund again and runs it as done, asking no one."""
    server, model, ledger = desk
    server.responder = clerk()
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "threads.sqlite")) as saver:
        agent = support_desk.support_agent(model, memory=False, checkpointer=saver)
        thread = {"configurable": {"thread_id": "desk-2"}}
        for text in (FIRST, SECOND, THIRD):
            final = await asyncio.wait_for(agent.ainvoke({"messages": [HumanMessage(text)]}, thread), BOUND_S)
            while final.get("__interrupt__"):
                final = await asyncio.wait_for(agent.ainvoke(Command(resume="approve"), thread), BOUND_S)
            assert final["status"] == "success"
        done = world(ledger)
        assert done[("refund", "A1")] == done[("refund", "B2")] == 1
        history = [snap async for snap in agent.aget_state_history(thread)]
        for snap in history:
            replayed = await asyncio.wait_for(agent.ainvoke(None, snap.config), BOUND_S)
            assert not replayed.get("__interrupt__"), f"replaying {snap.next} asked a person again"
            assert world(ledger) == done, f"replaying {snap.next} repeated a side effect"
