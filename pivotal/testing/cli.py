"""`pivotal ...` as a user runs it, in a process of its own: the tests that kill, resume and share
state across processes start the CLI this way, and read what such a process printed.
"""

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
