"""An irreversible action runs once per run: forks, replays and re-proposals never repeat it unreviewed.

Counted from the world's side, as in tests/test_side_effects.py: the support desk's ledger file
holds one line per refund that really happened (pivotal/testing/ledger_env.py).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langgraph.checkpoint.memory import InMemorySaver

from pivotal.core.context import Context
from pivotal.core.environments import ActionSpec
from pivotal.core.environments.once import repeat_reason
from pivotal.graphs import arun, build_graph
from pivotal.testing import ledger_env  # noqa: F401 — registers the support-desk environments

ROOT = Path(__file__).resolve().parents[1]
SIM = dict(model="sim", memory=False, max_steps=6)


def task(tmp_path: Path, env: str = "support-desk", **fields) -> dict:
    params = {"ledger": str(tmp_path / "ledger.jsonl"), **fields.pop("params", {})}
    return {"env": env, "params": params, **fields}


def refunds(tmp_path: Path, kind: str = "refund") -> list[dict]:
    path = tmp_path / "ledger.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [row for row in rows if row["kind"] == kind]


def emails(tmp_path: Path) -> list[dict]:
    return refunds(tmp_path, "email")


async def refunded_once(tmp_path: Path, saver: InMemorySaver, **context) -> tuple:
    result = await arun(task(tmp_path), Context(**SIM, **context), checkpointer=saver)
    assert result.status == "success" and [s["action"] for s in result.trajectory] == [
        "lookup_order",
        "refund",
        "send_email",
    ]
    assert len(refunds(tmp_path)) == 1
    return result, {"configurable": {"thread_id": result.thread_id, "checkpoint_ns": "",
                                     "checkpoint_id": result.trajectory[1]["checkpoint_id"]}}  # fmt: skip


# --- the pure rule ---------------------------------------------------------------------------


class Desk:
    def __init__(self, **refund) -> None:
        self.specs = [ActionSpec("refund", "pay back", irreversible=True, **refund), ActionSpec("lookup", "read")]

    def describe_actions(self) -> list[ActionSpec]:
        return self.specs


def test_the_rule_blocks_the_same_irreversible_call_and_nothing_else():
    done = [("refund", {"order_id": "A1", "amount": 20.0}), ("lookup", {"order_id": "A1"})]
    reason = repeat_reason(Desk(), "refund", {"amount": 20, "order_id": "A1"}, done)  # 20 == 20.0, any key order
    assert reason and "refund" in reason and "already ran" in reason and "\n" not in reason
    assert repeat_reason(Desk(), "refund", {"order_id": "A1", "amount": 5.0}, done) is None  # another call
    assert repeat_reason(Desk(), "lookup", {"order_id": "A1"}, done) is None  # reversible: repeat at will
    assert repeat_reason(Desk(), "refund", {"order_id": "A1", "amount": 20.0}, done, allow=["refund"]) is None
    assert repeat_reason(Desk(repeatable=True), "refund", {"order_id": "A1", "amount": 20.0}, done) is None
    keyed = Desk(once_key=("order_id",))  # the tool says what makes two calls the same: one refund per order
    assert repeat_reason(keyed, "refund", {"order_id": "A1", "amount": 5.0}, done)
    assert repeat_reason(keyed, "refund", {"order_id": "B2", "amount": 20.0}, done) is None


# --- forks ------------------------------------------------------------------------------------


async def test_a_fork_at_the_refund_in_process_does_not_refund_again(tmp_path):
    saver = InMemorySaver()
    result, at_refund = await refunded_once(tmp_path, saver)
    graph = build_graph(checkpointer=saver)
    fork = await graph.aupdate_state(at_refund, None, as_node="critic")  # skips the critic: a Studio edit
    final = await graph.ainvoke(None, fork, context=Context(**SIM))
    assert len(refunds(tmp_path)) == 1
    # the very refund this run executed at this step, and the email that ended the task after it:
    # taken as done with their recorded results, not run
    assert final["status"] == "success" and final["counters"]["reused"] == 2
    assert len(emails(tmp_path)) == 1
    assert [s["action"] for s in final["trajectory"]] == ["lookup_order", "refund", "send_email"]
    assert final["trajectory"][1]["observation"] == result.trajectory[1]["observation"]


async def test_a_replay_from_the_refunds_checkpoint_does_not_refund_again(tmp_path):
    saver = InMemorySaver()
    _, at_refund = await refunded_once(tmp_path, saver)
    final = await build_graph(checkpointer=saver).ainvoke(None, at_refund, context=Context(**SIM))
    assert final["status"] == "success" and len(refunds(tmp_path)) == 1


async def test_a_fork_before_the_refund_that_hands_the_executor_the_refund_does_not_refund_again(tmp_path):
    saver = InMemorySaver()
    result, _ = await refunded_once(tmp_path, saver)
    graph = build_graph(checkpointer=saver)
    before = {"configurable": {"thread_id": result.thread_id, "checkpoint_ns": "",
                               "checkpoint_id": result.trajectory[0]["checkpoint_id"]}}  # fmt: skip
    refund = {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0}, "thought": "edited in Studio"}
    fork = await graph.aupdate_state(before, {"chosen": refund}, as_node="critic")  # the lookup, edited into it
    final = await graph.ainvoke(None, fork, context=Context(**SIM))
    assert final["status"] == "success" and len(refunds(tmp_path)) == 1
    sent, blocked = [v for s in final["trajectory"] for v in s["verdicts"] if v["action"] == "refund"]
    assert "not reviewed in this branch" in sent["diagnosis"] and blocked["source"] == "guard"


async def test_an_edited_refund_in_a_fork_is_reviewed_again(tmp_path):
    saver = InMemorySaver()
    _, at_refund = await refunded_once(tmp_path, saver)
    graph = build_graph(checkpointer=saver)
    chosen = (await graph.aget_state(at_refund)).values["chosen"]
    chosen["arguments"]["amount"] = 5.0
    fork = await graph.aupdate_state(at_refund, {"chosen": chosen}, as_node="critic")
    final = await graph.ainvoke(None, fork, context=Context(**SIM))
    assert len(refunds(tmp_path)) == 1  # the critic saw it, and a second refund pays twice
    sent, judged = [v for s in final["trajectory"][1:] for v in s["verdicts"] if v["action"] == "refund"]
    assert sent["source"] == "guard" and "edited after its review" in sent["diagnosis"]
    assert (judged["source"], judged["decision"], judged["arguments"]["amount"]) == ("critic", "reject", 5.0)


async def test_an_edited_refund_in_a_fork_runs_after_the_review_and_approval_a_first_run_needs(tmp_path):
    saver = InMemorySaver()
    _, at_refund = await refunded_once(tmp_path, saver)
    graph = build_graph(checkpointer=saver)
    chosen = (await graph.aget_state(at_refund)).values["chosen"]
    chosen["arguments"]["amount"] = 5.0
    # a critic that approves it, and a person who must approve refunds: the fork waits for the person
    context = Context(**SIM, critic_model="sim:error=1.0", require_approval_for=["refund"])
    # skips both; the fork changes the turn's settings by writing them with it (a bare context would contradict them)
    fork = await graph.aupdate_state(
        at_refund, {"chosen": chosen, "run_settings": context.saved()}, as_node="human_approval"
    )
    paused = await graph.ainvoke(None, fork, context=context)
    [question] = paused["__interrupt__"]
    assert question.value["action"] == "refund" and question.value["arguments"]["amount"] == 5.0
    assert len(refunds(tmp_path)) == 1
    from langgraph.types import Command

    config = (await graph.aget_state({"configurable": {"thread_id": at_refund["configurable"]["thread_id"]}})).config
    await graph.ainvoke(Command(resume={"decision": "approve"}), config, context=context)
    assert [r["amount"] for r in refunds(tmp_path)] == [20.0, 5.0]  # reviewed and approved: it runs


@pytest.mark.slow
def test_a_fork_at_the_refund_in_another_process_does_not_refund_again(tmp_path):
    import asyncio

    path = str(tmp_path / "cp.sqlite")
    result = asyncio.run(arun(task(tmp_path), Context(**SIM), checkpoint_path=path))
    assert result.status == "success" and len(refunds(tmp_path)) == 1
    script = f"""
import asyncio, json
from pivotal.testing import ledger_env
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pivotal.graphs import build_graph
from pivotal.core.context import Context

async def main():
    async with AsyncSqliteSaver.from_conn_string({path!r}) as saver:
        graph = build_graph(checkpointer=saver)
        config = {{"configurable": {{"thread_id": {result.thread_id!r}, "checkpoint_ns": "",
                                   "checkpoint_id": {result.trajectory[1]["checkpoint_id"]!r}}}}}
        fork = await graph.aupdate_state(config, None, as_node="critic")
        final = await graph.ainvoke(None, fork, context=Context(model="sim", memory=False, max_steps=6))
        print(json.dumps({{"status": final["status"], "actions": [s["action"] for s in final["trajectory"]]}}))

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    forked = json.loads(done.stdout.strip().splitlines()[-1])
    assert forked["status"] == "success" and len(refunds(tmp_path)) == 1


# --- re-proposals after a pivot that went forward ---------------------------------------------


class Prompts(AsyncCallbackHandler):
    """The actor's prompts, as the model received them."""

    def __init__(self) -> None:
        self.actor: list[str] = []

    async def on_chat_model_start(self, serialized, messages, *, metadata=None, **kwargs) -> None:
        if (metadata or {}).get("pivotal_role") == "actor":
            self.actor.append("\n".join(str(m.content) for batch in messages for m in batch))


async def test_a_re_proposed_refund_after_a_forward_pivot_is_blocked_by_the_guard(tmp_path):
    # the forgetful desk's actor proposes the refund again after the bounce, and its critic approves it
    seen = Prompts()
    graph = build_graph(checkpointer=InMemorySaver())
    final = await graph.ainvoke(
        {"task": task(tmp_path, "support-desk-forgetful", params={"mistake": "email"})},
        {"configurable": {"thread_id": "forgetful"}, "callbacks": [seen]},
        context=Context(**SIM, max_pivot_retries=1),
    )
    assert len(refunds(tmp_path)) == 1
    assert final["counters"].get("guarded", 0) >= 1
    assert "already ran" in final["reason"]  # what stopped the attempt: the guard, not the critic
    assert any("refund" in prompt and "rejected by the guard" in prompt and "already ran" in prompt
               for prompt in seen.actor)  # fmt: skip


async def test_a_task_that_allows_the_repeat_runs_it_twice(tmp_path):
    once, twice = tmp_path / "once", tmp_path / "twice"
    for folder, allow in ((once, []), (twice, ["refund"])):
        folder.mkdir()
        await arun(
            task(folder, "support-desk-forgetful", params={"mistake": "email"}, allow_repeat=allow),
            Context(**SIM, max_pivot_retries=1),
            checkpoint_path=":memory:",
        )
    assert len(refunds(once)) == 1 and len(refunds(twice)) == 2


def test_an_agents_tools_declare_what_may_repeat_and_what_makes_two_calls_the_same():
    from langchain_core.tools import tool

    from pivotal import create_pivotal_agent
    from pivotal.core.environments import make_environment
    from pivotal.graphs.agent import stable_name

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        return "refunded"

    @tool
    def top_up(card: str) -> str:
        """Top a card up."""
        return "topped up"

    tools = [refund, top_up]
    create_pivotal_agent("sim", tools, irreversible=["refund", "top_up"], repeatable=["top_up"],
                         once_keys={"refund": ["order_id"]}, name="once-desk")  # fmt: skip
    specs = {spec.name: spec for spec in make_environment("once-desk").describe_actions()}
    assert specs["refund"].once_key == ("order_id",) and specs["top_up"].repeatable
    # an agent that declares neither keeps the environment name it had before they existed
    assert stable_name(tools, None, ["refund"], None, "", {"repeatable": [], "once_keys": {}}) == stable_name(
        tools, None, ["refund"], None, ""
    )


class CountingSaver(InMemorySaver):
    """Counts the checkpoints a listing hands out."""

    handed = 0

    async def alist(self, *args, **kwargs):
        async for item in super().alist(*args, **kwargs):
            self.handed += 1
            yield item


async def test_the_guard_reads_each_checkpoint_of_a_thread_once_however_often_it_is_forked(tmp_path):
    """A long conversation, or a thread forked again and again, would otherwise be read whole at every
    irreversible proposal: reads grew with forks × checkpoints (a forked thread's replays took minutes).
    """
    saver = CountingSaver()
    result, at_refund = await refunded_once(tmp_path, saver)
    graph = build_graph(checkpointer=saver)
    for _ in range(3):
        fork = await graph.aupdate_state(at_refund, None, as_node="critic")
        await graph.ainvoke(None, fork, context=Context(**SIM))
    assert len(refunds(tmp_path)) == 1
    thread = {"configurable": {"thread_id": result.thread_id, "checkpoint_ns": ""}}
    checkpoints = len([item async for item in InMemorySaver.alist(saver, thread)])
    reads = 8  # each irreversible proposal or execution also reads the one checkpoint it stops at
    assert saver.handed <= checkpoints + reads * 4, (saver.handed, checkpoints)


# --- forks whose model proposes anew ------------------------------------------------------------


def test_every_call_run_under_one_step_key_is_found_whichever_branch_ran_it():
    """Branches may run different calls under one key; the first one found hid the others."""
    from pivotal.core.environments.once import Seen

    def step(checkpoint: str, order: str) -> dict:
        return {"index": 5, "key": "run:0:5", "checkpoint_id": checkpoint, "action": "send_note",
                "arguments": {"order_id": order}}  # fmt: skip

    seen = Seen()
    seen.add([step("first-run", "1")])
    seen.add([step("a-fork", "3")])
    for order in ("1", "3"):
        assert seen.standing("run:0:5", {"action": "send_note", "arguments": {"order_id": order}}) is not None
    assert seen.standing("run:0:5", {"action": "send_note", "arguments": {"order_id": "4"}}) is None
    assert seen.standing("run:0:6", {"action": "send_note", "arguments": {"order_id": "1"}}) is None


def test_forks_of_a_finished_agent_thread_run_each_call_once_per_step_in_the_world(tmp_path):
    """`create_pivotal_agent`, three turns, then a fork from every checkpoint. A fork's model sees what
    the first run did not (lessons written since, recorded results) and may propose another call at a
    step; that call ran in the world, so a later fork reaching the same step with it must take it as
    done (12 of 76 forks sent one email again). Counted from the tools' own ledger against the
    distinct (step key, call) pairs the thread holds.
    """
    from collections import Counter

    from langchain_core.tools import tool

    from pivotal import create_pivotal_agent

    ledger = tmp_path / "ledger.jsonl"

    def wrote(**row) -> None:
        with ledger.open("a") as out:
            out.write(json.dumps(row) + "\n")

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order: its amount and status."""
        return f"order {order_id}: 20.00, paid"

    @tool
    def send_note(order_id: str, text: str) -> str:
        """Send the customer a note about their order (an email: it cannot be unsent)."""
        wrote(action="send_note", arguments={"order_id": order_id, "text": text})
        return f"sent a note about {order_id}"

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        wrote(action="refund", arguments={"order_id": order_id, "amount": amount})
        return f"refunded {amount:.2f} of {order_id}"

    agent = create_pivotal_agent(
        "sim",
        [lookup, send_note, refund],
        irreversible=["refund"],
        checkpointer=InMemorySaver(),
        memory=True,  # lessons a turn wrote are recalled on the forks: their prompts differ, so do some calls
        store_path=str(tmp_path / "lessons"),
    )
    thread = {"configurable": {"thread_id": "ticket-1"}}
    for said in ("Refund 20.00 of order A1.", "Send a note about order B2.", "Refund 5.00 of order C3."):
        agent.invoke({"messages": [("user", said)]}, thread)
    for snap in list(agent.get_state_history(thread)):
        if snap.next:
            agent.invoke(None, snap.config)
    ran = Counter(json.dumps(json.loads(line), sort_keys=True) for line in ledger.read_text().splitlines())
    steps: dict[str, set[str]] = {}
    for snap in agent.get_state_history(thread):
        for s in snap.values.get("trajectory") or []:
            if s["action"] in ("send_note", "refund"):
                call = json.dumps({"action": s["action"], "arguments": s["arguments"]}, sort_keys=True)
                steps.setdefault(call, set()).add(s["key"])
    assert any(len([c for c, keys in steps.items() if key in keys]) > 1 for keys in steps.values() for key in keys)
    assert ran == Counter({call: len(keys) for call, keys in steps.items()})


def test_the_middleware_takes_a_call_run_at_its_place_in_any_branch_as_done():
    """`create_agent` + `PivotalCritic`: two branches ran different calls at one place of a turn (a
    fork's model proposed anew); a later fork proposing the second one there meets it, not only the first.
    """
    from types import SimpleNamespace

    from langchain_core.messages import AIMessage, HumanMessage

    from pivotal.core.environments.once import REVIEWS, ThreadRecord
    from pivotal.middleware.critic import _executed, _step

    def state(call_id: str, order: str) -> dict:
        call = {"id": call_id, "name": "send_note", "args": {"order_id": order}}
        return {"messages": [HumanMessage("Send a note about order B2."), AIMessage("", tool_calls=[call])]}

    place = _step(state("c1", "1"), "c1")
    record = ThreadRecord(None)
    for call_id, order in (("c1", "1"), ("c2", "3")):
        record.add({REVIEWS: [{"tool_call_id": call_id, "executed": True, "action": "send_note",
                               "arguments": {"order_id": order}, "step": place}]})  # fmt: skip
    for order, ran in (("3", "c2"), ("1", "c1"), ("4", None)):
        fork = state("c9", order)
        request = SimpleNamespace(tool_call=fork["messages"][-1].tool_calls[0], state=fork)
        assert _executed(request, record) == ran
