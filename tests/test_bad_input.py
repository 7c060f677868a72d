"""Bad input gets one clear line before any work starts, and loses nothing."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.tools import tool

from pivotal.cli import main
from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.tools import ToolEnvironment
from pivotal.core.errors import PivotalError
from pivotal.graphs import arun

ROOT = Path(__file__).resolve().parents[1]
SIM = dict(model="sim", memory=False)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--env", "nope"], "unknown environment 'nope'; choose one of"),
        (["--model", "gpt-4"], "unknown model spec 'gpt-4'; accepted forms"),
        (["--model", "sim:error=2"], "sim option error must be between 0 and 1"),
        (["--model", "openai-compatible:llama3"], "needs <model>@<base_url>"),
        (["--model", "local:/no/such/model.gguf"], "local model file not found"),
        (["--max-steps", "0"], "max_steps must be > 0"),
        (["--param", "seed"], "--param needs KEY=VALUE"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, needle):
    code, out, err = cli(capsys, "run", "--store", str(tmp_path / "s"), "--checkpoints", ":memory:", *argv)
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("provider,variable", [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")])
def test_missing_key_names_the_variable_to_set(capsys, monkeypatch, tmp_path, provider, variable):
    monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    code, _, err = cli(capsys, "run", "--model", f"{provider}:some-model", "--checkpoints", ":memory:")
    assert code == 2 and f"set {variable}" in err


def test_unreachable_base_url_is_refused_before_any_step(capsys):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _, err = cli(
        capsys,
        "run",
        "--model",
        f"openai-compatible:m@http://127.0.0.1:{port}/v1",
        "--no-memory",
        "--checkpoints",
        ":memory:",
    )
    assert code == 2 and f"cannot reach the model endpoint http://127.0.0.1:{port}/v1" in err


def test_a_file_that_is_not_gguf_is_refused(capsys, tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model")
    code, _, err = cli(capsys, "run", "--model", f"local:{fake}", "--no-memory", "--checkpoints", ":memory:")
    assert code == 2 and "not a GGUF file" in err


def test_unusable_store_directory_is_refused_before_any_step(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = cli(capsys, "run", "--model", "sim", "--store", str(blocker / "store"), "--checkpoints", ":memory:")
    assert code == 2 and "lesson store" in err and str(blocker) in err


def test_an_unwritable_cache_folder_is_refused_before_any_step(capsys, tmp_path, monkeypatch):
    from pivotal.core.settings import settings

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("PIVOTAL_CACHE_DIR", str(blocker / "cache"))
    settings.cache_clear()
    try:
        store = str(tmp_path / "store")
        code, out, err = cli(capsys, "run", "--model", "sim", "--store", store, "--checkpoints", ":memory:")
    finally:
        settings.cache_clear()
    assert code == 2 and "cannot create the cache folder" in err and "PIVOTAL_CACHE_DIR" in err
    assert "step 1" not in out  # nothing ran


def test_empty_goal_is_refused():
    with pytest.raises(PivotalError, match="the task is empty"):
        import asyncio

        asyncio.run(arun("   ", Context(**SIM), checkpoint_path=":memory:"))


async def test_task_with_a_bad_field_is_refused():
    with pytest.raises(PivotalError, match="invalid task: env"):
        await arun({"env": "  "}, Context(**SIM), checkpoint_path=":memory:")


@tool
def flaky_lookup() -> str:
    """Look the record up."""
    raise ConnectionError("backend down while reading the record")


@tool
def finish(answer: str) -> str:
    """Give the final answer."""
    return f"answer recorded: {answer}"


register_environment(
    "flaky",
    lambda: ToolEnvironment(
        [flaky_lookup, finish], lambda task, calls: True if any(c["tool"] == "finish" for c in calls) else None
    ),
)


def test_a_tool_that_raises_becomes_an_observation():
    env = ToolEnvironment([flaky_lookup, finish], lambda task, calls: None)
    from pivotal.core.task import Task

    env.reset(Task(goal="g", env="flaky"))
    result = env.step("flaky_lookup", {})
    assert not result.done
    assert result.observation == "flaky_lookup raised ConnectionError: backend down while reading the record"


async def test_a_run_through_a_raising_tool_still_ends_with_an_outcome():
    result = await arun(
        {"goal": "look the record up, then finish", "env": "flaky"},
        Context(model="sim:seed=3,error=1.0", critic=False, memory=False, max_steps=4, max_pivot_retries=0),
        checkpoint_path=":memory:",
    )
    assert result.status in ("success", "failure") and result.reason
    raised = [s for s in result.trajectory if "raised ConnectionError" in s["observation"]]
    assert raised, [s["observation"] for s in result.trajectory]


def test_long_observations_are_clipped_with_head_and_tail_kept():
    from pivotal.prompts import SEE_MORE, clip

    text = "HEAD " + "x" * 10_000 + " TAIL"
    clipped = clip(text, 200, hint=SEE_MORE)
    assert len(clipped) <= 200 and clipped.startswith("HEAD") and clipped.endswith("TAIL")


@pytest.mark.slow
def test_cli_json_has_the_documented_fields(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pivotal.cli",
            "run",
            "--env",
            "gridworld",
            "--model",
            "sim",
            "--store",
            str(tmp_path / "s"),
            "--checkpoints",
            str(tmp_path / "c.sqlite"),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["status"] == "success"
    assert {"approved", "revised", "rejected"} <= set(summary["critic"])
    assert {"strategy", "count"} <= set(summary["retries"])
    assert {"recalled", "written"} <= set(summary["lessons"])
    assert summary["trajectory_length"] == len(summary["trajectory"]) and summary["thread_id"]
    assert summary["steps"] == summary["executed"] + summary["replayed"]
    assert summary["retries"]["replayed_steps"] == summary["replayed"]
    assert summary["usage"]["actor"]["input_tokens"] > 0


def test_cli_trace_and_exit_code_of_a_failed_task(capsys, tmp_path):
    argv = ["run", "--model", "sim", "--no-memory", "--max-steps", "1", "--retry", "none", "--checkpoints", ":memory:"]
    assert cli(capsys, *argv)[0] == 0  # the run finished; its outcome is in the output
    code, out, _ = cli(capsys, *argv, "--check")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("task ") and "step 0: actor proposes" in lines[1]
    assert any(line.strip().startswith("executed ") for line in lines)
    assert any(line.startswith("failure: step budget of 1") for line in lines)


@pytest.mark.parametrize(
    ("build", "spec"),
    [
        (lambda tools: __import__("pivotal").create_pivotal_agent("gpt-4o-mini", tools, memory=False), "gpt-4o-mini"),
        (lambda tools: __import__("pivotal").create_pivotal_agent("sim", tools, critic_model="claude-haiku"),
         "claude-haiku"),
        (lambda tools: __import__("pivotal").build_graph(context=Context(model="opnai:")), "opnai:"),
        (lambda tools: __import__("pivotal").PivotalCritic("gpt-4o-mini"), "gpt-4o-mini"),
    ],
    ids=["agent-model", "agent-critic-model", "build-graph", "critic-middleware"],
)  # fmt: skip
def test_a_model_spec_that_is_no_spec_is_refused_when_the_agent_is_built(build, spec):
    """`create_pivotal_agent("gpt-4o-mini", tools)` (the provider left out) was accepted and the app
    served; each run then failed on it. The spec's form is checked when built, in one line (its key
    and endpoint are checked when a run starts: a deployment may set them later).
    """

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    with pytest.raises(PivotalError) as refused:
        build([refund])
    assert str(refused.value).startswith(f"unknown model spec {spec!r}; accepted forms")
    assert len(str(refused.value).splitlines()) == 1


def test_create_pivotal_agent_given_a_whole_context_says_how_to_pass_its_settings():
    """`create_pivotal_agent(model, tools, context=Context(require_approval_for=["refund"]))`, the way
    `build_graph(context=...)` takes settings, was refused as "unknown context key 'context'", which
    reads as if the settings were wrong. The line now says the agent takes Context fields as keywords.
    """
    from pivotal import create_pivotal_agent

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    with pytest.raises(PivotalError) as refused:
        create_pivotal_agent("sim", [refund], context=Context(require_approval_for=["refund"]))
    text = str(refused.value)
    assert len(text.splitlines()) == 1
    assert "keyword" in text and "require_approval_for=" in text, text
