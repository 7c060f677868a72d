"""A thread is a conversation: each new human message (or new task) is a turn of its own.

The support desk of examples/support_desk.py on the loopback OpenAI-compatible provider: ticket A1,
then "also refund order B2" on the same thread. Refunds are counted from the world's side (the
ledger the tools write): A1 exactly once and B2 exactly once, through the agent alone, inside a
parent graph, and through the Studio server. Also: a failed final answer without a verifier is put
to the reflector.
"""

import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

import pivotal
from pivotal.cli.studio import QUIET
from pivotal.core.errors import PivotalError
from pivotal.testing.loopback_provider import generic_responder, loopback
from pivotal.testing.servers import free_port, serve

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("support_desk", ROOT / "examples" / "support_desk.py")
support_desk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(support_desk)

FIRST, SECOND, THIRD = "Please refund order A1 and tell me.", "Also refund order B2, please.", "Thanks! Anything left?"


def clerk(prompts: list[str] | None = None):
    """Works the ticket the `<task>` names: look up the order, refund it in full, email, answer.

    Only this turn's progress decides the next step; `prompts` collects each prompt the actor reads.
    """

    def respond(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
        prompt = "\n".join(str(m.get("content")) for m in messages)
        if schema_name != "Proposal":
            return generic_responder(schema_name, schema, messages)
        if prompts is not None:
            prompts.append(prompt)
        task = re.search(r"<task>(.*?)</task>", prompt, re.S).group(1)
        order = re.search(r"order (\w\d)", task)
        done = re.search(r"<progress>(.*?)</progress>", prompt, re.S).group(1)
        if order is None:
            return {"action": "finish", "arguments": {"answer": "Nothing left to do."}, "thought": "no new order"}
        order_id = order.group(1)
        total = support_desk.ORDERS[order_id]["total"]
        for action, arguments in (
            ("lookup_order", {"order_id": order_id}),
            ("refund", {"order_id": order_id, "amount": total}),
            ("send_email", {"order_id": order_id, "text": f"Your refund of {total:.2f} is on its way."}),
        ):
            if f":{action}(" not in done:
                return {"action": action, "arguments": arguments, "thought": f"next step of {order_id}"}
        return {"action": "finish", "arguments": {"answer": f"Refunded {order_id}."}, "thought": "done"}

    return respond


def refunds(ledger: Path) -> list[str]:
    entries = map(json.loads, ledger.read_text().splitlines()) if ledger.exists() else []
    return [e["order_id"] for e in entries if e["kind"] == "refund"]


async def test_a_second_message_is_a_new_turn_that_refunds_b2_once_and_never_a1_again(desk):
    server, model, ledger = desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ticket-1"}}
    paused = await agent.ainvoke({"messages": [("user", FIRST)]}, config)
    assert paused["__interrupt__"][0].value["arguments"]["order_id"] == "A1"
    first = await agent.ainvoke(Command(resume="approve"), config)  # a resume continues the turn
    assert first["status"] == "success" and refunds(ledger) == ["A1"] and len(first["turns"]) == 1

    paused = await agent.ainvoke({"messages": [("user", SECOND)]}, config)
    assert paused["__interrupt__"][0].value["arguments"]["order_id"] == "B2"
    second = await agent.ainvoke(Command(resume="approve"), config)
    assert second["status"] == "success" and refunds(ledger) == ["A1", "B2"]
    assert second["task"]["goal"] == SECOND and second["answer"] == "Refunded B2."
    assert [s["action"] for s in second["trajectory"]] == ["lookup_order", "refund", "send_email", "finish"]
    assert second["run_id"] != first["run_id"]  # its own idempotency keys and live environment
    assert [t["goal"] for t in second["turns"]] == [FIRST, SECOND]
    assert [t["status"] for t in second["turns"]] == ["success", "success"]
    assert [m.content for m in second["messages"] if isinstance(m, AIMessage)] == ["Refunded A1.", "Refunded B2."]


async def test_a_third_turn_reads_the_earlier_turns_in_the_actors_prompt(desk):
    server, model, ledger = desk
    prompts: list[str] = []
    server.responder = clerk(prompts)
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ticket-2"}}
    for text in (FIRST, SECOND):
        await agent.ainvoke({"messages": [HumanMessage(text)]}, config)
    assert "<earlier_turns>" not in prompts[0]  # nothing earlier: the block is left out
    prompts.clear()
    third = await agent.ainvoke({"messages": [HumanMessage(THIRD)]}, config)
    assert third["status"] == "success" and third["answer"] == "Nothing left to do." and refunds(ledger) == ["A1", "B2"]
    earlier = re.search(r"<earlier_turns>(.*?)</earlier_turns>", prompts[0], re.S).group(1)
    assert FIRST in earlier and SECOND in earlier and THIRD not in earlier
    assert 'refund({"order_id": "B2", "amount": 35.5})' in earlier and "answered: Refunded B2." in earlier
    assert third["trajectory"][0]["index"] == 0 and len(third["trajectory"]) == 1  # its own step budget


async def test_a_new_task_is_a_new_turn_and_nothing_new_is_refused(desk):
    server, model, ledger = desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ticket-3"}}
    first = await agent.ainvoke({"task": "Refund order A1."}, config)
    second = await agent.ainvoke({"task": "Refund order B2."}, config)
    assert refunds(ledger) == ["A1", "B2"] and second["task"]["goal"] == "Refund order B2."
    with pytest.raises(PivotalError, match="nothing new on this thread"):
        await agent.ainvoke({"task": second["task"]}, config)  # the same task again: not run twice
    assert refunds(ledger) == ["A1", "B2"] and first["task"]["id"] != second["task"]["id"]


async def test_each_turn_has_its_own_step_budget_and_counts_whatever_the_turns_before_spent(desk):
    """The shared step total (budget "fair") read the thread's executed steps, which add up over its
    turns: on a thread whose turns each need 4 steps under `max_steps=4`, the second turn failed at its
    first step. A turn's budget and its result count from the turn's opening.
    """
    server, model, ledger = desk
    server.responder = clerk()
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[], max_steps=4,
                                       max_pivot_retries=0, checkpointer=InMemorySaver())  # fmt: skip
    config = {"configurable": {"thread_id": "ticket-budget"}}
    first = await agent.ainvoke({"messages": [HumanMessage(FIRST)]}, config)
    second = await agent.ainvoke({"messages": [HumanMessage(SECOND)]}, config)
    assert first["status"] == second["status"] == "success", second["reason"]
    assert refunds(ledger) == ["A1", "B2"] and second["counters"]["executed"] == 8  # the thread's state: all turns
    own = pivotal.result(second)
    assert (
        len(own.steps) == 4
        and own.usage.by_role["actor"]["calls"] == pivotal.result(first).usage.by_role["actor"]["calls"]
    )


@pytest.mark.parametrize("own_state", [False, True], ids=["per-call", "kept-per-thread"])
async def test_inside_a_parent_graph_each_message_is_its_own_turn(desk, own_state):
    """Embedded as a node, the agent starts afresh each call (the parent's messages are the
    conversation) or, compiled with `checkpointer=True`, keeps its own state on the parent's thread.
    """
    server, model, ledger = desk
    prompts: list[str] = []
    server.responder = clerk(prompts)
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[], checkpointer=own_state or None)
    parent = StateGraph(MessagesState)
    parent.add_node("desk", agent)
    parent.add_edge(START, "desk")
    app = parent.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "chat-1"}}
    await app.ainvoke({"messages": [HumanMessage(FIRST)]}, config)
    prompts.clear()
    final = await app.ainvoke({"messages": [HumanMessage(SECOND)]}, config)
    assert refunds(ledger) == ["A1", "B2"]
    assert [m.content for m in final["messages"]] == [FIRST, "Refunded A1.", SECOND, "Refunded B2."]
    earlier = re.search(r"<earlier_turns>(.*?)</earlier_turns>", prompts[0], re.S).group(1)
    assert FIRST in earlier and "Refunded A1." in earlier and SECOND not in earlier


async def test_without_a_verifier_a_rejected_answer_is_put_to_the_reflector(desk):
    server, model, ledger = desk
    rejected: list[bool] = []

    def respond(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
        prompt = "\n".join(str(m.get("content")) for m in messages)
        if schema_name == "Verdict" and "<proposal>\nfinish" in prompt and not rejected:
            rejected.append(True)
            return {"decision": "reject", "confidence": 0.9, "diagnosis": "the answer does not say when the money "
                    "arrives", "revision": "say when the refund arrives"}  # fmt: skip
        if schema_name == "Reflection":
            assert "<turned_down>\nstep 3 (not executed):\n- finish(" in prompt
            return {"pivotal_step": 3, "no_return_step": 3, "error_type": "wrong_action",
                    "diagnosis": "the answer left out when the money arrives",
                    "advice": "say the refund arrives in 5 days", "lesson_candidates": []}  # fmt: skip
        return clerk()(schema_name, schema, messages)

    server.responder = respond
    agent = support_desk.support_agent(model, memory=False, require_approval_for=[])
    final = await agent.ainvoke({"messages": [HumanMessage(FIRST)]})
    assert final["status"] == "success" and final["retries"] == 1 and refunds(ledger) == ["A1"]
    assert final["usage"]["reflector"]["calls"] == 1
    [reflection] = final["reflections"]
    assert reflection["pivotal_step"] == 3 and reflection["advice"] == "say the refund arrives in 5 days"
    assert reflection["failure"].startswith("the critic rejected the final answer")


@pytest.mark.slow
async def test_the_studio_server_keeps_a_thread_a_conversation(tmp_path):
    ledger, example = tmp_path / "ledger.jsonl", str(ROOT / "examples" / "support_desk.py")
    (tmp_path / "desk_app.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('support_desk', {example!r})\n"
        "support_desk = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(support_desk)\n"
        "graph = support_desk.support_agent('sim', memory=False, require_approval_for=[])  # no person in this test\n"
    )
    config = {"dependencies": [str(ROOT), "."], "graphs": {"desk": "./desk_app.py:graph"}, "python_version": "3.11"}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    port = free_port()
    command = [str(Path(sys.executable).parent / "langgraph"), "dev", "--no-browser", "--no-reload",
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    env = {**os.environ, **QUIET, "SUPPORT_LEDGER": str(ledger)}
    from langgraph_sdk import get_client

    with loopback() as model, serve(command, "/ok", port, tmp_path / "server.log", cwd=tmp_path, env=env) as url:
        model.responder = clerk()
        client = get_client(url=url)
        [assistant] = await client.assistants.search(graph_id="desk")
        context = {"model": f"openai-compatible:clerk@{model.base_url_openai}", "default_env": "support-desk-example",
                   "memory": False, "max_steps": 8}  # fmt: skip
        thread = await client.threads.create()
        for text in (FIRST, SECOND):
            message = {"role": "human", "content": text}
            final = await client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                                           input={"messages": [message]}, context=context)  # fmt: skip
            assert final["status"] == "success", final
    assert refunds(ledger) == ["A1", "B2"] and final["task"]["goal"] == SECOND


async def test_two_messages_sent_at_once_to_one_thread_are_two_turns_one_after_the_other(desk, tmp_path):
    """Two requests of one chat arriving together (two workers, a retried request) hold the thread
    in turn, as `arun` does: neither goes on from a checkpoint the other is moving past.
    """
    import asyncio

    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    server, model, ledger = desk
    server.responder = clerk()
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "chat.sqlite")) as saver:
        agent = support_desk.support_agent(model, memory=False, require_approval_for=[], checkpointer=saver)
        config = {"configurable": {"thread_id": "ticket-2"}}
        asked = [agent.ainvoke({"messages": [("user", text)]}, config) for text in (FIRST, SECOND)]
        answers = await asyncio.gather(*asked)
        final = (await agent.aget_state(config)).values
    assert sorted(refunds(ledger)) == ["A1", "B2"]
    assert sorted(t["goal"] for t in final["turns"]) == sorted([FIRST, SECOND])
    assert [t["status"] for t in final["turns"]] == ["success", "success"]
    assert sorted(a["answer"] for a in answers) == ["Refunded A1.", "Refunded B2."]


async def test_a_stream_left_mid_way_never_blocks_the_next_call_on_its_thread(desk, tmp_path):
    import asyncio

    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    server, model, ledger = desk
    server.responder = clerk()
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "chat.sqlite")) as saver:
        agent = support_desk.support_agent(model, memory=False, require_approval_for=[], checkpointer=saver)
        config = {"configurable": {"thread_id": "ticket-3"}}
        stream = agent.astream({"messages": [("user", FIRST)]}, config, stream_mode="updates")
        async for _update in stream:
            break  # the app stops reading, and keeps the stream
        answer = await asyncio.wait_for(agent.ainvoke({"messages": [("user", SECOND)]}, config), 60)
        del stream
    assert answer["answer"] == "Refunded B2." and refunds(ledger) == ["B2"]
