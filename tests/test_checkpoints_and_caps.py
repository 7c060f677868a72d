"""Checkpoint retention, damaged checkpoint and store files, and size caps, on real SQLite files and
real Chroma stores in tmp_path, with runs of the `sim` model.
"""

import json
import os
import sqlite3
from datetime import timedelta

import pytest

from pivotal import prompts
from pivotal.cli import main
from pivotal.cli.batch import read_tasks
from pivotal.core import checkpoints
from pivotal.core.checkpoints import check_file, prune, stats
from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.core.task import MAX_GOAL_CHARS, parse_task
from pivotal.graphs import aresume, arun, build_graph, run_batch
from pivotal.graphs.checkpointer import open_checkpointer
from pivotal.memory.lesson import Lesson, lessons_block
from pivotal.memory.lesson.screen import MAX_LESSON_CHARS
from pivotal.memory.policy.registry import close_stores, open_store

TASK = {"env": "gridworld", "params": {"seed": 1}}


def quiet(**fields) -> Context:
    return Context(model="sim", memory=False, **fields)


def rows(path, table: str, thread: str | None = None) -> int:
    with sqlite3.connect(path) as db:
        if thread is None:
            return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return db.execute(f"SELECT count(*) FROM {table} WHERE thread_id = ?", (thread,)).fetchone()[0]


async def state_of(path, thread: str):
    async with open_checkpointer(str(path)) as saver:
        return await build_graph(checkpointer=saver).aget_state({"configurable": {"thread_id": thread}})


@pytest.fixture
async def runs(tmp_path):
    """Three finished runs and one waiting for approval, in one checkpoint file."""
    path = tmp_path / "cp.sqlite"
    finished = [
        await arun({**TASK, "params": {"seed": seed}}, quiet(), checkpoint_path=str(path), thread_id=f"done-{seed}")
        for seed in (1, 2, 3)
    ]
    paused = await arun(TASK, quiet(require_approval_for=["*"]), checkpoint_path=str(path), thread_id="paused")
    assert [r.status for r in finished] == ["success"] * 3 and paused.status == "interrupted"
    return path, finished


# --- retention --------------------------------------------------------------------------------


async def test_prune_keeps_finished_runs_last_checkpoint_and_leaves_a_paused_run_whole(runs):
    path, finished = runs
    before = {r.thread_id: (await state_of(path, r.thread_id)).values for r in finished}
    paused_rows = rows(path, "checkpoints", "paused"), rows(path, "writes", "paused")
    size = checkpoints.file_bytes(path)

    done = prune(path)

    assert done.threads == 3 and done.left_whole == 1 and done.checkpoints > 0 and done.writes > 0
    assert done.bytes_before == size and done.bytes_after < size / 2
    for result in finished:
        assert rows(path, "checkpoints", result.thread_id) == 1 and rows(path, "writes", result.thread_id) == 0
        saved = await state_of(path, result.thread_id)
        assert saved.values == before[result.thread_id] and not saved.next and not saved.tasks
    assert (rows(path, "checkpoints", "paused"), rows(path, "writes", "paused")) == paused_rows
    after = await aresume(
        "paused", {"decision": "approve"}, quiet(require_approval_for=["*"]), checkpoint_path=str(path)
    )
    assert after.status == "interrupted" and after.trajectory_length == 1  # resumable as before


async def test_finished_means_what_the_runner_means_no_next_node_and_no_pending_task(runs):
    path, _ = runs
    with sqlite3.connect(path) as db:
        found = checkpoints._threads(db)
    for thread in found:
        saved = await state_of(path, thread.id)
        assert thread.finished == (not saved.next and not saved.tasks), thread.id
    assert sorted(t.id for t in found if not t.finished) == ["paused"]


async def test_a_batch_resumed_after_prune_reads_finished_tasks_back_without_running_them(tmp_path):
    path, tasks = str(tmp_path / "cp.sqlite"), [{**TASK, "params": {"seed": seed}} for seed in (1, 2)]
    first = await run_batch(tasks, quiet(), checkpoint_path=path, thread_prefix="b")
    prune(path)
    kept = rows(path, "checkpoints")
    again = await run_batch(tasks, quiet(), checkpoint_path=path, thread_prefix="b")
    assert [r.status for r in again] == [r.status for r in first] == ["success", "success"]
    assert [r.trajectory for r in again] == [r.trajectory for r in first]
    assert rows(path, "checkpoints") == kept  # read back, not run again


async def test_stats_count_threads_checkpoints_and_bytes(runs):
    path, _ = runs
    found = stats(path)
    assert (found.threads, found.finished) == (4, 3)
    assert found.checkpoints == rows(path, "checkpoints") and found.writes == rows(path, "writes")
    assert found.bytes == os.path.getsize(path) + (
        os.path.getsize(f"{path}-wal") if os.path.exists(f"{path}-wal") else 0
    )
    assert found.bytes_per_step == found.bytes // found.checkpoints > 0
    unfinished = rows(path, "checkpoints", "paused")
    assert found.prunable == found.checkpoints - unfinished - 3
    prune(path)
    assert stats(path).prunable == 0 and stats(path).checkpoints == unfinished + 3


async def test_dry_run_older_than_threads_and_history_change_nothing_they_should_not(runs):
    path, finished = runs
    total, size = rows(path, "checkpoints"), checkpoints.file_bytes(path)
    dry = prune(path, dry_run=True)
    assert dry.checkpoints > 0 and dry.freed_estimate > 0 and rows(path, "checkpoints") == total
    assert prune(path, older_than=timedelta(days=1)).checkpoints == 0  # these runs are seconds old
    assert prune(path, keep="history").checkpoints == 0
    assert rows(path, "checkpoints") == total and checkpoints.file_bytes(path) <= size
    one = prune(path, threads=[finished[0].thread_id])
    assert one.threads == 1 and rows(path, "checkpoints", finished[1].thread_id) > 1


def test_a_locked_file_is_one_line_saying_what_to_do(tmp_path, monkeypatch):
    path = tmp_path / "cp.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript("CREATE TABLE checkpoints (thread_id); CREATE TABLE writes (thread_id);")
    monkeypatch.setattr(checkpoints, "LOCK_WAIT_S", 0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(PivotalError, match="in use by another process.*once that has finished"):
            prune(path)
    finally:
        holder.close()


async def test_the_cli_reports_and_prunes(capsys, runs):
    path, _ = runs
    assert main(["checkpoints", "stats", "--checkpoints", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 threads (3 finished, 1 can still go on)" in out and "per step" in out and "would delete" in out
    assert main(["checkpoints", "stats", "--checkpoints", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["threads"] == 4
    assert main(["checkpoints", "prune", "--checkpoints", str(path), "--dry-run"]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert main(["checkpoints", "prune", "--checkpoints", str(path), "--older-than", "0"]) == 0
    assert "1 runs that can still go on left whole" in capsys.readouterr().out and stats(path).prunable == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no checkpoint file at"), (b"not sqlite" * 50, "is damaged \\(file is not a database\\)")],
)
def test_the_cli_refuses_a_missing_or_foreign_file_in_one_line(capsys, tmp_path, content, message):
    path = tmp_path / "cp.sqlite"
    if content is not None:
        path.write_bytes(content)
    assert main(["checkpoints", "prune", "--checkpoints", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pivotal: error:")
    assert __import__("re").search(message, err)
    assert (path.read_bytes() if content else None) == content


# --- damaged files ----------------------------------------------------------------------------


async def test_a_corrupt_checkpoint_header_is_one_line_and_the_file_is_kept(runs):
    path, _ = runs
    data = bytearray(path.read_bytes())
    data[:16] = b"garbage garbage!"
    path.write_bytes(data)
    with pytest.raises(PivotalError) as raised:
        check_file(path)
    message = str(raised.value)
    assert "\n" not in message and "file is not a database" in message and "restore it from a backup" in message
    assert path.read_bytes() == data


async def test_a_damaged_page_fails_the_quick_check(runs):
    path, _ = runs
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(page, len(data), page):  # every page's header: its b-tree can no longer be read
        data[start : start + 12] = b"\xff" * 12
    path.write_bytes(data)
    with pytest.raises(PivotalError, match=r"is damaged \((quick_check: |database disk image is malformed)"):
        check_file(path)


def test_a_new_or_empty_checkpoint_file_is_fine_unless_runs_are_expected_in_it(tmp_path):
    check_file(tmp_path / "new.sqlite")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    check_file(empty)
    with pytest.raises(PivotalError, match=r"empty: 0 bytes"):
        check_file(empty, expect_data=True)


@pytest.fixture
def store_folder(tmp_path):
    folder = tmp_path / "store"
    open_store(str(folder)).put(
        [
            Lesson(kind="guardrail", situation=f"case {i}", text=f"lesson {i}", outcome="failure", family="f")
            for i in range(22)
        ]
    )
    close_stores()
    return folder


def test_a_store_truncated_to_zero_bytes_is_refused_never_replaced(store_folder):
    database = store_folder / "chroma.sqlite3"
    database.write_bytes(b"")
    with pytest.raises(PivotalError) as raised:
        open_store(str(store_folder))
    message = str(raised.value)
    assert "\n" not in message and f"lesson store {store_folder} is damaged" in message
    assert "`pivotal lessons export` makes one" in message and "PIVOTAL_STORE_PATH" in message
    assert database.read_bytes() == b""


def test_a_store_with_garbage_in_its_middle_is_refused_and_kept(store_folder):
    database = store_folder / "chroma.sqlite3"
    data = bytearray(database.read_bytes())
    for start in range(4096, len(data), 4096):
        data[start : start + 12] = b"\xff" * 12
    database.write_bytes(data)
    with pytest.raises(PivotalError, match=r"is damaged \(.*\): restore it from a backup"):
        open_store(str(store_folder))
    assert database.read_bytes() == data


def test_a_new_store_folder_is_still_created(tmp_path):
    store = open_store(str(tmp_path / "fresh" / "store"))
    assert store.count() == 0 and (tmp_path / "fresh" / "store" / "chroma.sqlite3").stat().st_size > 0


# --- size caps --------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["x" * 10_000_000, {"goal": "x" * 10_000_000, "env": "gridworld"}])
def test_a_10_mb_goal_is_refused_in_one_line(given):
    with pytest.raises(PivotalError) as raised:
        parse_task(given)
    message = str(raised.value)
    assert "\n" not in message and len(message) < 400
    assert f"over the cap of {MAX_GOAL_CHARS}" in message and "10000000 characters" in message


def test_a_batch_reports_an_over_long_goal_as_a_bad_line_and_run_exits_2(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"env": "gridworld"}) + "\n" + json.dumps({"goal": "y" * (MAX_GOAL_CHARS + 1)}) + "\n")
    good, bad = read_tasks(tasks)
    assert [number for number, _ in good] == [1] and bad[0][0] == 2 and "over the cap" in bad[0][1]
    long_goal = "z" * (MAX_GOAL_CHARS + 1)
    assert main(["run", "--goal", long_goal, "--model", "sim", "--no-memory", "--checkpoints", ":memory:"]) == 2
    assert "over the cap" in capsys.readouterr().err


def test_a_prompt_with_a_1_mb_recalled_lesson_stays_under_the_cap():
    lesson = {"kind": "guardrail", "situation": "in a maze", "text": "never " * 200_000}
    fields = dict(
        task="reach G",
        actions="- up\n- down",
        earlier_turns="- turn 1: asked: reach H",
        history="No steps taken yet.",
        repeats="",
        observation="a maze",
        lessons=lessons_block([lesson, {**lesson, "text": "go around walls"}]),
        reflections="(none)",
        held_here="",
        critiques="(none)",
    )
    prompt = prompts.render("actor", **fields)
    assert len(prompt) < len(fields) * prompts.SECTION_CHARS and "…(clipped" in prompt
    assert "go around walls" in prompt  # the tail of the block is kept
    huge = prompts.render("actor", **{name: "w" * 10_000_000 for name in fields})
    assert len(huge) <= len(fields) * prompts.SECTION_CHARS + len(prompts.template("actor"))


async def test_a_run_recalling_a_1_mb_lesson_keeps_it_clipped_in_state_and_checkpoints(tmp_path):
    store_path = str(tmp_path / "store")
    open_store(store_path).put(  # as a store written before the length cap would hold it
        [
            Lesson(
                kind="guardrail",
                situation="moving through the gridworld maze towards the goal G",
                text="Check the walls first. " + "x" * 1_000_000,
                outcome="failure",
                family="gridworld",
            )
        ]
    )
    path = tmp_path / "cp.sqlite"
    context = Context(model="sim", store_path=store_path, recall_min_similarity=0.0)
    result = await arun(TASK, context, checkpoint_path=str(path), thread_id="t")
    assert result.lessons["recalled"] == 1
    saved = await state_of(path, "t")
    assert all(len(lesson["text"]) <= MAX_LESSON_CHARS for lesson in saved.values.get("lessons", []))
    assert checkpoints.file_bytes(path) < 5_000_000
