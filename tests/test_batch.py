"""`run_batch` and `pivotal batch`: concurrency, streaming, failures that stay local, resume after kill -9."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.errors import PivotalError
from pivotal.graphs import run_batch
from pivotal.memory.policy.registry import open_store
from pivotal.testing.journal_env import just_started

ROOT = Path(__file__).resolve().parents[1]


def _peak_overlap(results) -> int:
    events = sorted([(r.started_at, 1) for r in results] + [(r.finished_at, -1) for r in results])
    peak = current = 0
    for _, change in events:
        current += change
        peak = max(peak, current)
    return peak


@pytest.mark.slow
async def test_concurrency_is_enforced_and_results_stream_as_tasks_finish():
    tasks = [{"env": "gridworld", "params": {"seed": seed}} for seed in range(12)]
    streamed = []
    results = await run_batch(
        tasks,
        Context(model="sim:latency=0.02", memory=False),
        concurrency=3,
        checkpoint_path=":memory:",
        on_result=lambda i, r: streamed.append((i, r.finished_at)),
    )
    assert all(r.status == "success" for r in results)
    assert 2 <= _peak_overlap(results) <= 3
    assert sorted(i for i, _ in streamed) == list(range(12))
    assert [t for _, t in streamed] == sorted(t for _, t in streamed)  # reported in finishing order
    assert len({r.thread_id for r in results}) == 12  # one LangGraph thread per task


async def test_one_failing_task_never_stops_the_batch():
    register_environment("explodes-later", _ExplodesLater)
    tasks = [
        {"env": "gridworld", "params": {"seed": 1}},
        {"env": "explodes-later"},
        {"env": "gridworld", "params": {"seed": 2}},
    ]
    results = await run_batch(tasks, Context(model="sim", memory=False), concurrency=2, checkpoint_path=":memory:")
    assert [r.status for r in results] == ["success", "error", "success"]
    assert "the environment's backend is down" in results[1].error


class _ExplodesLater:
    """Builds fine (so the batch's pre-check passes) and raises when a run resets it."""

    def reset(self, task):
        raise RuntimeError("the environment's backend is down")

    def describe_actions(self):
        return []

    def step(self, name, arguments):
        raise AssertionError("never reached")


async def test_zero_concurrency_is_refused():
    with pytest.raises(PivotalError, match="concurrency must be > 0"):
        await run_batch([{"env": "gridworld"}], Context(model="sim"), concurrency=0)


# --- the CLI ----------------------------------------------------------------------------------


def _tasks_file(folder: Path, count: int, extra: list[str] = ()) -> Path:
    path = folder / "tasks.jsonl"
    lines = [json.dumps({"env": "journal-grid", "params": {"seed": seed}}) for seed in range(count)]
    path.write_text("\n".join([*lines, *extra]) + "\n")
    return path


def _batch(folder: Path, *flags: str, **popen) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "pivotal.cli",
        "batch",
        str(folder / "tasks.jsonl"),
        "--out",
        str(folder / "results.jsonl"),
        "--checkpoints",
        str(folder / "checkpoints.sqlite"),
        "--store",
        str(folder / "store"),
        "--plugin",
        "pivotal.testing.journal_env",
        *flags,
    ]
    env = {**os.environ, "JOURNAL": str(folder / "journal.jsonl")}
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.slow
def test_bad_lines_are_reported_by_number_and_the_rest_run(tmp_path):
    _tasks_file(tmp_path, 3, extra=["{oops", json.dumps({"env": "no-such-env"})])
    out, err = _batch(tmp_path, "--model", "sim", "--no-memory").communicate(timeout=120)
    assert "tasks.jsonl:4: skipped: not JSON" in err and "tasks.jsonl:5: skipped: unknown environment" in err
    rows = {row["line"]: row for row in _lines(tmp_path / "results.jsonl")}
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert [rows[n]["status"] for n in (1, 2, 3)] == ["success"] * 3 and rows[4]["status"] == "error"
    assert "3 succeeded, 0 failed, 2 errors" in out
    assert set(rows[1]) >= {
        "status",
        "reason",
        "steps",
        "llm_calls",
        "critic",
        "retries",
        "lessons",
        "usage",
        "trajectory",
        "thread_id",
    }


@pytest.mark.slow
def test_an_existing_results_file_is_refused_without_resume_or_overwrite(tmp_path):
    _tasks_file(tmp_path, 1)
    (tmp_path / "results.jsonl").write_text("{}\n")
    process = _batch(tmp_path, "--model", "sim", "--no-memory")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2 and "exists; pass --resume" in err
    assert (tmp_path / "results.jsonl").read_text() == "{}\n"
    process = _batch(tmp_path, "--model", "sim", "--no-memory", "--concurrency", "0")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2 and "--concurrency must be > 0" in err


@pytest.mark.slow
def test_a_batch_killed_with_sigkill_resumes_without_rerunning_anything(tmp_path):
    count = 16
    _tasks_file(tmp_path, count)
    flags = ("--model", "sim:latency=0.1", "--lesson-model", "sim", "--concurrency", "4")  # kills land mid-task
    first = _batch(tmp_path, *flags)
    journal, results = tmp_path / "journal.jsonl", tmp_path / "results.jsonl"
    deadline = time.monotonic() + 120
    while len(_lines(results)) < 3 or not just_started(journal, results):
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() else "slow"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = {row["line"] for row in _lines(results)}
    assert 0 < len(before) < count

    out, err = _batch(tmp_path, *flags, "--resume").communicate(timeout=300)
    assert "resumed" in out, err
    rows = _lines(results)
    assert sorted(row["line"] for row in rows) == list(range(1, count + 1))  # each task answered once
    assert all(row["status"] == "success" for row in rows), [
        (r["line"], r["status"], r["reason"]) for r in rows if r["status"] != "success"
    ]

    entries = [e for e in _lines(journal) if not e["repeat"]]  # repeats were refused by the idempotency key
    executed = Counter((e["task"], e["position"]) for e in entries)
    assert max(executed.values()) == 1  # no environment action ran twice
    by_task = Counter(e["task"] for e in entries)
    assert all(by_task[str(row["task"]["params"]["seed"])] == row["trajectory_length"] for row in rows)
    pids = {}
    for e in entries:
        pids.setdefault(e["task"], set()).add(e["pid"])
    assert any(len(p) == 2 for p in pids.values())  # at least one task continued mid-way in the new process
    assert all(len(pids[str(row["task"]["params"]["seed"])]) == 1 for row in rows if row["line"] in before)

    lessons = open_store(str(tmp_path / "store")).get()
    # every finished run added one piece of evidence per lesson it wrote or merged into, once, kills or not
    reported = sum(row["lessons"]["written"] + row["lessons"]["merged"] for row in rows)
    assert lessons and sum(lesson.evidence for lesson in lessons.values()) == reported


_KILLED_AT_ITS_FIRST_CHECKPOINT = """
import asyncio, os, sys
from pivotal.core.context import Context
from pivotal.graphs import run_batch

async def killed(index):
    os._exit(9)  # kill -9 right after the task's first checkpoint, before its input is applied

asyncio.run(run_batch([{"env": "gridworld", "params": {"seed": 1}}], Context(model="sim", memory=False),
                      checkpoint_path=sys.argv[1], thread_prefix="b", on_start=killed))
"""


@pytest.mark.slow
async def test_a_batch_killed_at_a_tasks_first_checkpoint_runs_that_task_on_resume(tmp_path):
    """The first checkpoint holds only the input, not yet applied: read from another process the thread
    has no task, and the resume refused the same task as "another task" on an unfinished thread
    (seen once in a fresh-clone CI run under load, when a SIGKILL landed there).
    """
    checkpoints = str(tmp_path / "c.sqlite")
    killed = subprocess.run([sys.executable, "-c", _KILLED_AT_ITS_FIRST_CHECKPOINT, checkpoints], timeout=120)
    assert killed.returncode == 9
    task = {"env": "gridworld", "params": {"seed": 1}}
    [result] = await run_batch(
        [task], Context(model="sim", memory=False), checkpoint_path=checkpoints, thread_prefix="b"
    )
    assert result.status == "success", result.error
