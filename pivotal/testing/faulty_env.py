"""A vault whose `open_door` misbehaves as the task asks: hangs, or raises what no tool should.

`--plugin pivotal.testing.faulty_env`; the task's params pick the fault, so one batch mixes
healthy and faulty tasks: {"fault": "hang", "seconds": 30} | {"fault": "exit"} | {"fault": "interrupt"}
| {"fault": "string"} (`step` returns a bare observation string instead of a StepResult).
With "while_exists": PATH the fault happens only while that file exists: a transient fault
(and a hang ends when the file goes, so a test decides when, not the machine's speed); with
"started": PATH a hang touches that file as it begins.
"""

import time
from pathlib import Path
from typing import Any

from pivotal.core.environments import StepResult, register_environment
from pivotal.core.task import Task
from pivotal.testing.envs import Vault


class FaultyVault(Vault):
    def reset(self, task: Task) -> str:
        self.fault = task.params.get("fault", "")
        self.seconds = float(task.params.get("seconds", 30))
        self.while_exists = task.params.get("while_exists")
        self.started = task.params.get("started")
        return super().reset(task)

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if self.while_exists and not Path(self.while_exists).exists():
            return super().step(name, arguments)
        if name == "open_door" and self.fault == "hang":
            self._hang()
        if name == "open_door" and self.fault == "exit":
            raise SystemExit(3)
        if name == "open_door" and self.fault == "interrupt":
            raise KeyboardInterrupt
        if name == "open_door" and self.fault == "string":
            return "the door is open"  # type: ignore[return-value]  # the bug this fault stands for
        return super().step(name, arguments)

    def _hang(self) -> None:
        if self.started:
            Path(self.started).touch()  # a test waits for this to know the hang began
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline and (not self.while_exists or Path(self.while_exists).exists()):
            time.sleep(0.05)


register_environment("faulty-vault", FaultyVault)


def faulty_task(fault: str = "", **params: Any) -> dict[str, Any]:
    """A vault task with this fault ("" for a healthy one), as a batch line."""
    return {"env": "faulty-vault", "goal": "Open the vault.", "params": {"fault": fault, **params}}
