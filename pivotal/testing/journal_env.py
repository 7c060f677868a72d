"""A gridworld whose moves are "real" actions: each is written to an outside journal
($JOURNAL), which is how tests prove from the environment's side that no action ran twice.
Like a payment API with idempotency keys, it acts once per key (pivotal's `Idempotent`).
Loaded by the CLI as a plugin (`--plugin pivotal.testing.journal_env`).
"""

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from pivotal.core.environments import register_environment
from pivotal.core.environments.gridworld import GridWorld
from pivotal.core.task import Task


class JournalGrid(GridWorld):
    def reset(self, task: Task) -> str:
        self.tag, self.position = str(task.params.get("seed")), 0
        return super().reset(task)

    def step_once(self, key: str, name: str, arguments: dict[str, Any]):
        journal = os.environ["JOURNAL"]
        done = os.path.exists(journal) and any(json.loads(line)["key"] == key for line in open(journal))
        # The outside effect happens once per key; a repeat is logged as such (to count how often a
        # resumed run re-issued an action) and changes nothing outside. The maze follows the move.
        with open(journal, "a", encoding="utf-8") as log:
            log.write(
                json.dumps(
                    {
                        "key": key,
                        "task": self.tag,
                        "position": self.position,
                        "action": name,
                        "pid": os.getpid(),
                        "repeat": done,
                    }
                )
                + "\n"
            )
        self.position += 1
        return super().step(name, arguments)

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "position": self.position}

    def restore(self, snapshot: dict[str, Any]) -> None:
        super().restore(snapshot)
        self.position = snapshot["position"]


register_environment("journal-grid", JournalGrid)


def just_started(journal: Path, results: Path) -> bool:
    """A task has executed exactly one action and has no result yet: a batch killed now is surely
    mid-way through it (every maze needs more moves), so the resumed process must carry it on.
    """
    done = {str(row["task"]["params"]["seed"]) for row in json_lines(results)}
    actions = Counter(e["task"] for e in json_lines(journal) if not e["repeat"])
    return any(count == 1 and task not in done for task, count in actions.items())


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines written so far (the last one may still be half written)."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
