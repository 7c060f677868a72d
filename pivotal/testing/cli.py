"""`pivotal ...` as a user runs it, in a process of its own: the tests that kill, resume and share
state across processes start the CLI this way, and read what such a process printed.
"""

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """From a folder of its own, so nothing local carries state over between processes."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "pivotal.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(*args: str, timeout: float = 300, **kwargs) -> tuple[int, str, str]:
    """Run to the end: exit code, stdout, stderr."""
    process = cli(*args, **kwargs)
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


class HelperFailed(RuntimeError):
    """A helper process exited non-zero or printed no JSON."""


def json_output(done: subprocess.CompletedProcess) -> Any:
    """The JSON a helper process printed (all of stdout, or else its last line). A process that died
    prints nothing, and `json.loads("")` alone says nothing of why: the error carries its exit code
    and the end of its stderr.
    """
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        for text in (done.stdout, lines[-1]):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                pass
    command = " ".join(str(part) for part in done.args) if isinstance(done.args, list) else str(done.args)
    printed = f"printed {len(done.stdout)} characters, not JSON" if lines else "printed nothing"
    raise HelperFailed(
        f"helper process exited {done.returncode} and {printed}: {command[:300]}\n"
        f"its stderr:\n{done.stderr[-3000:] or '(empty)'}"
    )


PRELOADED = (
    "pivotal.cli.main",
    "pivotal.graphs.runner",
    "pivotal.memory.policy.registry",
    "pivotal.memory.storage.chroma",
    "pivotal.memory.storage.embeddings",
)
"""What the fork server imports once, before it forks: the command line, the graph, the store and its
embeddings (Chroma and onnxruntime start no thread at import, so the server forks with one)."""


def preimported(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`pivotal ...` in a process of its own, forked from a server that imported the command line
    once, as `subprocess.run(..., capture_output=True, text=True)` returns it. For a test that only
    reads what one command prints and its exit code: the child runs the same `main(argv)` in its own
    folder, environment and standard streams, ends through the same exit handlers, and a fresh
    interpreter's ~1.5 s of imports proves nothing there. A test that proves something about processes
    (two at once, a kill and a restart, a lock held by another process, a fresh `HOME` or a setting
    read at import) starts a real one with `cli`/`finish`.
    """
    import multiprocessing
    import tempfile

    context = multiprocessing.get_context("forkserver")
    if not _server_started:
        context.set_forkserver_preload(list(PRELOADED))
        atexit.register(_stop_server)
        _server_started.append(True)
    cwd.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pivotal-fork-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        child = context.Process(target=_main_in_child, args=(list(args), str(cwd), environment, str(out), str(err)))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["pivotal", *args], timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(["pivotal", *args], child.exitcode, out.read_text(), err.read_text())


_server_started: list[bool] = []


def _stop_server() -> None:
    """The server ends with this process and is waited for, so its CPU counts as this process's children's."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)
    if stop:
        stop()


def _main_in_child(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """What `python -m pivotal.cli ARGV` does after its imports, then the interpreter's exit: the
    exit handlers (the store registry's close) run, the streams are flushed, the code is the exit status.
    """
    import traceback

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, out, os.O_WRONLY | os.O_CREAT),
        (2, err, os.O_WRONLY | os.O_CREAT),
    ):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = ["pivotal", *argv]
    code: object = 1
    try:
        from pivotal.cli.main import main

        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 — as the interpreter does: the traceback on stderr, exit 1
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
