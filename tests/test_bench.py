"""`pivotal bench --quick`: the report's structure (not its numbers), and the metrics it is built on."""

import asyncio
import fcntl
import json
import os
import pty
import random
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from pivotal.bench.ablations import COMPARISONS
from pivotal.bench.metrics import comparisons, paired, sign_test, summarise
from pivotal.bench.plots import draw
from pivotal.bench.report import markdown
from pivotal.bench.truth import judge_trajectory
from pivotal.cli.bench import QUICK, local_plan, local_results
from pivotal.core.stats import wilson

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["actor", "critic", "critic+full", "critic+pivotal", "critic+pivotal+memory", "critic+pivotal+memory(task)",
           "critic+pivotal (loops off)", "critic+pivotal (hook off)"]  # fmt: skip
HOOKED = {"gridworld"}
"""The quick bench's worlds with a `steps_to_goal` hook: the hook-off configuration runs only there."""


def _configs(env: str) -> list[str]:
    return [c for c in CONFIGS if c != "critic+pivotal (hook off)" or env in HOOKED]


ENVS = QUICK["envs"]
STREAMS, TASKS = 1, 2
"""The report's structure needs every environment and configuration of `--quick`, not its 8 tasks per cell:
one stream of two tasks still gives each row its tasks, a stream for the memory curve (a lesson written by
the first task, recalled by the second) and a pair per comparison, at a quarter of the quick plan's work."""
PER_CELL = STREAMS * TASKS


def _run_on_a_terminal(args: list[str]) -> tuple[int, str]:
    """The bench with stderr on a pseudo-terminal, as a user sees it: the progress bar only draws on one."""
    reader, writer = pty.openpty()
    fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # a new pty is 0 columns wide
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=writer)
    os.close(writer)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(reader, 4096)
            except OSError:  # EIO: the child closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    thread = threading.Thread(target=drain)
    thread.start()
    code = process.wait(timeout=600)
    thread.join(timeout=10)
    os.close(reader)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_quick_bench_writes_a_complete_report_with_a_progress_bar(tmp_path):
    quick = ["bench", "--quick", "--streams", str(STREAMS), "--tasks", str(TASKS), "--out", str(tmp_path)]
    code, terminal = _run_on_a_terminal([sys.executable, "-m", "pivotal.cli", *quick])
    assert code == 0, terminal[-2000:]
    total = sum(len(_configs(env)) for env in ENVS) * PER_CELL
    assert f"{total}/{total}" in terminal and "task" in terminal  # the bar reached the end, on stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(results["groups"]) == sorted(f"{env}@0.3" for env in ENVS)
    for group, configs in results["groups"].items():
        assert list(configs) == _configs(group.split("@")[0])
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
            assert row["tasks"] == PER_CELL
    assert [(c["new"], c["baseline"]) for c in results["comparisons"]] == COMPARISONS
    for comparison in results["comparisons"]:
        envs = [env for env in ENVS if comparison["baseline"] in _configs(env)]
        assert set(comparison["groups"]) == {f"{env}@0.3" for env in envs} | ({"all"} if len(envs) > 1 else set())
        assert (comparison["groups"].get("all") or comparison["groups"]["gridworld@0.3"])["tasks"] == len(
            envs
        ) * PER_CELL
    assert set(results["pivot_accuracy"]) >= {"critic+full", "critic+pivotal", "critic+pivotal (hook off)"}
    assert set(results["memory_curve"]) == {"critic+pivotal", "critic+pivotal+memory"}
    assert len(results["records"]) == total
    report = (tmp_path / "report.md").read_text()
    for heading in (
        "## Should I turn it on?",
        "## Paired comparisons",
        "### critic+pivotal against critic+full",
        "Compared under: both budget fair · loop detection warn",
        "### critic+pivotal against critic+pivotal (loops off)",
        "### critic+pivotal against critic+pivotal (hook off)",
        "## Pivot accuracy",
        "## Memory over a stream",
        "### gridworld@0.3",
        "## Plots",
    ):
        assert heading in report
    assert "`sim` caveat: the errors are synthetic" in report
    assert "goal" not in report.lower()
    for plot in ("success_cost.png", "paired.png", "memory_stream.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({plot})" in report


def _task(config, index, status="success", attempts=1, executed=10, calls=20, env="gridworld"):
    return _row(status, attempts, executed, calls, config=config, index=index, env=env)


def test_a_known_saving_gets_an_interval_that_excludes_zero():
    """Pivotal executes 2–6 steps fewer on every retried task: the saving is real and must be called so."""
    rng = random.Random(3)
    rows = []
    for i in range(40):
        base = rng.randint(8, 20)
        retried = i % 2 == 0
        saving = rng.randint(2, 6) if retried else 0
        rows.append(_task("critic+full", i, attempts=2 if retried else 1, executed=base, calls=2 * base))
        rows.append(_task("critic+pivotal", i, attempts=2 if retried else 1, executed=base - saving, calls=2 * base))
    result = paired(rows, "critic+pivotal", "critic+full")["gridworld@0.3"]
    low, high = result["executed"]["ci95"]
    assert 0 < low <= result["executed"]["saved"] <= high and result["executed"]["significant"]
    assert result["retried"] == 20 and result["retried_executed"]["saved"] > result["executed"]["saved"]
    assert result["llm_calls"]["saved"] == 0 and not result["llm_calls"]["significant"]
    assert result["success"]["difference"] == 0 and not result["success"]["significant"]


def test_strategies_that_do_not_differ_get_an_interval_spanning_zero_and_the_plain_statement():
    """Two configurations drawing from one distribution, task by task: any gap is noise, and the report says so."""
    rng = random.Random(7)
    rows = []
    for i in range(30):
        for config in ("critic+pivotal", "critic+full"):
            steps = rng.randint(5, 25)
            status = "success" if rng.random() < 0.6 else "failure"
            rows.append(_task(config, i, status=status, attempts=1 if status == "success" else 2, executed=steps))
    result = paired(rows, "critic+pivotal", "critic+full")["gridworld@0.3"]
    for key in ("success", "executed"):
        low, high = result[key]["ci95"]
        assert low < 0 < high and not result[key]["significant"], (key, result[key])
    report = markdown(_results(rows), [])
    assert (
        "Not significant at this sample size (the 95% interval includes zero, or there is none): success in every row"
        in report
    )
    assert "executed steps in every row" in report
    assert "not established at this sample size" in report


def test_one_task_gets_no_interval_rather_than_a_certain_looking_one():
    """A bootstrap over one pair has zero width; shown, it would read as a sure difference."""
    rows = [_task("critic+full", 0, executed=9), _task("critic+pivotal", 0, executed=10)]
    result = paired(rows, "critic+pivotal", "critic+full")["gridworld@0.3"]
    assert result["executed"]["saved"] == pytest.approx(-1 / 9, abs=1e-3)
    assert result["executed"]["ci95"] is None and not result["executed"]["significant"]
    report = markdown(_results(rows), [])
    assert "-11% (too few tasks for an interval)" in report
    assert "too few tasks for an interval in every row" in report


def _retried_tasks() -> list[dict]:
    """30 tasks per env: a third fail once, which full retry pays 20 steps for and pivotal retry 14."""
    rows = []
    for env in ("gridworld", "taxi"):
        for i in range(30):
            failed_once = i % 3 == 0
            rows.append(_task("critic", i, status="failure" if failed_once else "success", env=env))
            for config, steps in (("critic+full", 20), ("critic+pivotal", 14)):
                cost = {"executed": steps, "calls": 40} if failed_once else {"executed": 10, "calls": 20}
                rows.append(_task(config, i, attempts=2 if failed_once else 1, env=env, **cost))
    return rows


def test_the_recommendation_follows_the_numbers_and_sits_beside_the_sim_caveat():
    report = markdown(_results(_retried_tasks()), [])
    top = report.split("## Paired comparisons")[0]
    assert "**Turn pivotal retry on in place of full retry**" in top
    assert "**critic+pivotal** against **critic+full**: success equal within the noise" in top
    assert "15% fewer (95% CI" in top  # per env 10 retried tasks: 10·14 + 20·10 steps against 10·20 + 20·10
    assert "about 20 LLM calls" in top  # retried tasks cost 40 calls, the rest 20: +6.7 calls per task for +33 pp
    assert "**Turn retry on** when a solved task is worth more than about" in top
    assert "`sim` caveat: the errors are synthetic" in top
    assert "| **all** | 60 | 20 |" in report
    assert "goal" not in report.lower()


def _results(rows):
    from pivotal.bench import metrics

    return {
        "meta": {
            "command": "test",
            "tasks_run": len(rows),
            "wall_s": 1.0,
            "model": "sim",
            "errors": [0.3],
            "envs": sorted({r["env"] for r in rows}),
            "streams": 1,
            "tasks": 30,
            "configs": [],
        },
        "groups": metrics.by_group(rows),
        "comparisons": comparisons(rows, COMPARISONS),
        "memory_curve": metrics.memory_curve(rows),
        "local": None,
    }


def test_the_plots_are_drawn_in_process(tmp_path):
    """The quick tier's look at the plots, which otherwise only the bench run above (slow) draws."""
    drawn = draw(tmp_path, _results(_retried_tasks()))
    assert [p.name for p in drawn] == ["success_cost.png", "paired.png", "memory_stream.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in drawn)


def test_local_runs_go_through_the_same_tables():
    """`--local N` with a fast stand-in model: the same metrics and the same paired tables, in its own section."""
    local = asyncio.run(local_results(local_plan(2, model="sim:error=0.3")))
    assert local["tasks"] == 2 and list(local["groups"]) == ["gridworld@0.0"]
    assert {(c["new"], c["baseline"]) for c in local["comparisons"]} == {
        ("critic+pivotal", "critic+full"),
        ("critic+pivotal", "critic"),
        ("critic+full", "critic"),
        ("critic", "actor"),
    }
    results = {**_results(local["records"]), "local": local}
    section = markdown(results, []).split("## Embedded local model")[1]
    assert "#### critic+pivotal against critic+full" in section and "| gridworld@0.0 |" in section
    assert "**all**" not in section  # one env@error: its row is the whole comparison
    assert "#### gridworld@0.0" in section and "| critic+pivotal |" in section


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


def test_ground_truth_replays_the_path_and_judges_each_proposal():
    """In gridworld seed 1 the expert's first move is good; a move off the grid is bad."""
    from pivotal.core.environments.gridworld import GridWorld
    from pivotal.core.task import Task

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


def test_the_help_counts_every_configuration():
    from pivotal.bench.ablations import CONFIGS, ON_ASK
    from pivotal.cli.bench import CONFIG_COUNT

    assert CONFIG_COUNT == len([config for config in CONFIGS if config not in ON_ASK])  # those a plan runs by default


def test_results_json_keeps_each_task_record_on_one_line():
    from pivotal.bench.report import results_json

    results = {
        "meta": {"command": "pivotal bench"},
        "groups": {},
        "records": [{"env": "taxi", "index": i} for i in range(3)],
    }
    text = results_json(results)
    assert json.loads(text) == results
    assert sum(line.strip().startswith('{"env":"taxi"') for line in text.splitlines()) == 3


def test_the_sign_test_reads_a_few_discordant_pairs_as_chance_and_many_as_real():
    assert sign_test(2, 5) == 0.453125  # 2 saved, 5 cost: 2 * P(X <= 2 | n=7, p=1/2)
    assert sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0
    assert sign_test(0, 10) < 0.002 and sign_test(10, 0) == sign_test(0, 10)
