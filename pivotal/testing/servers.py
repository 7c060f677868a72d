"""Starting real local servers in tests and the reliability suite: a free port, a log outside
the project, and a wait until the server answers.
"""

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tenacity import retry, retry_if_exception, stop_after_attempt

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    """Polls `url`; fails with the server's log when it exits or stays silent too long."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server at {url} did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.2)


LOGGING_RACE = "object has no attribute 'lock'"
"""A server's start that CPython's logging can break: uvicorn's logging setup closes every handler while
another thread of the starting server may still be creating one (`Handler.__init__` lists a handler
before it has its lock). Seen once in a fresh-clone CI run at load 9; such a start is made again once."""


def launch(command: list[str], url: str, log: Path, **popen: Any) -> subprocess.Popen:
    """Start `command` writing `log`, and return it once `url` answers; a start that died of the logging
    race (`LOGGING_RACE`) is made once more, any other failure is raised with the log at once.
    """

    def raced(error: BaseException) -> bool:
        return isinstance(error, RuntimeError) and LOGGING_RACE in log.read_text()

    @retry(stop=stop_after_attempt(2), retry=retry_if_exception(raced), reraise=True)
    def start() -> subprocess.Popen:
        with log.open("w") as out:
            server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, **popen)
        try:
            wait_until_up(url, server, log)
        except RuntimeError:
            if server.poll() is None:
                server.kill()
                server.wait(timeout=30)
            raise
        return server

    return start()


@contextmanager
def serve(command: list[str], ready_path: str, port: int, log: Path, **popen: Any) -> Iterator[str]:
    """Run `command` (already bound to `port`), yield its base URL once `ready_path` answers, stop it after."""
    url = f"http://127.0.0.1:{port}"
    server = launch(command, f"{url}{ready_path}", log, **popen)
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextmanager
def chroma_server(folder: Path) -> Iterator[str]:
    """A real `chroma run` on 127.0.0.1 storing in `folder/data`."""
    port = free_port()
    command = [str(BIN / "chroma"), "run", "--path", str(folder / "data"), "--host", "127.0.0.1", "--port", str(port)]
    with serve(command, "/api/v2/heartbeat", port, folder / "chroma.log") as url:
        yield url
