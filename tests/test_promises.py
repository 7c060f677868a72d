"""Every promise on every surface: one test per promise, parametrised over the ways an application
reaches Pivotal (docs/promises.md). A new surface joins by one more `Surface` in `surface`.

The application is a support desk (pivotal/testing/promise_desk.py) whose tools write a ledger
file: side effects are counted from it, the world's side, never from what Pivotal returns. The
graph's actor and every surface's critic are a real `ChatOpenAI` on the loopback OpenAI-compatible
server; a `create_agent` agent's own model is the same clerk as a tool-calling chat model.
Checkpoints are real SQLite files, and real Postgres (127.0.0.1:5432) for forks and double submits.
"""

import asyncio
import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import test_studio
from deepagents import create_deep_agent
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command
from langgraph_sdk import get_client

import pivotal
from pivotal import Context, PivotalCritic, PivotalError, ToolEnvironment, build_graph, create_pivotal_agent
from pivotal.core.environments import register_environment
from pivotal.graphs.busy import DoubleTextRejected, TurnInterrupted, board_for
from pivotal.testing.loopback_provider import loopback
from pivotal.testing.promise_desk import (
    ClerkChatModel,
    DelegatingClerk,
    clerk_responder,
    desk_tools,
    ledger_kinds,
    refunds_held,
)
from pivotal.testing.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
GOAL = "Please refund order A1 in full and email the customer."
APPROVE, REJECT = {"type": "approve"}, {"type": "reject", "message": "the customer withdrew the request"}
SETTINGS = {"memory": False, "max_steps": 8, "max_pivot_retries": 1, "max_critique_rounds": 3}
"""Every surface's deployment: four review rounds per proposed call, one retry of a failed attempt."""
ROUNDS = SETTINGS["max_critique_rounds"] + 1
SLACK = 4
"""Model calls a turn may make beyond its review rounds (a reflection, a last word)."""
STALL = 100
"""Graph steps after which a turn that does not stop by itself fails (GraphRecursionError) instead of
running on to LangGraph's default ceiling of 10,000."""


# --- the world and the models -----------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    """One loopback provider for the module; each test sets its responder."""
    with loopback() as running:
        yield running


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


def count(ledger: Path, kind: str) -> int:
    return ledger_kinds(ledger).count(kind)


def chat(url: str) -> ChatOpenAI:
    return ChatOpenAI(model="clerk", base_url=url, api_key="local", max_retries=0)


def said(final: dict[str, Any]) -> str:
    """What the turn told its user: this turn's tool results and replies, and the run's reason."""
    messages = final.get("messages") or []
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
    texts = [str(m.content) for m in messages[start:] if isinstance(m, AIMessage | ToolMessage)]
    for result in (final, final.get("pivotal_result") or {}):
        texts += [str(result.get("reason") or ""), str(result.get("answer") or "")]
    return "\n".join(texts)


# --- the surfaces -------------------------------------------------------------------------------


@dataclass
class Surface:
    """One way an application reaches Pivotal. `build(checkpointer, critic=..., **settings)` returns
    what the app invokes; `ask(text)` is the input that submits one message.
    """

    name: str
    build: Callable[..., Any]
    """`declare_tools=True`: the app names its tools to every safety setting where that is optional, so
    the names are checked when built (the graph and `create_pivotal_agent` always have them)."""
    ask: Callable[[str], dict[str, Any]]
    app_compiles: bool = False
    """The app compiles the graph that holds its checkpointer, so it wraps it in `pivotal.redacting`."""
    clerk: ClerkChatModel | None = None
    """The agent's own model, where it is not Pivotal's actor on the loopback server."""


SURFACES = ["graph", "pivotal_agent", "middleware", "deep_agent", "parent"]


@pytest.fixture(params=SURFACES)
def surface(request, server, ledger) -> Surface:
    return make_surface(request.param, server.base_url_openai, ledger)


def make_surface(name: str, url: str, ledger: Path) -> Surface:
    """The surface `name` over the loopback server at `url`, its tools writing `ledger` (a module-level
    function, so a test's subprocess builds the same app).
    """
    actor = chat(url)

    def pivotal_agent(checkpointer=None, *, critic=None, irreversible=("refund",), note="", declare_tools=False,
                      **settings):  # fmt: skip
        return create_pivotal_agent(
            actor,
            desk_tools(ledger, note),
            irreversible=list(irreversible),
            critic_model=critic or actor,
            checkpointer=checkpointer,
            **{**SETTINGS, **settings},
        )

    def messages(text: str) -> dict[str, Any]:
        return {"messages": [HumanMessage(text)]}

    if name == "graph":

        def graph(checkpointer=None, *, critic=None, irreversible=("refund",), note="", declare_tools=False,
                  **settings):  # fmt: skip
            tools = desk_tools(ledger, note)

            def desk() -> ToolEnvironment:
                return ToolEnvironment(tools, irreversible=list(irreversible))

            desk()  # the app's tools are checked when the app builds its graph
            register_environment("promise-desk", desk)
            context = Context(model=actor, critic_model=critic or actor, default_env="promise-desk",
                              **{**SETTINGS, **settings})  # fmt: skip
            return build_graph(checkpointer, context=context)

        return Surface("graph", graph, lambda text: {"task": {"env": "promise-desk", "goal": text}})
    if name == "pivotal_agent":
        return Surface("pivotal_agent", pivotal_agent, messages)
    if name == "middleware":
        clerk = ClerkChatModel()

        def middleware(checkpointer=None, *, critic=None, note="", declare_tools=False, **settings):
            tools = desk_tools(ledger, note)
            settings = {"irreversible": ["refund"], **SETTINGS, **settings}
            settings.pop("memory")  # the critic alone: PivotalMemory is the lessons' middleware
            if declare_tools:  # the tools named when built, so the safety names are checked then
                settings["tools"] = tools
            guard = PivotalCritic(critic or actor, **settings)
            return create_agent(clerk, tools, middleware=[guard], checkpointer=checkpointer)

        return Surface("middleware", middleware, messages, app_compiles=True, clerk=clerk)
    if name == "deep_agent":
        delegating = DelegatingClerk()

        def deep_agent(checkpointer=None, *, critic=None, note="", declare_tools=False, **settings):
            """The critic on the main agent only: the ticket goes to Deep Agents' own general-purpose
            sub-agent (`task`), which Pivotal's critic reaches through the run (middleware/nested.py).
            """
            tools = desk_tools(ledger, note)
            settings = {"irreversible": ["refund"], **SETTINGS, **settings}
            settings.pop("memory")
            if declare_tools:
                settings["tools"] = tools
            guard = PivotalCritic(critic or actor, **settings)
            return create_deep_agent(model=delegating, tools=tools, middleware=[guard], checkpointer=checkpointer)

        return Surface("deep_agent", deep_agent, messages, app_compiles=True, clerk=delegating)

    class Desk(MessagesState):
        task: str
        status: str
        pivotal_result: dict

    def parent(checkpointer=None, **settings):
        app = StateGraph(Desk)
        app.add_node("agent", pivotal_agent(**settings))
        app.add_edge(START, "agent")
        return app.compile(checkpointer=checkpointer)

    return Surface(
        "parent", parent, lambda text: {**messages(text), "task": "triage", "status": "open"}, app_compiles=True
    )


# --- the checkpointers --------------------------------------------------------------------------


@contextmanager
def saver(kind: str, folder: Path, request: pytest.FixtureRequest | str | None = None) -> Iterator[Any]:
    """A real checkpointer: a SQLite file in `folder`, or the module's Postgres database (`request`:
    the test's, or the database's address).
    """
    if kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        address = request if isinstance(request, str) else request.getfixturevalue("postgres")
        with PostgresSaver.from_conn_string(address) as checkpointer:
            checkpointer.setup()
            yield checkpointer
        return
    connection = sqlite3.connect(str(folder / "checkpoints.sqlite"), check_same_thread=False)
    try:
        yield SqliteSaver(connection)
    finally:
        connection.close()


def thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"ticket-{uuid.uuid4().hex[:8]}"}, "recursion_limit": STALL}


# --- the promises -------------------------------------------------------------------------------


def test_1_a_resume_after_an_interrupt_and_its_retries_refund_once(surface, server, ledger, tmp_path):
    server.responder = clerk_responder()
    config = thread()
    with saver("sqlite", tmp_path) as checkpointer:
        app = surface.build(checkpointer, require_approval_for=["refund"])
        paused = app.invoke(surface.ask(GOAL), config)
        assert paused.get("__interrupt__") and count(ledger, "refund") == 0
        at_pause = app.get_state(config).config
        app.invoke(Command(resume=APPROVE), config)
        assert count(ledger, "refund") == 1
        app.invoke(None, config)  # resumed again: the finished turn has nothing left to run
        again = {**at_pause, "recursion_limit": STALL}
        app.invoke(Command(resume=APPROVE), again)  # the approval sent again, as a client that timed out would
    assert count(ledger, "refund") == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_2_a_fork_from_every_checkpoint_of_a_finished_thread_refunds_once(surface, server, ledger, tmp_path, kind,
                                                                          request):  # fmt: skip
    server.responder = clerk_responder()
    config = thread()
    with saver(kind, tmp_path, request) as checkpointer:
        app = surface.build(checkpointer)
        app.invoke(surface.ask(GOAL), config)
        assert count(ledger, "refund") == 1 and count(ledger, "email") == 1
        history = list(app.get_state_history(config))
        assert any(snap.next for snap in history)  # the checkpoints before each node, the refund's included
        for snap in history:
            app.invoke(None, {**snap.config, "recursion_limit": STALL})
            assert count(ledger, "refund") == 1, f"forking at {snap.next} refunded again"
    assert count(ledger, "email") == 1


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_3_the_same_message_submitted_twice_refunds_once(surface, server, ledger, tmp_path, kind, request):
    server.responder = clerk_responder()
    config = thread()
    with saver(kind, tmp_path, request) as checkpointer:
        app = surface.build(checkpointer)
        app.invoke(surface.ask(GOAL), config)
        app.invoke(surface.ask(GOAL), config)  # the user pressed send twice
    assert count(ledger, "refund") == 1


def test_4_the_same_refund_proposed_again_later_runs_once(surface, server, ledger, tmp_path):
    server.responder = clerk_responder(forgetful=True)
    if surface.clerk is not None:
        surface.clerk.forgetful = True
    with saver("sqlite", tmp_path) as checkpointer:
        surface.build(checkpointer).invoke(surface.ask(GOAL), thread())
    assert count(ledger, "refund") == 1 and count(ledger, "email") == 1


@pytest.mark.parametrize(("reply", "refunds"), [(APPROVE, 1), (REJECT, 0)], ids=["approve", "reject"])
def test_5_an_approval_answered_by_another_instance_is_obeyed(surface, server, ledger, tmp_path, reply, refunds):
    server.responder = clerk_responder()
    config = thread()
    with saver("sqlite", tmp_path) as checkpointer:
        paused = surface.build(checkpointer, require_approval_for=["refund"]).invoke(surface.ask(GOAL), config)
    assert paused.get("__interrupt__") and count(ledger, "refund") == 0
    with saver("sqlite", tmp_path) as checkpointer:  # another process: its own connection, its own graph
        surface.build(checkpointer, require_approval_for=["refund"]).invoke(Command(resume=reply), config)
    assert count(ledger, "refund") == refunds


def test_6_a_critic_that_always_refuses_ends_the_turn_within_its_bound(surface, server, ledger, tmp_path):
    server.responder = clerk_responder(critic="reject")
    before = len(server.ok())
    with saver("sqlite", tmp_path) as checkpointer:
        surface.build(checkpointer).invoke(surface.ask(GOAL), thread())
    answered = [r.schema_name for r in server.ok()[before:]]
    agent_calls = len(surface.clerk.calls) if surface.clerk else 0
    attempts = 1 + SETTINGS["max_pivot_retries"]
    assert answered.count("Verdict") <= ROUNDS * attempts
    assert len(answered) + agent_calls <= 2 * ROUNDS * attempts + SLACK
    assert count(ledger, "refund") == 0


@pytest.mark.parametrize("cause", ["refused", "http500"])
def test_7_a_dead_critic_runs_no_tool_and_the_refusal_says_why(surface, server, ledger, tmp_path, cause):
    server.responder = clerk_responder()
    with loopback() as broken, saver("sqlite", tmp_path) as checkpointer:
        broken.responder = lambda *_: 1 / 0  # every request answered 500
        url = broken.base_url_openai if cause == "http500" else f"http://127.0.0.1:{free_port()}/v1"
        final = surface.build(checkpointer, critic=chat(url)).invoke(surface.ask(GOAL), thread())
    assert ledger_kinds(ledger) == []
    text = said(final)
    assert re.search(r"critic", text, re.I), text
    assert re.search(r"refused|connect|500|unreachable|unavailable|server error", text, re.I), text


@pytest.mark.parametrize("setting", ["irreversible", "require_approval_for"])
def test_8_a_misspelt_safety_name_fails_at_construction_naming_the_tool(surface, setting):
    with pytest.raises(PivotalError) as refused:
        surface.build(declare_tools=True, **{setting: ["refnd"]})
    assert re.search(r"\brefund\b", str(refused.value)) and "\n" not in str(refused.value)


def test_9_a_client_context_that_loosens_safety_is_refused(surface, server, ledger, tmp_path):
    server.responder = clerk_responder()
    with saver("sqlite", tmp_path) as checkpointer:
        app = surface.build(checkpointer, require_approval_for=["refund"])
        try:
            ran = app.invoke(surface.ask(GOAL), thread(), context={"require_approval_for": []})
        except PivotalError as refusal:
            ran = {"refused": str(refusal)}
    assert count(ledger, "refund") == 0
    assert "require_approval_for" in ran.get("refused", ""), f"not refused: {said(ran)[:200]}"


def test_9_a_client_context_with_a_misspelt_approval_is_refused_naming_the_tool(surface, server, ledger, tmp_path):
    """A run's tightening that names no tool (`refnd`) would tighten nothing: the real refund would run
    unasked. Refused in one line naming `refund`, before any tool runs, on every surface.
    """
    server.responder = clerk_responder()
    with saver("sqlite", tmp_path) as checkpointer:
        app = surface.build(checkpointer)
        with pytest.raises(PivotalError) as refused:
            app.invoke(surface.ask(GOAL), thread(), context={"require_approval_for": ["refnd"]})
    assert count(ledger, "refund") == 0 and count(ledger, "lookup") == 0
    assert re.search(r"\brefnd\b.*\brefund\b", str(refused.value)) and "\n" not in str(refused.value), refused.value


def test_10_a_canary_secret_never_reaches_the_checkpoint_file(surface, server, ledger, tmp_path):
    canary = f"sk-proj-Canary{uuid.uuid4().hex}"  # shaped like an API key, so Pivotal knows it for a secret
    server.responder = clerk_responder()
    with saver("sqlite", tmp_path) as checkpointer:
        app = surface.build(pivotal.redacting(checkpointer) if surface.app_compiles else checkpointer, note=canary)
        app.invoke(surface.ask(f"{GOAL} My account key is {canary}."), thread())  # in the goal, tool args, tool output
    assert count(ledger, "email") == 1  # the turn went through (the lookup returned the canary)
    raw = b"".join(path.read_bytes() for path in tmp_path.glob("checkpoints.sqlite*"))
    assert raw.count(canary.encode()) == 0


@pytest.mark.parametrize("policy", ["reject", "enqueue", "interrupt", "rollback"])
def test_11_a_message_sent_while_a_turn_runs_refunds_once(surface, server, ledger, tmp_path, policy):
    """Sent while the first turn's refund is still running (two request handlers, one thread): the
    second follows `double_text`, and the refund is made once whatever the policy.
    """
    server.responder = clerk_responder()
    config, done = thread(), {}
    with saver("sqlite", tmp_path) as checkpointer, refunds_held(ledger) as gate:
        app = surface.build(checkpointer, double_text=policy)

        def send(name: str, text: str) -> None:
            try:
                done[name] = app.invoke(surface.ask(text), config)
            except PivotalError as refused:
                done[name] = refused

        first = threading.Thread(target=send, args=("first", GOAL))
        first.start()
        _until(lambda: count(ledger, "refund") == 1 or not first.is_alive())
        second = threading.Thread(target=send, args=("second", f"{GOAL} Sent again."))
        second.start()
        board = asyncio.run(board_for(checkpointer))
        thread_id = config["configurable"]["thread_id"]
        if policy == "reject":
            second.join(30)
        elif policy == "enqueue":
            second.join(0.3)  # waiting leaves no mark on the board
        else:
            _until(lambda: asyncio.run(board.read(thread_id)).stop == policy)
        gate.set()
        first.join(60)
        second.join(60)
    assert count(ledger, "refund") == 1
    if policy == "reject":
        assert isinstance(done["second"], DoubleTextRejected), done["second"]
    elif policy == "enqueue":
        assert not isinstance(done["first"], Exception) and not isinstance(done["second"], Exception), done
    else:
        assert isinstance(done["first"], TurnInterrupted) and not isinstance(done["second"], Exception), done


KILLED = """
import json, sys
from pathlib import Path
sys.path.insert(0, "tests")
import test_promises as promises
from pivotal.testing.promise_desk import refunds_held

given = json.loads(sys.argv[1])
ledger = Path(given["ledger"])
surface = promises.make_surface(given["surface"], given["url"], ledger)
with promises.saver(given["kind"], Path(given["folder"]), given["postgres"]) as checkpointer, refunds_held(ledger):
    app = surface.build(promises.pivotal.redacting(checkpointer) if surface.app_compiles else checkpointer)
    app.invoke(surface.ask(promises.GOAL), given["config"])  # the refund holds until this process is killed
"""
"""The desk in a process of its own, run until its refund is written (then held, running)."""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_12_a_process_killed_during_the_refund_and_resumed_in_another_refunds_once(surface, server, ledger, tmp_path,
                                                                                  kind, request):  # fmt: skip
    """Kill -9 while the refund's tool runs, just after its ledger line: the thread resumed by another
    process goes on from its last checkpoint, where the refund had not ended, and does not run it again.
    """
    server.responder = clerk_responder()
    config = thread()
    address = request.getfixturevalue("postgres") if kind == "postgres" else None
    given = {"surface": surface.name, "url": server.base_url_openai, "ledger": str(ledger), "kind": kind,
             "folder": str(tmp_path), "postgres": address, "config": config}  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", KILLED, json.dumps(given)], cwd=ROOT, stderr=subprocess.PIPE)
    try:
        _until(lambda: count(ledger, "refund") == 1 or child.poll() is not None, 120)
        assert child.poll() is None, child.communicate()[1][-2000:]
    finally:
        child.send_signal(signal.SIGKILL)  # the refund was made; its step never ended
        child.communicate()
    with saver(kind, tmp_path, address) as checkpointer:
        app = surface.build(pivotal.redacting(checkpointer) if surface.app_compiles else checkpointer)
        app.invoke(None, config)  # resumed here: a process of its own, not the one that was killed
    assert count(ledger, "refund") == 1


def _until(check: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- `langgraph dev` over HTTP: one test, on tests/test_studio.py's server ------------------------


studio = test_studio.studio
"""Its module-scoped `langgraph dev` server and the app it serves, started once for this module."""


@pytest.mark.slow
async def test_9_over_http_a_client_context_that_loosens_safety_is_refused(studio):
    """The served desk agent asks a person before each refund; a run's context may not switch that off."""
    url, folder, _ = studio
    client = get_client(url=url)
    [assistant] = await client.assistants.search(graph_id="desk")
    thread = await client.threads.create()
    refused = await client.runs.wait(thread["thread_id"], assistant["assistant_id"],
                                     input={"messages": [{"role": "user", "content": "refund order A1"}]},
                                     context={"require_approval_for": []}, raise_error=False)  # fmt: skip
    ledger = folder / "desk.jsonl"
    assert not ledger.exists() or '"refund"' not in ledger.read_text(), refused.get("reason")
    assert "require_approval_for" in str(((refused or {}).get("__error__") or {}).get("message")), refused
