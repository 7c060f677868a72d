"""Batches over Ray workers against real services: a local Ray instance started once for the module
(`ray.init(num_cpus=2)`), Postgres at 127.0.0.1:5432 for the checkpoints every worker shares, and a
`chroma run` server for the lessons. The CLI joins that Ray instance by its address, as it would
join a cluster. Effects are counted from the world's side: the journal every move writes, with the
process that made it, and the lesson store.
"""

import json
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.testing.cli import cli, finish
from pivotal.testing.journal_env import json_lines
from pivotal.testing.servers import chroma_server

ROOT = Path(__file__).resolve().parents[1]
SERVER = "postgresql://postgres@127.0.0.1:5432"


def _admin():
    import psycopg

    return psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=3)


@pytest.fixture(scope="module")
def database() -> str:
    """A fresh database for this module's batches; skipped, in one line, where no server answers."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed: pip install 'pivotal[postgres]'")
    name = f"pivotal_ray_{uuid.uuid4().hex[:12]}"
    try:
        with _admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001 — whatever stops us reaching it, the reason is the skip
        pytest.skip(f"no Postgres at 127.0.0.1:5432 ({type(exc).__name__})")
    yield f"{SERVER}/{name}"
    with _admin() as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Path:
    """Where every worker's moves are written: workers inherit it from the process that starts Ray."""
    path = tmp_path_factory.mktemp("journal") / "journal.jsonl"
    os.environ["JOURNAL"] = str(path)
    return path


@pytest.fixture(scope="module")
def cluster(journal) -> str:
    """One local Ray instance with two CPUs for the whole module; its address, for the CLI to join."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'pivotal[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def lessons_server(tmp_path_factory) -> str:
    with chroma_server(tmp_path_factory.mktemp("chroma")) as url:
        yield url


@pytest.fixture
def fresh(journal) -> Path:
    journal.write_text("")
    return journal


def just_started_pid(journal: Path, results: Path) -> int | None:
    """The process running a task that has made exactly one move and has no result yet: killed now,
    that task is surely mid-way (every maze needs more moves), so another worker must carry it on.
    """
    done = {str(row["task"]["params"]["seed"]) for row in json_lines(results)}
    moves = [e for e in json_lines(journal) if not e["repeat"]]
    counts = Counter(e["task"] for e in moves)
    started = [e for e in moves if counts[e["task"]] == 1 and e["task"] not in done]
    return started[0]["pid"] if started else None


def tasks_file(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"env": "journal-grid", "params": {"seed": s}}) + "\n" for s in range(count)))
    return path


def assert_every_task_once_and_no_move_twice(results: Path, journal: Path, count: int) -> dict[str, set[int]]:
    answered = json_lines(results)
    assert sorted(row["line"] for row in answered) == list(range(1, count + 1))  # each task answered once
    assert all(row["status"] == "success" for row in answered), [(r["line"], r["reason"]) for r in answered]
    moves = [e for e in json_lines(journal) if not e["repeat"]]  # repeats were refused by the idempotency key
    assert max(Counter((e["task"], e["position"]) for e in moves).values()) == 1  # no move ran twice
    pids: dict[str, set[int]] = {}
    for e in moves:
        pids.setdefault(e["task"], set()).add(e["pid"])
    return pids


@pytest.mark.slow
def test_a_worker_killed_mid_batch_hands_its_tasks_on_and_no_move_or_lesson_is_lost_or_doubled(
    cluster, database, lessons_server, fresh, tmp_path
):
    from pivotal.memory.policy.registry import open_store

    count = 16
    results = tmp_path / "results.jsonl"
    batch = cli(
        *("batch", str(tasks_file(tmp_path, count)), "--out", str(results), "--ray", cluster, "--workers", "2"),
        *("--checkpoints", database, "--plugin", "pivotal.testing.journal_env", "--concurrency", "3"),
        *("--model", "sim:latency=0.1", "--lesson-model", "sim"),
        cwd=tmp_path,
        env={"PIVOTAL_STORE_URL": lessons_server},
    )
    deadline = time.monotonic() + 180
    while (victim := just_started_pid(fresh, results)) is None or len({e["pid"] for e in json_lines(fresh)}) < 2:
        assert batch.poll() is None and time.monotonic() < deadline, batch.stderr.read() if batch.poll() else "slow"
        time.sleep(0.02)
    os.kill(victim, signal.SIGKILL)
    out, err = batch.communicate(timeout=300)
    assert batch.returncode == 0, err

    pids = assert_every_task_once_and_no_move_twice(results, fresh, count)
    assert any(victim in p and len(p) == 2 for p in pids.values())  # a killed task went on in another process
    stored = list(open_store("", lessons_server).lessons(family="journal-grid"))
    written = sum(row["lessons"]["written"] for row in json_lines(results))
    assert written > 0 and len(stored) >= written  # every lesson a result counts is in the store
    assert len({lesson.text for lesson in stored}) == len(stored)  # and none twice


@pytest.mark.slow
def test_the_driver_killed_and_resumed_finishes_every_task_once(cluster, database, fresh, tmp_path):
    count = 12
    results = tmp_path / "results.jsonl"
    flags = (
        *(str(tasks_file(tmp_path, count)), "--out", str(results), "--ray", cluster, "--checkpoints", database),
        *("--plugin", "pivotal.testing.journal_env", "--model", "sim:latency=0.1", "--no-memory", "--concurrency", "3"),
    )
    first = cli("batch", *flags, cwd=tmp_path / "first")
    deadline = time.monotonic() + 180
    while len(json_lines(results)) < 3 or just_started_pid(fresh, results) is None:
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() else "slow"
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = {row["line"] for row in json_lines(results)}
    assert 0 < len(before) < count

    code, out, err = finish("batch", *flags, "--resume", cwd=tmp_path / "second")
    assert code == 0 and "resumed" in out, err
    pids = assert_every_task_once_and_no_move_twice(results, fresh, count)
    assert any(len(p) == 2 for p in pids.values())  # at least one task went on mid-way in a new worker


@pytest.mark.slow
async def test_results_come_back_in_order_once_each_from_both_workers(cluster, database, fresh):
    from pivotal.graphs.ray_batch import run_batch_on_ray
    from pivotal.testing import journal_env  # noqa: F401 — registers journal-grid on the driver too

    seen: list[int] = []
    tasks = [{"env": "journal-grid", "params": {"seed": seed}} for seed in range(6)]
    results = await run_batch_on_ray(
        tasks,
        Context(model="sim:latency=0.05", memory=False),
        checkpoints=database,
        workers=2,
        concurrency=2,
        on_result=lambda index, result: seen.append(index),
        plugins=["pivotal.testing.journal_env"],
    )
    assert [r.task["params"]["seed"] for r in results] == list(range(6))
    assert sorted(seen) == list(range(6)) and all(r.status == "success" for r in results)
    assert len({e["pid"] for e in json_lines(fresh)}) == 2  # both workers ran tasks


@pytest.mark.parametrize(
    ("checkpoints", "memory", "store_url", "expected"),
    [
        ("runs.sqlite", False, "", "Ray workers need checkpoints they all reach, not 'runs.sqlite'"),
        (SERVER + "/db", True, "", "Ray workers with memory need one Chroma server"),
    ],
)
def test_what_workers_cannot_share_is_refused_in_one_line_before_ray_starts(checkpoints, memory, store_url, expected):
    from pivotal.graphs.ray_batch import check_ray_inputs

    with pytest.raises(PivotalError, match=expected) as refused:
        check_ray_inputs(Context(model="sim", memory=memory, store_url=store_url), checkpoints, 4, None)
    assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_the_cli_refuses_sqlite_checkpoints_with_ray_before_writing_anything(tmp_path):
    code, _, err = finish(
        *("batch", str(tasks_file(tmp_path, 1)), "--out", "results.jsonl", "--ray", "--model", "sim", "--no-memory"),
        *("--checkpoints", "runs.sqlite"),
        cwd=tmp_path,
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--checkpoints postgresql://" in err, err
    assert not (tmp_path / "results.jsonl").exists()
