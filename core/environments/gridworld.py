"""A small maze with walls and holes: verifiable, restorable, and playable by a tiny model."""

import random
from collections import deque
from typing import Any

from pydantic import BaseModel, Field

from pivotal.core.environments.base import ActionSpec, StepResult, read_params
from pivotal.core.errors import PivotalError
from pivotal.core.task import Task

Cell = tuple[int, int]
MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


class Params(BaseModel):
    """`seed` picks the maze, `size` its side, `walls`/`holes` their share of the cells."""

    seed: int = 0
    size: int = Field(6, ge=4, le=12)
    walls: float = Field(0.15, ge=0, lt=1)
    holes: float = Field(0.12, ge=0, lt=1)


class GridWorld:
    params = Params
    """The task parameters it reads (`pivotal envs` lists them)."""

    default_goal = "Walk from S to the goal G without falling into a hole (O)."

    def __init__(self) -> None:
        self.size = 0
        self.walls: set[Cell] = set()
        self.holes: set[Cell] = set()
        self.start: Cell = (0, 0)
        self.goal: Cell = (0, 0)
        self.pos: Cell = (0, 0)
        self.done = False
        self.moves = 0

    # --- Environment -------------------------------------------------------------------
    def reset(self, task: Task) -> str:
        params = read_params(Params, task)
        self._generate(params.size, params.seed, params.walls, params.holes)
        self.pos, self.done, self.moves = self.start, False, 0
        return self.render("New maze.")

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if self.done:
            return StepResult(self.render("The episode is over."), done=True, success=self.pos == self.goal)
        problem = self.check(name, arguments)
        if problem:
            return StepResult(self.render(f"Nothing happened: {problem}."))
        self.moves += 1
        self.pos = _add(self.pos, MOVES[name])
        if self.pos in self.holes:
            self.done = True
            return StepResult(self.render(f"You moved {name} and fell into a hole."), done=True)
        if self.pos == self.goal:
            self.done = True
            return StepResult(self.render(f"You moved {name} and reached the goal."), done=True, success=True)
        return StepResult(self.render(f"You moved {name}."))

    def describe_actions(self) -> list[ActionSpec]:
        return [ActionSpec(name, f"move one cell {name}") for name in MOVES]

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        if name not in MOVES:
            return f"unknown move {name!r}"
        target = _add(self.pos, MOVES[name])
        if not self._inside(target):
            return f"moving {name} from {self.pos} leaves the grid"
        if target in self.walls:
            return f"there is a wall {name} of {self.pos}"
        return None

    def snapshot(self) -> dict[str, Any]:
        return {"pos": list(self.pos), "done": self.done, "moves": self.moves}

    def state_key(self) -> list[Any]:
        """The snapshot without its move counter, which never repeats."""
        return [*self.pos, self.done]

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.pos = tuple(snapshot["pos"])
        self.done, self.moves = bool(snapshot["done"]), int(snapshot["moves"])

    # --- Oracle (used by sim models) ------------------------------------------------------
    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        distance = self._distances()
        best = [
            name
            for name, delta in MOVES.items()
            if distance.get(_add(self.pos, delta), 10**6) == distance.get(self.pos, 0) - 1
        ]
        return (best[0], {}) if best and not self.done else None

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        if name not in MOVES:
            return "fatal", f"{name!r} is not a move"
        target = _add(self.pos, MOVES[name])
        if target in self.holes:
            return "fatal", f"moving {name} from {self.pos} falls into the hole at {target}"
        distance = self._distances()
        if distance.get(target, 10**6) == distance.get(self.pos, 0) - 1:
            return "good", f"moving {name} brings you closer to the goal"
        expert = self.expert_action()
        hint = f"; move {expert[0]} instead" if expert else ""
        return "poor", f"moving {name} from {self.pos} does not bring you closer to the goal{hint}"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        saved = self.snapshot()
        self.pos, self.done = self.start, False
        try:
            for index, (name, arguments) in enumerate(actions):
                verdict, reason = self.judge(name, arguments)
                if verdict != "good":
                    return index, reason
                self.pos = _add(self.pos, MOVES[name])
            return max(len(actions) - 1, 0), "the step budget ran out before the goal"
        finally:
            self.restore(saved)

    def last_recoverable(self, actions: list[tuple[str, dict[str, Any]]]) -> int:
        """Moves in a maze can be walked back, so only a hole (or a cell cut off from the goal) is past
        the point of no return; a blocked move leaves the agent where it was, as `step` does.
        """
        saved = self.snapshot()
        self.pos, self.done = self.start, False
        reachable = self._distances()
        try:
            for index, (name, arguments) in enumerate(actions):
                if self.check(name, arguments) is None:
                    self.pos = _add(self.pos, MOVES[name])
                if self.pos not in reachable:
                    return index
            return max(len(actions) - 1, 0)
        finally:
            self.restore(saved)

    def steps_to_goal(self, actions: list[tuple[str, dict[str, Any]]]) -> int | None:
        """The BFS distance from where these moves lead (blocked ones leave the agent in place)."""
        saved = self.snapshot()
        self.pos, self.done = self.start, False
        try:
            for name, arguments in actions:
                if self.check(name, arguments) is None:
                    self.pos = _add(self.pos, MOVES[name])
            return self._distances().get(self.pos)
        finally:
            self.restore(saved)

    def situation(self) -> str:
        """What recall looks lessons up by: the surroundings, not the coordinates, so a lesson about
        a hole below applies in every maze (and a short text embeds ~3x faster than the observation).
        """
        return "around you: " + ", ".join(f"{name}={self._describe(_add(self.pos, d))}" for name, d in MOVES.items())

    def instance(self) -> str:
        """Which maze this is: a lesson learnt here ("go down twice from the start") is recalled in
        other mazes only once another maze taught the same text (memory/lesson/__init__.py `general`).
        """
        return f"{self.size}|{self.start}|{self.goal}|{sorted(self.walls)}|{sorted(self.holes)}"

    # --- internals -----------------------------------------------------------------------
    def render(self, event: str) -> str:
        rows = ["   " + " ".join(str(c) for c in range(self.size))]
        for r in range(self.size):
            rows.append(f"{r:2d} " + " ".join(self._symbol((r, c)) for c in range(self.size)))
        around = ", ".join(f"{name}={self._describe(_add(self.pos, d))}" for name, d in MOVES.items())
        return (
            f"{event} You (A) are at row {self.pos[0]}, col {self.pos[1]}; the goal G is at "
            f"row {self.goal[0]}, col {self.goal[1]}. Around you: {around}.\n"
            "Legend: # wall, O hole (falling in ends the task), . floor.\n" + "\n".join(rows)
        )

    def _symbol(self, cell: Cell) -> str:
        if cell == self.pos:
            return "A"
        if cell == self.goal:
            return "G"
        if cell in self.walls:
            return "#"
        if cell in self.holes:
            return "O"
        return "S" if cell == self.start else "."

    def _describe(self, cell: Cell) -> str:
        if not self._inside(cell) or cell in self.walls:
            return "wall"
        if cell in self.holes:
            return "hole"
        return "goal" if cell == self.goal else "floor"

    def _inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.size and 0 <= cell[1] < self.size

    def _distances(self) -> dict[Cell, int]:
        """BFS distance to the goal over safe cells."""
        distance = {self.goal: 0}
        queue = deque([self.goal])
        while queue:
            cell = queue.popleft()
            for delta in MOVES.values():
                nxt = _add(cell, delta)
                if self._inside(nxt) and nxt not in distance and nxt not in self.walls and nxt not in self.holes:
                    distance[nxt] = distance[cell] + 1
                    queue.append(nxt)
        return distance

    def _generate(self, size: int, seed: int, wall_share: float, hole_share: float) -> None:
        rng = random.Random(f"gridworld:{size}:{seed}")
        self.size = size
        cells = [(r, c) for r in range(size) for c in range(size)]
        for _ in range(200):
            self.start, self.goal = (0, rng.randrange(size)), (size - 1, rng.randrange(size))
            free = [c for c in cells if c not in (self.start, self.goal)]
            rng.shuffle(free)
            n_walls, n_holes = int(len(free) * wall_share), int(len(free) * hole_share)
            self.walls = set(free[:n_walls])
            self.holes = set(free[n_walls : n_walls + n_holes])
            path = self._distances().get(self.start)
            if path is not None and path >= size - 1:
                return
        raise PivotalError(f"could not build a solvable {size}x{size} maze for seed {seed}")


def _add(cell: Cell, delta: Cell) -> Cell:
    return cell[0] + delta[0], cell[1] + delta[1]
