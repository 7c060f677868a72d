"""Starting real local servers in tests: a free port, and waiting until the server answers."""

import socket
import subprocess
import time
import urllib.request
from pathlib import Path


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
