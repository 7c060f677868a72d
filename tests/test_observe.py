"""An observe-only critic (`observe_only`): it reviews every call and blocks none, so the agent does
what it does with no critic at all (the world's ledger says so, written by the test's own tools);
and its report's figures match a scripted run whose right answers are known.

Both faces: `create_pivotal_agent` (the graph) and `create_agent` + `PivotalCritic`, in process, on
the support desk's clerk (pivotal/testing/promise_desk.py) with the critic's verdicts chosen per
tool; real SQLite checkpoints.
"""

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from pivotal import PivotalCritic, PivotalError, create_pivotal_agent, critic_report
from pivotal.cli.main import main
from pivotal.testing.promise_desk import ClerkChatModel, DeskRoleModel, clerk_responder, desk_tools, ledger_kinds

GOAL = "Please refund order A1 in full and email the customer."
SETTINGS = {"max_critique_rounds": 2, "max_pivot_retries": 1}
JUDGED = {
    "lookup_order": {"decision": "revise", "diagnosis": "look it up later"},
    "refund": {"decision": "approve", "confidence": 0.5},  # below the irreversible rule's 0.9: a block
    "send_email": {"decision": "reject", "diagnosis": "do not write to customers"},
}
"""The critic's verdicts: every tool's call would be blocked by an enforcing critic."""


@pytest.fixture
def saver(tmp_path):
    connection = sqlite3.connect(str(tmp_path / "threads.sqlite"), check_same_thread=False)
    yield SqliteSaver(connection)
    connection.close()


def desk(face: str, saver: Any, ledger: Path, critic: dict[str, Any] | None, **settings: Any) -> Any:
    """The app on one face; `critic` None: no critic at all (the graph's `critic=False`, no middleware)."""
    tools = desk_tools(ledger, failures=settings.pop("failures", None), answer_errors=face == "middleware")
    judge = DeskRoleModel(responder=clerk_responder(critic=critic or {}))
    if face == "graph":
        role = {"critic": False} if critic is None else {}
        return create_pivotal_agent(
            judge, tools, irreversible=["refund"], checkpointer=saver, memory=False, **SETTINGS, **role, **settings
        )
    middleware = [] if critic is None else [PivotalCritic(judge, irreversible=["refund"], **SETTINGS, **settings)]
    return create_agent(ClerkChatModel(), tools, middleware=middleware, checkpointer=saver)


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}, "recursion_limit": 100}


FACES = [pytest.param("graph", marks=pytest.mark.slow), "middleware"]
"""The graph's runs here take 1-3 s (three runs of four steps, each a checkpoint per node)."""


@pytest.mark.parametrize("face", FACES)
def test_observe_only_does_what_no_critic_does_and_records_what_the_critic_said(face, saver, tmp_path):
    runs = {}
    for mode, critic, settings in [
        ("none", None, {}),
        ("observe", JUDGED, {"observe_only": True}),
        ("enforce", JUDGED, {}),
    ]:
        ledger = tmp_path / f"{mode}.jsonl"
        app = desk(face, saver, ledger, critic, **settings)
        app.invoke({"messages": [("user", GOAL)]}, thread(mode))
        runs[mode] = [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
    assert runs["observe"] == runs["none"] and [r["kind"] for r in runs["none"]] == ["lookup", "refund", "email"]
    assert runs["enforce"] != runs["none"]  # the critic, enforced, changes what happens: observing it does not
    found = critic_report(saver, ["observe"])
    said = {name: (figures.reviewed, figures.would_block) for name, figures in found.tools.items()}
    assert {name: said[name] for name in JUDGED} == {"lookup_order": (1, 1), "refund": (1, 1), "send_email": (1, 1)}
    assert critic_report(saver, ["none"]).calls == []


EXPECTED = {
    # lookup: the critic asked to revise it, it ran and the task succeeded: a false alarm
    "lookup_order": {"reviewed": 1, "would_block": 1, "would_block_but_fine": 1},
    # refund, approved: a person rejected the first, approved the second
    "refund": {"reviewed": 2, "let_through_but_bad": 1, "let_through_and_fine": 1},
}
EXPECTED_BY_FACE = {
    # the graph's clerk takes the failed email as done and finishes; the answer is approved
    "graph": {
        "send_email": {"reviewed": 1, "would_block": 1, "would_block_and_bad": 1},
        "finish": {"reviewed": 1, "let_through_and_fine": 1},
    },
    # the agent's clerk sends it again, and the second one goes out
    "middleware": {
        "send_email": {"reviewed": 2, "would_block": 2, "would_block_and_bad": 1, "would_block_but_fine": 1}
    },
}


@pytest.mark.parametrize("face", FACES)
def test_the_report_matches_a_scripted_run_whose_answers_are_known(face, saver, tmp_path, capsys):
    judged = {**JUDGED, "refund": {"decision": "approve", "confidence": 0.95}}
    ledger = tmp_path / "ledger.jsonl"
    app = desk(face, saver, ledger, judged, observe_only=True, require_approval_for=["refund"],
               failures={"send_email": 1})  # fmt: skip
    config = thread("ticket")
    paused = app.invoke({"messages": [("user", GOAL)]}, config)
    assert paused.get("__interrupt__")
    paused = app.invoke(Command(resume={"type": "reject", "message": "wrong order"}), config)
    assert paused.get("__interrupt__")  # the clerk proposes the refund again
    app.invoke(Command(resume={"type": "approve"}), config)
    assert ledger_kinds(ledger).count("refund") == 1
    found = critic_report(saver)
    expected = {**EXPECTED, **EXPECTED_BY_FACE[face]}
    figures = {name: {k: v for k, v in f.model_dump().items() if v} for name, f in found.tools.items()}
    assert figures == expected
    revoked = critic_report(saver, revoked_runs=[c.run_id for c in found.calls if c.run_id])
    if face == "graph":  # the run's lessons taken back later: a call that turned out fine turns out bad
        outcomes = sorted((c.action, c.outcome) for c in revoked.calls)
        assert outcomes == [("finish", "revoked"), ("lookup_order", "revoked"), ("refund", "rejected"),
                            ("refund", "revoked"), ("send_email", "failed")]  # fmt: skip
    assert main(["critic", "report", "--checkpoints", str(tmp_path / "threads.sqlite"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tools"] == found.model_dump()["tools"]


@pytest.mark.slow
def test_a_run_may_narrow_observe_only_but_never_widen_it(saver, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    app = desk("graph", saver, ledger, JUDGED, observe_only=["lookup_order"])
    with pytest.raises(PivotalError, match="observe_only"):
        app.invoke({"messages": [("user", GOAL)]}, thread("wider"), context={"observe_only": True})
    assert ledger_kinds(ledger) == []
    app.invoke({"messages": [("user", GOAL)]}, thread("narrower"), context={"observe_only": []})
    assert critic_report(saver, ["narrower"]).calls == []  # nothing watched: the critic enforced every verdict


@pytest.mark.parametrize("face", ["graph", "middleware"])
def test_a_misspelt_observed_tool_is_refused_when_built(face, saver, tmp_path):
    with pytest.raises(PivotalError, match=r"observe_only names 'refnd'.*did you mean 'refund'"):
        agent = desk(face, saver, tmp_path / "ledger.jsonl", JUDGED, observe_only=["refnd"])
        agent.invoke({"messages": [("user", GOAL)]}, thread("typo"))  # the middleware sees its tools at a model call
