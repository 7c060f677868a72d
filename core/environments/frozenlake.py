"""Gymnasium's FrozenLake-v1 as a Pivotal environment: a real simulator nobody here wrote."""

from collections import deque
from typing import Any, Literal

from pydantic import BaseModel, Field

from pivotal.core.environments.base import ActionSpec, StepResult, read_params
from pivotal.core.task import Task

ACTIONS = {"left": 0, "down": 1, "right": 2, "up": 3}
DELTAS = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}


class Params(BaseModel):
    """`map`: one of Gymnasium's named maps, or `size` (+ `seed`) for a generated one."""

    map: Literal["4x4", "8x8"] = "4x4"
    size: int | None = Field(None, ge=2, le=32)
    seed: int = Field(0, ge=0)  # Gymnasium refuses negative seeds
    slippery: bool = False


class FrozenLake:
    params = Params
    """The task parameters it reads (`pivotal envs` lists them)."""

    default_goal = "Cross the frozen lake from S to the goal G without stepping into a hole (H)."

    def __init__(self) -> None:
        self.env: Any = None
        self.desc: list[str] = []
        self.deterministic = True
        """False on slippery ice: a move that went nowhere may go somewhere next time (loop detection)."""

    def reset(self, task: Task) -> str:
        params = read_params(Params, task)
        import gymnasium as gym  # imported here: gymnasium costs ~1 s and most runs never need it
        from gymnasium.envs.toy_text.frozen_lake import generate_random_map

        options: dict[str, Any] = {"is_slippery": params.slippery, "render_mode": "ansi"}
        if params.size is not None:
            options["desc"] = generate_random_map(size=params.size, seed=params.seed)
        else:
            options["map_name"] = params.map
        self.env = gym.make("FrozenLake-v1", **options)
        self.deterministic = not params.slippery
        self.env.reset(seed=params.seed)
        self.desc = ["".join(tile.decode() for tile in row) for row in self.env.unwrapped.desc.tolist()]
        return self._render("New lake.")

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if name not in ACTIONS:
            return StepResult(self._render(f"Nothing happened: unknown action {name!r}."))
        _, reward, terminated, truncated, info = self.env.step(ACTIONS[name])
        success = bool(terminated and reward > 0)
        if success:
            event = f"You moved {name} and reached the goal."
        elif terminated:
            event = f"You moved {name} and fell through the ice into a hole."
        else:
            event = f"You moved {name}." + (" Time is up." if truncated else "")
        return StepResult(
            self._render(event), done=bool(terminated or truncated), success=success, info={"reward": float(reward)}
        )

    def describe_actions(self) -> list[ActionSpec]:
        return [ActionSpec(name, f"move one tile {name}") for name in ACTIONS]

    def snapshot(self) -> dict[str, Any]:
        return {"s": int(self.env.unwrapped.s)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.env.unwrapped.s = int(snapshot["s"])

    # --- Oracle (used by sim models) ------------------------------------------------------
    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        distance, here = self._distances(), self._position()
        for name, delta in DELTAS.items():
            if distance.get(self._move(here, delta)) == distance.get(here, -1) - 1:
                return name, {}
        return None

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        if name not in DELTAS:
            return "fatal", f"{name!r} is not a move"
        here = self._position()
        target = self._move(here, DELTAS[name])
        if self._tile(target) == "H":
            return "fatal", f"moving {name} from {here} steps into the hole at {target}"
        distance = self._distances()
        if distance.get(target) == distance.get(here, -1) - 1:
            return "good", f"moving {name} brings you closer to the goal"
        return "poor", f"moving {name} from {here} does not bring you closer to the goal"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        saved = self.snapshot()
        self.env.unwrapped.s = self._index(self._find("S"))
        try:
            for index, (name, arguments) in enumerate(actions):
                verdict, reason = self.judge(name, arguments)
                if verdict != "good":
                    return index, reason
                self.env.unwrapped.s = self._index(self._move(self._position(), DELTAS[name]))
            return max(len(actions) - 1, 0), "the step budget ran out before the goal"
        finally:
            self.restore(saved)

    def last_recoverable(self, actions: list[tuple[str, dict[str, Any]]]) -> int:
        """A hole ends the episode, so the step into it is the point of no return; every other
        tile on the ice can reach the goal again (on the non-slippery lake the oracle models).
        """
        reachable, here = self._distances(), self._find("S")
        for index, (name, _) in enumerate(actions):
            here = self._move(here, DELTAS.get(name, (0, 0)))
            if here not in reachable:
                return index
        return max(len(actions) - 1, 0)

    def situation(self) -> str:
        """The tiles next to the agent (see GridWorld.situation)."""
        here = self._position()
        tiles = {"S": "start", "F": "frozen", "H": "hole", "G": "goal"}
        around = []
        for name, delta in DELTAS.items():
            target = self._move(here, delta)
            around.append(f"{name}={'edge' if target == here else tiles.get(self._tile(target), '?')}")
        return "around you: " + ", ".join(around)

    def instance(self) -> str:
        """Which lake this is (see GridWorld.instance)."""
        return "/".join(self.desc)

    # --- internals -----------------------------------------------------------------------
    def _render(self, event: str) -> str:
        row, col = self._position()
        board = self.env.render().strip("\n")
        return (
            f"{event} You are at row {row}, col {col} (highlighted). Tiles: S start, F frozen "
            f"(safe), H hole (ends the task), G goal.\n{board}"
        )

    def _position(self) -> tuple[int, int]:
        return divmod(int(self.env.unwrapped.s), len(self.desc[0]))

    def _index(self, cell: tuple[int, int]) -> int:
        return cell[0] * len(self.desc[0]) + cell[1]

    def _find(self, tile: str) -> tuple[int, int]:
        return next((r, c) for r, row in enumerate(self.desc) for c, t in enumerate(row) if t == tile)

    def _tile(self, cell: tuple[int, int]) -> str:
        return self.desc[cell[0]][cell[1]]

    def _move(self, cell: tuple[int, int], delta: tuple[int, int]) -> tuple[int, int]:
        """FrozenLake keeps you in place at the edge."""
        row = min(max(cell[0] + delta[0], 0), len(self.desc) - 1)
        col = min(max(cell[1] + delta[1], 0), len(self.desc[0]) - 1)
        return row, col

    def _distances(self) -> dict[tuple[int, int], int]:
        goal = self._find("G")
        distance, queue = {goal: 0}, deque([goal])
        while queue:
            cell = queue.popleft()
            for delta in DELTAS.values():
                nxt = self._move(cell, delta)
                if nxt not in distance and self._tile(nxt) != "H":
                    distance[nxt] = distance[cell] + 1
                    queue.append(nxt)
        return distance
