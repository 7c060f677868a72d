"""Watching a run as a LangChain app does, and reading what it returned, on every face.

- `stream_mode="messages"`: the answer streams chunk by chunk and nothing else (the role calls carry
  LangGraph's `nostream` tag; `stream_roles` shows them, tagged by role);
- `astream_events`: one `on_tool_start`/`on_tool_end` pair per tool that ran, none for a step the
  once-guard reused; the critic's review and the reflection are runs of their own names;
- `pivotal.result(...)`: one typed result from the graph, the agent and a parent's `pivotal_result`.

In process on scripted models (`ScriptedChatModel` streams as a provider does) and `sim`; the token
stream through a real SDK runs against the loopback provider's server-sent chunks.
"""

import json
from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from pivotal import Context, PivotalCritic, PivotalError, Result, build_graph, create_pivotal_agent, result
from pivotal.testing.loopback_provider import generic_responder, loopback
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict

ANSWER = "Refunded 20.00 of order A1 to the customer's card."
ASK = {"messages": [HumanMessage("Refund order A1.")]}


@pytest.fixture
def ledger() -> list[tuple[str, Any]]:
    return []


@pytest.fixture
def tools(ledger):
    @tool
    def lookup(order_id: str) -> str:
        """Look an order up."""
        ledger.append(("lookup", order_id))
        return f"order {order_id}: 20.00, paid by card"

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        ledger.append(("refund", order_id))
        return f"refunded {amount:.2f} of {order_id}"

    return [lookup, refund]


def desk_model() -> ScriptedChatModel:
    """The actor looks the order up, refunds it and answers; the critic approves each proposal."""
    return ScriptedChatModel(
        script={
            "Proposal": [
                {"action": "lookup", "arguments": {"order_id": "A1"}, "thought": "check the order"},
                {"action": "refund", "arguments": {"order_id": "A1", "amount": 20.0}, "thought": "refund it"},
                {"action": "finish", "arguments": {"answer": ANSWER}, "thought": "done"},
            ],
            "Verdict": [verdict("approve")],
        }
    )


def desk(tools, **settings):
    return create_pivotal_agent(desk_model(), tools, irreversible=["refund"], memory=False, max_steps=5, **settings)


APPROVE = (verdict("approve"),)


def middleware_agent(tools, verdicts=APPROVE, **critic):
    model = ScriptedChatModel(
        script={
            "agent": [
                tool_call("lookup", order_id="A1"),
                tool_call("refund", order_id="A1", amount=20.0),
                AIMessage(ANSWER),
            ]
        }
    )
    reviewer = ScriptedChatModel(script={"Verdict": list(verdicts)})
    return create_agent(model, tools, middleware=[PivotalCritic(reviewer, irreversible=["refund"], **critic)])


async def messages_of(app, given, config=None, **kwargs) -> list[tuple[Any, dict[str, Any]]]:
    return [chunk async for chunk in app.astream(given, config, stream_mode="messages", **kwargs)]


# --- streaming the answer ----------------------------------------------------------------------


async def test_a_chat_ui_streaming_messages_gets_the_answer_in_chunks_and_nothing_else(tools):
    agent = desk(tools)
    chunks = await messages_of(agent, ASK)
    assert {meta["langgraph_node"] for _, meta in chunks} == {"respond"}
    assert len(chunks) > 5 and all(isinstance(message, AIMessageChunk) for message, _ in chunks)
    assert "".join(message.content for message, _ in chunks) == ANSWER
    assert all("pivotal:answer" in meta["tags"] for _, meta in chunks)
    built = await messages_of(desk(tools, stream_roles=True), ASK)  # the agent's own setting, kept at every node
    assert {meta["langgraph_node"] for _, meta in built} == {"actor", "critic", "respond"}
    # the message saved in the thread is the one streamed: one id, the same words
    final = await desk(tools).ainvoke(ASK)
    assert final["messages"][-1].content == ANSWER and final["messages"][-1].name == "pivotal"


async def test_a_sim_run_streams_only_its_answer_and_stream_roles_shows_each_role_by_tag():
    """The gridworld run on `sim` streamed about 70 actor and critic chunks before the answer."""
    graph = build_graph()
    task = {"task": {"env": "gridworld", "params": {"size": 4}}}
    quiet = await messages_of(graph, task, context=Context(model="sim", memory=False))
    assert {meta["langgraph_node"] for _, meta in quiet} == {"respond"}
    loud = await messages_of(graph, task, context=Context(model="sim", memory=False, stream_roles=True))
    roles = Counter(tag for _, meta in loud for tag in meta.get("tags", []) if tag.startswith("pivotal:"))
    assert roles["pivotal:actor"] > 5 and roles["pivotal:critic"] > 5 and roles["pivotal:answer"] > 0
    assert all(TAG_NOSTREAM not in meta.get("tags", []) for _, meta in loud)
    said = "".join(m.content for m, meta in loud if meta["langgraph_node"] == "respond")
    assert said == "".join(m.content for m, _ in quiet)


async def test_astream_events_without_nostream_runs_show_only_the_answer_tokens(tools):
    events = [e async for e in desk(tools).astream_events(ASK, version="v2", exclude_tags=[TAG_NOSTREAM])]
    streamed = [e for e in events if e["event"] == "on_chat_model_stream"]
    assert {e["name"] for e in streamed} == {"answer"} and len(streamed) > 5
    assert "".join(e["data"]["chunk"].content for e in streamed) == ANSWER


async def test_the_middleware_keeps_the_critic_out_of_the_stream_and_the_agent_in_it(tools):
    chunks = await messages_of(middleware_agent(tools), ASK)
    said = [m for m, meta in chunks if isinstance(m, AIMessageChunk)]
    assert all(meta["langgraph_node"] == "model" for m, meta in chunks if isinstance(m, AIMessageChunk))
    assert "".join(m.content for m in said) == ANSWER and len([m for m in said if m.content]) > 5
    assert not [meta for _, meta in chunks if any(t.startswith("pivotal:") for t in meta.get("tags", []))]
    shown = await messages_of(middleware_agent(tools, stream_roles=True), ASK)
    critic = [meta for _, meta in shown if "pivotal:critic" in meta.get("tags", [])]
    assert len(critic) >= 2 and {meta["langgraph_node"] for meta in critic} == {"PivotalCritic.after_model"}


# --- tools as tool runs, reviews and reflections as named runs ---------------------------------


def tool_events(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["event"], e["name"]) for e in events if e["event"] in ("on_tool_start", "on_tool_end")]


PAIRS = [("on_tool_start", "lookup"), ("on_tool_end", "lookup"), ("on_tool_start", "refund"), ("on_tool_end", "refund")]


async def test_every_executed_tool_is_one_tool_run_on_the_graph_and_on_the_agent(tools, ledger):
    graph_events = [e async for e in desk(tools).astream_events(ASK, version="v2")]
    agent_events = [e async for e in middleware_agent(tools).astream_events(ASK, version="v2")]
    assert tool_events(graph_events) == PAIRS and tool_events(agent_events) == PAIRS
    assert ledger == [("lookup", "A1"), ("refund", "A1")] * 2
    ended = next(e for e in graph_events if e["event"] == "on_tool_end" and e["name"] == "refund")
    assert "refunded 20.00 of A1" in str(ended["data"]["output"])
    executor = {e["run_id"] for e in graph_events if e["event"] == "on_chain_start" and e["name"] == "executor"}
    assert all(e["parent_ids"][-1] in executor for e in graph_events if e["event"] == "on_tool_start")
    for events in (graph_events, agent_events):  # each review a run named for what it gives
        reviews = [e for e in events if e["event"] == "on_chain_end" and e["name"] == "review"]
        assert len(reviews) >= 2 and all("pivotal:critic" in e["tags"] for e in reviews)


def test_a_sync_invoke_hands_callbacks_the_tool_runs_too(tools):
    class Tools(BaseCallbackHandler):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_tool_start(self, serialized, input_str, **kwargs) -> None:
            self.seen.append(serialized["name"])

    handler = Tools()
    final = desk(tools).invoke(ASK, {"callbacks": [handler]})
    assert final["status"] == "success" and handler.seen == ["lookup", "refund"]


async def test_a_replay_reuses_the_recorded_refund_and_shows_no_tool_run_for_it(tools, ledger):
    """The once-guard's replay runs no tool, so it shows none: the events say what happened in the world."""
    agent = desk(tools, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "replay"}}
    first = await agent.ainvoke(ASK, config)
    refund = next(step for step in first["trajectory"] if step["action"] == "refund")
    again = {"configurable": {"thread_id": "replay", "checkpoint_id": refund["checkpoint_id"]}}
    events = [e async for e in agent.astream_events(None, again, version="v2")]
    assert tool_events(events) == [] and ledger.count(("refund", "A1")) == 1
    assert result(next(e for e in reversed(events) if e["event"] == "on_chain_end")["data"]["output"]).answer == ANSWER


async def test_the_reflection_is_a_named_run():
    graph = build_graph()
    context = Context(model="sim", memory=False, max_steps=1, max_pivot_retries=1)
    task = {"task": {"env": "gridworld", "params": {"size": 5}}}
    events = [e async for e in graph.astream_events(task, context=context, version="v2")]
    assert any(e["event"] == "on_chain_end" and e["name"] == "reflection" for e in events)


# --- the typed result ------------------------------------------------------------------------


async def test_the_graph_invoke_and_stream_give_one_typed_result(tools):
    invoked = result(await desk(tools).ainvoke(ASK))
    assert isinstance(invoked, Result) and invoked.face == "graph"
    assert (invoked.status, invoked.answer, invoked.verified) == ("success", ANSWER, False)
    assert [s.action for s in invoked.steps] == ["lookup", "refund", "finish"]
    assert "refunded 20.00 of A1" in invoked.steps[1].observation
    assert [(r.action, r.decision, r.source, r.executed) for r in invoked.reviews][:1] == [
        ("lookup", "approve", "critic", True)
    ]
    assert invoked.usage.llm_calls == 6 and invoked.usage.by_role.keys() == {"actor", "critic"}
    values = [v async for v in desk(tools).astream(ASK, stream_mode="values")]
    streamed = result(values[-1])
    assert streamed.model_dump(exclude={"run_id", "usage"}) == invoked.model_dump(exclude={"run_id", "usage"})
    assert streamed.usage.llm_calls == invoked.usage.llm_calls
    updates = [u async for u in desk(tools).astream(ASK, stream_mode="updates")]
    last = result(updates[-1])  # respond's update: the outcome a parent reads
    assert (last.status, last.answer, [s.action for s in last.steps]) == (
        "success",
        ANSWER,
        ["lookup", "refund", "finish"],
    )
    both = [c async for c in desk(tools).astream(ASK, stream_mode=["updates", "values"])]
    assert result(both[-1]).answer == ANSWER
    parts = [p async for p in desk(tools).astream(ASK, stream_mode="values", version="v2")]
    assert result(parts[-1]).answer == result(await desk(tools).ainvoke(ASK, version="v2")).answer == ANSWER


async def test_a_paused_run_reads_as_interrupted_with_the_question(tools):
    agent = desk(tools, require_approval_for=["refund"], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ask"}}
    paused = result(await agent.ainvoke(ASK, config))
    assert paused.status == "interrupted" and paused.interrupts[0]["action"] == "refund"
    state = await agent.aget_state(config)
    assert result(state.values).status == "running"  # the saved state says nothing of the pause
    assert [s.action for s in paused.steps] == ["lookup"]
    done = result(await agent.ainvoke(Command(resume="approve"), config))
    assert done.status == "success" and [r.source for r in done.approvals] == ["human"]


async def test_the_agent_with_the_critic_gives_the_same_typed_result(tools):
    agent = result(await middleware_agent(tools).ainvoke(ASK))
    assert agent.face == "agent" and (agent.status, agent.answer) == ("success", ANSWER)
    ran = [("lookup", {"order_id": "A1"}), ("refund", {"order_id": "A1", "amount": 20.0})]
    assert [(s.action, s.arguments) for s in agent.steps] == ran
    assert [(r.action, r.decision, r.executed) for r in agent.reviews] == [(a, "approve", True) for a, _ in ran]
    assert agent.usage.by_role["critic"]["calls"] == 2
    turned_down = result(await middleware_agent(tools, [verdict("approve"), verdict("reject", 0.9, "no")]).ainvoke(ASK))
    assert [s.action for s in turned_down.steps] == ["lookup"] and turned_down.answer == ANSWER
    assert [(r.action, r.decision, r.executed) for r in turned_down.reviews][-1] == ("refund", "reject", False)
    plain = result({"messages": [HumanMessage("hi"), AIMessage("", tool_calls=[{"name": "lookup", "args": {},
                    "id": "c1"}]), ToolMessage("ok", tool_call_id="c1"), AIMessage("Hello.")]})  # fmt: skip
    assert (plain.answer, [s.observation for s in plain.steps]) == ("Hello.", ["ok"])


async def test_a_parent_graph_reads_pivotal_result_as_the_typed_result(tools):
    class Parent(MessagesState):
        pivotal_result: dict
        status: str

    def app():
        parent = StateGraph(Parent)
        parent.add_node("agent", desk(tools))
        parent.add_edge(START, "agent")
        return parent.compile()

    events = [e async for e in app().astream_events({**ASK, "status": "open"}, version="v2")]
    assert tool_events(events) == PAIRS
    out = await app().ainvoke({**ASK, "status": "open"})
    read = result(out)
    assert read.face == "node" and (read.status, read.answer) == ("success", ANSWER) and out["status"] == "open"
    assert [s.action for s in read.steps] == ["lookup", "refund", "finish"] and read.usage.llm_calls == 6


def test_what_is_no_output_is_refused_in_one_line():
    for given in ("done", {"foo": 1}):
        with pytest.raises(PivotalError) as refused:
            result(given)
        assert len(str(refused.value).splitlines()) == 1 and "result()" in str(refused.value)


# --- a real token stream through the OpenAI SDK ------------------------------------------------


def desk_responder(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any] | str:
    """The agent's model looks the order up, then answers in words; the critic approves."""
    if schema_name == "lookup":
        answered = any(m.get("role") == "tool" for m in messages)
        return ANSWER if answered else {"order_id": "A1"}
    return generic_responder(schema_name, schema, messages)


async def test_an_openai_agent_streams_its_answer_token_by_token_and_the_critic_not_at_all(tools):
    from langchain_openai import ChatOpenAI

    with loopback() as server:
        server.responder = desk_responder

        def model():
            return ChatOpenAI(model="gpt-desk", base_url=server.base_url_openai, api_key="sk-test", max_retries=0)

        agent = create_agent(model(), tools[:1], middleware=[PivotalCritic(model())])
        chunks = await messages_of(agent, ASK)
    words = [m.content for m, meta in chunks if isinstance(m, AIMessageChunk) and m.content]
    assert "".join(words) == ANSWER and len(words) == len(ANSWER.split())
    assert {meta["langgraph_node"] for m, meta in chunks if isinstance(m, AIMessageChunk)} == {"model"}
    streamed = [r for r in server.requests if r.body.get("stream")]
    assert len(streamed) == 2 and all(r.status == 200 and r.schema_name != "Verdict" for r in streamed)
    reviews = [r for r in server.requests if r.schema_name == "Verdict"]  # asked for whole: it is never shown
    assert len(reviews) == 1 and reviews[0].status == 200 and not reviews[0].body.get("stream")


async def test_an_openai_graph_streams_only_its_answer(tools):
    from langchain_openai import ChatOpenAI

    def clerk(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
        if schema_name != "Proposal":
            return generic_responder(schema_name, schema, messages)
        prompt = json.dumps(messages)
        if "lookup(" not in prompt.split("<progress>")[-1]:
            return {"action": "lookup", "arguments": {"order_id": "A1"}, "thought": "check"}
        return {"action": "finish", "arguments": {"answer": ANSWER}, "thought": "done"}

    with loopback() as server:
        server.responder = clerk
        model = ChatOpenAI(model="gpt-desk", base_url=server.base_url_openai, api_key="sk-test", max_retries=0)
        agent = create_pivotal_agent(model, tools[:1], memory=False, max_steps=4)
        chunks = await messages_of(agent, ASK)
    assert {meta["langgraph_node"] for _, meta in chunks} == {"respond"}
    assert "".join(m.content for m, _ in chunks) == ANSWER
    # every request was a role's call, hidden from the stream, so none asked the provider for one
    assert server.requests and all(not r.body.get("stream") and r.status == 200 for r in server.requests)


async def test_a_provider_that_cannot_stream_serves_a_graph_watched_as_a_chat_ui_watches(tools, ledger):
    """The loopback's Anthropic route refuses `stream: true` (as some proxies and providers do): the
    roles' calls, hidden from `stream_mode="messages"` anyway, must not ask for a stream.
    """
    from langchain_anthropic import ChatAnthropic

    def clerk(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
        if schema_name != "Proposal":
            return generic_responder(schema_name, schema, messages)
        if "lookup(" not in json.dumps(messages).split("<progress>")[-1]:
            return {"action": "lookup", "arguments": {"order_id": "A1"}, "thought": "check"}
        return {"action": "finish", "arguments": {"answer": ANSWER}, "thought": "done"}

    with loopback() as server:
        server.responder = clerk
        model = ChatAnthropic(
            model="claude-desk", base_url=server.base_url_anthropic, api_key="sk-ant-test", max_retries=0
        )
        agent = create_pivotal_agent(model, tools[:1], memory=False, max_steps=4)
        chunks = await messages_of(agent, ASK)
    assert "".join(m.content for m, _ in chunks) == ANSWER
    assert ledger == [("lookup", "A1")]
    assert server.requests and all(r.status == 200 and not r.body.get("stream") for r in server.requests)
