"""One resume: a thread paused for approval in one process continues in another, by `resume()`,
`pivotal resume` or `Command(resume=...)`, for an agent built without `name=` too; its saved
settings win; a resume that cannot go on leaves the decision unspent. Counted from the world's
side: the refund tool writes a ledger line each time it really runs.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

APP = '''
import json, os
from langchain_core.tools import tool
from pivotal import create_pivotal_agent

@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an amount of an order to the customer's card. Cannot be undone."""
    with open(os.environ["DESK_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({"kind": "refund", "order_id": order_id}) + "\\n")
    return f"refunded {amount} of {order_id}"

def agent(checkpointer=None):
    """The README's agent: no name=."""
    return create_pivotal_agent("sim", [refund], require_approval_for=["refund"], max_steps=2,
                                max_pivot_retries=0, memory=False, checkpointer=checkpointer)
'''
THREAD = "ticket-1"
NOWHERE = "openai-compatible:gpt@http://127.0.0.1:9/v1"
"""Process B's own default model: a run on it would be refused (nothing listens there)."""


@pytest.fixture
def paused(tmp_path, monkeypatch):
    """Process A (this one): the app's agent paused before its first refund, checkpoints in SQLite."""
    (tmp_path / "desk_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DESK_LEDGER", str(tmp_path / "ledger.jsonl"))
    import asyncio
    import importlib

    desk_app = importlib.import_module("desk_app")

    async def pause() -> dict:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "runs.sqlite")) as saver:
            ticket = {"messages": [("user", "refund order A1")]}
            return await desk_app.agent(saver).ainvoke(ticket, {"configurable": {"thread_id": THREAD}})

    state = asyncio.run(pause())
    assert state["__interrupt__"][0].value["action"] == "refund"
    sys.modules.pop("desk_app")
    return tmp_path


def process_b(folder: Path, body: str) -> dict:
    """Another process, whose own default model is `NOWHERE`: runs `body`, prints its `out`."""
    head = (
        "import asyncio, json, sys\n"
        "from pivotal.core.errors import PivotalError\n"
        "from langgraph.types import Command\n"
        f"sys.path.insert(0, {str(folder)!r})\n"
        f"CHECKPOINTS, THREAD = {str(folder / 'runs.sqlite')!r}, {THREAD!r}\n"
        "try:\n"
    )
    tail = "except PivotalError as exc:\n    out = {'error': str(exc)}\nprint(json.dumps(out))\n"
    script = head + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    ") + tail
    env = {**os.environ, "DESK_LEDGER": str(folder / "ledger.jsonl"), "PIVOTAL_MODEL": NOWHERE}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def refunds(folder: Path) -> int:
    ledger = folder / "ledger.jsonl"
    return (
        [json.loads(line)["kind"] for line in ledger.read_text().splitlines()].count("refund") if ledger.exists() else 0
    )


RESUME = """
    import desk_app
    from pivotal import resume
    desk_app.agent()  # the same agent: its tools registered under the same name; resume() reads the saved settings
    result = resume(THREAD, {{"decision": "{decision}"}}, checkpoint_path=CHECKPOINTS)
    out = {{"status": result.status, "approved": result.critic["human_approved"]}}
"""


@pytest.mark.slow
def test_an_unnamed_agent_resumes_in_another_process_on_its_own_saved_model(paused):
    out = process_b(paused, RESUME.format(decision="approve"))
    assert "error" not in out, out
    assert out["approved"] >= 1 and refunds(paused) == 1  # on the thread's sim, not the process's NOWHERE


@pytest.mark.slow
def test_command_resume_in_another_process_finds_the_unnamed_agents_tools(paused):
    out = process_b(
        paused,
        """
        import desk_app
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async def go():
            async with AsyncSqliteSaver.from_conn_string(CHECKPOINTS) as saver:
                agent = desk_app.agent(saver)
                return await agent.ainvoke(Command(resume="approve"), {"configurable": {"thread_id": THREAD}})
        out = {"status": asyncio.run(go())["status"]}
    """,
    )
    assert "error" not in out, out
    assert refunds(paused) == 1


@pytest.mark.slow
@pytest.mark.parametrize("how", ["resume", "command"])
def test_a_resume_where_the_tools_are_missing_is_refused_and_the_decision_stays_unspent(paused, how):
    """Process B never imported the app: one line, and a later reject still stops the refund."""
    if how == "resume":
        body = """
            from pivotal import resume
            resume(THREAD, {"decision": "approve"}, checkpoint_path=CHECKPOINTS)
            out = {}
        """
    else:
        body = """
            from pivotal import build_graph
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async def go():
                async with AsyncSqliteSaver.from_conn_string(CHECKPOINTS) as saver:
                    await build_graph(saver).ainvoke(Command(resume="approve"), {"configurable": {"thread_id": THREAD}})
            asyncio.run(go())
            out = {}
        """
    refused = process_b(paused, body)
    assert "unknown environment 'agent-" in refused["error"] and len(refused["error"].splitlines()) == 1
    assert refunds(paused) == 0
    rejected = process_b(paused, RESUME.format(decision="reject"))
    assert "error" not in rejected, rejected
    assert rejected["approved"] == 0 and refunds(paused) == 0


COMMAND = """
    import desk_app
    from pivotal import build_graph
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async def go():
        async with AsyncSqliteSaver.from_conn_string(CHECKPOINTS) as saver:
            desk_app.agent()  # its tools registered in this process too
            graph = {graph}
            config = {{"configurable": {{"thread_id": THREAD}}}}
            values = await graph.ainvoke(Command(resume="{decision}"), config{context})
            approved = values["counters"].get("human_approved", 0)
            return {{"status": values["status"], "reason": values["reason"], "approved": approved}}
    out = asyncio.run(go())
"""


@pytest.mark.slow
def test_command_resume_with_no_context_goes_on_with_the_threads_saved_settings(paused):
    """A bare `build_graph` in a process whose default model is NOWHERE and memory on: the turn goes
    on as it started (sim, memory off), not on the process's defaults.
    """
    out = process_b(paused, COMMAND.format(graph="build_graph(saver)", decision="approve", context=""))
    assert "error" not in out, out
    assert out["status"] == "success" and out["approved"] == 1, out  # NOWHERE: "failure", a connection error
    assert refunds(paused) == 1


@pytest.mark.slow
def test_command_resume_may_repeat_a_saved_setting(paused):
    context = ', context={"max_steps": 2, "memory": False}'
    out = process_b(paused, COMMAND.format(graph="desk_app.agent(saver)", decision="approve", context=context))
    assert "error" not in out, out
    assert refunds(paused) == 1


@pytest.mark.slow
@pytest.mark.parametrize("graph", ["desk_app.agent(saver)", "build_graph(saver)"])
def test_command_resume_that_contradicts_the_saved_settings_is_refused_and_the_decision_stays_unspent(paused, graph):
    contradiction = ', context={"max_steps": 7}'
    refused = process_b(paused, COMMAND.format(graph=graph, decision="approve", context=contradiction))
    assert "max_steps 7 contradicts this run's saved max_steps 2" in refused.get("error", ""), refused
    assert len(refused["error"].splitlines()) == 1 and refunds(paused) == 0
    rejected = process_b(paused, COMMAND.format(graph=graph, decision="reject", context=""))
    assert "error" not in rejected, rejected
    assert rejected["approved"] == 0 and refunds(paused) == 0
