"""The contract between Pivotal and wherever actions execute.

Environments are synchronous (most tools and simulators are); the graph calls them from a
worker thread so async nodes never block the event loop.
"""

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pivotal.task import Task


@dataclass(frozen=True)
class ActionSpec:
    """One action the actor may choose; `parameters` is a JSON schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    irreversible: bool = False


@dataclass
class StepResult:
    observation: str
    done: bool = False
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """`reset` → observation; `step` → StepResult. Everything else is optional."""

    def reset(self, task: Task) -> str: ...

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult: ...

    def describe_actions(self) -> list[ActionSpec]: ...


@runtime_checkable
class Restorable(Protocol):
    """Environments that can save and load their state skip replay on a pivot."""

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, snapshot: dict[str, Any]) -> None: ...


@runtime_checkable
class Idempotent(Protocol):
    """Environments whose actions reach the outside world (payments, files, tickets) and can
    recognise a repeat. A run killed after an action ran but before its checkpoint was written
    executes that step again on resume, with the same key: `step_once` must not act twice for
    one key (return the first result instead). Without it that one step is at-least-once."""

    def step_once(self, key: str, name: str, arguments: dict[str, Any]) -> StepResult: ...


@runtime_checkable
class Prechecked(Protocol):
    """Environments that can tell, without side effects, that an action is illegal right now."""

    def check(self, name: str, arguments: dict[str, Any]) -> str | None: ...


@runtime_checkable
class Oracle(Protocol):
    """Ground truth the `sim` models consult (with their configured error rate) in tests and benchmarks."""

    def expert_action(self) -> tuple[str, dict[str, Any]] | None: ...

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        """('good'|'poor'|'fatal', reason) for taking this action in the current state."""
        ...

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        """Index of the first step that doomed the attempt, and why."""
        ...


def check_action(env: Environment, name: str, arguments: dict[str, Any]) -> str | None:
    """Deterministic pre-check: a reason to reject, or None.

    Runs before any LLM judgement because it is free and always right about what it covers.
    """
    specs = {spec.name: spec for spec in env.describe_actions()}
    if name not in specs:
        return f"unknown action {name!r}; choose one of: {', '.join(specs)}"
    problem = _argument_problem(specs[name].parameters, arguments)
    if problem:
        return f"invalid arguments for {name}: {problem}"
    if isinstance(env, Prechecked):
        return env.check(name, arguments)
    return None


_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "object": dict, "array": list}


def _argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    properties = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in arguments]
    if missing:
        return f"missing {', '.join(missing)}"
    unknown = [key for key in arguments if properties and key not in properties]
    if unknown:
        return f"unknown argument {', '.join(unknown)}"
    for key, value in arguments.items():
        expected = _JSON_TYPES.get(properties.get(key, {}).get("type", ""))
        if expected and not isinstance(value, expected):
            return f"{key} should be {properties[key]['type']}, got {type(value).__name__}"
    return None
