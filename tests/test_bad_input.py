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


# --- plain functions as tools, as LangChain's create_agent takes them ------------------------------


def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: shipped"


def refund_order(order_id: str, amount: float) -> str:
    """Refund an order. Cannot be undone."""
    return f"refunded {amount} on {order_id}"


def test_plain_functions_are_tools_to_the_agent_the_critic_and_the_environment_alike():
    """A plain function was met by `AttributeError: 'function' object has no attribute 'name'` in all
    three, where LangChain's `create_agent` takes it. It is converted as LangChain converts it (its
    `tool`), so the name, description and arguments are the ones `create_agent` would give the model.
    """
    from pivotal import PivotalCritic, create_pivotal_agent
    from pivotal.core.task import Task

    functions = [lookup_order, refund_order]
    env = ToolEnvironment(functions, None, irreversible=["refund_order"])
    converted = {name: (t.description, t.args) for name, t in env.tools.items()}
    assert converted == {f.__name__: (tool(f).description, tool(f).args) for f in functions}
    env.reset(Task(goal="refund A1", env="plain"))
    assert env.step("lookup_order", {"order_id": "A1"}).observation == "lookup_order returned: order A1: shipped"
    assert create_pivotal_agent("sim", functions, irreversible=["refund_order"], memory=False) is not None
    critic = PivotalCritic("sim", irreversible=["refund_order"], tools=functions)
    assert set(critic._tools) == {"lookup_order", "refund_order"}


def no_docstring(order_id: str) -> str:
    return order_id


@pytest.mark.parametrize(
    ("tools", "needle"),
    [
        ([lookup_order, 42], "tools[1] is int 42, not a tool; pass a LangChain tool (@tool) or a plain function"),
        ([{"name": "refund"}], "tools[0] is dict {'name': 'refund'}, not a tool"),
        (lookup_order, "tools must be a list, not function"),
        ("lookup_order", "tools must be a list, not str 'lookup_order'"),
        ([no_docstring], "tools[0] (no_docstring) cannot be made a tool: Function must have a docstring"),
    ],
    ids=["int", "dict", "one-function", "str", "no-docstring"],
)
@pytest.mark.parametrize("build", ["agent", "critic", "environment"])
def test_what_is_no_tool_is_refused_in_one_line(tools, needle, build):
    from pivotal import PivotalCritic, create_pivotal_agent

    builders = {
        "agent": lambda: create_pivotal_agent("sim", tools, memory=False),
        "critic": lambda: PivotalCritic("sim", tools=tools),
        "environment": lambda: ToolEnvironment(tools),
    }
    with pytest.raises(PivotalError) as refused:
        builders[build]()
    assert needle in str(refused.value) and len(str(refused.value).splitlines()) == 1


# --- the run API's arguments ------------------------------------------------------------------------


def _agent():
    from langgraph.checkpoint.memory import InMemorySaver

    from pivotal import create_pivotal_agent

    return create_pivotal_agent("sim", [lookup_order], memory=False, max_pivot_retries=0, checkpointer=InMemorySaver())


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda run: run("hi", "sim"), "context must be a Context, e.g. Context(model='sim', max_steps=20), not str "
         "'sim'; a model spec goes in Context(model='sim')"),
        (lambda run: run("hi", graph="notagraph"), "graph must be a compiled graph (create_pivotal_agent(...), "
         "build_graph(...)), not str 'notagraph'"),
        (lambda run: run("hi", Context(**SIM), checkpointer="x.sqlite"), "checkpointer must be a LangGraph"),
        (lambda run: run("hi", Context(**SIM), checkpoint_path=3), "checkpoint_path must be a SQLite file's path"),
        (lambda run: run("hi", Context(**SIM), thread_id=7), "thread_id must be a str, not int 7"),
        (lambda run: run("hi", Context(**SIM), plugins="my_envs"), "plugins must be a list of module names"),
    ],
    ids=["context-str", "graph-str", "checkpointer", "checkpoint-path", "thread-id", "plugins-str"],
)  # fmt: skip
def test_a_run_argument_of_the_wrong_kind_is_named_in_one_line(call, needle):
    """`run("hi", "sim")` raised `AttributeError: 'str' object has no attribute 'default_env'` from deep
    inside, `run("hi", graph="notagraph")` the same for `context_schema`; and `plugins="my_envs"` was
    read as the plugins m, y, _, ... Each is refused naming the parameter and what it takes.
    """
    from pivotal.graphs import run

    with pytest.raises(PivotalError) as refused:
        call(run)
    assert needle in str(refused.value) and len(str(refused.value).splitlines()) == 1


def test_a_checkpoint_path_may_be_a_path(tmp_path):
    """A `pathlib.Path` is what a user has in hand for a file: taken as the file it names."""
    from pivotal.graphs import run

    done = run({"env": "gridworld", "goal": "reach the goal"}, Context(**SIM), checkpoint_path=tmp_path / "cp.sqlite")
    assert done.status in ("success", "failure") and (tmp_path / "cp.sqlite").exists()


def test_resume_and_batches_check_their_arguments_too():
    import asyncio

    from pivotal.graphs import resume, run, run_batch

    with pytest.raises(PivotalError, match=r"^context must be a Context, .*Context\(model='sim'\)$"):
        resume("t1", {"decision": "approve"}, "sim")
    with pytest.raises(PivotalError, match="^graph must be a compiled graph"):
        resume("t1", {"decision": "approve"}, graph=object())
    with pytest.raises(PivotalError, match="^context must be a Context"):
        asyncio.run(run_batch(["hi"], "sim"))
    agent = _agent()  # a right graph and context still run
    assert run("walk", graph=agent, thread_id="t-ok").status in ("success", "failure")


@pytest.mark.parametrize("given", [None, "runs.sqlite", {}], ids=["none", "str", "dict"])
def test_redacting_refuses_what_is_no_checkpointer(given):
    """`pivotal.redacting(None)` handed None back: the app looked covered and nothing was redacted."""
    import pivotal

    with pytest.raises(PivotalError, match="^checkpointer must be a LangGraph checkpointer .*; pass the saver"):
        pivotal.redacting(given)


def test_a_graph_built_with_no_checkpointer_or_a_parents_still_builds():
    """LangGraph's own checkpointer values (None: none; True: a subgraph's use of its parent's) are
    not `redacting`'s to refuse; a str is.
    """
    from pivotal import build_graph

    assert build_graph(context=Context(**SIM)).checkpointer is None
    assert build_graph(True, context=Context(**SIM)).checkpointer is True
    with pytest.raises(PivotalError, match="^checkpointer must be a LangGraph checkpointer"):
        build_graph("runs.sqlite", context=Context(**SIM))


# --- environment parameters --------------------------------------------------------------------------


def test_a_misspelt_environment_parameter_is_refused_naming_the_closest(capsys):
    """`pivotal run --env gridworld --param sise=4` ran the default 6x6 grid and exited 0: pydantic
    drops a key the environment's `params` model does not name.
    """
    code, out, err = cli(capsys, "run", "--no-memory", "--model", "sim", "--checkpoints", ":memory:",
                         "--param", "sise=4")  # fmt: skip
    assert code == 2 and out == ""
    assert err == (
        "pivotal: error: gridworld has no parameter 'sise': did you mean size? it takes seed, size, walls, "
        "holes (see `pivotal envs`); fix the name (--param size=VALUE)\n"
    )


async def test_the_python_api_and_a_direct_invoke_refuse_it_alike():
    from pivotal import build_graph
    from pivotal.graphs.checks import check_task

    with pytest.raises(PivotalError, match="^frozenlake has no parameter 'slipery': did you mean slippery?"):
        await arun({"env": "frozenlake", "params": {"slipery": False}}, Context(**SIM), checkpoint_path=":memory:")
    with pytest.raises(PivotalError, match="^taxi has no parameter 'colour': it takes seed"):
        check_task({"env": "taxi", "params": {"colour": "red"}})
    with pytest.raises(PivotalError, match="^gridworld has no parameter 'sise'"):  # Studio, invoke: no run API
        await build_graph(context=Context(**SIM)).ainvoke({"task": {"env": "gridworld", "params": {"sise": 4}}})


def test_a_batch_line_with_a_misspelt_parameter_is_its_own_bad_line(tmp_path):
    """`pivotal batch` records a bad line as its own error row and runs the others: a misspelt key is
    such a line, not a refusal of the whole batch when it starts.
    """
    from pivotal.cli.batch import read_tasks

    path = tmp_path / "tasks.jsonl"
    path.write_text('{"env": "gridworld", "params": {"sise": 4}}\n{"env": "gridworld", "params": {"size": 4}}\n')
    good, bad = read_tasks(path)
    assert [number for number, _ in good] == [2]
    assert bad == [(1, "gridworld has no parameter 'sise': did you mean size? it takes seed, size, walls, holes "
                       "(see `pivotal envs`); fix the name (--param size=VALUE)")]  # fmt: skip


def test_an_environment_that_cannot_say_what_it_reads_takes_any_parameter():
    """A ToolEnvironment's verifier, or a plugin's reset, may read any key: only an environment whose
    `params` model belongs to the `reset` that reads it is held to it. `kinds-grid` inherits
    GridWorld's model but its own `reset` also reads `kind`.
    """
    import pivotal.testing.plugin_envs  # noqa: F401 — registers kinds-grid and forward-grid
    from pivotal.graphs.checks import check_task

    assert check_task({"env": "flaky", "params": {"anything": 1}}).params == {"anything": 1}
    assert check_task({"env": "kinds-grid", "params": {"kind": "a", "seed": 2}}).params["kind"] == "a"
    with pytest.raises(PivotalError, match="^forward-grid has no parameter 'kind'"):  # reset is GridWorld's
        check_task({"env": "forward-grid", "params": {"kind": "a"}})


# --- argparse's own errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["resume", "X", "--decision", "maybe"], "pivotal: error: argument --decision: invalid choice: 'maybe' "
         "(choose from 'approve', 'reject'); see `pivotal resume --help`"),
        (["run", "--max-steps", "x"], "pivotal: error: argument --max-steps: invalid int value: 'x'; see "
         "`pivotal run --help`"),
        ([], "pivotal: error: the following arguments are required: command; see `pivotal --help`"),
    ],
    ids=["choice", "type", "no-command"],
)  # fmt: skip
def test_an_argument_argparse_refuses_is_one_line_too(capsys, argv, line):
    """The subcommand's whole usage block came first (22 lines for `pivotal resume`)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "" and err == line + "\n"


def test_help_still_shows_the_whole_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["resume", "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0 and out.startswith("usage: pivotal resume") and "--decision" in out
    assert len(out.splitlines()) > 20
