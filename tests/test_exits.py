"""Every way a command ends is one line and prompt: the real CLI in a subprocess, each case bounded
in time, with no traceback and nothing half-written left behind.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from pivotal.testing.cli import preimported
from pivotal.testing.faulty_env import faulty_task as vault
from pivotal.testing.loopback_provider import loopback
from pivotal.testing.servers import BIN, free_port, wait_until_up

FAULTY = ["--plugin", "pivotal.testing.faulty_env"]
POSTGRES = "postgresql://postgres@127.0.0.1:5432"


def pivotal(tmp_path: Path, *argv: str, timeout: float = 90, env: dict[str, str] | None = None, **popen):
    """The real command line in `tmp_path`, with the sim model and no lesson store unless a test asks."""
    command = [sys.executable, "-m", "pivotal.cli", *argv]
    environment = {**os.environ, "PIVOTAL_MODEL": "sim", "PIVOTAL_STORE_PATH": str(tmp_path / "store"), **(env or {})}
    if popen:
        return subprocess.Popen(command, cwd=tmp_path, env=environment, text=True, **popen)
    return subprocess.run(command, cwd=tmp_path, env=environment, text=True, capture_output=True, timeout=timeout)


def forked(tmp_path: Path, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """`pivotal(...)` for a case that reads only what one command printed, its exit code and the files it
    left: a process forked from one that imported the command line once (`pivotal.testing.cli.preimported`).
    The cases about how a process ends (a hung tool's thread at exit, SystemExit and KeyboardInterrupt
    from tools, a server going away) start a fresh one with `pivotal`.
    """
    env = {"PIVOTAL_MODEL": "sim", "PIVOTAL_STORE_PATH": str(tmp_path / "store")}
    return preimported(*argv, cwd=tmp_path, env=env, timeout=timeout)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def write_tasks(path: Path, tasks: list[dict]) -> Path:
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks), encoding="utf-8")
    return path


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]


def batch_argv(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    tasks = str(tmp_path / "tasks.jsonl")
    return ["batch", tasks, "--out", str(out), "--checkpoints", str(tmp_path / "c.sqlite"), *FAULTY, *extra]


# --- hung tools ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_hung_tool_does_not_keep_the_batch_alive_after_its_summary(tmp_path):
    """The hung thread would have been joined at exit for ever: the summary was printed, the
    process never ended. Now it ends as soon as the results are written and the lock released.
    """
    holding = tmp_path / "holding"  # the hang outlives the test's patience unless this goes
    holding.touch()
    write_tasks(tmp_path / "tasks.jsonl", [vault("hang", seconds=600, while_exists=str(holding)), vault()])
    out = tmp_path / "out.jsonl"
    started = time.monotonic()
    try:
        done = pivotal(
            tmp_path, *batch_argv(tmp_path, out, "--no-memory"), env={"PIVOTAL_STEP_TIMEOUT": "1"}, timeout=60
        )
    finally:
        holding.unlink()
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    assert "2 tasks: 1 succeeded" in done.stdout and "Traceback" not in done.stderr, done.stderr
    assert sorted(r["status"] for r in rows(out)) == ["error", "success"]
    FileLock(f"{out}.lock", timeout=0).acquire()  # released: another batch could take it


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,said",
    [
        ("hang", "did not finish within 1 s (PIVOTAL_STEP_TIMEOUT)"),
        ("exit", "environment code raised SystemExit: 3"),
        ("interrupt", "environment code raised KeyboardInterrupt"),
        ("string", "FaultyVault.step returned str 'the door is open', not a StepResult"),
    ],
)
def test_pivotal_run_reports_an_environment_fault_in_one_line_and_exits(tmp_path, fault, said):
    holding = tmp_path / "holding"
    holding.touch()
    argv = ["run", "--env", "faulty-vault", "--goal", "Open the vault.", "--param", f"fault={fault}"]
    argv += ["--param", "seconds=600", "--param", f"while_exists={holding}", *FAULTY, "--no-memory"]
    argv += ["--max-pivot-retries", "0", "--checkpoints", str(tmp_path / "c.sqlite"), "--thread-id", "t1"]
    started = time.monotonic()
    try:
        done = pivotal(tmp_path, *argv, env={"PIVOTAL_STEP_TIMEOUT": "1"}, timeout=60)
    finally:
        holding.unlink()
    assert time.monotonic() - started < 60
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert line.startswith("pivotal: error: ") and said in line and "--thread-id" in line, line


# --- the results file and its marker --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "marker",
    [b"{not json", b"[1, 2]", b'{"thread_prefix": 7, "checkpoints": "c.sqlite"}', b"\xff\xfe\x00"],
    ids=["not-json", "not-an-object", "no-prefix", "not-utf8"],
)
def test_a_damaged_batch_marker_is_one_line_and_nothing_changes(tmp_path, marker):
    write_tasks(tmp_path / "tasks.jsonl", [vault()])
    out = tmp_path / "out.jsonl"
    out.write_text('{"line": 1, "status": "success"}\n{"line": 2, "sta', encoding="utf-8")
    (tmp_path / "out.jsonl.batch").write_bytes(marker)
    before = out.read_bytes()
    done = forked(tmp_path, *batch_argv(tmp_path, out, "--resume"))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"batch marker {out}.batch is damaged" in line and "--overwrite" in line, line
    assert out.read_bytes() == before and (tmp_path / "out.jsonl.batch").read_bytes() == marker


@pytest.fixture
def small_disk(tmp_path):
    """A folder on its own 1 MB filesystem, so the test can fill the results' disk mid-batch."""
    mount = tmp_path / "results"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the disk-full fault needs its own filesystem")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as blocks, contextlib.suppress(OSError):
        while True:
            blocks.write(b"\0" * 4096)
    return filler


@pytest.mark.slow
def test_a_full_results_disk_stops_the_batch_in_one_line_with_no_half_line(tmp_path, small_disk):
    """Before: a 33-line traceback and a result line cut off where the disk ran out."""
    write_tasks(tmp_path / "tasks.jsonl", [vault()] * 6)
    out = small_disk / "out.jsonl"
    argv = batch_argv(tmp_path, out, "--no-memory", "--concurrency", "1", "--model", "sim:latency=0.3")
    running = pivotal(tmp_path, *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (out.exists() and rows(out)) and time.monotonic() < deadline:
        time.sleep(0.05)
    filler = fill(small_disk)
    stdout, stderr = running.communicate(timeout=60)
    assert running.returncode == 2, stdout + stderr
    line = one_line(stderr)
    assert "No space left on device" in line and f"--out {out} --resume" in line, line
    text = out.read_text(encoding="utf-8")
    assert text.endswith("\n") and all(json.loads(row) for row in text.splitlines())  # every line whole
    answered = len(text.splitlines())
    assert 1 <= answered < 6
    filler.unlink()
    resumed = pivotal(tmp_path, *argv[:-2], "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(r["line"] for r in rows(out)) == [1, 2, 3, 4, 5, 6]


# --- tasks files --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_bom_before_the_first_task_line_is_accepted(tmp_path):
    """Editors on Windows save UTF-8 with a BOM: the first task used to be skipped as not JSON."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(b"\xef\xbb\xbf" + (json.dumps(vault()) + "\n").encode() * 2)
    out = tmp_path / "out.jsonl"
    done = forked(tmp_path, *batch_argv(tmp_path, out, "--no-memory"))
    assert done.returncode == 0 and "skipped" not in done.stderr, done.stderr
    assert [r["status"] for r in sorted(rows(out), key=lambda r: r["line"])] == ["success", "success"]


@pytest.mark.slow
def test_a_goal_with_bytes_that_are_not_utf8_is_refused_not_changed(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    bad = b'{"env": "faulty-vault", "goal": "Open the vault \xff now."}\n'
    tasks.write_bytes(bad + (json.dumps(vault()) + "\n").encode())
    out = tmp_path / "out.jsonl"
    done = forked(tmp_path, *batch_argv(tmp_path, out, "--no-memory"))
    assert done.returncode == 0, done.stderr
    line = one_line(done.stderr)
    at = bad.index(b"\xff") + 1
    assert (
        line
        == f"{tasks}:1: skipped: not UTF-8 text (byte 0xff at character {at} of the line); save the tasks file as UTF-8"
    )
    by_line = {r["line"]: r for r in rows(out)}
    assert by_line[1]["status"] == "error" and by_line[2]["status"] == "success"
    assert "\ufffd" not in out.read_text(encoding="utf-8")  # no goal was run with a replacement character


@pytest.mark.slow
def test_a_command_line_goal_that_is_not_utf8_is_refused(tmp_path):
    command = [sys.executable, "-m", "pivotal.cli", "run", "--goal", os.fsdecode(b"Open \xff the vault."), *FAULTY]
    command += ["--env", "faulty-vault", "--no-memory", "--checkpoints", ":memory:"]
    done = subprocess.run(
        command, cwd=tmp_path, env={**os.environ, "PIVOTAL_MODEL": "sim"}, capture_output=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == b""
    line = one_line(done.stderr.decode())
    assert "--goal is not UTF-8 text (byte 0xff at character 6)" in line, line


# --- shared services that go away mid-batch -----------------------------------------------------


def start_chroma(folder: Path, port: int) -> subprocess.Popen:
    log = folder / f"chroma-{port}-{time.monotonic_ns()}.log"
    command = [str(BIN / "chroma"), "run", "--path", str(folder / "data"), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_until_up(f"http://127.0.0.1:{port}/api/v2/heartbeat", server, log)
    return server


def wait_for_rows(out: Path, count: int, running: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while not (out.exists() and len(rows(out)) >= count) and time.monotonic() < deadline and running.poll() is None:
        time.sleep(0.05)


@pytest.mark.slow
def test_a_chroma_server_that_goes_away_stops_the_batch_like_a_full_disk(tmp_path):
    """Before: `ConnectError` rows on the tasks in flight and after, exit 0, as if each task had failed
    on its own. Now the batch stops with exit 2 and one line, and `--resume` finishes it once the
    server is back.
    """
    port = free_port()
    server = start_chroma(tmp_path, port)
    write_tasks(tmp_path / "tasks.jsonl", [vault()] * 10)
    out = tmp_path / "out.jsonl"
    argv = batch_argv(tmp_path, out, "--store-url", f"http://127.0.0.1:{port}", "--concurrency", "2")
    argv += ["--model", "sim:latency=0.2"]
    try:
        running = pivotal(tmp_path, *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for_rows(out, 2, running)
        server.kill()
        server.wait(timeout=30)
        stdout, stderr = running.communicate(timeout=90)
        assert running.returncode == 2, stdout + stderr
        line = one_line(stderr)
        assert "the lesson store server failed" in line and f"--out {out} --resume" in line, line
        answered = rows(out)
        assert 2 <= len(answered) < 10 and {r["status"] for r in answered} == {"success"}, answered
        server = start_chroma(tmp_path, port)
        resumed = pivotal(tmp_path, *argv, "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert sorted(r["line"] for r in rows(out)) == list(range(1, 11))
        assert {r["status"] for r in rows(out)} == {"success"}
    finally:
        server.kill()
        server.wait(timeout=30)


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A database of its own, so the test can shut it off mid-batch without touching anyone else's."""
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    name = f"pivotal_exits_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        pytest.skip(f"no Postgres at 127.0.0.1:5432 ({type(exc).__name__})")
    yield name
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.slow
def test_a_postgres_outage_is_one_line_on_the_terminal_and_the_pool_noise_goes_to_the_log(tmp_path, postgres_database):
    """Before: 16-17 psycopg pool warnings on stderr ahead of the line that says what to do."""
    import psycopg

    write_tasks(tmp_path / "tasks.jsonl", [vault()] * 10)
    out = tmp_path / "out.jsonl"
    argv = batch_argv(tmp_path, out, "--no-memory", "--concurrency", "2", "--model", "sim:latency=0.2")
    argv[argv.index("--checkpoints") + 1] = f"{POSTGRES}/{postgres_database}"
    running = pivotal(tmp_path, *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_rows(out, 2, running)
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:  # the outage: no connections
        admin.execute(f'ALTER DATABASE "{postgres_database}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (postgres_database,))
    stdout, stderr = running.communicate(timeout=90)
    assert running.returncode == 2, stdout + stderr
    line = one_line(stderr)
    assert "a database failed" in line and "--resume" in line, line
    logged = (tmp_path / ".pivotal" / "pivotal.log").read_text(encoding="utf-8")
    assert "psycopg.pool" in logged, logged


# --- a provider that never answers --------------------------------------------------------------


@pytest.mark.slow
def test_a_silent_provider_is_waited_for_once_per_run(tmp_path):
    """Before: every step and retry waited for it again (9 calls of 3 requests each for one task:
    27 minutes with the defaults). Now a run gives up on a model after one call timed out, so the
    defaults bound a silent provider to one `PIVOTAL_CALL_DEADLINE` (120 s) per run.
    """
    with loopback() as server:
        server.faults = [("timeout", 600)] * 100
        env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": server.base_url_openai, "PIVOTAL_REQUEST_TIMEOUT": "0.5"}
        argv = ["run", "--env", "faulty-vault", "--goal", "Open the vault.", *FAULTY, "--model", "openai:m"]
        started = time.monotonic()
        done = pivotal(tmp_path, *argv, "--no-memory", "--checkpoints", ":memory:", "--json", env=env, timeout=120)
        wall = time.monotonic() - started
        asked = len(server.requests)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "failure" and "not asked again in this run" in result["reason"], result["reason"]
    assert asked == 3, asked  # one call: the request and the SDK's 2 retries
    assert result["llm_calls"] == 1 and wall < 60, (result["llm_calls"], wall)


@pytest.mark.slow
def test_pivotal_run_whose_chroma_server_goes_away_ends_in_one_line(tmp_path):
    port = free_port()
    server = start_chroma(tmp_path, port)
    holding, started = tmp_path / "holding", tmp_path / "started"
    holding.touch()
    argv = ["run", "--env", "faulty-vault", "--goal", "Open the vault.", "--param", "fault=hang", *FAULTY]
    argv += ["--param", f"while_exists={holding}", "--param", f"started={started}", "--param", "seconds=60"]
    argv += ["--store-url", f"http://127.0.0.1:{port}", "--checkpoints", str(tmp_path / "c.sqlite")]
    try:
        running = pivotal(tmp_path, *argv, "--thread-id", "t1", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 90
        while not started.exists() and time.monotonic() < deadline and running.poll() is None:
            time.sleep(0.05)
        server.kill()  # while the tool hangs; the run then needs the store to write its lessons
        server.wait(timeout=30)
        holding.unlink()
        stdout, stderr = running.communicate(timeout=90)
    finally:
        server.kill()
    assert running.returncode == 2, stdout + stderr
    line = one_line(stderr)
    assert "the lesson store server failed" in line and "--thread-id t1" in line, line
