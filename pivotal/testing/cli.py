"""`pivotal ...` as a user runs it, in a process of its own: the tests that kill, resume and share
state across processes start the CLI this way.
"""

import os
import subprocess
import sys
from pathlib import Path

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
