"""Environments a plugin would bring, each with the one trait a test of issue 32 needs: no way
back (`forward-grid`), kinds of task under one name (`kinds-grid`), and one text action whose
pre-check lists every legal command (`word-room`). Loaded by the CLI as a plugin
(`--plugin pivotal.testing.plugin_envs`).
"""

from typing import Any

from pivotal.core.environments import ActionSpec, StepResult, register_environment
from pivotal.core.environments.gridworld import GridWorld
from pivotal.core.task import Task


class ForwardGrid(GridWorld):
    """A gridworld that declares no way back, like a plugin whose world cannot be rewound."""

    rewind = "forward"


class KindsGrid(GridWorld):
    """One maze, two kinds of task (`--param kind=a|b`): its `family()` hint keeps their lessons apart."""

    def reset(self, task: Task) -> str:
        self.kind = str(task.params.get("kind", ""))
        return super().reset(task)

    def family(self) -> str:
        return self.kind


ROOMS = ("hall", "study", "cellar", "attic", "garden")
THINGS = ("lamp", "trunk", "table", "mirror", "clock", "rug", "desk", "chest")
PLAN = ("take brass lamp", "open antique trunk", "take golden key", "unlock cellar door")


class WordRoom:
    """A text adventure with one action, `command(text)`: dozens of commands are legal at every
    step, one is the plan's next, and the pre-check's reason lists them all.
    """

    default_goal = "Find the golden key and unlock the cellar door."

    def reset(self, task: Task) -> str:
        self.done = 0
        return "You are in the hall. Type commands."

    def legal_actions(self) -> list[tuple[str, dict[str, Any]]]:
        moves = [f"go to the {room}" for room in ROOMS]
        looks = [f"examine {adjective} {thing}" for adjective in ("old", "dusty", "antique") for thing in THINGS]
        return [("command", {"text": text}) for text in (*moves, *looks, *PLAN)]

    def describe_actions(self) -> list[ActionSpec]:
        text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return [ActionSpec("command", "type one command", text)]

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        commands = [args["text"] for _, args in self.legal_actions()]
        if arguments.get("text") in commands:
            return None
        return f"there is no {arguments.get('text')!r} here; the commands that work here: {', '.join(commands)}"

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if arguments.get("text") == PLAN[self.done]:
            self.done += 1
            return StepResult(
                f"Done: {arguments['text']}.", done=self.done == len(PLAN), success=self.done == len(PLAN)
            )
        return StepResult("Nothing useful happens.")

    def snapshot(self) -> dict[str, Any]:
        return {"done": self.done}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.done = int(snapshot["done"])

    # --- Oracle (used by sim models) ------------------------------------------------------
    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        return ("command", {"text": PLAN[self.done]}) if self.done < len(PLAN) else None

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        if self.done < len(PLAN) and arguments.get("text") == PLAN[self.done]:
            return "good", "the next step of the plan"
        return "poor", "it does not get the key or open the door"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        done = 0
        for index, (_, arguments) in enumerate(actions):
            if done < len(PLAN) and arguments.get("text") == PLAN[done]:
                done += 1
            else:
                return index, f"{arguments.get('text')!r} instead of {PLAN[done]!r}"
        return max(len(actions) - 1, 0), "no mistake found"

    def steps_to_goal(self, actions: list[tuple[str, dict[str, Any]]]) -> int:
        """Commands off the plan do nothing, so the plan's steps not yet done are all that is left."""
        done = 0
        for _, arguments in actions:
            done += done < len(PLAN) and arguments.get("text") == PLAN[done]
        return len(PLAN) - done


register_environment("forward-grid", ForwardGrid)
register_environment("kinds-grid", KindsGrid)
register_environment("word-room", WordRoom)
