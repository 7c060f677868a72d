"""Every setting and every input is checked up front: bad ones cost one line on stderr (exit 2),
never a traceback, a pydantic dump or a run that quietly goes on without saving. Each case runs
the real command line in a process of its own.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pivotal.testing.cli import preimported

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
from pivotal.core.environments import register_environment
from pivotal.core.environments.base import ActionSpec, StepResult

class Resets:
    """Whatever `reset` gives back (or raises) is the case under test."""

    def __init__(self, result):
        self.result = result

    def reset(self, task):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    def step(self, name, arguments):
        return StepResult("done", done=True, success=True)

    def describe_actions(self):
        return [ActionSpec("wait", "do nothing")]


NAMES = [f"inspect_subsystem_number_{i:02d}" for i in range(20)]


class Crowded:
    """Twenty actions; the pre-check refuses all but `finish` in the project's own words."""

    default_goal = "Finish the task."

    def reset(self, task):
        return "Twenty subsystems to inspect; only finish ends the task."

    def step(self, name, arguments):
        return StepResult(f"{name} done", done=name == "finish", success=name == "finish")

    def describe_actions(self):
        return [ActionSpec(n, "inspect one subsystem") for n in NAMES] + [ActionSpec("finish", "end the task")]

    def check(self, name, arguments):
        return None if name == "finish" else f"unknown action {name!r}; choose one of: {', '.join(NAMES)}"


register_environment("reset-raises", lambda: Resets(RuntimeError("license server\\nunreachable")))
register_environment("reset-returns-number", lambda: Resets(42))
register_environment("crowded", Crowded)
'''


def pivotal(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The CLI in `tmp_path` (no .env but the test's own), with no PIVOTAL_* from the caller."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("PIVOTAL_")}
    return subprocess.Popen(
        [sys.executable, "-m", "pivotal.cli", *argv],
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,
    )


def _interruptible() -> None:
    """Ctrl-C reaches the CLI as in a terminal, even when the suite itself runs in the background
    (`cmd &` in a script starts with SIGINT ignored, the child inherits that, and Python then never
    raises KeyboardInterrupt: the SIGINT test read exit 0).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`pivotal run` to its end, for the cases that read only what it printed and its exit code: in a
    process forked from one that imported the command line once (`pivotal.testing.cli.preimported`;
    every setting and `.env` is read when the command starts, never at import). The signal tests below
    start the command as a user's shell would, with `pivotal`.
    """
    flags = ("--model", "sim", "--no-memory", "--checkpoints", str(tmp_path / "c.sqlite"))
    clean = {key: value for key, value in os.environ.items() if not key.startswith("PIVOTAL_")}
    done = preimported("run", *flags, *argv, cwd=tmp_path, environ=clean, env=env, timeout=120)
    return done.returncode, done.stdout, done.stderr


def assert_one_line(err: str, *needles: str) -> None:
    assert err.count("\n") == 1 and err.startswith("pivotal: "), err
    assert "Traceback" not in err and "pydantic" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "variable,value,needle",
    [
        (
            "PIVOTAL_REQUEST_TIMEOUT",
            "abc",
            "PIVOTAL_REQUEST_TIMEOUT='abc' is not valid: input should be a valid number",
        ),
        ("PIVOTAL_MAX_LESSONS", "many", "PIVOTAL_MAX_LESSONS='many' is not valid: input should be a valid integer"),
        ("PIVOTAL_MAX_RETRIES", "-5", "PIVOTAL_MAX_RETRIES='-5' is not valid: input should be greater than or equal"),
        ("PIVOTAL_REQUEST_TIMEOUT", "0", "PIVOTAL_REQUEST_TIMEOUT='0' is not valid: input should be greater than 0"),
        ("PIVOTAL_LOCAL_THREADS", "0", "PIVOTAL_LOCAL_THREADS='0' is not valid"),
        ("PIVOTAL_REQUESTS_PER_SECOND", "-1", "PIVOTAL_REQUESTS_PER_SECOND='-1' is not valid"),
        ("PIVOTAL_LOG_LEVEL", "loud", "PIVOTAL_LOG_LEVEL='LOUD' is not valid: input should be 'DEBUG'"),
        ("PIVOTAL_CHECKPOINT_PATH", "", "PIVOTAL_CHECKPOINT_PATH or PIVOTAL_CHECKPOINT_URL is set but empty"),
        ("PIVOTAL_STORE_PATH", " ", "PIVOTAL_STORE_PATH is set but empty"),
        ("PIVOTAL_MODEL", "", "PIVOTAL_MODEL is set but empty"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(tmp_path, variable, value, needle):
    code, out, err = run(tmp_path, env={variable: value})
    assert code == 2 and out == ""
    assert_one_line(err, needle, "remove it to use the default")
    assert not (tmp_path / "c.sqlite").exists()  # refused before any work


@pytest.mark.slow
def test_a_bad_setting_in_dotenv_is_named_too(tmp_path):
    (tmp_path / ".env").write_text("PIVOTAL_MAX_LESSONS=many\n", encoding="utf-8")
    code, _, err = run(tmp_path)
    assert code == 2
    assert_one_line(err, "PIVOTAL_MAX_LESSONS='many' is not valid", "fix it in the environment or .env")


@pytest.mark.slow
def test_a_dotenv_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / ".env").write_bytes(b"PIVOTAL_MODEL=sim\nOPENAI_API_KEY=caf\xe9\n")
    code, _, err = run(tmp_path)
    assert code == 2
    assert_one_line(err, f"{tmp_path / '.env'} is not UTF-8 text (line 2); save it as UTF-8")


@pytest.mark.slow
def test_a_dotenv_with_a_byte_order_mark_just_works(tmp_path):
    (tmp_path / ".env").write_text("PIVOTAL_MODEL=sim\n", encoding="utf-8-sig")  # as Windows Notepad saves it
    process = pivotal(tmp_path, "run", "--no-memory", "--checkpoints", ":memory:")  # the model comes from .env
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0 and "success: goal reached" in out, err
    (tmp_path / ".env").write_text("PIVOTAL_MAX_LESSONS=many\n", encoding="utf-8-sig")  # its first line is read
    assert_one_line(run(tmp_path)[2], "PIVOTAL_MAX_LESSONS='many'")


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--env", "frozenlake", "--param", "map=9x9"], "frozenlake parameter map='9x9' is not valid: input should be"),
        (["--env", "frozenlake", "--param", "size=big"], "frozenlake parameter size='big' is not valid"),
        (["--env", "taxi", "--param", "seed=-3"], "taxi parameter seed=-3 is not valid"),
        (["--param", "size=40"], "gridworld parameter size=40 is not valid: input should be less than or equal to 12"),
        (["--env", "configs", "--param", "seed=x"], "configs parameter seed='x' is not valid"),
        (["--param", "sise=4"], "gridworld has no parameter 'sise': did you mean size? it takes seed, size, walls"),
    ],
)
def test_a_bad_environment_parameter_is_one_line(tmp_path, argv, needle):
    code, out, err = run(tmp_path, *argv)
    assert code == 2 and out == ""
    assert_one_line(err, needle)


@pytest.mark.slow
@pytest.mark.parametrize(
    "env,needle",
    [
        ("reset-raises", "environment 'reset-raises': reset() raised RuntimeError: license server unreachable"),
        ("reset-returns-number", "environment 'reset-returns-number': reset() returned int 42, not the first obs"),
    ],
)
def test_an_environment_whose_reset_fails_is_named_in_one_line(tmp_path, env, needle):
    (tmp_path / "hostile_envs.py").write_text(PLUGIN)
    code, out, err = run(tmp_path, "--plugin", "hostile_envs", "--env", env, "--goal", "anything")
    assert code == 2 and out == ""
    assert_one_line(err, needle)


@pytest.mark.slow
def test_a_precheck_reason_over_the_schema_limit_is_clipped_not_fatal(tmp_path):
    (tmp_path / "hostile_envs.py").write_text(PLUGIN)
    code, out, err = run(tmp_path, "--plugin", "hostile_envs", "--env", "crowded", "--json")
    assert code == 0 and "Traceback" not in err, err
    result = json.loads(out)
    assert result["status"] in ("success", "failure") and result["critic"]["prechecked"] > 0
    assert len(result["reason"]) < 600  # a failure's reason quotes the last verdict, cut to the schema's 400


class _EmptyChoices(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers 200 with no choices at all."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": []})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_an_empty_choices_list_is_reported_in_words(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmptyChoices)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        model = f"openai-compatible:m@http://127.0.0.1:{server.server_address[1]}/v1"
        code, out, err = run(tmp_path, "--model", model, "--max-steps", "1", "--retry", "none")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0 and "Traceback" not in err, err
    assert "the model server sent an empty `choices` list" in out, out


def _wait_for(condition, process: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the command never got going"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_during_run_says_how_to_continue(tmp_path):
    argv = ("run", "--model", "sim:latency=0.2", "--no-memory", "--checkpoints", "c.sqlite", "--thread-id", "t1")
    process = pivotal(tmp_path, *argv)
    _wait_for(lambda: (tmp_path / "c.sqlite").exists(), process)
    time.sleep(1.0)  # a few steps in
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert_one_line(err, "terminated (SIGTERM)", "continue with the same command (same --thread-id)")
    again = pivotal(tmp_path, *argv)  # what the line says works
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and "success: goal reached" in out, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "sent,code,said", [(signal.SIGTERM, 143, "terminated (SIGTERM)"), (signal.SIGINT, 130, "interrupted")]
)
def test_a_stopped_batch_points_to_resume(tmp_path, sent, code, said):
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps({"params": {"seed": s}}) + "\n" for s in range(6)))
    argv = ("batch", "tasks.jsonl", "--out", "results.jsonl", "--model", "sim:latency=0.1", "--no-memory")
    process = pivotal(tmp_path, *argv, "--concurrency", "1", "--checkpoints", "c.sqlite")
    results = tmp_path / "results.jsonl"
    _wait_for(lambda: results.exists() and results.read_text().count("\n") >= 1, process)
    process.send_signal(sent)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert_one_line(err, said, "continue with `pivotal batch tasks.jsonl --out results.jsonl --resume`")
    assert "--thread-id" not in err
    resumed = pivotal(tmp_path, *argv, "--resume")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0 and "6 tasks: 6 succeeded" in out, err


_STOPPED_INSIDE_THE_LOOP = """
import asyncio, os, signal, sys
from pivotal.cli.main import _sigterm_as_interrupt
signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == "ignored" else signal.default_int_handler)
from pivotal.core.errors import Terminated
seen = []
async def work():
    os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler right after this line returns
    seen.append("the line after the kill")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        seen.append("cancelled at its await")
        raise
try:
    with _sigterm_as_interrupt(), asyncio.Runner() as runner:
        runner.run(work())
except Terminated:
    print(seen)
"""


@pytest.mark.parametrize("ctrl_c", ["handled", "ignored"])  # ignored: a script's background job
def test_a_sigterm_inside_the_event_loop_stops_the_run_at_an_await_as_ctrl_c_does(ctrl_c):
    """Raised from the handler, the stop landed in whatever line ran — asyncio's, LangGraph's or a
    tool's — where it could be swallowed or cut a clean-up in half (a SIGTERM'd batch once outlived
    its 60 s under load); handed to asyncio's Ctrl-C handler, it cancels the run at its next await.
    """
    script = [sys.executable, "-c", _STOPPED_INSIDE_THE_LOOP, ctrl_c]
    done = subprocess.run(script, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['the line after the kill', 'cancelled at its await']", done.stderr
