"""A fork preview says, call for call, what the fork then does to the world: previewed, then forked,
from every checkpoint of a finished thread, on both faces (`create_pivotal_agent` and `create_agent`
+ `PivotalCritic`). The world's side is the ledger the test's own tools write; the people's side is
the approvals the fork asks for. Real SQLite checkpoints; the support desk's clerk in process.
"""

import asyncio
import json
import sqlite3
from collections import Counter
from typing import Any

import pytest
import test_studio
from langchain.agents import create_agent
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from langgraph_sdk import get_client

from pivotal import PivotalCritic, afork_preview, create_pivotal_agent, fork_preview
from pivotal.cli.main import main
from pivotal.testing.promise_desk import ClerkChatModel, DeskRoleModel, desk_tools, ledger_kinds

GOAL = "Please refund order A1 in full and email the customer."
KIND = {"lookup_order": "lookup", "refund": "refund", "send_email": "email"}
AGAIN = {"type": "approve", "repeat": True}
"""The test's person approves every question, a repeat too: whatever the fork asks runs."""


def emailed(task: Any, calls: list[dict[str, Any]]) -> bool | None:
    """The ticket is done once an email went out: that step ends the task."""
    return True if any(c["tool"] == "send_email" and not c["error"] for c in calls) else None


SCENARIOS = {
    # the email fails once: every step is taken as done but the failed one, which runs again
    "graph-failed-email": ("graph", {"failures": {"send_email": 1}}),
    # the email ends the task: a fork before it takes the sent email as done, irreversible or not,
    # and asks no person again (it once ran again, and sent a second email)
    "graph-final-email-once": ("graph", {"verifier": emailed}),
    "graph-final-email-once-asked": (
        "graph",
        {"verifier": emailed, "irreversible": ["refund", "send_email"], "require_approval_for": ["send_email"]},
    ),
    "agent-failed-email": ("middleware", {"failures": {"send_email": 1}}),
    "agent-failed-email-asked": ("middleware", {"failures": {"send_email": 1}, "require_approval_for": ["send_email"]}),
}


@pytest.fixture
def saver(tmp_path):
    connection = sqlite3.connect(str(tmp_path / "threads.sqlite"), check_same_thread=False)
    yield SqliteSaver(connection)
    connection.close()


def build(face: str, saver: Any, ledger: Any, settings: dict[str, Any]) -> Any:
    settings = dict(settings)
    tools = desk_tools(ledger, failures=settings.pop("failures", None), answer_errors=face == "middleware")
    irreversible = settings.pop("irreversible", ["refund"])
    if face == "graph":
        return create_pivotal_agent(DeskRoleModel(), tools, irreversible=irreversible, checkpointer=saver,
                                    memory=False, max_steps=6, max_pivot_retries=1, **settings)  # fmt: skip
    critic = PivotalCritic(DeskRoleModel(), irreversible=irreversible, **settings)
    return create_agent(ClerkChatModel(), tools, middleware=[critic], checkpointer=saver)


def answered(app: Any, result: dict[str, Any], thread: dict[str, Any]) -> list[tuple[str, str]]:
    """Approve every question until the run ends; the calls asked about, in order."""
    asked = []
    for _ in range(10):
        if not result.get("__interrupt__"):
            return asked
        value = result["__interrupt__"][0].value
        asked.append((value["action"], json.dumps(value["arguments"], sort_keys=True)))
        result = app.invoke(Command(resume=AGAIN), thread)
    raise AssertionError(f"still asking after 10 answers: {asked}")


@pytest.mark.slow  # 5-8 s each: a fork from each of 30-50 checkpoints
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_fork_preview_matches_what_the_fork_does(scenario, saver, tmp_path):
    face, settings = SCENARIOS[scenario]
    ledger = tmp_path / "ledger.jsonl"
    app = build(face, saver, ledger, settings)
    thread = {"configurable": {"thread_id": "ticket"}, "recursion_limit": 200}
    answered(app, app.invoke({"messages": [("user", GOAL)]}, thread), thread)
    assert ledger_kinds(ledger).count("refund") == 1
    history = list(app.get_state_history(thread))
    fates: Counter[str] = Counter()
    for snapshot in history:
        # a replay from the checkpoint, and a fork from an edit of it (Studio's edit, `update_state`)
        edited = [app.update_state(snapshot.config, None)] if snapshot.next not in ((), ("__start__",)) else []
        for config in [snapshot.config, *edited]:
            preview = fork_preview(app, config)
            if config is snapshot.config:
                assert preview.next == list(snapshot.next)
            before = len(ledger_kinds(ledger))
            asked = answered(app, app.invoke(None, {**config, "recursion_limit": 200}), thread)
            ran = ledger_kinds(ledger)[before:]
            expected = [KIND[c.action] for c in preview.calls if c.fate in ("run", "ask")]
            place = f"fork at {snapshot.next} ({config['configurable']['checkpoint_id']}): {preview.fates()}"
            assert Counter(ran) == Counter(expected), place
            asks = {(c.action, json.dumps(c.arguments, sort_keys=True)) for c in preview.calls if c.fate == "ask"}
            assert set(asked) == asks, place
            fates.update(fate for _, fate in preview.fates())
    if "once" in scenario:  # nothing that ran runs again, nobody is asked again
        assert set(fates) == {"skip"}, fates
        return
    wanted = {"skip", *({"ask"} if "asked" in scenario else {"run"})}
    assert wanted <= set(fates), fates  # the scenario shows what it is about


def test_the_command_previews_a_fork_of_a_thread(saver, tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"
    app = build("graph", saver, ledger, {"failures": {"send_email": 1}})
    thread = {"configurable": {"thread_id": "ticket"}, "recursion_limit": 200}
    app.invoke({"messages": [("user", GOAL)]}, thread)
    first = list(app.get_state_history(thread))[-1]  # the thread's input: everything it did comes after
    path = str(tmp_path / "threads.sqlite")
    assert main(["fork-preview", "ticket", "--checkpoint", first.config["configurable"]["checkpoint_id"],
                 "--checkpoints", path, "--json"]) == 0  # fmt: skip
    shown = json.loads(capsys.readouterr().out)
    assert [(c["action"], c["fate"]) for c in shown["calls"]] == fork_preview(saver, first.config).fates()
    history = list(app.get_state_history(thread))  # the history as a list reads the same
    assert fork_preview(history, first.config["configurable"]["checkpoint_id"]) == fork_preview(app, first.config)
    assert [c["fate"] for c in shown["calls"]] == ["skip", "skip", "run"]  # the failed email runs again
    assert main(["fork-preview", "ticket", "--checkpoint", "nope", "--checkpoints", path]) == 2
    assert "no checkpoint 'nope'" in capsys.readouterr().err


# --- Studio: a served thread, previewed from its history as Studio reads it -------------------------

studio = test_studio.studio
"""tests/test_studio.py's `langgraph dev` server, started once for this module."""


@pytest.mark.slow
async def test_a_studio_fork_does_what_its_preview_said(studio, capsys):
    """The support desk's email ends the task; a fork before the refund takes both as done, and sends nothing."""
    import pivotal.testing.ledger_env  # noqa: F401 — the served app's environment, registered here too

    url, folder, _ = studio
    client = get_client(url=url)
    [assistant] = await client.assistants.search(graph_id="pivotal")
    thread = await client.threads.create()
    ledger = folder / "preview-ledger.jsonl"
    context = {"model": "sim", "memory": False}
    task = {"env": "support-desk", "params": {"ledger": str(ledger)}}
    final = await client.runs.wait(thread["thread_id"], assistant["assistant_id"], input={"task": task},
                                   context=context)  # fmt: skip
    at_refund = final["trajectory"][1]["checkpoint_id"]
    history = await client.threads.get_history(thread["thread_id"], limit=1000)
    preview = await afork_preview(list(history), at_refund)
    assert preview.fates() == [("refund", "skip"), ("send_email", "skip")], preview
    assert await asyncio.to_thread(main, ["fork-preview", thread["thread_id"], "--checkpoint", at_refund,
                                          "--server", url, "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["calls"] == preview.model_dump()["calls"]
    before = ledger_kinds(ledger)
    await client.runs.wait(thread["thread_id"], assistant["assistant_id"], input=None, context=context,
                           checkpoint_id=at_refund)  # fmt: skip
    ran = ledger_kinds(ledger)[len(before) :]
    assert ran == [KIND[c.action] for c in preview.calls if c.fate in ("run", "ask")] == []
