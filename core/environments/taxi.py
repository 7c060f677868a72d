"""Gymnasium's Taxi-v4 as a Pivotal environment: pick a passenger up and drop them at their stop.

A second real simulator nobody here wrote, with a longer horizon than FrozenLake and two
kinds of mistake: a wasted move, and an illegal pickup/dropoff (−10 in Taxi's own rewards).
"""

from collections import deque
from typing import Any

from pydantic import BaseModel, Field

from pivotal.core.environments.base import ActionSpec, StepResult, read_params
from pivotal.core.task import Task

ACTIONS = {"south": 0, "north": 1, "east": 2, "west": 3, "pickup": 4, "dropoff": 5}
STOPS = "RGYB"


class Params(BaseModel):
    """`seed` picks the taxi, passenger and destination positions."""

    seed: int = Field(0, ge=0)  # Gymnasium refuses negative seeds


class Taxi:
    params = Params
    """The task parameters it reads (`pivotal envs` lists them)."""

    default_goal = "Drive the taxi to the passenger, pick them up, and drop them off at their destination."

    def __init__(self) -> None:
        self.env: Any = None
        self.start = 0
        self._distance: dict[int, int] | None = None

    def reset(self, task: Task) -> str:
        params = read_params(Params, task)
        import gymnasium as gym  # imported here: gymnasium costs ~1 s and most runs never need it

        self.env = gym.make("Taxi-v4")
        self._distance = None
        self.start, _ = self.env.reset(seed=params.seed)
        return self._render("New fare.")

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if name not in ACTIONS:
            return StepResult(self._render(f"Nothing happened: unknown action {name!r}."))
        _, reward, terminated, truncated, _ = self.env.step(ACTIONS[name])
        success = bool(terminated and reward > 0)
        if success:
            event = "You dropped the passenger at their destination."
        elif reward <= -10:
            event = f"Illegal {name}: nothing to {name} here (penalty)."
        else:
            event = f"You did {name}." + (" Time is up." if truncated else "")
        return StepResult(
            self._render(event), done=bool(terminated or truncated), success=success, info={"reward": float(reward)}
        )

    def describe_actions(self) -> list[ActionSpec]:
        moves = {
            "south": "drive one cell down",
            "north": "drive one cell up",
            "east": "drive one cell right",
            "west": "drive one cell left",
            "pickup": "pick the passenger up (only at their stop)",
            "dropoff": "drop the passenger off (only at their destination)",
        }
        return [ActionSpec(name, text) for name, text in moves.items()]

    def snapshot(self) -> dict[str, Any]:
        return {"s": int(self.env.unwrapped.s)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.env.unwrapped.s = int(snapshot["s"])

    # --- Oracle (used by sim models) ------------------------------------------------------
    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        here, distance = self._state(), self._distances()
        for name, action in ACTIONS.items():
            if (there := self._next(here, action)) is None or distance.get(there, 1 << 30) == distance.get(here, 0) - 1:
                return name, {}
        return None

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        if name not in ACTIONS:
            return "fatal", f"{name!r} is not an action"
        here = self._state()
        _, nxt, reward, _ = self.env.unwrapped.P[here][ACTIONS[name]][0]
        where = self._describe(here)
        if reward <= -10:
            return "fatal", f"{name} with {where} is illegal"
        distance = self._distances()
        if self._next(here, ACTIONS[name]) is None or distance.get(nxt, 1 << 30) == distance.get(here, 0) - 1:
            return "good", f"{name} with {where} is on a shortest route"
        return "poor", f"{name} with {where} does not bring the fare closer"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        saved = self.snapshot()
        self.env.unwrapped.s = self.start
        try:
            for index, (name, arguments) in enumerate(actions):
                verdict, reason = self.judge(name, arguments)
                if verdict != "good":
                    return index, reason
                self.env.unwrapped.s = self.env.unwrapped.P[self._state()][ACTIONS[name]][0][1]
            return max(len(actions) - 1, 0), "the step budget ran out before the drop-off"
        finally:
            self.restore(saved)

    # --- internals -----------------------------------------------------------------------
    def _state(self) -> int:
        return int(self.env.unwrapped.s)

    def _next(self, state: int, action: int) -> int | None:
        """The next state, or None when this action ends the fare successfully."""
        _, nxt, reward, terminated = self.env.unwrapped.P[state][action][0]
        return None if terminated and reward > 0 else nxt

    def _distances(self) -> dict[int, int]:
        """Steps from each state to a successful drop-off. Kept for the fare: the judge asks on every step and
        Taxi's table never changes, and one search used to be most of a bench run's time.
        """
        if self._distance is None:
            self._distance = steps_to_drop_off(self.env.unwrapped.P)
        return self._distance

    def _describe(self, state: int) -> str:
        row, col, passenger, destination = self.env.unwrapped.decode(state)
        rider = "the passenger aboard" if passenger == 4 else f"the passenger waiting at {STOPS[passenger]}"
        return f"the taxi at row {row}, col {col} and {rider}"

    def _render(self, event: str) -> str:
        row, col, passenger, destination = self.env.unwrapped.decode(self._state())
        locs = self.env.unwrapped.locs
        rider = (
            "The passenger is in the taxi."
            if passenger == 4
            else f"The passenger waits at {STOPS[passenger]} (row {locs[passenger][0]}, col {locs[passenger][1]})."
        )
        board = "\n".join("".join(c.decode() for c in line) for line in self.env.unwrapped.desc.tolist())
        return (
            f"{event} The taxi is at row {row}, col {col}. {rider} Destination: {STOPS[destination]} "
            f"(row {locs[destination][0]}, col {locs[destination][1]}). '|' are walls; ':' can be crossed.\n{board}"
        )


def steps_to_drop_off(table: dict[int, dict[int, list[Any]]]) -> dict[int, int]:
    """A backward breadth-first search from the states where a drop-off succeeds, on Taxi's own transition table."""
    before: dict[int, set[int]] = {}
    finishing = []
    for state, moves in table.items():
        for _, nxt, reward, terminated in (outcomes[0] for outcomes in moves.values()):
            if terminated and reward > 0:
                finishing.append(state)
            elif nxt != state:
                before.setdefault(nxt, set()).add(state)
    distance = dict.fromkeys(finishing, 1)
    queue = deque(distance)
    while queue:
        state = queue.popleft()
        for earlier in before.get(state, ()):
            if earlier not in distance:
                distance[earlier] = distance[state] + 1
                queue.append(earlier)
    return distance
