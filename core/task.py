"""What a run is asked to do."""

import uuid
from typing import Any

from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

MAX_GOAL_CHARS = 20_000
"""A goal is an instruction, not the material to work on: it is sent in every prompt of every
step and saved in every checkpoint, so a 10 MB goal made a 465 MB checkpoint file and 57 M prompt
tokens. Long material belongs in the environment (what reset or a tool returns), where
observations are clipped."""


class Task(BaseModel):
    """A goal in a named environment; `params` configure the environment (seed, size, ...)."""

    goal: str = ""
    env: str = "gridworld"
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    family: str = ""
    """Tasks of one family share lessons; defaults to the environment name."""
    params: dict[str, Any] = Field(default_factory=dict)
    allow_repeat: list[str] = Field(default_factory=list)
    """Irreversible actions this task may run more than once with the same arguments ("*": all);
    by default the guard refuses a repeat (`pivotal.core.environments.once`)."""

    @field_validator("goal")
    @classmethod
    def _goal_bounded(cls, value: str) -> str:
        if len(value) > MAX_GOAL_CHARS:
            raise PydanticCustomError(
                "goal_too_long",
                "the goal is {length} characters, over the cap of {cap} (MAX_GOAL_CHARS); put long "
                "material in the environment (its reset text or a tool), not in the goal",
                {"length": len(value), "cap": MAX_GOAL_CHARS},
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("env must name an environment, e.g. gridworld")
        return value.strip()

    def model_post_init(self, _context: object) -> None:
        if not self.family:
            self.family = self.env


def parse_task(value: "Task | dict[str, Any] | str | None", default_env: str = "") -> Task:
    """Accept a Task, its dict form, or a bare goal string; one clear line when it is none of them.

    A task that names no environment runs in `default_env` (an agent's own tools), else gridworld.
    """
    from pivotal.core.errors import PivotalError

    if isinstance(value, Task):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise PivotalError("the task is empty; give it a goal, e.g. --goal 'reach G'")
        value = {"goal": value.strip()}
    if isinstance(value, dict):
        if default_env and not value.get("env"):
            value = {**value, "env": default_env}
        try:
            return Task.model_validate(value)
        except ValueError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())  # type: ignore[attr-defined]
            raise PivotalError(f"invalid task: {problems}") from None
    raise PivotalError("no task given; pass {'task': {'goal': ..., 'env': ...}} or a goal string")
