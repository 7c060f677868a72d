"""The critic and the experience store as middleware of a LangChain `create_agent` agent: the
agent's tool calls are reviewed before they run, and its lessons outlive the process.
"""

import subprocess
import sys
import textwrap

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from pivotal import PivotalCritic, PivotalMemory
from pivotal.core.task import Task
from pivotal.memory.policy.rules import NO_QUARANTINE
from pivotal.middleware import critic_counts
from pivotal.testing.ledger_env import SupportDesk
from pivotal.testing.scripted import ScriptedChatModel, stepping_tools, tool_call, verdict


@pytest.fixture
def paid():
    return []


@pytest.fixture
def tools(paid):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        paid.append((order_id, amount))
        return f"refunded {amount:.2f} of {order_id}"

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's total."""
        return f"order {order_id}: total 20.00"

    return [refund, lookup_order]


def _ran(result, name):
    return [m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == name]


def test_revise_runs_nothing_returns_the_critics_text_and_the_model_proposes_again(tools, paid):
    agent_model = ScriptedChatModel(
        script={
            "agent": [tool_call("refund", order_id="A1", amount=200.0), tool_call("refund", order_id="A1", amount=20.0)]
        }
    )
    critic = ScriptedChatModel(
        script={
            "Verdict": [
                verdict("revise", 0.9, "200 is more than the order's total", "refund 20.00"),
                verdict("approve"),
            ]
        }
    )
    agent = create_agent(agent_model, tools, middleware=[PivotalCritic(critic, irreversible=["refund"])])
    result = agent.invoke({"messages": [("user", "Refund order A1 in full.")]})
    assert paid == [("A1", 20.0)]  # the revised call never ran
    first, second = _ran(result, "refund")
    assert (
        first.status == "error" and "refund 20.00" in first.content and "more than the order's total" in first.content
    )
    assert second.content == "refunded 20.00 of A1"
    counts = critic_counts(result)["counters"]
    assert counts["revised"] == 1 and counts["approved"] == 1 and counts["llm_calls"] == 2
    # the critic's second look saw its own send-back in the prompt (the graph's critic prompt)
    assert "sent back for revision" in critic.prompts["Verdict"][1][-1].content


async def test_reject_and_the_irreversible_rules_async_with_a_sim_spec(tmp_path):
    """`sim` critic, judging from the support desk's oracle: a second refund of a paid order is
    fatal (an LLM reject of an irreversible tool is final); the same refund again never reaches it.
    """
    desk = SupportDesk()
    desk.reset(Task(env="support-desk", params={"ledger": str(tmp_path / "ledger.jsonl")}))
    steps = [
        tool_call("lookup_order", order_id="A1"),
        tool_call("refund", order_id="A1", amount=20.0),
        tool_call("refund", order_id="A1", amount=20.0),  # the same call again: the once guard
        tool_call("refund", order_id="A1", amount=5.0),  # another refund: the critic rejects it
        tool_call("send_email", order_id="A1", text="Your refund of 20.00 is on its way."),
    ]
    agent = create_agent(
        ScriptedChatModel(script={"agent": steps}),
        stepping_tools(desk),
        middleware=[PivotalCritic("sim", environment=desk)],
    )
    result = await agent.ainvoke({"messages": [("user", desk.default_goal)]})
    assert [e["amount"] for e in desk.entries() if e["kind"] == "refund"] == [20.0]
    _, repeat, other = _ran(result, "refund")
    assert "already ran" in repeat.content and repeat.status == "error"
    assert "rejected refund" in other.content and "pays the customer twice" in other.content
    assert any(e["kind"] == "email" for e in desk.entries())
    counts = critic_counts(result)["counters"]
    assert counts["rejected"] == 2 and counts["prechecked"] == 1
    assert counts["llm_calls"] == 4  # lookup, refund, the other refund, the email: the repeat cost no call


@pytest.mark.parametrize(("name", "runs"), [("lookup_order", True), ("refund", False)])
def test_send_backs_are_bounded_per_step_like_the_graphs(tools, paid, name, runs):
    """max_critique_rounds=1: the second revise is the last round; a reversible call then runs as the
    best revised proposal (on_critique_exhausted), an irreversible one does not and the agent is told to stop.
    """
    arguments = {"order_id": "A1", "amount": 20.0} if name == "refund" else {"order_id": "A1"}
    calls = [tool_call(name, **arguments) for _ in range(3)]
    agent_model = ScriptedChatModel(script={"agent": calls})
    critic = ScriptedChatModel(script={"Verdict": [verdict("revise", 0.8, "not sure", "check the ticket first")]})
    middleware = PivotalCritic(critic, irreversible=["refund"], max_critique_rounds=1)
    result = create_agent(agent_model, tools, middleware=[middleware]).invoke({"messages": [("user", "Refund A1.")]})
    first, second, third = _ran(result, name)
    assert first.status == "error" and "check the ticket first" in first.content
    if runs:  # the third call opens a new step: the critic judges it afresh
        assert second.content == "order A1: total 20.00" and len(critic.prompts["Verdict"]) == 3
    else:  # the third call costs no critic call
        assert paid == [] and "stop calling tools" in second.content and "turned down" in third.content
        assert len(critic.prompts["Verdict"]) == 2


def test_a_compensated_irreversible_call_may_run_again_and_only_once_more(tmp_path):
    desk = SupportDesk(compensate=True)  # refund names reverse_refund as its compensation
    desk.reset(Task(env="support-desk-saga", params={"ledger": str(tmp_path / "ledger.jsonl")}))
    refund = {"order_id": "A1", "amount": 20.0}
    steps = [tool_call("refund", **refund), tool_call("reverse_refund", **refund)]
    steps += [tool_call("refund", **refund), tool_call("refund", **refund)]
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve")]})
    agent = create_agent(
        ScriptedChatModel(script={"agent": steps}),
        stepping_tools(desk),
        middleware=[PivotalCritic(critic, environment=desk)],
    )
    result = agent.invoke({"messages": [("user", desk.default_goal)]})
    assert [e["kind"] for e in desk.entries()] == ["refund", "reversal", "refund"]
    assert "already ran" in _ran(result, "refund")[-1].content


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_same_refund_twice_in_one_reply_runs_once(tools, paid, mode):
    """The calls of one model reply run side by side, each seeing the state from before either ran."""
    twice = tool_call("refund", order_id="A1", amount=20.0)
    again = tool_call("refund", order_id="A1", amount=20.0)
    twice.tool_calls.append(again.tool_calls[0])
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve")]})
    agent = create_agent(
        ScriptedChatModel(script={"agent": [twice]}), tools, middleware=[PivotalCritic(critic, irreversible=["refund"])]
    )
    question = {"messages": [("user", "Refund order A1.")]}
    result = agent.invoke(question) if mode == "sync" else await agent.ainvoke(question)
    assert paid == [("A1", 20.0)]
    assert sorted("already ran" in m.content for m in _ran(result, "refund")) == [False, True]


def test_an_irreversible_call_runs_only_on_a_confident_approval(tools, paid):
    agent_model = ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1", amount=20.0)]})
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.6, "probably fine")]})
    agent = create_agent(agent_model, tools, middleware=[PivotalCritic(critic, irreversible=["refund"])])
    result = agent.invoke({"messages": [("user", "Refund order A1.")]})
    assert paid == []
    (refused,) = _ran(result, "refund")
    assert "confidence 0.60 < 0.9" in refused.content


def test_a_precheck_failure_costs_no_critic_call(tools, paid):
    agent_model = ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1")]})
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve")]})
    agent = create_agent(agent_model, tools, middleware=[PivotalCritic(critic)])
    result = agent.invoke({"messages": [("user", "Refund order A1.")]})
    assert paid == [] and "Verdict" not in critic.prompts
    assert "missing amount" in _ran(result, "refund")[0].content


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"type": "approve"}, [("A1", 20.0)]),
        ("approve", [("A1", 20.0)]),
        (
            {
                "decisions": [
                    {"type": "edit", "edited_action": {"name": "refund", "args": {"order_id": "A1", "amount": 10.0}}}
                ]
            },
            [("A1", 10.0)],
        ),
        ({"type": "reject", "message": "the customer withdrew the request"}, []),
        ({"decision": "maybe"}, []),
    ],
    ids=["approve", "plain-string", "hitl-edit", "hitl-reject", "unreadable"],
)
def test_a_person_decides_after_the_critic_approves(tools, paid, reply, expected):
    agent_model = ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1", amount=20.0)]})
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95, "the order's total")]})
    middleware = PivotalCritic(critic, irreversible=["refund"], require_approval_for=["irreversible"])
    agent = create_agent(agent_model, tools, middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "ticket-1"}}
    paused = agent.invoke({"messages": [("user", "Refund order A1.")]}, config)
    (pending,) = paused["__interrupt__"]
    assert pending.value["name"] == "refund" and pending.value["critic"] == "the order's total"
    assert paid == []
    result = agent.invoke(Command(resume=reply), config)
    assert paid == expected
    assert len(critic.prompts["Verdict"]) == 1  # the resumed tool call did not ask the critic again
    if not expected:
        assert "Not run: a person rejected refund" in _ran(result, "refund")[0].content


async def test_an_approval_resumes_from_disk_in_a_fresh_agent_async(tools, paid, tmp_path):
    """Paused and resumed through SQLite checkpoints, the resume by a newly built agent (as another
    process would): the refund runs once, and the critic is not asked again (the verdict is in the checkpoint).
    """
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    critic = ScriptedChatModel(script={"Verdict": [verdict("approve", 0.95, "the order's total")]})
    config = {"configurable": {"thread_id": "ticket-2"}}

    def agent(saver, *steps):
        model = ScriptedChatModel(script={"agent": list(steps)})
        middleware = PivotalCritic(critic, irreversible=["refund"], require_approval_for=["refund"])
        return create_agent(model, tools, middleware=[middleware], checkpointer=saver)

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        paused = await agent(saver, tool_call("refund", order_id="A1", amount=20.0)).ainvoke(
            {"messages": [("user", "Refund order A1.")]}, config
        )
        assert paused["__interrupt__"] and paid == []
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        result = await agent(saver).ainvoke(Command(resume={"type": "approve"}), config)
    assert paid == [("A1", 20.0)]
    assert _ran(result, "refund")[0].content == "refunded 20.00 of A1"
    assert critic_counts(result)["counters"]["human_approved"] == 1
    assert len(critic.prompts["Verdict"]) == 1 and critic_counts(result)["counters"]["llm_calls"] == 1


_WRITE_THEN_RECALL = textwrap.dedent(
    """
    import sys
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from pivotal import PivotalMemory
    from pivotal.memory.policy.rules import NO_QUARANTINE
    from pivotal.testing.scripted import ScriptedChatModel, tool_call

    @tool
    def lookup_order(order_id: str) -> str:
        '''Look up an order's total.'''
        return "order A1: total 20.00"

    store, phase = sys.argv[1], sys.argv[2]
    lesson = {"kind": "guardrail", "situation": "a customer asks for a refund of an order",
              "text": "Look the order up first: refund at most its total."}
    roles = ScriptedChatModel(script={"LessonDrafts": [{"lessons": [lesson]}],
                                      "LessonVerdict": [{"decision": "approve", "reason": "checked"}]})
    agent_model = ScriptedChatModel(script={"agent": [tool_call("lookup_order", order_id="A1")]})
    memory = PivotalMemory(roles, family="support", store_path=store, outcome=lambda state: True, **NO_QUARANTINE)
    agent = create_agent(agent_model, [lookup_order], middleware=[memory])
    result = agent.invoke({"messages": [("user", "A customer asks for a refund of order A1.")]})
    if phase == "write":
        print("written", len(result["pivotal_memory"]["written"]))
    else:
        system = agent_model.prompts["agent"][0][0].content
        print("recalled", "refund at most its total" in system, len(result["pivotal_recalled"]))
    """
)


@pytest.mark.slow
def test_a_lesson_written_in_one_process_is_recalled_in_the_next(tmp_path):
    """Real Chroma on disk (PersistentClient), two processes, the whole write path (distill, dedup, gate, writer)."""
    store = str(tmp_path / "lessons")
    runs = [
        subprocess.run(
            [sys.executable, "-c", _WRITE_THEN_RECALL, store, phase], capture_output=True, text=True, timeout=180
        )
        for phase in ("write", "recall")
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr[-2000:]
    assert runs[0].stdout.split()[-2:] == ["written", "1"]
    assert runs[1].stdout.split()[-3:] == ["recalled", "True", "1"]


async def test_both_together_async_the_critic_sees_the_recalled_lessons(tools, paid, tmp_path):
    from pivotal.core.models.roles import ask_role  # noqa: F401 — the critic's path, as the graph's

    lesson = {"kind": "guardrail", "situation": "Refund order A1.", "text": "Never refund more than the order's total."}
    roles = ScriptedChatModel(
        script={"LessonDrafts": [{"lessons": [lesson]}], "LessonVerdict": [{"decision": "approve"}]}
    )
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve")]})

    def agent(*steps):
        memory = PivotalMemory(
            roles, family="desk", store_path=str(tmp_path / "lessons"), outcome=lambda s: True, **NO_QUARANTINE
        )
        model = ScriptedChatModel(script={"agent": list(steps)})
        return create_agent(model, tools, middleware=[memory, PivotalCritic(critic, irreversible=["refund"])])

    first = await agent(tool_call("lookup_order", order_id="A1")).ainvoke({"messages": [("user", "Refund order A1.")]})
    assert first["pivotal_memory"]["counters"]["lessons_written"] == 1
    await agent(tool_call("refund", order_id="A1", amount=20.0)).ainvoke({"messages": [("user", "Refund order A1.")]})
    assert "Never refund more than the order's total" in critic.prompts["Verdict"][-1][-1].content
    assert paid == [("A1", 20.0)]


def test_lessons_in_the_agents_langgraph_store(tools):
    """`create_agent(store=...)`: the lessons live in the agent's own store, as a Pivotal graph's do."""
    from langgraph.store.memory import InMemoryStore

    store = InMemoryStore()
    lesson = {"kind": "skill", "situation": "Look up order A1.", "text": "lookup_order takes the order id as written."}
    roles = ScriptedChatModel(
        script={"LessonDrafts": [{"lessons": [lesson]}], "LessonVerdict": [{"decision": "approve"}]}
    )

    def ask(*steps):
        model = ScriptedChatModel(script={"agent": list(steps)})
        memory = PivotalMemory(roles, family="desk", outcome=lambda state: True, **NO_QUARANTINE)
        agent = create_agent(model, tools, middleware=[memory], store=store)
        return model, agent.invoke({"messages": [("user", "Look up order A1.")]})

    ask(tool_call("lookup_order", order_id="A1"))
    assert store.search(("pivotal", "lessons"), limit=10)
    model, result = ask()
    assert "takes the order id as written" in model.prompts["agent"][0][0].content
    assert result["pivotal_recalled"]


def test_the_graphs_approval_reader_takes_human_in_the_loop_decisions_and_never_fails_open():
    from pivotal.nodes.human_approval import read_reply

    assert read_reply({"type": "approve"}) == ("approve", "")
    assert read_reply({"decisions": [{"type": "reject", "message": "keep it"}]}) == ("reject", "keep it")
    assert read_reply({"type": "edit", "edited_action": {"name": "refund", "args": {}}})[0] == "reject"
    assert read_reply({"decisions": [{"type": "approve"}, {"type": "approve"}]})[0] == "reject"
