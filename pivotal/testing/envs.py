"""Small environments for tests: each exposes exactly the behaviour one test needs to observe."""

from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, tool

from pivotal.core.environments import ActionSpec, StepResult
from pivotal.core.environments.gridworld import GridWorld
from pivotal.core.environments.tools import ToolEnvironment
from pivotal.core.task import Task


@tool
def finish() -> str:
    """Declare the task finished."""
    return "finished"


def finish_environment(*tools: BaseTool, intro: str = "Call finish.") -> Callable[[], ToolEnvironment]:
    """A factory for the smallest tools task: the run succeeds once `finish` is called.

    `tools` come before `finish` in the action list; tests use them to make the agent meet a
    raising tool, a leaking tool or planted text on its way to the end.
    """

    def done(task: Task, calls: list[dict[str, Any]]) -> bool | None:
        return True if any(call["tool"] == "finish" for call in calls) else None

    return lambda: ToolEnvironment([*tools, finish], done, intro=intro)


class Vault:
    """`open_door` wins, `noop` wastes a step, `wipe_disk` is fatal; every executed action is logged."""

    executed: list[str] = []

    def __init__(self, forbid_in_precheck: bool = False) -> None:
        self.forbid_in_precheck = forbid_in_precheck

    def reset(self, task: Task) -> str:
        Vault.executed = []
        return "The vault door is closed. The disk holds the only copy of the data."

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        Vault.executed.append(name)
        if name == "open_door":
            return StepResult("The door opens.", done=True, success=True)
        if name == "wipe_disk":
            return StepResult("The disk is wiped. The data is gone.", done=True, success=False)
        return StepResult("Nothing happens.", done=False, success=False)

    def describe_actions(self) -> list[ActionSpec]:
        return [
            ActionSpec("open_door", "open the vault door", {}),
            ActionSpec("noop", "wait", {}),
            ActionSpec("wipe_disk", "erase the disk", {}, irreversible=True),
        ]

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        if self.forbid_in_precheck and name == "wipe_disk":
            return "wipe_disk is forbidden by policy"
        return None

    def expert_action(self) -> tuple[str, dict[str, Any]]:
        return ("open_door", {})

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        return {
            "open_door": ("good", "opens the door"),
            "noop": ("poor", "wastes a step"),
            "wipe_disk": ("fatal", "destroys the only copy of the data"),
        }[name]

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        for index, (name, _) in enumerate(actions):
            if name != "open_door":
                return index, f"{name} instead of open_door"
        return max(len(actions) - 1, 0), "no mistake found"


class ReplayOnlyGridWorld:
    """A gridworld without snapshot/restore that declares replay safe, so a pivot resets and replays."""

    rewind = "replay"

    def __init__(self) -> None:
        self._inner = GridWorld()
        self.steps_run = 0
        self.default_goal = self._inner.default_goal

    def reset(self, task: Task) -> str:
        return self._inner.reset(task)

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        self.steps_run += 1
        return self._inner.step(name, arguments)

    def describe_actions(self) -> list[ActionSpec]:
        return self._inner.describe_actions()

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        return self._inner.check(name, arguments)

    def expert_action(self):
        return self._inner.expert_action()

    def judge(self, name: str, arguments: dict[str, Any]):
        return self._inner.judge(name, arguments)

    def first_mistake(self, actions):
        return self._inner.first_mistake(actions)
