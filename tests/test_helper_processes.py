"""A helper process that dies says why: the chaos suite's store-contention workers once died with an
empty stdout, and `json.loads("")` was all anyone saw (issue 40).
"""

import subprocess
import sys

import pytest

from pivotal.testing.cli import HelperFailed, finish, json_output, preimported


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_helper_that_dies_is_reported_with_its_exit_code_and_stderr():
    died = "import sys; sys.stderr.write('Traceback ...\\nOSError: the worker could not open its model'); sys.exit(3)"
    done = python(died)
    with pytest.raises(HelperFailed) as failed:
        json_output(done)
    message = str(failed.value)
    assert "exited 3 and printed nothing" in message
    assert "OSError: the worker could not open its model" in message


def test_a_helper_that_exits_0_without_json_is_reported_with_its_stderr():
    done = python("import sys; print('not json'); sys.stderr.write('warning: the store was read-only')")
    with pytest.raises(HelperFailed, match="exited 0 and printed 9 characters, not JSON") as failed:
        json_output(done)
    assert "warning: the store was read-only" in str(failed.value)


def test_a_helper_json_is_read_whole_or_from_its_last_line():
    assert json_output(python("import json; print(json.dumps({'a': [1, 2]}, indent=2))")) == {"a": [1, 2]}
    assert json_output(python("print('starting'); print('{\"status\": \"success\"}')")) == {"status": "success"}


PLUGIN = """
import os, sys
print(f"plugin: cwd={os.getcwd()} flag={os.environ.get('FORK_FLAG')} first={sys.path[0]}", file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--model", "gpt-4o"],
        ["run", "--env", "nope", "--model", "sim"],
        ["batch", "missing.jsonl", "--out", "out.jsonl"],
        ["run", "--plugin", "fork_plugin", "--env", "nope", "--model", "sim"],
        ["envs"],
        ["no-such-command"],
    ],
    ids=["bad-model", "bad-env", "missing-tasks", "plugin-from-cwd", "envs", "argparse-exit"],
)
def test_a_preimported_command_prints_and_exits_as_a_fresh_process_does(tmp_path, argv):
    """`preimported` stands in for a fresh `python -m pivotal.cli` only where what it printed and its exit
    code are all a test reads: the same bytes on both streams and the same code, with the child's own
    folder (a plugin imported from it), environment and exit handlers.
    """
    (tmp_path / "fork_plugin.py").write_text(PLUGIN)
    env = {"FORK_FLAG": "set-for-this-command", "PIVOTAL_STORE_PATH": str(tmp_path / "store")}
    code, out, err = finish(*argv, cwd=tmp_path, env=env, timeout=120)
    forked = preimported(*argv, cwd=tmp_path, env=env, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (code, out, err)
    if "fork_plugin" in argv:
        assert f"plugin: cwd={tmp_path} flag=set-for-this-command first={tmp_path}" in forked.stderr


@pytest.mark.slow
def test_a_preimported_command_past_its_timeout_is_killed_and_said_so(tmp_path):
    argv = ["run", "--model", "sim:latency=5", "--no-memory", "--checkpoints", ":memory:"]
    with pytest.raises(subprocess.TimeoutExpired):
        preimported(*argv, cwd=tmp_path, timeout=3)
    assert preimported("run", "--model", "gpt-4o", cwd=tmp_path).returncode == 2  # the server goes on


SERVER = """
import http.server, sys
from pathlib import Path
tries = Path(sys.argv[1])
tries.write_text(tries.read_text() + "x" if tries.exists() else "x")
if len(tries.read_text()) == 1:
    sys.exit(sys.argv[3] + " (the first start)")
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Ok).serve_forever()
"""
"""A server whose first start dies printing its argument, and whose second answers."""


@pytest.mark.parametrize(
    ("first_words", "starts"),
    [("AttributeError: 'StreamHandler' object has no attribute 'lock'", 2), ("ImportError: no module named app", 1)],
    ids=["logging-race", "other-failure"],
)
def test_a_server_start_broken_by_the_logging_race_is_made_again_and_any_other_failure_is_raised(
    tmp_path, first_words, starts
):
    from pivotal.testing.servers import free_port, serve

    port, tries = free_port(), tmp_path / "tries"
    command = [sys.executable, "-c", SERVER, str(tries), str(port), first_words]
    if starts == 2:
        with serve(command, "/ok", port, tmp_path / "server.log") as url:
            assert url.endswith(str(port))
    else:
        with pytest.raises(RuntimeError, match="no module named app"), serve(command, "/ok", port, tmp_path / "s.log"):
            pass
    assert len(tries.read_text()) == starts
