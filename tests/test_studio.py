"""LangGraph Studio's server (`langgraph dev`) serving langgraph.json: one real server test.

Runs a task through the `langgraph-sdk` client with `sim` models, reads the thread's history,
checks Studio draws every node, and forks from a step's recorded checkpoint.
"""

import json
import os
import sys
from pathlib import Path

import pytest
from langgraph_sdk import get_client

from pivotal.cli.studio import QUIET
from pivotal.graphs.builder import NODES
from pivotal.testing.servers import free_port, serve

ROOT = Path(__file__).resolve().parents[1]
LANGGRAPH = Path(sys.executable).parent / "langgraph"


DESK_APP = """
import json, os
from langchain_core.tools import tool
from pivotal import create_pivotal_agent

@tool
def refund(order_id: str, amount: float) -> str:
    \"\"\"Refund an amount of an order to the customer's card. Cannot be undone.\"\"\"
    with open(os.environ["DESK_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({"kind": "refund", "order_id": order_id}) + "\\n")
    return f"refunded {amount} of {order_id}"

graph = create_pivotal_agent("sim", [refund], require_approval_for=["refund"], max_steps=6, name="desk")
"""
"""An application's own agent, served as its module defines it: its settings are the defaults."""


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """An application's own Studio setup in its own folder, where the server keeps its runs.

    A module registers the app's environments and serves Pivotal's graph, and the folder's
    langgraph.json names it, as docs/studio.md shows. The port is chosen here and checked: on a
    taken port the server silently moves elsewhere.
    """
    port, folder = free_port(), tmp_path_factory.mktemp("studio")
    (folder / "studio_app.py").write_text(
        "from pivotal.testing import ledger_env  # registers the app's environments\n"
        "from pivotal.graphs.studio import graph  # noqa: F401\n"
    )
    (folder / "desk_app.py").write_text(DESK_APP)
    graphs = {"pivotal": "./studio_app.py:graph", "desk": "./desk_app.py:graph"}
    config = {"dependencies": [str(ROOT), "."], "graphs": graphs}
    (folder / "langgraph.json").write_text(json.dumps({**config, "python_version": "3.11"}))
    log_path = folder / "server.log"  # outside the project, or the reload watcher loops
    command = [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)]
    env = {
        **os.environ,
        **QUIET,
        "DESK_LEDGER": str(folder / "desk.jsonl"),
        "PIVOTAL_STORE_PATH": str(folder / "lessons"),
    }
    with serve(command, "/ok", port, log_path, cwd=folder, env=env) as url:
        yield url, folder, log_path


@pytest.mark.slow
async def test_studio_runs_a_task_shows_every_node_and_forks_from_a_step(studio):
    url, folder, log_path = studio
    client = get_client(url=url)
    [assistant] = await client.assistants.search(graph_id="pivotal")
    drawn = {node["id"] for node in (await client.assistants.get_graph(assistant["assistant_id"]))["nodes"]}
    assert set(NODES) <= drawn

    context = {"model": "sim:error=0.3,seed=1", "store_path": str(folder / "store")}
    thread = await client.threads.create()
    final = await client.runs.wait(
        thread["thread_id"],
        assistant["assistant_id"],
        input={"task": {"env": "gridworld", "params": {"seed": 1}}},
        context=context,
    )
    assert final["status"] == "success", final
    history = await client.threads.get_history(thread["thread_id"], limit=500)
    checkpoints = {state["checkpoint"]["checkpoint_id"]: state for state in history}
    step = final["trajectory"][1]
    assert checkpoints[step["checkpoint_id"]]["next"] == ["executor"]  # the step's own checkpoint

    forked = await client.runs.wait(
        thread["thread_id"], assistant["assistant_id"], input=None, checkpoint_id=step["checkpoint_id"], context=context
    )
    assert forked["trajectory"][:1] == final["trajectory"][:1]  # the prefix before the fork is kept
    after = await client.threads.get_history(thread["thread_id"], limit=1000)
    assert any(
        state["parent_checkpoint"]
        and state["parent_checkpoint"]["checkpoint_id"] == step["checkpoint_id"]
        and state["checkpoint"]["checkpoint_id"] not in checkpoints
        for state in after
    )
    assert "BlockingError" not in log_path.read_text()


async def test_studio_runs_the_apps_own_environment(studio):
    url, folder, _ = studio
    client = get_client(url=url)
    [assistant] = await client.assistants.search(graph_id="pivotal")
    thread = await client.threads.create()
    task = {"env": "support-desk", "params": {"ledger": str(folder / "ledger.jsonl")}}
    final = await client.runs.wait(thread["thread_id"], assistant["assistant_id"], input={"task": task},
                                   context={"model": "sim", "memory": False})  # fmt: skip
    assert final["status"] == "success", final
    kinds = [json.loads(line)["kind"] for line in (folder / "ledger.jsonl").read_text().splitlines()]
    assert kinds == ["refund", "email"]


@pytest.mark.slow
async def test_a_studio_fork_at_the_refund_is_reviewed_and_never_refunds_again(studio):
    """A Studio edit `as_node="critic"` that skips the critic and changes nothing hands the executor
    the very refund the thread's other branch ran at this step: taken as done, not run again.
    """
    url, folder, _ = studio
    client = get_client(url=url)
    [assistant] = await client.assistants.search(graph_id="pivotal")
    thread = await client.threads.create()
    ledger = folder / "fork-ledger.jsonl"
    context = {"model": "sim", "memory": False}
    task = {"env": "support-desk", "params": {"ledger": str(ledger)}}
    final = await client.runs.wait(
        thread["thread_id"], assistant["assistant_id"], input={"task": task}, context=context
    )
    at_refund = final["trajectory"][1]
    assert final["status"] == "success" and at_refund["action"] == "refund"
    fork = await client.threads.update_state(
        thread["thread_id"], None, as_node="critic", checkpoint={"checkpoint_id": at_refund["checkpoint_id"]}
    )
    forked = await client.runs.wait(thread["thread_id"], assistant["assistant_id"], input=None, context=context,
                                    checkpoint_id=fork["checkpoint"]["checkpoint_id"])  # fmt: skip
    # the refund and the email that ended the task after it: both taken as done, neither run again
    assert forked["status"] == "success" and forked["counters"]["reused"] == 2, forked
    kinds = [json.loads(line)["kind"] for line in ledger.read_text().splitlines()]
    assert kinds.count("refund") == 1 and kinds.count("email") == 1


async def test_studio_keeps_lessons_in_the_servers_store_where_its_memory_view_shows_them(studio):
    """Under `langgraph dev` the run has the server's store: lessons go there, not to a Chroma folder."""
    url, folder, _ = studio
    client = get_client(url=url)
    [assistant] = await client.assistants.search(graph_id="pivotal")
    thread = await client.threads.create()
    chroma = folder / "unused-chroma"
    context = {"model": "sim:error=0.35,seed=8", "lesson_model": "sim", "critic": False, "max_steps": 12}
    final = await client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                                   input={"task": {"env": "gridworld", "params": {"seed": 7}}},
                                   context={**context, "store_path": str(chroma)})  # fmt: skip
    written = final["counters"]["lessons_written"]
    found = await client.store.search_items(["pivotal", "lessons", "gridworld"], limit=100)
    assert written > 0 and len(found["items"]) >= written
    assert {item["value"]["run_id"] for item in found["items"]} >= {final["run_id"]}
    assert not chroma.exists()


@pytest.mark.parametrize(
    "graphs,needle",
    [
        ({"pivotal": "./graphs/missing.py:graph"}, "does not exist"),
        ({"pivotal": "./graphs/__init__.py:no_such_graph"}, "has no compiled graph named 'no_such_graph'"),
        ({"pivotal": "pivotal.graphs.no_such_module:graph"}, "importing pivotal.graphs.no_such_module failed"),
        ({"pivotal": "pivotal.graphs:no_such_graph"}, "has no compiled graph named 'no_such_graph'"),
    ],
)
def test_a_config_pointing_at_a_missing_graph_is_a_one_line_error(tmp_path, capsys, graphs, needle):
    import json

    from pivotal.cli import main

    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {k: v.replace("./", f"{ROOT}/") for k, v in graphs.items()}}))
    assert main(["studio", "--check", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_the_project_config_checks_clean(capsys):
    from pivotal.cli import main

    assert main(["studio", "--check", "--config", str(ROOT / "langgraph.json")]) == 0
    assert "graph 'pivotal'" in capsys.readouterr().err


@pytest.mark.slow
async def test_the_server_keeps_the_agents_own_settings_and_refuses_an_unknown_key(studio):
    """A run's context overrides only the keys it names; the rest are the agent's, not Context()'s."""
    url, folder, _ = studio
    client = get_client(url=url)
    [assistant] = await client.assistants.search(graph_id="desk")
    schema = (await client.assistants.get_schemas(assistant["assistant_id"]))["context_schema"]
    assert schema["properties"]["model"]["default"] == "sim" and schema["properties"]["max_steps"]["default"] == 6
    for context in ({}, {"max_steps": 5}):
        thread = await client.threads.create()
        ticket = {"messages": [{"role": "user", "content": "refund order A1"}]}
        await client.runs.wait(thread["thread_id"], assistant["assistant_id"], input=ticket, context=context)
        state = await client.threads.get_state(thread["thread_id"])
        [pending] = [i for task in state["tasks"] for i in task["interrupts"]]
        assert pending["value"]["action"] == "refund"  # the agent's approval, not Context()'s none
        settings = state["values"]["run_settings"]
        assert (settings["model"], settings["require_approval_for"], settings["default_env"]) == (
            "sim",
            ["refund"],
            "desk",
        )
        assert settings["max_steps"] == context.get("max_steps", 6)
    assert not (folder / "desk.jsonl").exists()

    thread = await client.threads.create()
    refused = await client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                                     input={"messages": [{"role": "user", "content": "refund A1"}]},
                                     context={"modle": "sim"}, raise_error=False)  # fmt: skip
    message = str(refused["__error__"]["message"])
    assert "unknown context key 'modle' (did you mean 'model'?)" in message and len(message.splitlines()) == 1

    # a client cannot switch the deployment's approval off: tighten-only (docs/configuration.md)
    thread = await client.threads.create()
    loosened = await client.runs.wait(thread["thread_id"], assistant["assistant_id"], input=ticket,
                                      context={"require_approval_for": []}, raise_error=False)  # fmt: skip
    message = str(loosened["__error__"]["message"])
    assert "context require_approval_for [] loosens this deployment's require_approval_for ['refund']" in message
    assert len(message.splitlines()) == 1 and not (folder / "desk.jsonl").exists()
