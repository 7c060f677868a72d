"""Postgres checkpoints against the real server at 127.0.0.1:5432: a run paused or killed in one
process goes on in another, from the database alone. Each module run gets a database of its own,
dropped at the end. The effects are counted from the world's side (the ledger, the journal), as
in tests/test_side_effects.py and tests/test_batch.py.
"""

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError, infrastructure_fault
from pivotal.graphs import run_batch
from pivotal.graphs.checkpointer import open_checkpointer
from pivotal.testing.cli import cli, finish
from pivotal.testing.journal_env import just_started

ROOT = Path(__file__).resolve().parents[1]
SERVER = "postgresql://postgres@127.0.0.1:5432"
NOWHERE = "postgresql://postgres:s3cret-Pw@127.0.0.1:1/pivotal"  # nothing listens on port 1


def _admin():
    import psycopg

    return psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=3)


@pytest.fixture(scope="module")
def database() -> str:
    """A fresh database for this module's runs; skipped, in one line, where no server answers."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed: pip install 'pivotal[postgres]'")
    name = f"pivotal_test_{uuid.uuid4().hex[:12]}"
    try:
        with _admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001 — whatever stops us reaching it, the reason is the skip
        pytest.skip(f"no Postgres at 127.0.0.1:5432 ({type(exc).__name__})")
    yield f"{SERVER}/{name}"
    with _admin() as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.slow
def test_a_run_paused_in_one_process_is_approved_from_postgres_in_another_and_refunds_once(database, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    code, out, err = finish(
        *("run", "--env", "support-desk", "--param", f"ledger={ledger}", "--model", "sim", "--no-memory"),
        *("--require-approval-for", "refund", "--plugin", "pivotal.testing.ledger_env", "--json"),
        cwd=tmp_path / "machine-a",
        env={"PIVOTAL_CHECKPOINT_URL": database},  # the variable, where the resume below passes the flag
    )
    assert code == 0, err
    paused = json.loads(out)
    assert paused["status"] == "interrupted" and paused["interrupt"]["action"] == "refund"
    assert lines(ledger) == []

    code, out, err = finish(
        *("resume", paused["thread_id"], "--decision", "approve", "--checkpoints", database, "--json"),
        cwd=tmp_path / "machine-b",
    )
    assert code == 0, err
    done = json.loads(out)
    assert done["status"] == "success", done["reason"]
    assert [entry["kind"] for entry in lines(ledger)].count("refund") == 1
    assert not list(tmp_path.rglob("*.sqlite"))  # neither process kept anything on its own disk


@pytest.mark.slow
def test_a_batch_killed_with_sigkill_resumes_from_postgres_and_finishes_every_task_once(database, tmp_path):
    count = 12
    tasks, results, journal = tmp_path / "tasks.jsonl", tmp_path / "results.jsonl", tmp_path / "journal.jsonl"
    tasks.write_text("".join(json.dumps({"env": "journal-grid", "params": {"seed": s}}) + "\n" for s in range(count)))
    flags = (
        *(str(tasks), "--out", str(results), "--checkpoints", database, "--plugin", "pivotal.testing.journal_env"),
        *("--model", "sim:latency=0.1", "--no-memory", "--concurrency", "4"),  # kills land mid-task
    )
    env = {"JOURNAL": str(journal)}
    first = cli("batch", *flags, cwd=tmp_path / "first", env=env)
    deadline = time.monotonic() + 120
    while len(lines(results)) < 3 or not just_started(journal, results):
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() else "slow"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = {row["line"] for row in lines(results)}
    assert 0 < len(before) < count

    code, out, err = finish("batch", *flags, "--resume", cwd=tmp_path / "second", env=env)
    assert code == 0 and "resumed" in out, err
    rows = lines(results)
    assert sorted(row["line"] for row in rows) == list(range(1, count + 1))  # each task answered once
    assert all(row["status"] == "success" for row in rows), [(r["line"], r["reason"]) for r in rows]
    entries = [e for e in lines(journal) if not e["repeat"]]  # repeats were refused by the idempotency key
    assert max(Counter((e["task"], e["position"]) for e in entries).values()) == 1  # no action ran twice
    pids: dict[str, set[int]] = {}
    for e in entries:
        pids.setdefault(e["task"], set()).add(e["pid"])
    assert any(len(p) == 2 for p in pids.values())  # at least one task went on mid-way in the new process


@pytest.mark.slow
async def test_run_batch_takes_the_applications_own_postgres_saver_and_leaves_it_open(database, tmp_path, monkeypatch):
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from pivotal.testing import journal_env  # noqa: F401 — registers journal-grid

    journal = tmp_path / "journal.jsonl"
    monkeypatch.setenv("JOURNAL", str(journal))
    tasks = [{"env": "journal-grid", "params": {"seed": seed}} for seed in range(3)]
    context = Context(model="sim", memory=False)
    async with AsyncPostgresSaver.from_conn_string(database) as saver:
        await saver.setup()
        first = await run_batch(tasks, context, checkpointer=saver, thread_prefix="app")
        actions = len(lines(journal))
        again = await run_batch(tasks, context, checkpointer=saver, thread_prefix="app")  # read back, not re-run
        saved = await saver.aget_tuple({"configurable": {"thread_id": "app:2"}})
    assert [r.status for r in first] == ["success"] * 3 and saved is not None and actions > 0
    assert [(r.thread_id, r.trajectory_length) for r in again] == [(r.thread_id, r.trajectory_length) for r in first]
    assert len(lines(journal)) == actions  # the finished runs came back from Postgres; no action ran again


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "batch"])
def test_an_unreachable_server_is_exit_2_and_one_line_without_the_password(tmp_path, command):
    (tmp_path / "tasks.jsonl").write_text('{"env": "gridworld"}\n')
    where = ["tasks.jsonl", "--out", "results.jsonl"] if command == "batch" else ["--env", "gridworld"]
    code, out, err = finish(command, *where, "--model", "sim", "--no-memory", "--checkpoints", NOWHERE, cwd=tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "cannot use the Postgres checkpoints at postgresql://postgres:[redacted]@127.0.0.1:1/pivotal" in err
    assert "s3cret" not in err and "Traceback" not in err
    assert not (tmp_path / "results.jsonl").exists()  # refused before anything was written: the same command reruns


async def test_a_missing_driver_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)  # what an install without the extra looks like
    with pytest.raises(PivotalError, match=r"pip install 'pivotal\[postgres\]'"):
        async with open_checkpointer(NOWHERE):
            pass


def test_a_postgres_failure_mid_batch_is_a_storage_fault_that_stops_the_batch():
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    assert "OperationalError" in infrastructure_fault(psycopg.OperationalError("server closed the connection"))


def test_checkpoint_stats_and_prune_refuse_a_postgres_url_in_one_line(tmp_path):
    code, _, err = finish("checkpoints", "stats", "--checkpoints", NOWHERE, cwd=tmp_path)
    assert code == 2 and "read SQLite checkpoint files" in err and len(err.strip().splitlines()) == 1


_OPEN = (
    "import asyncio, sys\n"
    "from graphs.checkpointer import open_checkpointer\n"
    "async def main():\n"
    "    async with open_checkpointer(sys.argv[1]):\n"
    "        pass\n"
    "asyncio.run(main())\n"
)


@pytest.mark.slow
def test_processes_setting_up_a_new_database_together_all_finish():
    """Setup's CREATE INDEX CONCURRENTLY waits for every open transaction, so a second process
    blocked in pg_advisory_lock (a transaction) and the first one waited on each other for ever.
    """
    pytest.importorskip("psycopg", reason="the postgres extra is not installed: pip install 'pivotal[postgres]'")
    name = f"pivotal_setup_{uuid.uuid4().hex[:12]}"
    try:
        with _admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001 — whatever stops us reaching it, the reason is the skip
        pytest.skip(f"no Postgres at 127.0.0.1:5432 ({type(exc).__name__})")
    try:
        openers = [
            subprocess.Popen([sys.executable, "-c", _OPEN, f"{SERVER}/{name}"], cwd=ROOT, stderr=subprocess.PIPE)
            for _ in range(4)
        ]
        codes = [opener.wait(timeout=90) for opener in openers]
        assert codes == [0, 0, 0, 0], [opener.stderr.read() for opener in openers]
    finally:
        for opener in openers:
            opener.kill()
        with _admin() as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
