"""A gridworld whose snapshots are slow, as a container checkpoint or a big simulator copy is: for
measuring and testing when Pivotal snapshots (every step, or only when replaying is cheaper).
"""

import time
from typing import Any

from pivotal.core.environments import register_environment
from pivotal.core.environments.base import ActionSpec, StepResult
from pivotal.core.environments.gridworld import GridWorld
from pivotal.core.task import Task


class SlowSnapshotWorld:
    """`replay=True` declares the moves safe to repeat (a pure simulation), so Pivotal may snapshot
    it now and then and replay from the nearest snapshot; `replay=False` keeps the default rewind,
    a snapshot after every step. Waits stand in for the costs, so no CPU is burnt measuring them.
    """

    def __init__(self, replay: bool, snapshot_seconds: float = 0.02, step_seconds: float = 0.0) -> None:
        self.rewind = "replay" if replay else "snapshot"
        self.snapshot_seconds, self.step_seconds = snapshot_seconds, step_seconds
        self.snapshots = self.restores = self.steps = 0
        self._inner = GridWorld()
        self.default_goal = self._inner.default_goal

    def reset(self, task: Task) -> str:
        return self._inner.reset(task)

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        self.steps += 1
        time.sleep(self.step_seconds)
        return self._inner.step(name, arguments)

    def describe_actions(self) -> list[ActionSpec]:
        return self._inner.describe_actions()

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        return self._inner.check(name, arguments)

    def snapshot(self) -> dict[str, Any]:
        self.snapshots += 1
        time.sleep(self.snapshot_seconds)
        return self._inner.snapshot()

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.restores += 1
        self._inner.restore(snapshot)

    def state_key(self) -> list[Any]:
        return self._inner.state_key()

    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        return self._inner.expert_action()

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        return self._inner.judge(name, arguments)

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        return self._inner.first_mistake(actions)

    def last_recoverable(self, actions: list[tuple[str, dict[str, Any]]]) -> int:
        return self._inner.last_recoverable(actions)


register_environment("slow-snapshot-grid", lambda: SlowSnapshotWorld(replay=True, snapshot_seconds=0.05))
"""Importable by another process (a fork or a resume there needs the environment registered)."""
