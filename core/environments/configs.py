"""A tool-use environment built with the tools adapter: copy a setting from staging to production.

The agent has real LangChain tools (`read`, `write`, `delete` — irreversible — and `submit`)
over an in-memory config store, and a verifier decides success: production holds staging's
value, nothing was deleted, and `submit("done")` ended the task. Seeds vary the service,
the key and the values, so a stream of these tasks is "related work" for the lesson store.
"""

import random
from typing import Any

from langchain_core.tools import StructuredTool
from pydantic import BaseModel

from pivotal.core.environments.base import read_params
from pivotal.core.environments.tools import Call, ToolEnvironment
from pivotal.core.task import Task

SERVICES = ["payments", "search", "billing", "auth", "checkout", "inventory"]
KEYS = ["timeout_ms", "max_retries", "pool_size", "batch_size"]


class Params(BaseModel):
    """`seed` picks the service, the key and the values."""

    seed: int = 0


class ConfigCopy(ToolEnvironment):
    params = Params
    """The task parameters it reads (`pivotal envs` lists them)."""

    default_goal = "Copy a setting from staging to production, then submit 'done'."

    def __init__(self) -> None:
        self.store: dict[str, str] = {}
        tools = [
            StructuredTool.from_function(self._read, name="read", description="Read the value at a config path."),
            StructuredTool.from_function(self._write, name="write", description="Write a value to a config path."),
            StructuredTool.from_function(
                self._delete, name="delete", description="Delete a config path. Cannot be undone."
            ),
            StructuredTool.from_function(
                self._submit, name="submit", description="Finish the task with a short answer."
            ),
        ]
        super().__init__(tools, self._verify, irreversible=["delete"])
        self.rewind = "snapshot"  # the config store is in this object: restoring it really goes back

    def reset(self, task: Task) -> str:
        rng = random.Random(read_params(Params, task).seed)
        self.service, self.key = rng.choice(SERVICES), rng.choice(KEYS)
        self.store = {
            f"{env}/{service}/{key}": str(rng.randrange(1, 5000))
            for env in ("staging", "production")
            for service in SERVICES
            for key in KEYS
        }
        self.source, self.target = f"staging/{self.service}/{self.key}", f"production/{self.service}/{self.key}"
        super().reset(task)
        return (
            f"Task: copy {self.key} of {self.service} from staging to production, then submit 'done'. "
            f"Paths look like staging/<service>/<key>. Services: {', '.join(SERVICES)}. "
            f"Keys: {', '.join(KEYS)}."
        )

    # --- tools ---------------------------------------------------------------------------
    def _read(self, path: str) -> str:
        """Read the value at a config path."""
        return self.store.get(path, f"no such path {path!r}")

    def _write(self, path: str, value: str) -> str:
        """Write a value to a config path."""
        self.store[path] = str(value)
        return f"{path} = {value}"

    def _delete(self, path: str) -> str:
        """Delete a config path. Cannot be undone."""
        return "deleted" if self.store.pop(path, None) is not None else f"no such path {path!r}"

    def _submit(self, answer: str) -> str:
        """Finish the task with a short answer."""
        return f"submitted {answer!r}"

    def _verify(self, task: Task, calls: list[Call]) -> bool | None:
        if not any(c["tool"] == "submit" for c in calls):
            return None
        deleted = any(c["tool"] == "delete" and not c["error"] for c in calls)
        return not deleted and self.store.get(self.target) == self.store.get(self.source)

    # --- snapshot (pivot restores state instead of replaying tool calls) -----------------
    def snapshot(self) -> dict[str, Any]:
        return {"store": dict(self.store), "calls": [dict(c) for c in self.calls]}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.store, self.calls = dict(snapshot["store"]), [dict(c) for c in snapshot["calls"]]

    # --- Oracle (used by sim models) ------------------------------------------------------
    def _plan(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            ("read", {"path": self.source}),
            ("write", {"path": self.target, "value": self.store.get(self.source, "")}),
            ("submit", {"answer": "done"}),
        ]

    def _progress(self, calls: list[tuple[str, dict[str, Any]]]) -> int:
        plan, done = self._plan(), 0
        for call in calls:
            if done < len(plan) and call == plan[done]:
                done += 1
        return done

    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        done = self._progress([(c["tool"], c["arguments"]) for c in self.calls])
        plan = self._plan()
        return plan[done] if done < len(plan) else None

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        expert = self.expert_action()
        if expert is not None and (name, arguments) == expert:
            return "good", f"{name} {arguments} is the next step of the copy"
        if name == "delete":
            return "fatal", f"deleting {arguments.get('path', 'a path')} destroys config and cannot be undone"
        if name == "submit":
            return "fatal", "submitting before production holds the staging value ends the task unfinished"
        if name == "write":
            return "fatal", f"writing {arguments} would put a wrong value in the config"
        return "poor", f"{name} {arguments} does not advance the copy"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        plan = self._plan()
        for index, action in enumerate(actions):
            if index >= len(plan) or action != plan[index]:
                return index, f"step {index} was {action[0]} {action[1]}, not the copy's next step"
        return max(len(actions) - 1, 0), "the step budget ran out before submitting"
