"""Faults a batch meets in ordinary operation: each stays with its task, or stops the batch cleanly
when it is the storage every task shares; nothing is lost, nothing runs twice.
"""

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from pivotal.core.context import Context
from pivotal.graphs import arun, run_batch
from pivotal.testing.faulty_env import faulty_task as vault  # registers faulty-vault
from pivotal.testing.loopback_provider import loopback

ROOT = Path(__file__).resolve().parents[1]


async def test_a_hung_step_times_out_and_the_other_tasks_do_not_wait(tmp_path):
    """Eight hung tools once held every shared worker thread; now each holds one of the environments' own."""
    context = Context(model="sim", memory=False, step_timeout=1.0, max_pivot_retries=0)
    tasks = [vault("hang", seconds=20)] * 8 + [vault()] * 6
    started = time.perf_counter()
    results = await run_batch(tasks, context, concurrency=14, checkpoint_path=str(tmp_path / "c.sqlite"))
    wall = time.perf_counter() - started
    hung, healthy = results[:8], results[8:]
    assert all(r.status == "error" and "did not finish within 1 s" in r.error for r in hung)
    assert all(r.status == "success" for r in healthy)
    assert wall < 10, wall


@pytest.mark.parametrize("fault", ["exit", "interrupt"])
async def test_system_exit_or_keyboard_interrupt_from_a_tool_is_that_tasks_error(tmp_path, fault):
    context = Context(model="sim", memory=False, max_pivot_retries=0)
    tasks = [vault(), vault(fault), vault()]
    results = await run_batch(tasks, context, concurrency=3, checkpoint_path=str(tmp_path / "c.sqlite"))
    assert [r.status for r in results] == ["success", "error", "success"]
    assert ("SystemExit: 3" if fault == "exit" else "KeyboardInterrupt") in results[1].error


async def test_a_store_that_cannot_take_the_batchs_counts_at_its_end_stops_it_as_a_storage_fault(tmp_path, monkeypatch):
    """The counts a batch leaves in the store folder's journal go to Chroma at its end: failing
    there is the batch's storage fault (the CLI's exit 2), not a line at exit after it reported done.
    """
    import errno

    from pivotal.core.errors import InfrastructureFault
    from pivotal.memory.policy.journal import Journal
    from pivotal.memory.policy.registry import close_stores
    from pivotal.memory.storage.chroma import JOURNAL
    from pivotal.memory.storage.ledger_file import LedgerFile

    store = tmp_path / "store"
    context = Context(model="sim", memory=True, store_path=str(store), max_pivot_retries=0)
    ran = await run_batch([vault()], context, checkpoint_path=str(tmp_path / "c.sqlite"))  # a stored lesson
    assert ran[0].status == "success"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(LedgerFile, "append", full)
    with pytest.raises(InfrastructureFault, match=r"storage failed \(No space left on device\); the batch stopped"):
        await run_batch([vault()], context, checkpoint_path=str(tmp_path / "c2.sqlite"))
    assert Journal(str(store / JOURNAL)).read()[1]  # the run's records wait in the journal, not lost
    monkeypatch.undo()
    close_stores()


async def test_a_provider_that_trickles_its_reply_is_cut_off_at_the_call_deadline(tmp_path):
    """The SDK's timeout is per read: one byte every 0.2 s never trips it, the deadline does."""
    with loopback() as server:
        server.faults = [("trickle", 0.2)] * 50
        model = ChatOpenAI(model="m", base_url=server.base_url_openai, api_key="k", timeout=2, max_retries=0)
        context = Context(model=model, memory=False, call_deadline=1.5, max_pivot_retries=0, structured_retries=0)
        started = time.perf_counter()
        result = await arun(vault(), context, checkpoint_path=":memory:")
        wall = time.perf_counter() - started
    assert result.status == "failure" and wall < 15, (result.status, wall)
    assert "PIVOTAL_CALL_DEADLINE" in json.dumps(result.model_dump())


# --- the batch command ----------------------------------------------------------------------


def batch(tmp_path: Path, *extra: str, tasks: list[dict] | None = None, model: str = "sim", **popen):
    tasks_file = tmp_path / "tasks.jsonl"
    if tasks is not None:
        tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    command = [sys.executable, "-m", "pivotal.cli", "batch", str(tasks_file), "--out", str(tmp_path / "out.jsonl")]
    command += ["--model", model, "--checkpoints", str(tmp_path / "c.sqlite"), "--store", str(tmp_path / "store")]
    command += ["--plugin", "pivotal.testing.faulty_env", *extra]
    if popen:
        return subprocess.Popen(command, cwd=tmp_path, text=True, **popen)
    return subprocess.run(command, cwd=tmp_path, text=True, capture_output=True, timeout=300)


def rows(tmp_path: Path) -> list[dict]:
    text = (tmp_path / "out.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.slow
def test_resume_reruns_error_rows_but_keeps_answers(tmp_path):
    """A failure is an answer; an error is not: `--resume` runs the errored task again."""
    outage = tmp_path / "outage"
    outage.touch()
    first = batch(tmp_path, tasks=[vault(), vault("exit", while_exists=str(outage))])
    assert first.returncode == 0, first.stderr
    assert sorted(r["status"] for r in rows(tmp_path)) == ["error", "success"]
    outage.unlink()
    again = batch(tmp_path, "--resume")
    assert again.returncode == 0, again.stderr
    assert [r["status"] for r in sorted(rows(tmp_path), key=lambda r: r["line"])] == ["success", "success"]
    assert "1 tasks were already done" in again.stdout


@pytest.mark.slow
def test_a_second_batch_on_the_same_results_is_refused_before_touching_them(tmp_path):
    holding = tmp_path / "holding"  # the first batch's hang lasts until the test removes it
    holding.touch()
    tasks = [vault("hang", seconds=120, while_exists=str(holding))] + [vault()] * 3
    first = batch(tmp_path, tasks=tasks, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = tmp_path / "out.jsonl"
    deadline = time.monotonic() + 60
    while not (out.exists() and rows(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    before = out.read_bytes(), (tmp_path / "out.jsonl.batch").read_bytes()
    for flag in ("--overwrite", "--resume"):
        second = batch(tmp_path, flag)
        assert second.returncode == 2
        assert "in use by another batch" in second.stderr and len(second.stderr.strip().splitlines()) == 1
        assert out.read_bytes().startswith(before[0]) and (tmp_path / "out.jsonl.batch").read_bytes() == before[1]
    holding.unlink()
    first.communicate(timeout=120)
    assert first.returncode == 0
    assert sorted(r["line"] for r in rows(tmp_path)) == [1, 2, 3, 4]


@pytest.fixture
def store_mount(tmp_path):
    """A folder on its own small filesystem, so the test can fill the store's disk mid-batch."""
    mount = tmp_path / "store"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the disk-full fault needs its own filesystem")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.slow
def test_a_store_whose_disk_fills_stops_the_batch_and_resume_finishes_it(tmp_path, store_mount):
    """Storage faults stop the batch with exit 2 and one line; no task records them as its own error."""
    tasks = [vault()] * 8
    slow = "sim:latency=0.3"
    running = batch(
        tmp_path, "--concurrency", "1", model=slow, tasks=tasks, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out = tmp_path / "out.jsonl"
    deadline = time.monotonic() + 120
    while not (out.exists() and len(rows(tmp_path)) >= 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    filler = store_mount / "filler"
    with filler.open("wb") as disk, contextlib.suppress(OSError):
        while True:
            disk.write(b"\0" * (1 << 20))
            disk.flush()
    try:
        stdout, stderr = running.communicate(timeout=120)
    finally:
        filler.unlink()
    assert running.returncode == 2, stdout + stderr
    assert "--resume" in stderr and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    answered = rows(tmp_path)
    assert 2 <= len(answered) < 8 and all(r["status"] == "success" for r in answered)
    resumed = batch(tmp_path, "--resume", model=slow)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(r["line"] for r in rows(tmp_path)) == list(range(1, 9))
    assert {r["status"] for r in rows(tmp_path)} == {"success"}


@pytest.mark.slow
def test_a_goal_that_cannot_be_utf8_is_still_written(tmp_path):
    (tmp_path / "tasks.jsonl").write_text('{"env": "faulty-vault", "goal": "Open \\ud800 the vault."}\n')
    done = batch(tmp_path)
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in rows(tmp_path)] == ["success"]
