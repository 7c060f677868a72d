"""Every promise that can be asked over HTTP, against a real `langgraph dev` server driven by
`langgraph-sdk` (docs/promises.md, the `langgraph dev` column).

The server serves the promise desk (pivotal/testing/promise_desk.py) as an application would: its
own module builds `create_pivotal_agent` agents on a real `ChatOpenAI` whose base URL, passed in an
environment variable, is the loopback OpenAI-compatible server this test process runs, so each test
scripts the clerk and the critic. The desk's tools append to a ledger file: refunds are counted
from it, the world's side. One server for the module (it takes seconds to start); each test clears
the ledger and works threads of its own. Row 12 kills a server, so it starts two of its own.
"""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.errors import ConflictError, NotFoundError

from pivotal.cli.studio import QUIET
from pivotal.testing.loopback_provider import Loopback, loopback
from pivotal.testing.promise_desk import clerk_responder, ledger_kinds
from pivotal.testing.servers import free_port, launch, serve

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LANGGRAPH = Path(sys.executable).parent / "langgraph"
GOAL = "Please refund order A1 in full and email the customer."
APPROVE, REJECT = {"type": "approve"}, {"type": "reject", "message": "the customer withdrew the request"}
ROUNDS = 4
"""The served desks' review rounds per proposed call (`max_critique_rounds=3`), as in test_promises."""
ATTEMPTS = 2
SLACK = 4

DESK_APP = '''
"""The application's module: its desk agents on a real OpenAI-compatible client, named in langgraph.json."""
import os
import time
from pathlib import Path

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI

from pivotal import PivotalCritic, create_pivotal_agent
from pivotal.testing.promise_desk import ClerkChatModel, desk_tools

LEDGER = Path(os.environ["DESK_LEDGER"])
HOLD = Path(os.environ["DESK_HOLD"])
SETTINGS = {"memory": False, "max_steps": 8, "max_pivot_retries": 1, "max_critique_rounds": 3}


def chat(url: str) -> ChatOpenAI:
    return ChatOpenAI(model="clerk", base_url=url, api_key="local", max_retries=0, timeout=20)


def tools():
    """The desk's tools; while the HOLD file exists a refund, once made, keeps running."""
    lookup, refund, email = desk_tools(LEDGER, os.environ.get("DESK_NOTE", ""))
    made = refund.func

    def held(order_id: str, amount: float) -> str:
        done = made(order_id, amount)
        deadline = time.monotonic() + 60
        while HOLD.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return done

    refund.func = held
    return [lookup, refund, email]


clerk = chat(os.environ["DESK_LLM_URL"])
desk = create_pivotal_agent(clerk, tools(), irreversible=["refund"], name="http-desk", **SETTINGS)
approving = create_pivotal_agent(clerk, tools(), irreversible=["refund"], require_approval_for=["refund"],
                                 name="http-desk-approving", **SETTINGS)
dead_critic = create_pivotal_agent(clerk, tools(), irreversible=["refund"], name="http-desk-dead",
                                   critic_model=chat(os.environ["DESK_DEAD_URL"]), **SETTINGS)
broken_critic = create_pivotal_agent(clerk, tools(), irreversible=["refund"], name="http-desk-broken",
                                     critic_model=chat(os.environ["DESK_BROKEN_URL"]), **SETTINGS)


def failing_tools():
    """The desk's tools, its lookup failing with the note (a key) in its message."""
    lookup, refund, email = desk_tools(LEDGER)

    def failing(order_id: str) -> str:
        raise RuntimeError(f"order service refused api_key={os.environ['DESK_NOTE']}")

    lookup.func = failing
    return [lookup, refund, email]


failing = create_agent(ClerkChatModel(), failing_tools(),
                       middleware=[PivotalCritic(clerk, irreversible=["refund"], tools=failing_tools())])
'''


@dataclass
class Served:
    url: str
    folder: Path
    llm: Loopback
    canary: str
    log: Path

    @property
    def ledger(self) -> Path:
        return self.folder / "desk.jsonl"

    @property
    def hold(self) -> Path:
        return self.folder / "desk.hold"

    def refunds(self) -> int:
        return ledger_kinds(self.ledger).count("refund")

    def emails(self) -> int:
        return ledger_kinds(self.ledger).count("email")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    """`langgraph dev` in the application's folder, its models on this process's loopback servers."""
    folder = tmp_path_factory.mktemp("desk-server")
    canary = f"sk-proj-Canary{uuid.uuid4().hex}"  # shaped like an API key, so Pivotal knows it for a secret
    port, log = free_port(), folder / "server.log"
    with loopback() as llm, loopback() as broken:
        broken.responder = lambda *_: 1 / 0  # every request answered 500
        env = desk_folder(folder, llm, broken.base_url_openai, canary)
        with serve(dev_command(port), "/ok", port, log, cwd=folder, env=env) as url:
            yield Served(url, folder, llm, canary, log)


def desk_folder(folder: Path, llm: Loopback, broken_url: str, note: str = "") -> dict[str, str]:
    """Writes the application's folder (its module and langgraph.json); the server's environment."""
    (folder / "desk_app.py").write_text(DESK_APP)
    graphs = {
        name: f"./desk_app.py:{name}" for name in ("desk", "approving", "dead_critic", "broken_critic", "failing")
    }
    config = {"dependencies": [str(ROOT), "."], "graphs": graphs, "python_version": "3.11",
              "http": {"app": "pivotal.graphs.served:app"}}  # fmt: skip
    (folder / "langgraph.json").write_text(json.dumps(config))
    return {
        **os.environ,
        **QUIET,
        "DESK_LEDGER": str(folder / "desk.jsonl"),
        "DESK_HOLD": str(folder / "desk.hold"),
        "DESK_NOTE": note,
        "DESK_LLM_URL": llm.base_url_openai,
        "DESK_BROKEN_URL": broken_url,
        "DESK_DEAD_URL": f"http://127.0.0.1:{free_port()}/v1",  # nothing listens: connection refused
        "PIVOTAL_STORE_PATH": str(folder / "lessons"),
    }


def dev_command(port: int) -> list[str]:
    return [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)]


@pytest.fixture
def desk(served: Served) -> Served:
    """The module's server with a fresh ledger and the clerk's default script."""
    served.ledger.unlink(missing_ok=True)
    served.hold.unlink(missing_ok=True)
    served.llm.responder = clerk_responder()
    return served


def ticket(text: str = GOAL) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def assistant(client: Any, graph: str) -> str:
    """The graph's own assistant, the one the server made (a test may add others)."""
    found = await client.assistants.search(graph_id=graph, metadata={"created_by": "system"})
    [own] = found
    return own["assistant_id"]


async def pending(client: Any, thread_id: str) -> list[dict[str, Any]]:
    state = await client.threads.get_state(thread_id)
    return [i["value"] for task in state["tasks"] for i in task["interrupts"]]


def said(final: Any) -> str:
    """What a run told its user: this turn's replies and tool results, and the run's reason and answer."""
    final = final if isinstance(final, dict) else {}
    messages = final.get("messages") or []
    start = max((i for i, m in enumerate(messages) if m.get("type") == "human"), default=0)
    texts = [str(m.get("content")) for m in messages[start:] if m.get("type") in ("ai", "tool")]
    for result in (final, final.get("pivotal_result") or {}):
        texts += [str(result.get("reason") or ""), str(result.get("answer") or "")]
    return "\n".join(texts)


# --- the promises, over HTTP ----------------------------------------------------------------------


async def test_1_over_http_a_resume_resumed_and_answered_again_refunds_once(desk):
    client = get_client(url=desk.url)
    desk_id = await assistant(client, "approving")
    thread = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread, desk_id, input=ticket())
    [asked] = await pending(client, thread)
    assert asked["action"] == "refund" and desk.refunds() == 0
    at_pause = (await client.threads.get_state(thread))["checkpoint"]["checkpoint_id"]
    await client.runs.wait(thread, desk_id, command={"resume": APPROVE})
    assert desk.refunds() == 1
    await client.runs.wait(thread, desk_id, input=None)  # resumed again: nothing left to run
    await client.runs.wait(thread, desk_id, command={"resume": APPROVE})  # the approval sent twice
    await client.runs.wait(thread, desk_id, command={"resume": APPROVE}, checkpoint_id=at_pause)  # from the pause
    assert desk.refunds() == 1 and desk.emails() == 1


async def test_2_over_http_a_fork_from_every_checkpoint_refunds_once(desk):
    """Every checkpoint of a finished thread run again (`checkpoint_id`), then each edited state forked."""
    client = get_client(url=desk.url)
    desk_id = await assistant(client, "desk")
    thread = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread, desk_id, input=ticket())
    assert desk.refunds() == 1 and desk.emails() == 1
    history = await client.threads.get_history(thread, limit=1000)
    assert any(state["next"] == ["executor"] for state in history)  # the refund's own checkpoint among them
    for state in history:
        await client.runs.wait(thread, desk_id, input=None, checkpoint_id=state["checkpoint"]["checkpoint_id"])
        assert desk.refunds() == 1, f"forking at {state['next']} refunded again"
    for state in history:
        if not state["next"] or state["next"] == ["__start__"]:
            continue
        fork = await client.threads.update_state(thread, {}, checkpoint_id=state["checkpoint"]["checkpoint_id"])
        await client.runs.wait(thread, desk_id, input=None, checkpoint_id=fork["checkpoint"]["checkpoint_id"])
        assert desk.refunds() == 1, f"an edited fork at {state['next']} refunded again"
    assert desk.emails() == 1


async def test_3_over_http_the_same_message_sent_twice_refunds_once(desk):
    client = get_client(url=desk.url)
    desk_id = await assistant(client, "desk")
    thread = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread, desk_id, input=ticket())
    await client.runs.wait(thread, desk_id, input=ticket())  # the user pressed send again
    assert desk.refunds() == 1


async def test_4_over_http_the_same_refund_proposed_again_runs_once(desk):
    desk.llm.responder = clerk_responder(forgetful=True)
    client = get_client(url=desk.url)
    thread = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread, await assistant(client, "desk"), input=ticket())
    assert desk.refunds() == 1 and desk.emails() == 1


@pytest.mark.parametrize(
    ("reply", "refunds"),
    [(APPROVE, 1), (REJECT, 0), ({"type": "edit", "args": {"order_id": "A1", "amount": 99.0}}, 0)],
    ids=["approve", "reject", "edit"],
)
async def test_5_over_http_an_approval_answered_by_another_client_is_obeyed(desk, reply, refunds):
    """Paused through one client, answered through another (the sync client, as another process would)."""
    first = get_client(url=desk.url)
    desk_id = await assistant(first, "approving")
    thread = (await first.threads.create())["thread_id"]
    await first.runs.wait(thread, desk_id, input=ticket())
    assert [a["action"] for a in await pending(first, thread)] == ["refund"] and desk.refunds() == 0
    other = get_sync_client(url=desk.url)
    final = await asyncio.to_thread(other.runs.wait, thread, desk_id, command={"resume": reply})
    assert desk.refunds() == refunds, said(final)
    if refunds == 0:  # asked again or ended: never the edited amount run unasked
        assert all(json.loads(line).get("amount") != 99.0 for line in desk.ledger.read_text().splitlines())


async def test_6_over_http_a_critic_that_always_refuses_ends_the_turn_within_its_bound(desk):
    desk.llm.responder = clerk_responder(critic="reject")
    before = len(desk.llm.ok())
    client = get_client(url=desk.url)
    thread = (await client.threads.create())["thread_id"]
    final = await client.runs.wait(thread, await assistant(client, "desk"), input=ticket())
    answered = [r.schema_name for r in desk.llm.ok()[before:]]
    assert answered.count("Verdict") <= ROUNDS * ATTEMPTS, answered
    assert len(answered) <= 2 * ROUNDS * ATTEMPTS + SLACK, answered
    assert desk.refunds() == 0 and final.get("status") not in (None, "success"), said(final)


@pytest.mark.parametrize(("graph", "why"), [("dead_critic", r"refused|connect"), ("broken_critic", r"500")])
async def test_7_over_http_a_dead_critic_runs_no_tool_and_says_why(desk, graph, why):
    client = get_client(url=desk.url)
    thread = (await client.threads.create())["thread_id"]
    final = await client.runs.wait(thread, await assistant(client, graph), input=ticket())
    assert ledger_kinds(desk.ledger) == []
    text = said(final)
    assert re.search(r"critic", text, re.I) and re.search(why, text, re.I), text


@pytest.mark.parametrize("setting", ["irreversible", "require_approval_for"])
def test_8_a_misspelt_safety_name_in_a_served_app_fails_the_check_in_one_line(tmp_path, capsys, monkeypatch, setting):
    """The app's module builds its agent with a misspelt tool: `pivotal studio --check` says so, naming `refund`."""
    from pivotal.cli import main

    app = DESK_APP.replace('irreversible=["refund"], name="http-desk",', f'{setting}=["refnd"], name="http-desk",')
    assert app != DESK_APP
    (tmp_path / "desk_app.py").write_text(app)
    config = {"dependencies": ["."], "graphs": {"desk": f"{tmp_path}/desk_app.py:desk"}}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    for name in ("DESK_LEDGER", "DESK_HOLD", "DESK_LLM_URL", "DESK_DEAD_URL", "DESK_BROKEN_URL"):
        monkeypatch.setenv(name, str(tmp_path / name))  # the module reads them; nothing is called here
    assert main(["studio", "--check", "--config", str(tmp_path / "langgraph.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(r"\brefnd\b.*\brefund\b", err) and len(err.splitlines()) == 1, err


async def test_8_over_http_an_assistant_naming_a_wrong_tool_fails_its_run_in_one_line(desk):
    """An assistant made on the server with `require_approval_for=["refnd"]`: its run fails, naming `refund`."""
    client = get_client(url=desk.url)
    made = await client.assistants.create("desk", context={"require_approval_for": ["refnd"]})
    thread = (await client.threads.create())["thread_id"]
    refused = await client.runs.wait(thread, made["assistant_id"], input=ticket(), raise_error=False)
    message = str(((refused or {}).get("__error__") or {}).get("message"))
    assert re.search(r"\brefund\b", message) and "refnd" in message and len(message.splitlines()) == 1, refused
    assert desk.refunds() == 0


async def test_9_over_http_a_run_context_that_drops_the_approval_is_refused(desk):
    """The approving desk asks a person before each refund; a run's context may not switch that off."""
    client = get_client(url=desk.url)
    thread = (await client.threads.create())["thread_id"]
    refused = await client.runs.wait(thread, await assistant(client, "approving"), input=ticket(),
                                     context={"require_approval_for": []}, raise_error=False)  # fmt: skip
    message = str(((refused or {}).get("__error__") or {}).get("message"))
    assert "loosens this deployment's require_approval_for ['refund']" in message, refused
    assert len(message.splitlines()) == 1 and desk.refunds() == 0


async def test_10_over_http_no_secret_in_any_byte_the_server_keeps(desk):
    """The canary in the goal, in tool arguments (the email quotes the goal), in tool output (the order
    lookup's note) and in a person's reply when resuming: 0 times in the server's files.
    """
    canary = desk.canary
    client = get_client(url=desk.url)
    thread = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread, await assistant(client, "desk"), input=ticket(f"{GOAL} My key is {canary}."))
    assert desk.refunds() == 1 and desk.emails() == 1
    approving = await assistant(client, "approving")
    paused = (await client.threads.create())["thread_id"]
    await client.runs.wait(paused, approving, input=ticket())
    said_no = {"type": "reject", "message": f"not with key {canary}"}
    await client.runs.wait(paused, approving, command={"resume": said_no})
    assert desk.refunds() == 1
    kept = desk.folder / ".langgraph_api"
    _until(lambda: all(_in(kept, t) for t in (thread, paused)), 40)  # the server's periodic flush wrote both
    for path in [*kept.rglob("*"), desk.log]:
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), f"the canary is in {path.name}"


async def test_10_over_http_a_tool_error_quoting_a_key_reaches_no_byte_the_server_keeps(desk):
    """A served `create_agent` + `PivotalCritic` whose lookup raises with the canary in its message: the
    server writes the failed run's exception to its log (twice, with its traceback) and to its
    checkpoints (the `__error__` pending write); neither holds the canary.
    """
    client = get_client(url=desk.url)
    thread = (await client.threads.create())["thread_id"]
    failed = await client.runs.wait(thread, await assistant(client, "failing"), input=ticket(), raise_error=False)
    assert failed["__error__"]["error"] == "RuntimeError" and desk.refunds() == 0
    kept = desk.folder / ".langgraph_api"
    _until(lambda: _in(kept, thread) and b"Background run failed" in desk.log.read_bytes(), 40)
    for path in [*kept.rglob("*"), desk.log]:
        if path.is_file():
            assert desk.canary.encode() not in path.read_bytes(), f"the canary is in {path.name}"


@pytest.mark.parametrize("policy", ["reject", "enqueue", "interrupt", "rollback"])
async def test_11_over_http_a_message_sent_while_a_turn_runs_refunds_once(desk, policy):
    """The first turn's refund is made and still running when a second message comes, sent with the
    server's `multitask_strategy`: whatever the strategy, the refund is made once.
    """
    client = get_client(url=desk.url)
    desk_id = await assistant(client, "desk")
    thread = (await client.threads.create())["thread_id"]
    desk.hold.touch()
    first = await client.runs.create(thread, desk_id, input=ticket())
    await asyncio.to_thread(_until, lambda: desk.refunds() == 1)
    try:
        second = await client.runs.create(thread, desk_id, input=ticket(f"{GOAL} Sent again."),
                                          multitask_strategy=policy)  # fmt: skip
    except ConflictError:
        assert policy == "reject"
        second = None
    else:
        assert policy != "reject"
    await asyncio.sleep(1)
    desk.hold.unlink()
    await client.runs.join(thread, first["run_id"])
    if second is not None:
        await client.runs.join(thread, second["run_id"])
    assert desk.refunds() == 1, ledger_kinds(desk.ledger)
    # and each strategy did what the server says it does with the first run
    try:
        stopped = (await client.runs.get(thread, first["run_id"]))["status"]
    except NotFoundError:
        stopped = "deleted"
    assert stopped == {"interrupt": "interrupted", "rollback": "deleted"}.get(policy, "success"), stopped
    if second is not None:
        assert (await client.runs.get(thread, second["run_id"]))["status"] == "success"


KEPT = (".langgraph_ops.pckl", ".langgraph_checkpoint.1.pckl", ".langgraph_checkpoint.2.pckl", "store.pckl")
"""What `langgraph dev` keeps on disk: runs and threads, checkpoints, their pending writes, the store
(written once something is put in it)."""


def test_12_over_http_a_server_killed_during_the_refund_and_started_again_refunds_once(tmp_path):
    """The server's whole process group killed (SIGKILL) while the refund's tool runs (its ledger line written),
    then a new `langgraph dev` on the same folder: the thread is there, the server itself retries the
    run it left running, and the user resumes the thread and sends the message again: 1 refund.

    The in-memory runtime writes `.langgraph_api/` every 10 s (and at a clean shutdown), so the kill
    comes once a write after the refund began is on disk; a thread younger than that write is lost
    whole (docs/promises.md, row 12).
    """
    with loopback() as llm:
        llm.responder = clerk_responder()
        env = desk_folder(tmp_path, llm, llm.base_url_openai)
        ledger, hold, kept = tmp_path / "desk.jsonl", tmp_path / "desk.hold", tmp_path / ".langgraph_api"
        hold.touch()
        with _dev(tmp_path, env, "first.log") as (url, server):
            client = get_sync_client(url=url)
            desk_id = _system_assistant(client, "desk")
            thread = client.threads.create()["thread_id"]
            run = client.runs.create(thread, desk_id, input=ticket())
            _until(lambda: ledger_kinds(ledger).count("refund") == 1, 60)
            began = time.time()
            _until(lambda: _flushed(kept, began), 40)  # what the server knew during the refund, on disk
            assert client.runs.get(thread, run["run_id"])["status"] == "running" and hold.exists()
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        hold.unlink()
        with _dev(tmp_path, env, "second.log") as (url, _):
            client = get_sync_client(url=url)
            assert client.threads.get(thread)["thread_id"] == thread  # the thread survived the kill
            retried = client.runs.join(thread, run["run_id"])  # the server retries the run it left running
            assert client.runs.get(thread, run["run_id"])["status"] == "success", said(retried)
            assert ledger_kinds(ledger) == ["lookup", "refund", "email"]  # the retried run went on to the email
            desk_id = _system_assistant(client, "desk")
            client.runs.wait(thread, desk_id, input=None)  # the user resumes the thread
            assert ledger_kinds(ledger) == ["lookup", "refund", "email"]
            client.runs.wait(thread, desk_id, input=ticket())  # and sends the message again
            assert ledger_kinds(ledger).count("refund") == 1, ledger_kinds(ledger)


@contextmanager
def _dev(folder: Path, env: dict[str, str], log_name: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`langgraph dev` in its own process group (so one signal reaches every process it started)."""
    port, log = free_port(), folder / log_name
    url = f"http://127.0.0.1:{port}"
    server = launch(dev_command(port), f"{url}/ok", log, cwd=folder, env=env, start_new_session=True)
    try:
        yield url, server
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)


def _system_assistant(client: Any, graph: str) -> str:
    [own] = client.assistants.search(graph_id=graph, metadata={"created_by": "system"})
    return own["assistant_id"]


def _flushed(folder: Path, since: float) -> bool:
    """Every file the server keeps was written after `since`: one whole periodic write came after it."""
    files = [folder / name for name in KEPT]
    return all(f.stat().st_mtime > since if f.exists() else f.name == "store.pckl" for f in files)


def _in(folder: Path, text: str) -> bool:
    return any(text.encode() in p.read_bytes() for p in folder.rglob("*") if p.is_file())


def _until(check: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
