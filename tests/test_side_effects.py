"""Side effects happen once: retries, resumes, forks and restarts never run an executed tool again.

Every test counts from the world's side: the support desk's ledger file holds one line per
refund, reversal and email that really happened (pivotal/testing/ledger_env.py). In the tests
across processes the application registers the support desk from its own module, `support_app`,
loaded with `--plugin` as a user's app would be.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pivotal.core.context import Context
from pivotal.graphs import arun
from pivotal.testing import ledger_env  # noqa: F401 — registers the support-desk environments

ROOT = Path(__file__).resolve().parents[1]
SIM = dict(model="sim", memory=False, max_steps=6)


def task(tmp_path: Path, env: str = "support-desk", **params) -> dict:
    return {"env": env, "params": {"ledger": str(tmp_path / "ledger.jsonl"), **params}}


def ledger(tmp_path: Path, kind: str | None = None) -> list[dict]:
    path = tmp_path / "ledger.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [row for row in rows if kind is None or row["kind"] == kind]


def decided(result, action: str) -> int:
    """Approved decisions to run `action` that the trajectory holds, one per executed step."""
    return sum(step["action"] == action for step in result.trajectory)


@pytest.mark.parametrize("retry", ["pivotal", "full"])
async def test_a_retry_goes_forward_and_never_refunds_again(tmp_path, retry):
    result = await arun(task(tmp_path, mistake="email"), Context(retry=retry, **SIM), checkpoint_path=":memory:")
    assert result.status == "success" and result.retries["count"] == 1
    assert len(ledger(tmp_path, "refund")) == 1 == decided(result, "refund")
    assert len(ledger(tmp_path, "email")) == 2 == decided(result, "send_email")  # the bounced one, then the retry
    assert result.replayed == 0
    reflection = result.reflections[0]
    assert reflection["rewind"] == "forward"  # abandoned steps stay done, and the actor is told so
    assert reflection["not_undone"] == ([2] if retry == "pivotal" else [0, 1, 2])


async def test_a_pivot_compensates_the_abandoned_refund_through_the_critic(tmp_path):
    result = await arun(
        task(tmp_path, "support-desk-saga", mistake="refund"), Context(**SIM), checkpoint_path=":memory:"
    )
    assert result.status == "success"
    refunds, reversals = ledger(tmp_path, "refund"), ledger(tmp_path, "reversal")
    assert len(refunds) == 2 == decided(result, "refund") and len(reversals) == 1
    assert sum(e["amount"] for e in refunds + reversals) == 20.0  # the ledger nets to one refund
    undo = [s for s in result.trajectory if s.get("compensates") is not None]
    assert [(s["action"], s["compensates"]) for s in undo] == [("reverse_refund", 1)]
    assert undo[0]["verdicts"][-1]["source"] == "critic"  # reviewed like any action
    assert result.reflections[0]["rewind"] == "compensate"


async def test_a_full_retry_compensates_every_abandoned_side_effect_newest_first(tmp_path):
    result = await arun(
        task(tmp_path, "support-desk-saga", mistake="email"), Context(retry="full", **SIM), checkpoint_path=":memory:"
    )
    assert result.status == "success"
    refunds, reversals = ledger(tmp_path, "refund"), ledger(tmp_path, "reversal")
    assert len(refunds) == decided(result, "refund") == 2 and len(reversals) == 1
    assert sum(e["amount"] for e in refunds + reversals) == 20.0


# --- across processes -----------------------------------------------------------------------


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """The application's folder, holding the module that registers its environment."""
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "support_app.py").write_text("from pivotal.testing import ledger_env  # registers support-desk\n")
    return folder


def cli(*args: str, app: Path | None = None, **popen) -> subprocess.Popen:
    """`pivotal ...` in a new process, as a user would run it, with the app's folder importable when given."""
    env = {**os.environ, "PYTHONPATH": str(app)} if app else dict(os.environ)
    return subprocess.Popen(
        [sys.executable, "-m", "pivotal.cli", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def finish(*args: str, **kwargs) -> tuple[int, str, str]:
    process = cli(*args, **kwargs)
    out, err = process.communicate(timeout=180)
    return process.returncode, out, err


def paused_run(tmp_path: Path, app: Path, *approvals: str) -> dict:
    flags = [flag for action in approvals for flag in ("--require-approval-for", action)]
    code, out, err = finish(
        "run",
        "--env",
        "support-desk",
        "--param",
        f"ledger={tmp_path / 'ledger.jsonl'}",
        "--model",
        "sim",
        "--no-memory",
        "--checkpoints",
        str(tmp_path / "cp.sqlite"),
        "--plugin",
        "support_app",
        "--json",
        *flags,
        app=app,
    )
    assert code == 0, err
    return json.loads(out)


def resume(tmp_path: Path, thread: str, *flags: str, app: Path | None = None) -> tuple[int, str, str]:
    return finish(
        "resume",
        thread,
        "--decision",
        "approve",
        "--checkpoints",
        str(tmp_path / "cp.sqlite"),
        "--json",
        *flags,
        app=app,
    )


@pytest.mark.slow
def test_approvals_resumed_in_other_processes_refund_once_and_keep_the_run_settings(tmp_path, app):
    paused = paused_run(tmp_path, app, "refund", "send_email")
    assert paused["status"] == "interrupted" and paused["interrupt"]["action"] == "refund"
    assert ledger(tmp_path) == []
    # no --plugin, no --model, no --require-approval-for: the thread kept them
    code, out, err = resume(tmp_path, paused["thread_id"], app=app)
    assert code == 0, err
    after_refund = json.loads(out)
    assert after_refund["status"] == "interrupted" and after_refund["interrupt"]["action"] == "send_email"
    code, out, err = resume(tmp_path, paused["thread_id"], app=app)
    assert code == 0, err
    done = json.loads(out)
    assert done["status"] == "success", err
    assert len(ledger(tmp_path, "refund")) == 1 == decided_row(done, "refund")
    assert done["replayed"] == 0


def decided_row(row: dict, action: str) -> int:
    return sum(step["action"] == action for step in row["trajectory"])


@pytest.mark.slow
def test_a_failed_resume_leaves_the_thread_waiting(tmp_path, app):
    paused = paused_run(tmp_path, app, "send_email")
    assert paused["interrupt"]["action"] == "send_email" and len(ledger(tmp_path, "refund")) == 1
    code, _, err = resume(tmp_path, paused["thread_id"])  # run from elsewhere: the app's module is not importable
    assert code == 2 and "cannot import plugin 'support_app'" in err and len(err.strip().splitlines()) == 1
    code, _, err = resume(tmp_path, paused["thread_id"], "--model", "sim:error=0.5", app=app)
    assert code == 2 and "--model 'sim:error=0.5' contradicts this run's saved model 'sim'" in err
    code, out, err = resume(tmp_path, paused["thread_id"], app=app)  # still waiting: the approval was not used up
    assert code == 0 and json.loads(out)["status"] == "success", err
    assert len(ledger(tmp_path, "refund")) == 1 and len(ledger(tmp_path, "email")) == 1


@pytest.mark.slow
def test_a_studio_fork_in_another_process_restores_the_tools_without_running_them(tmp_path):
    path = str(tmp_path / "cp.sqlite")
    result = asyncio.run(arun(task(tmp_path), Context(**SIM), checkpoint_path=path))
    assert result.status == "success" and [s["action"] for s in result.trajectory] == [
        "lookup_order",
        "refund",
        "send_email",
    ]
    fork_at = result.trajectory[2]["checkpoint_id"]  # just before the email: re-decide it with an edited text
    script = f"""
import asyncio, json
from pivotal.testing import ledger_env
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pivotal.graphs import build_graph
from pivotal.core.context import Context

async def main():
    async with AsyncSqliteSaver.from_conn_string({path!r}) as saver:
        graph = build_graph(checkpointer=saver)
        config = {{"configurable": {{"thread_id": {result.thread_id!r}, "checkpoint_ns": "",
                                   "checkpoint_id": {fork_at!r}}}}}
        chosen = (await graph.aget_state(config)).values["chosen"]
        chosen["arguments"]["text"] = "Edited in Studio: your refund is on its way."
        fork = await graph.aupdate_state(config, {{"chosen": chosen}}, as_node="critic")
        final = await graph.ainvoke(None, fork, context=Context(model="sim", memory=False, max_steps=6))
        print(json.dumps({{"status": final["status"], "counters": final["counters"],
                          "actions": [s["action"] for s in final["trajectory"]]}}))

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    forked = json.loads(done.stdout.strip().splitlines()[-1])
    assert forked["status"] == "success" and forked["actions"] == ["lookup_order", "refund", "send_email"]
    assert forked["counters"].get("replayed", 0) == 0
    assert len(ledger(tmp_path, "refund")) == 1  # the refund before the fork point never ran again
    assert [e["text"] for e in ledger(tmp_path, "email")][-1].startswith("Edited in Studio")


def batch(tmp_path: Path, *flags: str) -> subprocess.Popen:
    return cli(
        "batch",
        str(tmp_path / "tasks.jsonl"),
        "--out",
        str(tmp_path / "results.jsonl"),
        "--checkpoints",
        str(tmp_path / "cp.sqlite"),
        *flags,
    )


def kill_during_the_refund(tmp_path: Path, env: str) -> None:
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task(tmp_path, env, slow_refund=3)) + "\n")
    first = batch(tmp_path, "--model", "sim", "--no-memory", "--plugin", "pivotal.testing.ledger_env")
    deadline = time.monotonic() + 120
    while not ledger(tmp_path, "refund"):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)  # the refund happened; its step's checkpoint was never written
    first.wait()


def results(tmp_path: Path) -> list[dict]:
    path = tmp_path / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_kill_9_during_a_refund_then_resume_refunds_once_with_an_idempotent_tool(tmp_path):
    kill_during_the_refund(tmp_path, "support-desk-once")
    process = batch(tmp_path, "--resume", "--model", "local")  # contradicts the saved model: refused, nothing touched
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2 and "--model 'local' contradicts this run's saved model 'sim'" in err
    process = batch(tmp_path, "--resume")  # no flags: the batch's own model, store and plugin
    out, err = process.communicate(timeout=120)
    [row] = results(tmp_path)
    assert row["status"] == "success", err
    assert len(ledger(tmp_path, "refund")) == 1 == decided_row(row, "refund")
    assert [e["of"] for e in ledger(tmp_path, "repeat")] == ["refund"]  # the step did run again, and acted no more
    assert row["at_least_once"] == []


@pytest.mark.slow
def test_kill_9_during_a_refund_without_idempotency_refunds_at_most_once(tmp_path):
    """The executor notes an irreversible call beside its checkpoint before the tool runs: the resumed
    run takes the refund in flight as run (it may have acted) and never runs it again.
    """
    kill_during_the_refund(tmp_path, "support-desk")
    _, err = batch(tmp_path, "--resume").communicate(timeout=120)
    [row] = results(tmp_path)
    assert len(ledger(tmp_path, "refund")) == 1, err  # the refund in flight at the crash did not run again
    assert row["at_least_once"] == []  # nothing of this run may have run twice
    assert len(ledger(tmp_path, "email")) == decided_row(row, "send_email")  # no other step ran again
