"""`pivotal run` shows the mechanism as it happens: proposals, verdicts, executions, the pivot
with its kept prefix, and what memory did.
"""

import io
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pivotal.cli.trace import Trace
from pivotal.core.context import Context
from pivotal.graphs import arun

ROOT = Path(__file__).resolve().parents[1]
RETRYING = Context(model="sim:error=0.4", memory=False, max_steps=6, max_critique_rounds=1, max_pivot_retries=1)
"""Seed 2 of a 4x4 gridworld fails and retries from its pivotal step (sim is seeded)."""


async def test_the_trace_tells_each_proposal_verdict_execution_and_the_pivot_in_order():
    out = io.StringIO()
    result = await arun({"env": "gridworld", "params": {"seed": 2, "size": 4}}, RETRYING, on_update=Trace(out))
    lines = out.getvalue().splitlines()
    proposals = [line for line in lines if "actor proposes" in line]
    verdicts = [line for line in lines if re.match(r"\s+(critic|pre-check): (approve|revise|reject)", line)]
    executed = [line for line in lines if line.strip().startswith("executed ")]
    assert len(proposals) == len(verdicts) >= len(executed) == result.executed
    kept = result.reflections[0]["kept_steps"]
    pivot = next(i for i, line in enumerate(lines) if line.startswith("  pivot:"))
    assert f"retry from step {kept}, keeping {kept} step(s)" in lines[pivot]
    assert lines[pivot - 1].startswith("  reflection (attempt 0)")
    assert lines[pivot + 1].startswith(f"  step {kept}: actor proposes")  # the retry redoes the pivotal step


async def test_the_trace_reports_what_memory_did(tmp_path):
    out = io.StringIO()
    context = replace(RETRYING, memory=True, store_path=str(tmp_path / "store"))
    result = await arun({"env": "gridworld", "params": {"seed": 2, "size": 4}}, context, on_update=Trace(out))
    written = result.lessons["written"]
    assert f"  memory: written {written}, merged {result.lessons['merged']}" in out.getvalue()


@pytest.mark.slow
def test_pivotal_run_prints_the_trace_before_the_summary(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "pivotal.cli", "run", "--env", "gridworld", "--param", "size=4", "--seed", "2"]
        + ["--model", "sim:error=0.4", "--max-steps", "6", "--max-critique-rounds", "1", "--max-pivot-retries", "1"]
        + ["--store", str(tmp_path / "store"), "--checkpoints", ":memory:"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("task ") and "actor proposes" in lines[1] + lines[2]
    assert any(line.startswith("  pivot: retry from step") for line in lines)
    assert lines[-1].startswith("final path") and lines[-2].startswith(("success:", "failure:"))
    assert not any(re.match(r"\s+\d+\. ", line) for line in lines)  # the path is not printed twice


def test_an_actor_entry_that_recalled_first_tells_the_lessons_then_the_proposal():
    """Recall is part of the actor's entry (graphs/builder.py `_joined`): its lessons still get their line,
    before the proposal they were shown for, and only when they change.
    """
    out = io.StringIO()
    trace = Trace(out)
    lesson = {
        "id": "l1",
        "kind": "guardrail",
        "situation": "a wall",
        "text": "Do not walk into the wall.",
        "similarity": 1.0,
    }
    proposal = {"action": "up", "arguments": {}, "thought": "", "error": ""}
    trace("actor", {"lessons": [lesson], "recall_key": "r\na wall", "proposal": proposal})
    trace("actor", {"lessons": [lesson], "recall_key": "r\nthe same wall", "proposal": proposal})
    lines = out.getvalue().splitlines()
    assert lines[0] == "        recall: 1 lesson(s): [guardrail] Do not walk into the wall."
    assert [line for line in lines if "recall:" in line] == [lines[0]] and len(lines) == 3
    assert lines[1].startswith("  step 0: actor proposes up") and lines[2] == lines[1]
