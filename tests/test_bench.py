"""`pivotal bench --quick`: the report's structure (not its numbers), and the metrics it is built on."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pivotal.bench.metrics import pivotal_vs_full, summarise, wilson
from pivotal.bench.truth import judge_trajectory

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["actor", "critic", "critic+full", "critic+pivotal", "critic+pivotal+memory", "critic+pivotal+memory(task)"]
ENVS = ["gridworld", "frozenlake", "taxi", "configs"]


def test_quick_bench_writes_a_complete_report(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pivotal.cli", "bench", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(results["groups"]) == sorted(f"{env}@0.3" for env in ENVS)
    for configs in results["groups"].values():
        assert list(configs) == CONFIGS
        for row in configs.values():
            assert {
                "success",
                "success_ci95",
                "pass@1",
                "pass@2",
                "pass@3",
                "executed_steps",
                "replayed_steps",
                "llm_calls",
                "tokens",
                "wall_s",
                "critic_precision",
                "critic_recall",
                "success_after_revise",
                "lessons_written",
                "lessons_recalled",
                "lessons_retired",
            } <= set(row)
            assert row["tasks"] == 8
    assert set(results["pivotal_vs_full"]) == set(results["groups"])
    assert set(results["memory_curve"]) == {"critic+pivotal", "critic+pivotal+memory"}
    assert len(results["records"]) == len(ENVS) * len(CONFIGS) * 8
    report = (tmp_path / "report.md").read_text()
    for heading in ("## Pivotal retry against full retry", "## Memory over a stream", "## gridworld@0.3", "## Plots"):
        assert heading in report
    for plot in ("success.png", "pivotal_vs_full.png", "memory_stream.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({plot})" in report


@pytest.mark.parametrize("wins,total,low,high", [(0, 10, 0.0, 0.278), (10, 10, 0.722, 1.0), (5, 10, 0.237, 0.763)])
def test_wilson_interval_matches_the_textbook_values(wins, total, low, high):
    assert wilson(wins, total) == pytest.approx((low, high), abs=0.002)


def _row(status, attempts, executed, calls, **extra):
    return {
        "env": "gridworld",
        "error": 0.3,
        "stream": 0,
        "status": status,
        "attempts": attempts,
        "executed": executed,
        "replayed": 0,
        "llm_calls": calls,
        "tokens": 10,
        "wall_s": 0.1,
        "revised": 0,
        "lessons": {},
        "bad_blocked": 0,
        "bad_passed": 0,
        "good_blocked": 0,
        "good_passed": 0,
        **extra,
    }


def test_pass_at_k_counts_attempts_and_critic_scores_use_the_oracle_counts():
    rows = [
        _row("success", 1, 5, 10, bad_blocked=3, good_blocked=1, bad_passed=1),
        _row("success", 3, 9, 20, revised=1),
        _row("failure", 3, 12, 25, revised=1),
    ]
    summary = summarise(rows)
    assert (summary["pass@1"], summary["pass@2"], summary["pass@3"]) == (pytest.approx(1 / 3, abs=1e-3),) * 2 + (
        pytest.approx(2 / 3, abs=1e-3),
    )
    assert summary["critic_precision"] == 0.75 and summary["critic_recall"] == 0.75
    assert summary["success_after_revise"] == 0.5


def test_pivotal_vs_full_compares_the_same_tasks():
    full = [
        _row("success", 2, 20, 40, config="critic+full", index=0),
        _row("success", 1, 5, 10, config="critic+full", index=1),
    ]
    pivotal = [
        _row("success", 2, 12, 24, config="critic+pivotal", index=0),
        _row("success", 1, 5, 10, config="critic+pivotal", index=1),
    ]
    [row] = pivotal_vs_full(full + pivotal).values()
    assert row["executed_reduction"] == pytest.approx(1 - 17 / 25, abs=1e-3)
    assert row["retried_tasks"] == 1 and row["retried_executed_reduction"] == pytest.approx(0.4)


def test_ground_truth_replays_the_path_and_judges_each_proposal():
    """In gridworld seed 1 the expert's first move is good; a move off the grid is bad."""
    from pivotal.environments.gridworld import GridWorld
    from pivotal.task import Task

    env = GridWorld()
    env.reset(Task(env="gridworld", params={"seed": 1}))
    good, _ = env.expert_action()
    bad = next(name for name in ("up", "left", "down", "right") if env.judge(name, {})[0] != "good")
    step = {
        "action": good,
        "arguments": {},
        "verdicts": [
            {"action": bad, "arguments": {}, "decision": "reject", "source": "critic"},
            {"action": good, "arguments": {}, "decision": "approve", "source": "critic"},
        ],
    }
    counts = judge_trajectory({"env": "gridworld", "params": {"seed": 1}}, [step])
    assert counts == {"bad_blocked": 1, "bad_passed": 0, "good_blocked": 0, "good_passed": 1}
