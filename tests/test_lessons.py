"""Lessons: gated, written to Chroma on disk, persisted across processes, recalled later."""

import json
import subprocess
import sys
from pathlib import Path

from graphs import arun
from memory.store import open_store
from pivotal.context import Context

ROOT = Path(__file__).resolve().parents[1]
FAILING = dict(model="sim:error=0.35,seed=7", lesson_model="sim", critic=False, max_steps=12)


async def _run(store: Path, seed: int = 7, **context):
    return await arun({"env": "gridworld", "params": {"seed": seed}},
                      Context(store_path=str(store), **{**FAILING, **context}), checkpoint_path=":memory:")


async def test_lessons_from_failures_and_success_pass_the_gate_and_land_in_chroma(tmp_path):
    result = await _run(tmp_path / "store")
    assert result.status == "success" and result.retries["count"] >= 1
    assert result.lessons["candidates"] >= 2  # guardrails from reflections + a skill from the success
    assert result.lessons["approved"] >= result.lessons["written"] >= 2  # same text merges into one id
    lessons = open_store(str(tmp_path / "store")).get()
    assert {lesson.outcome for lesson in lessons.values()} == {"failure", "success"}
    assert all(lesson.family == "gridworld" and lesson.run_id == result.run_id for lesson in lessons.values())


async def test_gate_rejections_are_not_written(tmp_path):
    result = await _run(tmp_path / "store", lesson_model="sim:error=1.0")
    assert result.lessons["candidates"] > 0 and result.lessons["written"] == 0
    assert open_store(str(tmp_path / "store")).count() == 0


_COUNT = "import sys; from memory.store import open_store; print(open_store(sys.argv[1]).count())"


async def test_lessons_persist_across_processes_and_a_later_run_recalls_them(tmp_path):
    store = tmp_path / "store"
    first = await _run(store)
    count = subprocess.run([sys.executable, "-c", _COUNT, str(store)], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert count.returncode == 0, count.stderr
    assert int(count.stdout) == first.lessons["written"]

    later = subprocess.run(
        [sys.executable, "-m", "pivotal.cli", "run", "--env", "gridworld", "--seed", "2", "--model", "sim",
         "--store", str(store), "--checkpoints", ":memory:", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert later.returncode == 0, later.stderr
    summary = json.loads(later.stdout)
    assert summary["lessons"]["recalled"] >= 1
    recalled = {lesson_id for step in summary["trajectory"] for lesson_id in step["lessons"]}
    assert recalled <= set(open_store(str(store)).get())


async def test_a_failed_run_keeps_what_the_store_already_held(tmp_path):
    store = tmp_path / "store"
    await _run(store)
    before = set(open_store(str(store)).get())
    failed = await _run(store, retry="none", max_steps=1)
    assert failed.status == "failure"
    assert before <= set(open_store(str(store)).get())


async def test_memory_off_never_touches_the_store(tmp_path):
    result = await _run(tmp_path / "store", memory=False)
    assert not (tmp_path / "store").exists()
    assert result.lessons == {"recalled": 0, "candidates": 0, "approved": 0, "written": 0}
    assert not {"distiller", "gate"} & set(result.usage)
