"""Graph state. Values are plain JSON so every checkpointer stores and reloads them as-is.

Lists that a pivot cuts back (the trajectory) are replaced whole by the node that changes
them; only the counters add up, through `add_counts`.
"""

from typing import Annotated, Any, Literal, TypedDict

Status = Literal["running", "success", "failure"]


def add_counts(current: dict[str, Any] | None, update: dict[str, Any] | None) -> dict[str, Any]:
    """Add numbers key by key (nested dicts too), so nodes report deltas, never totals."""
    merged = dict(current or {})
    for key, value in (update or {}).items():
        if isinstance(value, dict):
            merged[key] = add_counts(merged.get(key), value)
        else:
            merged[key] = merged.get(key, 0) + value
    return merged


class Step(TypedDict, total=False):
    """One executed environment step."""

    index: int
    action: str
    arguments: dict[str, Any]
    thought: str
    verdicts: list[dict[str, Any]]
    observation: str
    done: bool
    success: bool
    snapshot: dict[str, Any] | None
    checkpoint_id: str | None
    """LangGraph checkpoint just before this step executed: fork from it in Studio."""
    lessons: list[str]
    error: bool
    """The action raised (a tool error): nothing to compensate."""
    compensates: int | None
    """Index of the abandoned step this compensating action undid."""


class InputState(TypedDict, total=False):
    """What a caller (or LangGraph Studio) passes in."""

    task: dict[str, Any] | str
    """A `Task` as a dict, or just a goal string for the default environment."""
    run_id: str
    """Set by the runners (`arun`, `run_batch`) so they can release the run's environment; new if absent."""
    run_settings: dict[str, Any]
    """The run's Context as given at start, so a resume anywhere runs with the same settings."""
    plugins: list[str]
    """Modules the CLI imported to register the run's environment; a resume imports them again."""


class State(InputState, total=False):
    status: Status
    reason: str
    observation: str
    first_observation: str
    trajectory: list[Step]
    proposal: dict[str, Any] | None
    critiques: list[dict[str, Any]]
    """Verdicts for the step being decided (cleared when a step executes)."""
    chosen: dict[str, Any] | None
    """The proposal the executor will run (approved, or the best one when critique rounds ran out)."""
    next: Literal["execute", "ask_human", "propose", "fail"]
    attempt_failed: str
    reflections: list[dict[str, Any]]
    retries: int
    attempt_start: int
    """Trajectory length when this attempt began: the step budget counts the steps after it.
    0 when a pivot rewound the world (the kept prefix counts); the whole length when the world
    could not go back and the retry goes forward from it."""
    compensations: list[dict[str, Any]]
    """Compensating actions a pivot queued (newest abandoned step first); the actor proposes
    them before anything else and the critic reviews each like any action."""
    lessons: list[dict[str, Any]]
    """Lessons recalled for the current step."""
    recalled: list[str]
    candidates: list[dict[str, Any]]
    approved_lessons: list[dict[str, Any]]
    written: list[str]
    retired: list[str]
    counters: Annotated[dict[str, Any], add_counts]
    """executed, replayed, llm_calls, approved, revised, rejected, prechecked, fallbacks."""
    usage: Annotated[dict[str, Any], add_counts]
    """Per role: calls, input_tokens, output_tokens, seconds, fallbacks."""
