"""One owner per thread (graphs/lease.py) and no silent restart (pivotal/cli/batch.py), from the
world's side: the support desk's ledgers and the journal count what really happened.

Two `pivotal batch --resume` processes given the same batch (one checkpoint database, one thread
prefix, each its own copy of the results file, as two machines would have) run every task once
between them; a process frozen past its lease is taken over with the run id and idempotency keys
it used, and stops when it wakes; a batch whose checkpoints were emptied refuses to start its
started tasks again from step 0.
"""

import json
import shutil
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from pivotal.testing.cli import cli, finish
from pivotal.testing.journal_env import just_started

PLUGIN = ("--plugin", "pivotal.testing.ledger_env")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def kinds(ledger: Path) -> list[str]:
    return [entry["kind"] for entry in lines(ledger)]


def start_batch(tmp_path: Path, checkpoints: str, model: str) -> Path:
    """An empty batch, so both copies of it begin with the same marker (prefix, checkpoints, model)."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    code, _, err = finish(
        *("batch", str(tasks), "--out", str(tmp_path / "a" / "results.jsonl"), "--checkpoints", checkpoints),
        *("--model", model, "--no-memory", *PLUGIN),
        cwd=tmp_path / "a",
    )
    assert code == 0, err
    return tasks


def copy_batch(tmp_path: Path) -> None:
    """The second machine's copy of the batch: the same results file and marker."""
    (tmp_path / "b").mkdir(exist_ok=True)
    for name in ("results.jsonl", "results.jsonl.batch"):
        shutil.copy(tmp_path / "a" / name, tmp_path / "b" / name)


def resume(tmp_path: Path, machine: str, tasks: Path, env: dict[str, str] | None = None):
    out = tmp_path / machine / "results.jsonl"
    return cli("batch", str(tasks), "--out", str(out), "--resume", cwd=tmp_path / machine, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_two_batch_processes_on_one_database_run_every_task_and_email_once(store, tmp_path, request):
    count = 8
    checkpoints = request.getfixturevalue("postgres") if store == "postgres" else str(tmp_path / "cp.sqlite")
    tasks = start_batch(tmp_path, checkpoints, "sim:latency=0.1")
    ledgers = [tmp_path / f"ledger-{i}.jsonl" for i in range(count)]
    desk = [
        {"env": "support-desk", "params": {"ledger": str(ledger), "order": f"A{i}"}} for i, ledger in enumerate(ledgers)
    ]
    tasks.write_text("".join(json.dumps(task) + "\n" for task in desk))  # no idempotency keys: only the lease
    copy_batch(tmp_path)

    both = [resume(tmp_path, machine, tasks) for machine in ("a", "b")]
    ends = [process.communicate(timeout=300) for process in both]
    assert [process.returncode for process in both] == [0, 0], [err for _, err in ends]

    rows = {machine: lines(tmp_path / machine / "results.jsonl") for machine in ("a", "b")}
    answered = sorted(row["line"] for machine in rows for row in rows[machine])
    assert answered == list(range(1, count + 1))  # every task answered once, by one of them
    assert all(row["status"] == "success" for machine in rows for row in rows[machine])
    for (_, err), machine in zip(ends, ("a", "b"), strict=True):
        assert len(rows[machine]) + err.count(": skipped: ") == count, err  # each ran a task or left it
    assert [kinds(ledger).count("email") for ledger in ledgers] == [1] * count  # every customer e-mailed once
    assert [kinds(ledger).count("refund") for ledger in ledgers] == [1] * count


@pytest.mark.slow
def test_a_frozen_owner_is_taken_over_with_its_run_id_and_keys_and_stops_when_it_wakes(tmp_path):
    lease = {"PIVOTAL_LEASE_S": "1.5"}
    checkpoints = str(tmp_path / "cp.sqlite")
    tasks = start_batch(tmp_path, checkpoints, "sim:latency=0.3")
    ledger = tmp_path / "ledger.jsonl"
    task = {"env": "support-desk-once", "params": {"ledger": str(ledger), "slow_refund": 3}}
    tasks.write_text(json.dumps(task) + "\n")
    first = resume(tmp_path, "a", tasks, lease)
    deadline = time.monotonic() + 120
    while "refund" not in kinds(ledger):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    first.send_signal(signal.SIGSTOP)  # mid-refund, its step not checkpointed: frozen, alive, not renewing
    try:
        copy_batch(tmp_path)
        time.sleep(2.5)  # past its lease
        second = resume(tmp_path, "b", tasks, lease)
        _, err = second.communicate(timeout=300)
    finally:
        first.send_signal(signal.SIGCONT)
    _, first_err = first.communicate(timeout=120)
    assert second.returncode == 0, err
    [row] = lines(tmp_path / "b" / "results.jsonl")
    assert row["status"] == "success", row["reason"]
    [refund] = [entry for entry in lines(ledger) if entry["kind"] == "refund"]
    [repeat] = [entry for entry in lines(ledger) if entry["kind"] == "repeat"]
    assert repeat["of"] == "refund" and repeat["key"] == refund["key"]  # the same key: the payment API refused it
    assert refund["key"].split(":")[0] == row["run_id"]  # the run taken over kept its run id
    assert kinds(ledger).count("email") == 1  # the woken owner did not go on with the run
    [stopped] = lines(tmp_path / "a" / "results.jsonl")
    assert stopped["status"] == "error" and stopped["reason"].startswith("LeaseLost"), first_err


@pytest.mark.slow
def test_a_batch_whose_checkpoints_were_emptied_is_refused_instead_of_restarting_its_tasks(tmp_path):
    count = 6
    tasks, out, journal = tmp_path / "tasks.jsonl", tmp_path / "results.jsonl", tmp_path / "journal.jsonl"
    checkpoints = tmp_path / "cp.sqlite"
    tasks.write_text("".join(json.dumps({"env": "journal-grid", "params": {"seed": s}}) + "\n" for s in range(count)))
    flags = (
        *(str(tasks), "--out", str(out), "--checkpoints", str(checkpoints), "--plugin", "pivotal.testing.journal_env"),
        *("--model", "sim:latency=0.1", "--no-memory", "--concurrency", "2"),
    )
    env = {"JOURNAL": str(journal)}
    first = cli("batch", *flags, cwd=tmp_path, env=env)
    deadline = time.monotonic() + 120
    while not lines(out) or not just_started(journal, out):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    with sqlite3.connect(checkpoints) as db:  # emptied: a valid file that holds nothing
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            db.execute(f"DELETE FROM {table}")
    moves, results = len(lines(journal)), out.read_text()

    code, _, err = finish("batch", str(tasks), "--out", str(out), "--resume", cwd=tmp_path, env=env)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(checkpoints) in err and "started" in err and "step 0" in err
    assert len(lines(journal)) == moves  # no move ran again, from step 0 or anywhere
    assert out.read_text() == results


async def test_a_second_holder_waits_for_the_first_and_a_gone_process_is_taken_over_at_once(tmp_path):
    import asyncio
    import subprocess
    import sys

    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from pivotal.graphs.lease import ThreadBusy, _machine, thread_lease

    order: list[str] = []
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:

        async def hold(name: str, seconds: float) -> None:
            async with thread_lease(saver, "t"):
                order.append(f"{name} in")
                await asyncio.sleep(seconds)
                order.append(f"{name} out")

        await asyncio.gather(hold("first", 0.3), hold("second", 0))
        assert order == ["first in", "first out", "second in", "second out"]

        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # its process id now names no process on this machine
        for owner, taken in ((f"{_machine()}|{gone.pid}|x", True), (f"elsewhere/boot|{gone.pid}|y", False)):
            await saver.conn.execute(
                "UPDATE pivotal_leases SET owner = ?, expires_at = 1e12 WHERE thread_id = 't'", (owner,)
            )
            await saver.conn.commit()
            try:
                async with thread_lease(saver, "t", busy="skip"):
                    pass
            except ThreadBusy as busy:
                assert not taken and "is being run by process" in str(busy)
            else:
                assert taken  # a lease another machine's process holds is only taken once it runs out
