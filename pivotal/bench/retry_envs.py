"""The environments of the issue 32 retry bench, written as a plugin the way the README tells users
to (`register_environment`, loaded with `--plugin pivotal.bench.retry_envs`): a cliff grid (falling
off ends the attempt), a lava and door-key grid (the key must be fetched before the door opens;
lava ends the attempt) and a text adventure whose lamp can be lost for good while the attempt goes
on (a point of no return long before the end). Each is a small deterministic world whose oracle,
for the `sim` models, is a breadth-first search over its states.
"""

import random
from collections import deque
from typing import Any

from pivotal.core.environments import ActionSpec, StepResult, register_environment
from pivotal.core.task import Task

Call = tuple[str, dict[str, Any]]
State = tuple[Any, ...]
GOAL, DEAD, ON = "goal", "dead", ""
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


class SearchWorld:
    """A world given as states and moves; the oracle's answers all come from one search.

    A subclass gives `start(params)`, `calls(state)` (the legal calls), `apply(state, call)` ->
    (next state, GOAL | DEAD | ON, what happened) and `show(state)`.
    """

    default_goal = "Reach the goal."

    def reset(self, task: Task) -> str:
        self.state = self.begin = self.start(task.params)
        self.over = False
        return self.show(self.state)

    # --- what a plugin subclass gives -------------------------------------------------------
    def start(self, params: dict[str, Any]) -> State:
        raise NotImplementedError

    def calls(self, state: State) -> list[Call]:
        raise NotImplementedError

    def apply(self, state: State, call: Call) -> tuple[State, str, str]:
        raise NotImplementedError

    def show(self, state: State) -> str:
        raise NotImplementedError

    # --- the Environment protocol -----------------------------------------------------------
    def legal_actions(self) -> list[Call]:
        return self.calls(self.state)

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        if (name, arguments or {}) in self.legal_actions():
            return None
        legal = ", ".join(_spelt(call) for call in self.legal_actions())
        return f"{_spelt((name, arguments or {}))} is not possible here; the moves that work here: {legal}"

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if self.over:
            return StepResult("The attempt is over.", done=True)
        if problem := self.check(name, arguments):
            return StepResult(f"Nothing happened: {problem}.")
        self.state, outcome, said = self.apply(self.state, (name, arguments or {}))
        self.over = outcome != ON
        return StepResult(f"{said} {self.show(self.state)}", done=self.over, success=outcome == GOAL)

    def snapshot(self) -> dict[str, Any]:
        return {"state": list(self.state), "over": self.over}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.state, self.over = tuple(snapshot["state"]), bool(snapshot["over"])

    # --- Oracle (used by sim models) --------------------------------------------------------
    def expert_action(self) -> Call | None:
        here = self.distance(self.state)
        if self.over or here is None:
            return None
        return next((call for call in self.calls(self.state) if self._after(self.state, call) == here - 1), None)

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        call = (name, arguments or {})
        if call not in self.calls(self.state):
            return "fatal", f"{_spelt(call)} is not possible here"
        after, here = self._after(self.state, call), self.distance(self.state)
        if after is None:
            return "fatal", f"{_spelt(call)} puts the goal out of reach"
        if here is not None and after == here - 1:
            return "good", f"{_spelt(call)} brings you closer to the goal"
        expert = self.expert_action()
        return "poor", f"{_spelt(call)} does not bring you closer" + (f"; {_spelt(expert)} does" if expert else "")

    def first_mistake(self, actions: list[Call]) -> tuple[int, str]:
        state = self.begin
        for index, call in enumerate(actions):
            here, after = self.distance(state), self._after(state, call)
            if after is None or here is None or after != here - 1:
                return index, f"step {index}: {_spelt(call)} did not bring the goal closer"
            state = self._next(state, call)
        return max(len(actions) - 1, 0), "the step budget ran out before the goal"

    def last_recoverable(self, actions: list[Call]) -> int:
        state = self.begin
        for index, call in enumerate(actions):
            if self._after(state, call) is None:
                return index
            state = self._next(state, call)
        return max(len(actions) - 1, 0)

    def steps_to_goal(self, actions: list[Call]) -> int | None:
        state = self.begin
        for call in actions:
            if self._after(state, call) is None:
                return None
            state = self._next(state, call)
        return self.distance(state)

    def distance(self, state: State) -> int | None:
        """Fewest steps from `state` to the goal (None: out of reach), by breadth-first search."""
        seen, queue = {state: 0}, deque([state])
        while queue:
            here = queue.popleft()
            for call in self.calls(here):
                after, outcome, _ = self.apply(here, call)
                if outcome == GOAL:
                    return seen[here] + 1
                if outcome == ON and after not in seen:
                    seen[after] = seen[here] + 1
                    queue.append(after)
        return None

    def _after(self, state: State, call: Call) -> int | None:
        """The distance left once `call` is taken (0: it reaches the goal; None: out of reach)."""
        if call not in self.calls(state):
            return self.distance(state)  # refused by the pre-check: nothing happens
        after, outcome, _ = self.apply(state, call)
        return 0 if outcome == GOAL else None if outcome == DEAD else self.distance(after)

    def _next(self, state: State, call: Call) -> State:
        return self.apply(state, call)[0] if call in self.calls(state) else state


def _spelt(call: Call | None) -> str:
    if call is None:
        return "nothing"
    name, arguments = call
    return str(arguments["text"]) if "text" in arguments else name


class GridWorldBase(SearchWorld):
    """A grid walked with up/down/left/right: state (row, col, *more), cells by their symbol."""

    rows, cols = 5, 8
    cells: dict[tuple[int, int], str]

    def describe_actions(self) -> list[ActionSpec]:
        return [ActionSpec(name, f"move one cell {name}") for name in MOVES]

    def calls(self, state: State) -> list[Call]:
        row, col = state[0], state[1]
        legal: list[Call] = []
        for name, (dr, dc) in MOVES.items():
            cell = (row + dr, col + dc)
            if 0 <= cell[0] < self.rows and 0 <= cell[1] < self.cols and self.passable(state, cell):
                legal.append((name, {}))
        return legal

    def passable(self, state: State, cell: tuple[int, int]) -> bool:
        return self.cells.get(cell) != "#"

    def moved(self, state: State, call: Call) -> tuple[int, int]:
        dr, dc = MOVES[call[0]]
        return state[0] + dr, state[1] + dc

    def picture(self, state: State) -> str:
        def symbol(cell: tuple[int, int]) -> str:
            return "A" if cell == (state[0], state[1]) else self.cells.get(cell, ".")

        return "\n".join("".join(symbol((r, c)) for c in range(self.cols)) for r in range(self.rows))

    def situation(self) -> str:
        around = [f"{name}={self.cells.get(self.moved(self.state, (name, {})), '.')}" for name in MOVES]
        return "around you: " + ", ".join(around)


class CliffGrid(GridWorldBase):
    """Cliff walking: start bottom-left, goal bottom-right, the cliff between them and a few loose
    edges above it (`seed`); stepping onto the cliff (C) ends the attempt. Params: `seed`, `cols`.
    """

    default_goal = "Walk from S to G without falling off the cliff (C)."
    rows = 4

    def start(self, params: dict[str, Any]) -> State:
        self.cols = int(params.get("cols", 8))
        rng = random.Random(int(params.get("seed", 0)))
        bottom = self.rows - 1
        self.cells = {(bottom, c): "C" for c in range(1, self.cols - 1)}
        self.cells[(bottom, self.cols - 1)] = "G"
        for c in rng.sample(range(2, self.cols - 2), k=max(1, self.cols // 4)):
            self.cells[(rng.randrange(1, bottom), c)] = "C"  # loose edge above the cliff
        return (bottom, 0)

    def apply(self, state: State, call: Call) -> tuple[State, str, str]:
        cell = self.moved(state, call)
        tile = self.cells.get(cell, ".")
        if tile == "C":
            return cell, DEAD, f"You moved {call[0]} and fell off the cliff."
        return cell, GOAL if tile == "G" else ON, f"You moved {call[0]}."

    def show(self, state: State) -> str:
        return self.picture(state)


class LavaKeyGrid(GridWorldBase):
    """Two rooms split by a wall with a locked door (D): fetch the key (K) in the first room, open
    the door, reach G in the second; lava (L) ends the attempt. State: (row, col, key, door open).
    Params: `seed`.
    """

    default_goal = "Pick up the key, open the door and reach G; never step on lava (L)."
    rows, cols = 5, 7

    def describe_actions(self) -> list[ActionSpec]:
        return [
            *super().describe_actions(),
            ActionSpec("pickup", "pick up the key on your cell"),
            ActionSpec("open", "open the door next to you with the key"),
        ]

    def start(self, params: dict[str, Any]) -> State:
        rng = random.Random(int(params.get("seed", 0)))
        wall = 3
        door = (rng.randrange(self.rows), wall)
        self.cells = {(r, wall): "#" for r in range(self.rows) if (r, wall) != door}
        self.cells[door] = "D"
        free = [(r, c) for r in range(self.rows) for c in range(self.cols) if (r, c) not in self.cells]
        start, key, goal = (0, 0), rng.choice([cell for cell in free if cell[1] < wall and cell != (0, 0)]), None
        goal = rng.choice([cell for cell in free if cell[1] > wall + 1])
        self.cells[key], self.cells[goal] = "K", "G"
        lava = [cell for cell in free if cell not in (start, key, goal) and cell[1] != wall - 1 and cell[1] != wall + 1]
        for cell in rng.sample(lava, k=3):
            self.cells[cell] = "L"
            if self.distance((*start, False, False)) is None:
                del self.cells[cell]  # lava may not cut the goal off
        return (*start, False, False)

    def passable(self, state: State, cell: tuple[int, int]) -> bool:
        tile = self.cells.get(cell)
        return tile != "#" and (tile != "D" or bool(state[3]))

    def calls(self, state: State) -> list[Call]:
        legal = super().calls(state)
        if self.cells.get((state[0], state[1])) == "K" and not state[2]:
            legal.append(("pickup", {}))
        if state[2] and not state[3] and any(self.cells.get(self.moved(state, (m, {}))) == "D" for m in MOVES):
            legal.append(("open", {}))
        return legal

    def apply(self, state: State, call: Call) -> tuple[State, str, str]:
        row, col, key, door = state
        if call[0] == "pickup":
            return (row, col, True, door), ON, "You picked up the key."
        if call[0] == "open":
            return (row, col, key, True), ON, "You opened the door."
        cell = self.moved(state, call)
        tile = self.cells.get(cell, ".")
        if tile == "L":
            return (*cell, key, door), DEAD, f"You moved {call[0]} into lava."
        return (*cell, key, door), GOAL if tile == "G" else ON, f"You moved {call[0]}."

    def show(self, state: State) -> str:
        holding = "You hold the key." if state[2] else "You have no key."
        return f"{self.picture(state)}\n{holding} The door is {'open' if state[3] else 'locked'}."


ROOMS = {"hall": ("kitchen", "library", "cellar"), "kitchen": ("hall",), "library": ("hall",),
         "cellar": ("hall", "vault"), "vault": ()}  # fmt: skip
"""Which rooms each room leads to."""


class CaveQuest(SearchWorld):
    """A text adventure with one action, `command(text)`: find the lamp and light it, fetch the key,
    go down to the cellar and unlock the vault. Dropping the lamp down the well loses it for good
    while the game goes on; drinking the potion ends it. The seed says which room holds which thing.
    State: (room, lamp: none|held|lit|lost, key held, vault open).
    """

    default_goal = "Light a lamp, find the key and unlock the vault below the cellar."

    def describe_actions(self) -> list[ActionSpec]:
        text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return [ActionSpec("command", "type one command", text)]

    def start(self, params: dict[str, Any]) -> State:
        rng = random.Random(int(params.get("seed", 0)))
        self.lamp_room, self.key_room = rng.sample(["kitchen", "library"], 2)
        return ("hall", "none", False, False)

    def calls(self, state: State) -> list[Call]:
        room, lamp, key, vault = state
        said = [f"go to the {other}" for other in ROOMS[room] if other != "vault" or vault]
        said += ["examine the walls", "drink the potion"]
        said += ["drop the lamp down the well"] if lamp in ("held", "lit") and room == "hall" else []
        said += ["take the lamp"] if room == self.lamp_room and lamp == "none" else []
        said += ["light the lamp"] if lamp == "held" else []
        said += ["take the key"] if room == self.key_room and not key else []
        said += ["unlock the vault door"] if room == "cellar" and key and not vault else []
        return [("command", {"text": text}) for text in said]

    def apply(self, state: State, call: Call) -> tuple[State, str, str]:
        room, lamp, key, vault = state
        text = call[1]["text"]
        if text == "drink the potion":
            return state, DEAD, "The potion was poison."
        if text.startswith("go to the "):
            there = text.removeprefix("go to the ")
            if there == "cellar" and lamp != "lit":
                return state, ON, "It is too dark to go down; you climb back."
            return (there, lamp, key, vault), GOAL if there == "vault" else ON, f"You go to the {there}."
        changes = {"take the lamp": (room, "held", key, vault), "light the lamp": (room, "lit", key, vault),
                   "drop the lamp down the well": (room, "lost", key, vault), "take the key": (room, lamp, True, vault),
                   "unlock the vault door": (room, lamp, key, True)}  # fmt: skip
        return changes.get(text, state), ON, "Done." if text in changes else "Nothing useful happens."

    def show(self, state: State) -> str:
        room, lamp, key, vault = state
        found = "held" if key else "not found"
        return f"You are in the {room}. Lamp: {lamp}. Key: {found}. Vault: {'open' if vault else 'locked'}."


register_environment("cliff-grid", CliffGrid)
register_environment("lava-key-grid", LavaKeyGrid)
register_environment("cave-quest", CaveQuest)


def without_distance(world: type) -> type:
    """The same world with its `steps_to_goal` hook switched off, as an application's tools have no
    such oracle: runs then learn nothing of the distance to the goal (neither the pivot, the executor's
    hopeless-attempt check nor the `sim` reflector's estimates), while the bench still scores them
    against the hooked original (pivotal.bench.pivot_truth).
    """
    return type(f"{world.__name__}Blind", (world,), {"steps_to_goal": None})


def _register_blind() -> None:
    from pivotal.core.environments.gridworld import GridWorld
    from pivotal.testing.plugin_envs import WordRoom

    worlds: dict[str, type] = {"cliff-grid": CliffGrid, "lava-key-grid": LavaKeyGrid, "cave-quest": CaveQuest}
    worlds.update({"word-room": WordRoom, "gridworld": GridWorld})
    for name, world in worlds.items():
        register_environment(f"{name}-blind", without_distance(world))


_register_blind()
