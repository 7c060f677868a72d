"""`pivotal ...` as a user runs it, in a process of its own: the tests that kill, resume and share
state across processes start the CLI this way, and read what such a process printed.
"""

import atexit
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
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
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    environ: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`pivotal ...` in a process of its own, forked from a server that imported the command line
    once, as `subprocess.run(..., capture_output=True, text=True)` returns it. For a test that only
    reads what one command prints and its exit code: the child runs the same `main(argv)` in its own
    folder, environment and standard streams, ends through the same exit handlers, and a fresh
    interpreter's ~1.5 s of imports proves nothing there. A test that proves something about processes
    (two at once, a kill and a restart, a lock held by another process, a fresh `HOME` or a setting
    read at import) starts a real one with `cli`/`finish`. `env` is laid over `environ` (default: this
    process's environment), as `cli` lays it over `os.environ`.
    """
    import tempfile

    cwd.mkdir(parents=True, exist_ok=True)
    environment = {**(os.environ if environ is None else environ), "PYTHONPATH": str(ROOT), **(env or {})}
    with tempfile.TemporaryDirectory(prefix="pivotal-fork-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        code = _ForkServer.get().run([*args], str(cwd), environment, str(out), str(err), timeout)
        stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    if code is None:
        raise subprocess.TimeoutExpired(["pivotal", *args], timeout, stdout, stderr)
    return subprocess.CompletedProcess(["pivotal", *args], code, stdout, stderr)


class _ForkServer:
    """One server per process that calls `preimported`, started on first use and ended (and waited
    for) at exit. It reads one JSON request a line and answers `{"id", "pid"}` when it forked and
    `{"id", "code"}` when that child ended (its exit status, or minus the signal that ended it).
    """

    _one: "_ForkServer | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "_ForkServer":
        with cls._lock:
            if cls._one is None or cls._one.process.poll() is not None:
                cls._one = cls()
                atexit.register(cls._one.close)
            return cls._one

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from pivotal.testing.cli import _serve; _serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.process.stdin and self.process.stdout  # both are pipes
        self.requests, self.replies = self.process.stdin, self.process.stdout
        self.write = threading.Lock()
        self.next_id = 0
        self.pids: dict[int, int] = {}
        self.codes: dict[int, int] = {}
        self.done: dict[int, threading.Event] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.replies:
            reply = json.loads(line)
            if "pid" in reply:
                self.pids[reply["id"]] = reply["pid"]
            else:
                self.codes[reply["id"]] = reply["code"]
                self.done[reply["id"]].set()
        for event in list(self.done.values()):  # the server died: nobody waits for ever
            event.set()

    def run(self, argv: list[str], cwd: str, env: dict[str, str], out: str, err: str, timeout: float) -> int | None:
        with self.write:
            self.next_id += 1
            number = self.next_id
            self.done[number] = threading.Event()
            request = {"id": number, "argv": argv, "cwd": cwd, "env": env, "out": out, "err": err}
            self.requests.write((json.dumps(request) + "\n").encode())
            self.requests.flush()
        finished = self.done[number].wait(timeout)
        if not finished and number in self.pids:
            os.kill(self.pids[number], signal.SIGKILL)
            self.done[number].wait(30)
        code = self.codes.pop(number, None)
        if finished and code is None:
            raise RuntimeError(f"the fork server ended (exit {self.process.poll()}) before `pivotal {' '.join(argv)}`")
        return code if finished else None

    def close(self) -> None:
        """Its CPU counts among this process's children's, as a subprocess's does."""
        if self.process.poll() is None:
            self.requests.close()
            self.process.wait(60)


def _serve() -> None:
    """The server: the imports once, then a fork per request; it never starts a thread, so each child
    starts from one thread as a fresh interpreter does.
    """
    for module in PRELOADED:
        importlib.import_module(module)  # by name, as `python -m pivotal.cli` runs it
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    running: dict[int, int] = {}
    pending, reading = b"", True

    def answer(reply: dict) -> None:
        os.write(1, (json.dumps(reply) + "\n").encode())  # unbuffered: nothing left over for a child

    while reading or running:
        for key, _ in selector.select():
            if key.fd == wake_r:
                os.read(wake_r, 4096)
            elif chunk := os.read(0, 65536):
                pending += chunk
            else:
                reading = False
                selector.unregister(0)
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                selector.close()
                os.close(wake_r)
                os.close(wake_w)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _main_in_child(request["argv"], request["cwd"], request["env"], request["out"], request["err"])
            running[pid] = request["id"]
            answer({"id": request["id"], "pid": pid})
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            answer({"id": running.pop(pid), "code": os.waitstatus_to_exitcode(status)})


def _main_in_child(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """What `python -m pivotal.cli ARGV` does after its imports, then the interpreter's exit: the
    exit handlers (the store registry's close) run, the streams are flushed, the code is the exit status.
    """
    import traceback

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # `python -m` puts the working folder first on the path, then PYTHONPATH's folders
    sys.path[:0] = [cwd, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path)]
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
        code = importlib.import_module("pivotal.cli.main").main(argv)
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
