"""Structured logs: one JSON event per node transition off a terminal, text on one; no secrets anywhere."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pivotal.core import logs

ROOT = Path(__file__).resolve().parents[1]
PLANTED = "sk-planted-0123456789abcdefXYZ"


def _cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pivotal.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_every_node_transition_is_one_json_event_with_its_fields(tmp_path):
    done = _cli(
        "run",
        "--env",
        "gridworld",
        "--seed",
        "7",
        "--model",
        "sim:error=0.35,seed=7",
        "--max-steps",
        "12",
        "--no-critic",
        "--store",
        str(tmp_path / "store"),
        "--checkpoints",
        ":memory:",
        "--json",
        PIVOTAL_LOG_LEVEL="INFO",
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines()]  # not a terminal: every line is JSON
    nodes = [e for e in events if e["event"] == "node"]
    result = json.loads(done.stdout)
    assert {e["node"] for e in nodes} >= {
        "start",
        "recall",
        "actor",
        "critic",
        "executor",
        "reflector",
        "pivot",
        "distill",
        "dedup",
        "gate",
        "memory_writer",
    }
    assert all({"run_id", "task_id", "step", "latency_ms", "tokens", "level", "timestamp"} <= set(e) for e in nodes)
    assert {e["run_id"] for e in nodes} == {result["run_id"]} and {e["task_id"] for e in nodes} == {
        result["task"]["id"]
    }
    verdicts = [e["verdict"] for e in nodes if e["node"] == "critic"]
    assert verdicts.count("approve") == result["critic"]["approved"]
    assert verdicts.count("reject") == result["critic"]["rejected"] > 0  # the pre-check's rejections
    assert sum(e["node"] == "executor" for e in nodes) == result["executed"]


@pytest.mark.slow
def test_the_level_comes_from_settings(tmp_path):
    done = _cli(
        "run",
        "--env",
        "gridworld",
        "--model",
        "sim",
        "--no-memory",
        "--checkpoints",
        ":memory:",
        PIVOTAL_LOG_LEVEL="WARNING",
    )
    assert done.returncode == 0 and done.stderr == ""


def test_logs_are_human_readable_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    try:
        logs.configure("INFO")
        logs.logger().info("node", node="actor", step=3)
    finally:
        monkeypatch.undo()
        logs.configure("WARNING")
    line = terminal.getvalue().strip()
    assert "node" in line and "actor" in line
    assert not line.startswith("{")


@pytest.mark.slow
def test_a_planted_key_never_reaches_logs_or_results(tmp_path):
    """The tool prints the key; the run, its debug logs, its JSON and a batch's results must not."""
    env = {"OPENAI_API_KEY": PLANTED, "PIVOTAL_LOG_LEVEL": "DEBUG"}
    single = _cli(
        "run",
        "--env",
        "leaky",
        "--goal",
        "show the configuration",
        "--plugin",
        "pivotal.testing.leaky_env",
        "--model",
        "sim",
        "--store",
        str(tmp_path / "store"),
        "--checkpoints",
        str(tmp_path / "cp.sqlite"),
        "--json",
        **env,
    )
    assert single.returncode == 0, single.stderr
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"env": "leaky", "goal": "show the configuration"}) + "\n")
    batch = _cli(
        "batch",
        str(tmp_path / "tasks.jsonl"),
        "--out",
        str(tmp_path / "results.jsonl"),
        "--plugin",
        "pivotal.testing.leaky_env",
        "--model",
        "sim",
        "--store",
        str(tmp_path / "store2"),
        "--checkpoints",
        str(tmp_path / "cp2.sqlite"),
        **env,
    )
    assert batch.returncode == 0, batch.stderr
    everything = single.stdout + single.stderr + batch.stdout + batch.stderr + (tmp_path / "results.jsonl").read_text()
    for artefact in ("cp.sqlite", "cp2.sqlite"):  # checkpoints hold every observation
        everything += (tmp_path / artefact).read_bytes().decode("latin-1")
    for store in ("store", "store2"):  # lessons distilled from those observations
        everything += "".join(p.read_bytes().decode("latin-1") for p in (tmp_path / store).rglob("*") if p.is_file())
    assert "key=[redacted]" in json.loads(single.stdout)["trajectory"][0]["observation"]  # it did pass through
    assert PLANTED not in everything
