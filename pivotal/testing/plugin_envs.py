"""Environments a plugin would bring, each with the one trait a test of issue 32 needs: no way
back (`forward-grid`), kinds of task under one name (`kinds-grid`), one text action whose
pre-check lists every legal command (`word-room`), and turns that come back round and walls that
stop a step (`lava-grid`, MiniGrid's kind of loops). Loaded by the CLI as a plugin
(`--plugin pivotal.testing.plugin_envs`).
"""

import random
from collections import deque
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


HEADINGS = ("east", "south", "west", "north")
AHEAD = {"east": (1, 0), "south": (0, 1), "west": (-1, 0), "north": (0, -1)}
Pose = tuple[int, int, int]
"""x, y and the index of the heading in HEADINGS."""


class LavaGrid:
    """MiniGrid's LavaGap: a square room, a column of lava with one gap (placed by `seed`), the goal in
    the far corner. The agent turns and steps forward: four turns come back round, and a step into
    the wall changes nothing, so wrong moves make loops and no-ops as in MiniGrid; a step into the
    lava ends the task.
    """

    default_goal = "Reach the goal G in the far corner without stepping into the lava."
    size = 5

    def reset(self, task: Task) -> str:
        layout = random.Random(int(task.params.get("seed", 0)))
        self.column = layout.randrange(2, self.size - 1)
        self.gap = layout.randrange(self.size)
        self.pose: Pose = (0, 0, 0)
        self.distances = self._distances()
        return self._render("New room.")

    def describe_actions(self) -> list[ActionSpec]:
        return [
            ActionSpec("left", "turn left"),
            ActionSpec("right", "turn right"),
            ActionSpec("forward", "step one cell ahead"),
        ]

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        self.pose = self._after(self.pose, name)
        x, y, _ = self.pose
        if self._lava(x, y):
            return StepResult(self._render("You stepped into the lava."), done=True)
        if (x, y) == self._goal():
            return StepResult(self._render("You reached the goal."), done=True, success=True)
        return StepResult(self._render(f"You did {name}."))

    def snapshot(self) -> dict[str, Any]:
        return {"pose": list(self.pose)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        x, y, heading = snapshot["pose"]
        self.pose = (int(x), int(y), int(heading))

    # --- Oracle (used by sim models) ------------------------------------------------------
    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        here = self.distances.get(self.pose)
        if not here:
            return None
        return next((name, {}) for name in ("forward", "left", "right") if self._closer(self.pose, name))

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        x, y, _ = self._after(self.pose, name)
        if self._lava(x, y):
            return "fatal", "it steps into the lava"
        if self._closer(self.pose, name):
            return "good", "it gets closer to the goal"
        return "poor", "it does not get closer to the goal"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        pose: Pose = (0, 0, 0)
        for index, (name, _) in enumerate(actions):
            if not self._closer(pose, name):
                return index, f"{name} did not get closer to the goal"
            pose = self._after(pose, name)
        return max(len(actions) - 1, 0), "no mistake found"

    def _after(self, pose: Pose, name: str) -> Pose:
        x, y, heading = pose
        if name in ("left", "right"):
            return x, y, (heading + (1 if name == "right" else -1)) % 4
        dx, dy = AHEAD[HEADINGS[heading]]
        if 0 <= x + dx < self.size and 0 <= y + dy < self.size:
            return x + dx, y + dy, heading
        return pose  # the wall: nothing happens

    def _closer(self, pose: Pose, name: str) -> bool:
        far = len(self.distances) + 1
        return self.distances.get(self._after(pose, name), far) < self.distances.get(pose, far)

    def _distances(self) -> dict[Pose, int]:
        """Moves to the goal from every pose (breadth first, backwards over the moves)."""
        poses = [(x, y, h) for x in range(self.size) for y in range(self.size) for h in range(4)]
        goal = self._goal()
        distances = {pose: 0 for pose in poses if pose[:2] == goal}
        queue = deque(distances)
        while queue:
            target = queue.popleft()
            for pose in poses:
                if pose in distances or self._lava(*pose[:2]) or pose[:2] == goal:
                    continue
                if any(self._after(pose, name) == target for name in ("left", "right", "forward")):
                    distances[pose] = distances[target] + 1
                    queue.append(pose)
        return distances

    def _lava(self, x: int, y: int) -> bool:
        return x == self.column and y != self.gap

    def _goal(self) -> tuple[int, int]:
        return self.size - 1, self.size - 1

    def _render(self, event: str) -> str:
        x, y, heading = self.pose
        rows = [
            "".join(
                "A" if (cx, cy) == (x, y) else "G" if (cx, cy) == self._goal() else "L" if self._lava(cx, cy) else "."
                for cx in range(self.size)
            )  # fmt: skip
            for cy in range(self.size)
        ]
        return f"{event} You are at ({x},{y}) facing {HEADINGS[heading]}.\n" + "\n".join(rows)


register_environment("forward-grid", ForwardGrid)
register_environment("kinds-grid", KindsGrid)
register_environment("word-room", WordRoom)
register_environment("lava-grid", LavaGrid)
