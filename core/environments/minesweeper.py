"""Minesweeper, the task the pivotal-retry mechanism was first measured on: it fails late and
irreversibly (one wrong reveal ends the game after many good ones), so going back to the state
just before the mistake keeps a long, correct prefix that a full retry throws away.

The board opens with one safe region already revealed: mines are placed away from a seeded
start cell and its neighbours, and reset floods the zeros from there. Classic "first click is
always safe" would make the mine layout depend on the agent's first move; an opening fixed by
the seed keeps the board, the oracle and every retry of a task the same, and makes the first
move a deduction instead of a coin toss.
"""

import random
from typing import Any

from pydantic import BaseModel, Field

from pivotal.core.environments.base import ActionSpec, StepResult, read_params
from pivotal.core.errors import PivotalError
from pivotal.core.task import Task

Cell = tuple[int, int]
COMPASS: dict[str, Cell] = {
    "n": (-1, 0),
    "ne": (-1, 1),
    "e": (0, 1),
    "se": (1, 1),
    "s": (1, 0),
    "sw": (1, -1),
    "w": (0, -1),
    "nw": (-1, -1),
}
BOARD_TRIES = 200


class Params(BaseModel):
    """`seed` picks the board; `guess_free` regenerates it until deduction alone clears it, so a
    failure is the agent's mistake, never bad luck the oracle shares.
    """

    rows: int = Field(6, ge=3, le=16)
    cols: int = Field(6, ge=3, le=16)
    mines: int = Field(5, ge=1)
    seed: int = Field(0, ge=0)
    guess_free: bool = True


class Minesweeper:
    params = Params
    """The task parameters it reads (`pivotal envs` lists them)."""

    default_goal = "Reveal every cell without a mine; revealing a mine loses the game."
    rewind = "snapshot"

    def __init__(self) -> None:
        self.rows = self.cols = 0
        self.mines: set[Cell] = set()
        self.revealed: set[Cell] = set()
        self.last: Cell = (0, 0)
        self.exploded = False
        self._opening: dict[str, Any] = {}

    # --- Environment -------------------------------------------------------------------
    def reset(self, task: Task) -> str:
        params = read_params(Params, task)
        if params.mines > params.rows * params.cols - 9:
            raise PivotalError(
                f"minesweeper: {params.mines} mines do not fit a {params.rows}x{params.cols} board with a 3x3 "
                f"safe opening; use at most {params.rows * params.cols - 9} (--param mines=N)"
            )
        self._generate(params)
        return self.render("New board: the opening region is revealed.")

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if self.exploded or self._cleared():
            return StepResult(self.render("The game is over."), done=True, success=not self.exploded)
        problem = self.check(name, arguments)
        if problem:
            return StepResult(self.render(f"Nothing happened: {problem}."))
        cell = (arguments["row"], arguments["col"])
        self.last = cell
        if cell in self.mines:
            self.exploded = True
            return StepResult(self.render(f"You revealed row {cell[0]}, col {cell[1]}: a mine. Game lost."), done=True)
        self._flood(cell)
        if self._cleared():
            return StepResult(self.render("You revealed the last safe cell. Board cleared."), done=True, success=True)
        shows = self._count(cell)
        return StepResult(self.render(f"You revealed row {cell[0]}, col {cell[1]}: it shows {shows or 'no mines'}."))

    def describe_actions(self) -> list[ActionSpec]:
        cell = {
            "row": {"type": "integer", "minimum": 0, "maximum": self.rows - 1},
            "col": {"type": "integer", "minimum": 0, "maximum": self.cols - 1},
        }
        return [
            ActionSpec(
                "reveal",
                "reveal one hidden cell (#); a mine ends the game",
                {"type": "object", "properties": cell, "required": ["row", "col"]},
                irreversible=True,
            )
        ]

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        if name != "reveal":
            return f"unknown action {name!r}; the only action is reveal(row, col)"
        row, col = arguments.get("row"), arguments.get("col")
        if type(row) is not int or type(col) is not int:
            return f"reveal needs whole-number row and col, got row={row!r}, col={col!r}"
        if not self._inside((row, col)):
            return (
                f"row {row}, col {col} is outside the {self.rows}x{self.cols} board; "
                f"rows run 0-{self.rows - 1}, cols 0-{self.cols - 1}"
            )
        if (row, col) in self.revealed:
            return f"row {row}, col {col} is already revealed; pick a hidden cell (#)"
        return None

    def snapshot(self) -> dict[str, Any]:
        return {"revealed": self._mask(), "last": list(self.last), "exploded": self.exploded}

    def restore(self, snapshot: dict[str, Any]) -> None:
        mask = str(snapshot["revealed"])
        self.revealed = {divmod(i, self.cols) for i, bit in enumerate(mask) if bit == "1"}
        self.last = tuple(snapshot["last"])
        self.exploded = bool(snapshot["exploded"])

    def state_key(self) -> list[Any]:
        """What is revealed, without the last cell, which only says where the eye was."""
        return [self._mask(), self.exploded]

    def situation(self) -> str:
        """The last revealed cell's number and its eight neighbours, no coordinates, so a lesson
        about a pattern ("a 1 with one hidden neighbour") is found on any board.
        """
        around = ", ".join(f"{name}={self._describe(_add(self.last, d))}" for name, d in COMPASS.items())
        return f"last reveal shows {self._describe(self.last)}; around it: {around}"

    def instance(self) -> str:
        """Which board this is: a solved board's reveals (a task lesson) say nothing about another
        board's mines, so they are recalled only here (see GridWorld.instance).
        """
        return f"{self.rows}x{self.cols}|{sorted(self.mines)}"

    def wrong_action(self, rng: random.Random) -> tuple[str, dict[str, Any]] | None:
        """A plausible mistake for the `sim` actor: a hidden cell that is not certainly safe. Drawn
        from the whole schema, most wrong cells would be revealed ones the pre-check bounces for
        free, and the error rate would measure nothing.
        """
        safe, _ = self._deduce()
        expert = self.expert_action()
        hidden = [c for c in self._hidden() if expert is None or c != (expert[1]["row"], expert[1]["col"])]
        risky = [c for c in hidden if c not in safe] or hidden
        if not risky:
            return None
        row, col = rng.choice(risky)
        return "reveal", {"row": row, "col": col}

    # --- Oracle (used by sim models) ------------------------------------------------------
    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        """A cell constraint propagation proves safe; when none is, the cell with the lowest
        estimated mine probability: then the oracle guesses and may hit a mine (guess_free
        boards never need that).
        """
        if self.exploded or self._cleared():
            return None
        safe, mines = self._deduce()
        if safe:
            row, col = min(safe)
        else:
            risk = self._risk(mines)
            row, col = min(risk, key=lambda c: (risk[c], c))
        return "reveal", {"row": row, "col": col}

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        """`fatal` for a mine; `poor` for a reveal that does nothing, or a gamble on a cell the board
        does not prove safe while another cell is proven safe; `good` otherwise (a proven-safe
        cell, or any mine-free cell when nothing is proven).
        """
        problem = self.check(name, arguments)
        if problem:
            return "poor", problem
        cell = (arguments["row"], arguments["col"])
        if cell in self.mines:
            return "fatal", f"revealing row {cell[0]}, col {cell[1]} hits a mine"
        safe, _ = self._deduce()
        if safe and cell not in safe:
            other = min(safe)
            return "poor", (
                f"row {cell[0]}, col {cell[1]} is a gamble: the numbers do not prove it safe, "
                f"while row {other[0]}, col {other[1]} is certainly safe"
            )
        return "good", f"row {cell[0]}, col {cell[1]} is safe"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        """The step that doomed the attempt: the reveal of a mine; without one (the budget ran out),
        the first step that revealed nothing. A gamble that turned out safe is not blamed: it
        left the board solvable and closer to cleared.
        """
        saved = self.snapshot()
        self.restore(self._opening)
        try:
            wasted = None
            for index, (name, arguments) in enumerate(actions):
                verdict, reason = self.judge(name, arguments)
                if verdict == "fatal":
                    return index, reason
                if self.check(name, arguments):
                    wasted = (index, reason) if wasted is None else wasted
                    continue
                self._flood((arguments["row"], arguments["col"]))
            return wasted or (max(len(actions) - 1, 0), "the step budget ran out before every safe cell was revealed")
        finally:
            self.restore(saved)

    def last_recoverable(self, actions: list[tuple[str, dict[str, Any]]]) -> int:
        """A mine is the only point of no return: every safe reveal leaves the board clearable."""
        index, reason = self.first_mistake(actions)
        return index if "hits a mine" in reason else max(len(actions) - 1, 0)

    # --- rendering -----------------------------------------------------------------------
    def render(self, event: str) -> str:
        left = self.rows * self.cols - len(self.mines) - len(self.revealed)
        header = "    " + " ".join(f"{c:2d}" for c in range(self.cols))
        rows = [
            f"{r:2d}  " + " ".join(f"{self._symbol((r, c)):>2}" for c in range(self.cols)) for r in range(self.rows)
        ]
        return (
            f"{event} {left} safe cell{'' if left == 1 else 's'} still hidden, {len(self.mines)} mines in all.\n"
            "Legend: # hidden, . revealed with no mine around, 1-8 mines among the eight neighbours, * mine.\n"
            + "\n".join([header, *rows])
        )

    def _symbol(self, cell: Cell) -> str:
        if self.exploded and cell in self.mines:
            return "*"
        if cell not in self.revealed:
            return "#"
        return str(self._count(cell) or ".")

    def _describe(self, cell: Cell) -> str:
        if not self._inside(cell):
            return "edge"
        if cell not in self.revealed:
            return "mine" if self.exploded and cell == self.last else "hidden"
        return str(self._count(cell))

    # --- deduction -----------------------------------------------------------------------
    def _deduce(self) -> tuple[set[Cell], set[Cell]]:
        """Hidden cells the revealed numbers prove safe, and those they prove to be mines.

        Single-cell rules (a number whose mines are all found frees its other hidden neighbours;
        one with as many hidden neighbours as missing mines marks them all), the subset rule (a
        constraint inside another settles the difference) and the total mine count, to a fixpoint.
        """
        safe: set[Cell] = set()
        mines: set[Cell] = set()
        while True:
            constraints = self._constraints(safe, mines)
            found = _settled(constraints)
            if not found:
                found = _settled(_differences(constraints))
            if not found:
                found = self._by_total(safe, mines)
            if not found:
                return safe, mines
            for cells, is_mine in found:
                (mines if is_mine else safe).update(cells)

    def _constraints(self, safe: set[Cell], mines: set[Cell]) -> list[tuple[frozenset[Cell], int]]:
        constraints = set()
        for cell in self.revealed:
            around = self._neighbours(cell)
            unknown = frozenset(c for c in around if c not in self.revealed and c not in safe and c not in mines)
            if unknown:
                constraints.add((unknown, self._count(cell) - sum(c in mines for c in around)))
        return sorted(constraints, key=lambda item: (len(item[0]), sorted(item[0])))

    def _by_total(self, safe: set[Cell], mines: set[Cell]) -> list[tuple[frozenset[Cell], bool]]:
        unknown = frozenset(c for c in self._hidden() if c not in safe and c not in mines)
        left = len(self.mines) - len(mines)
        if unknown and left == 0:
            return [(unknown, False)]
        if unknown and left == len(unknown):
            return [(unknown, True)]
        return []

    def _risk(self, mines: set[Cell]) -> dict[Cell, float]:
        """A rough mine probability per undecided hidden cell: the worst of the constraints it is in,
        else the density of the mines not yet located. Not exact enumeration: good enough to
        choose a guess, and the oracle says it is guessing.
        """
        unknown = [c for c in self._hidden() if c not in mines]
        density = (len(self.mines) - len(mines)) / max(len(unknown), 1)
        risk = dict.fromkeys(unknown, density)
        frontier: dict[Cell, float] = {}
        for cells, need in self._constraints(set(), mines):
            for cell in cells:
                frontier[cell] = max(frontier.get(cell, 0.0), need / len(cells))
        risk.update(frontier)
        return risk

    # --- board ---------------------------------------------------------------------------
    def _generate(self, params: Params) -> None:
        rng = random.Random(f"minesweeper:{params.rows}x{params.cols}:{params.mines}:{params.seed}")
        self.rows, self.cols = params.rows, params.cols
        cells = [(r, c) for r in range(self.rows) for c in range(self.cols)]
        for _ in range(BOARD_TRIES):
            start = rng.choice(cells)
            free = {start, *self._neighbours(start)}
            self.mines = set(rng.sample([c for c in cells if c not in free], params.mines))
            self.revealed, self.last, self.exploded = set(), start, False
            self._flood(start)
            self._opening = self.snapshot()
            if not params.guess_free or self._solvable():
                self.restore(self._opening)
                return
        raise PivotalError(
            f"minesweeper: no guess-free {params.rows}x{params.cols} board with {params.mines} mines in "
            f"{BOARD_TRIES} tries for seed {params.seed}; use fewer mines or --param guess_free=false"
        )

    def _solvable(self) -> bool:
        """Whether deduction alone clears the board from the opening (leaves it played out)."""
        while not self._cleared():
            safe, _ = self._deduce()
            if not safe:
                return False
            for cell in safe:
                self._flood(cell)
        return True

    def _flood(self, cell: Cell) -> None:
        """Reveal the cell, and when it has no mine around, its neighbours, recursively."""
        stack = [cell]
        while stack:
            here = stack.pop()
            if here in self.revealed:
                continue
            self.revealed.add(here)
            if self._count(here) == 0:
                stack.extend(n for n in self._neighbours(here) if n not in self.revealed)

    def _count(self, cell: Cell) -> int:
        return sum(n in self.mines for n in self._neighbours(cell))

    def _neighbours(self, cell: Cell) -> list[Cell]:
        return [n for d in COMPASS.values() if self._inside(n := _add(cell, d))]

    def _hidden(self) -> list[Cell]:
        return [(r, c) for r in range(self.rows) for c in range(self.cols) if (r, c) not in self.revealed]

    def _cleared(self) -> bool:
        return len(self.revealed) + len(self.mines) == self.rows * self.cols and not self.exploded

    def _inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.rows and 0 <= cell[1] < self.cols

    def _mask(self) -> str:
        return "".join("1" if (r, c) in self.revealed else "0" for r in range(self.rows) for c in range(self.cols))


def _settled(constraints: list[tuple[frozenset[Cell], int]]) -> list[tuple[frozenset[Cell], bool]]:
    """Constraints whose cells are all safe (no mine missing) or all mines (as many as cells)."""
    return [(cells, need > 0) for cells, need in constraints if need == 0 or need == len(cells)]


def _differences(constraints: list[tuple[frozenset[Cell], int]]) -> list[tuple[frozenset[Cell], int]]:
    """The subset rule: A inside B leaves B−A holding B's mines minus A's."""
    return [
        (big - small, need_big - need_small)
        for small, need_small in constraints
        for big, need_big in constraints
        if small < big
    ]


def _add(cell: Cell, delta: Cell) -> Cell:
    return cell[0] + delta[0], cell[1] + delta[1]
