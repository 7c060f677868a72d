"""A misspelt name in a safety setting is refused when the agent is built, naming the closest tool:
accepted, `irreversible=["refnd"]` left the real refund without its pause and its once-guard.
Counted from the world's side: where a check can only come at the first model call, no tool ran.
"""

import json

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

from pivotal import Context, PivotalCritic, PivotalError, PivotalMemory, ToolEnvironment, arun, create_pivotal_agent
from pivotal.memory.storage import embeddings
from pivotal.testing.scripted import ScriptedChatModel, tool_call, verdict


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def tools(ledger):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        with ledger.open("a") as out:
            out.write(json.dumps({"order_id": order_id}) + "\n")
        return f"refunded {amount:.2f} of {order_id}"

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's total."""
        return f"order {order_id}: total 20.00"

    @tool
    def send_email(order_id: str, text: str) -> str:
        """Email the customer."""
        return "sent"

    return [lookup_order, refund, send_email]


def refunds(ledger) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert len(text.splitlines()) == 1
    return text


@pytest.mark.parametrize(
    ("setting", "wrong", "closest"),
    [
        ({"irreversible": ["refnd"]}, "refnd", "refund"),
        ({"require_approval_for": ["refnd"]}, "refnd", "refund"),
        ({"repeatable": ["send_emial"]}, "send_emial", "send_email"),
        ({"once_keys": {"refnd": ["order_id"]}}, "refnd", "refund"),
        ({"once_keys": {"refund": ["orderid"]}}, "orderid", "order_id"),
        ({"compensations": {"refnd": "refund"}}, "refnd", "refund"),
        ({"compensations": {"refund": "reverse_refnd"}}, "reverse_refnd", None),
    ],
    ids=[
        "irreversible",
        "require_approval_for",
        "repeatable",
        "once_keys",
        "once_keys-argument",
        "compensations",
        "compensation-tool",
    ],  # fmt: skip
)
def test_create_pivotal_agent_refuses_a_name_that_is_no_tool(tools, setting, wrong, closest):
    with pytest.raises(PivotalError) as refused:
        create_pivotal_agent("sim", tools, **setting)
    text = one_line(refused)
    assert f"names {wrong!r}, which is no" in text
    if closest:
        assert f"did you mean {closest!r}?" in text


def test_the_special_words_of_require_approval_for_stay_valid(tools):
    create_pivotal_agent("sim", tools, irreversible=["refund"], require_approval_for=["*", "irreversible", "refund"])


def test_no_approvals_may_be_said_with_none_and_a_bare_name_is_refused_on_both_faces(tools):
    """`require_approval_for=None` crashed deep inside (a TypeError from iterating None); a bare
    "refund" would have been read letter by letter.
    """
    agent = create_pivotal_agent("sim", tools, irreversible=["refund"], require_approval_for=None)
    assert agent is not None
    PivotalCritic("sim", require_approval_for=None, tools=tools)
    for build in (
        lambda: create_pivotal_agent("sim", tools, irreversible=["refund"], require_approval_for="refund"),
        lambda: PivotalCritic("sim", require_approval_for="refund", tools=tools),
    ):
        with pytest.raises(PivotalError) as refused:
            build()
        assert "require_approval_for must be a list of action names" in one_line(refused)
        assert "['refund']" in str(refused.value)


def test_a_tool_environment_refuses_an_unknown_irreversible_tool(tools):
    with pytest.raises(PivotalError, match="irreversible names 'refnd'.*did you mean 'refund'"):
        ToolEnvironment(tools, irreversible=["refnd"])


def test_the_critic_given_the_tools_refuses_a_typo_when_built(tools):
    with pytest.raises(PivotalError) as refused:
        PivotalCritic("sim", irreversible=["refnd"], tools=tools)
    assert "did you mean 'refund'" in one_line(refused)
    with pytest.raises(PivotalError, match="require_approval_for names 'refnd'"):
        PivotalCritic("sim", require_approval_for=["irreversible", "refnd"], tools=tools)
    PivotalCritic("sim", irreversible=["refund"], require_approval_for=["*"], tools=tools)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_critic_without_the_tools_refuses_at_the_first_model_call_before_any_tool_runs(tools, ledger, mode):
    model = ScriptedChatModel(script={"agent": [tool_call("refund", order_id="A1", amount=20.0)]})
    critic = ScriptedChatModel(script={"Verdict": [verdict("approve")]})
    agent = create_agent(model, tools, middleware=[PivotalCritic(critic, irreversible=["refnd"])])
    given = {"messages": [("user", "Refund order A1.")]}
    with pytest.raises(PivotalError) as refused:
        await agent.ainvoke(given) if mode == "async" else agent.invoke(given)
    assert "irreversible names 'refnd'" in one_line(refused) and "did you mean 'refund'" in str(refused.value)
    assert refunds(ledger) == 0 and "agent" not in model.prompts  # refused before the model was even asked


def test_the_critic_checks_an_environment_when_built(tools):
    environment = ToolEnvironment(tools)
    with pytest.raises(PivotalError, match="irreversible names 'refnd', which is no action"):
        PivotalCritic("sim", irreversible=["refnd"], environment=environment)
    with pytest.raises(PivotalError, match="environment must be an Environment"):
        PivotalCritic("sim", environment=tools)


async def test_the_graph_refuses_a_task_allowing_a_misspelt_action_to_repeat_before_any_step():
    task = {"goal": "walk to G", "env": "gridworld", "params": {"seed": 1}, "allow_repeat": ["lefft"]}
    with pytest.raises(PivotalError) as refused:
        await arun(task, Context(model="sim", memory=False, max_steps=4), checkpoint_path=":memory:")
    assert "allow_repeat names 'lefft'" in one_line(refused) and "did you mean 'left'" in str(refused.value)
    await arun(
        {**task, "allow_repeat": ["*", "left"]},
        Context(model="sim", memory=False, max_steps=4),
        checkpoint_path=":memory:",
    )


def test_pivotal_memory_without_its_embedding_wheel_is_refused_when_built(monkeypatch, tmp_path):
    monkeypatch.setattr(embeddings, "MODEL_PACKAGE", "no_such_minilm_wheel")
    with pytest.raises(PivotalError) as refused:
        PivotalMemory("sim", store_path=str(tmp_path / "lessons"))
    text = one_line(refused)
    assert "embedding model cannot load" in text and embeddings.INSTALL_HINT in text
    assert not (tmp_path / "lessons").exists()  # nothing opened on the way


async def test_the_run_api_refuses_an_approval_for_no_action_of_its_tasks_before_any_step(tmp_path):
    """`arun(task, Context(require_approval_for=["refnd"]), checkpoint_path=...)` on a registered desk ran
    the real refund with no pause (1 refund in the ledger): the runners checked the names nowhere, as one
    context may serve a batch over several environments. They know every task they run, so a name that is
    an action of none of them is refused in one line before any step; one that is an action of one of a
    batch's environments still serves it. Through the real openai SDK and a SQLite checkpoint file.
    """
    from langchain_openai import ChatOpenAI

    from pivotal import register_environment, run_batch
    from pivotal.testing.loopback_provider import loopback
    from pivotal.testing.promise_desk import clerk_responder, desk_tools, ledger_kinds

    ledger = tmp_path / "ledger.jsonl"
    register_environment("names-desk", lambda: ToolEnvironment(desk_tools(ledger), irreversible=["refund"]))
    task = {"env": "names-desk", "goal": "Refund order A1."}
    with loopback() as server:
        server.responder = clerk_responder()
        model = ChatOpenAI(model="clerk", base_url=server.base_url_openai, api_key="local", max_retries=0)
        wrong = Context(model=model, memory=False, max_pivot_retries=0, require_approval_for=["refnd"])
        with pytest.raises(PivotalError) as refused:
            await arun(task, wrong, checkpoint_path=str(tmp_path / "cp.sqlite"))
        assert "require_approval_for names 'refnd'" in one_line(refused) and "did you mean 'refund'" in str(
            refused.value
        )
        with pytest.raises(PivotalError, match="refnd"):
            await run_batch([task], wrong, checkpoint_path=str(tmp_path / "batch.sqlite"))
        assert ledger_kinds(ledger) == []
        # a batch over two environments: `refund` is an action of one of them, and guards it
        mixed = Context(model=model, memory=False, max_steps=3, max_pivot_retries=0, require_approval_for=["refund"])
        grid = {"env": "gridworld", "params": {"size": 4, "seed": 1}}  # 3 is under gridworld's least: now refused
        results = await run_batch([task, grid], mixed, checkpoint_path=str(tmp_path / "mixed.sqlite"))
    assert results[0].status == "interrupted" and results[0].interrupt["action"] == "refund"
    assert ledger_kinds(ledger) == ["lookup"]


def test_approval_for_irreversible_actions_where_none_is_marked_is_refused_on_every_face(tools, ledger):
    """`require_approval_for=["irreversible"]` with no tool marked irreversible guarded nothing: the refund
    ran unasked (1 refund in the ledger, on `create_pivotal_agent` and on `create_agent` + `PivotalCritic`).
    Refused in one line when built, as a misspelt name is; with the refund marked, it is accepted.
    """
    from pivotal import build_graph, register_environment, run

    with pytest.raises(PivotalError) as refused:
        create_pivotal_agent("sim", tools, require_approval_for=["irreversible"], memory=False)
    assert "no action here is irreversible" in one_line(refused) and "irreversible=" in str(refused.value)
    with pytest.raises(PivotalError, match="no tool here is irreversible"):
        PivotalCritic("sim", tools=tools, require_approval_for=["irreversible"])
    register_environment("unmarked-desk", lambda: ToolEnvironment(tools))
    with pytest.raises(PivotalError, match="no action here is irreversible"):
        build_graph(context=Context(model="sim", default_env="unmarked-desk", require_approval_for=["irreversible"]))
    with pytest.raises(PivotalError, match="no action here is irreversible"):
        unmarked = Context(model="sim", memory=False, require_approval_for=["irreversible"])
        run({"env": "unmarked-desk", "goal": "Refund order A1."}, unmarked, checkpoint_path=":memory:")
    assert refunds(ledger) == 0
    create_pivotal_agent("sim", tools, irreversible=["refund"], require_approval_for=["irreversible"], memory=False)
    PivotalCritic("sim", tools=tools, irreversible=["refund"], require_approval_for=["irreversible", "*"])
