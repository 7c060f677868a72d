"""The contract between Pivotal and wherever actions execute.

Environments are synchronous (most tools and simulators are); the graph calls them from a
worker thread so async nodes never block the event loop.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from difflib import SequenceMatcher, get_close_matches
from typing import Any, Protocol, TypeVar, get_args, runtime_checkable

from pydantic import BaseModel, ValidationError

from pivotal.core.errors import PivotalError, first_problem
from pivotal.core.schemas import Verdict
from pivotal.core.state import Rewind
from pivotal.core.task import Task

REWIND_MODES: tuple[str, ...] = get_args(Rewind)


P = TypeVar("P", bound=BaseModel)


def read_params(schema: type[P], task: Task) -> P:
    """The task's `params` as the environment's own model: a bad one (`--param map=9x9`) is one
    line naming the parameter, not a KeyError from deep inside a simulator.
    """
    try:
        return schema.model_validate(task.params)
    except ValidationError as exc:
        name, problem, given = first_problem(exc)
        raise PivotalError(
            f"{task.env} parameter {name}={given!r} is not valid: {problem}; fix it (--param {name}=VALUE)"
        ) from None


@dataclass(frozen=True)
class ActionSpec:
    """One action the actor may choose; `parameters` is a JSON schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    irreversible: bool = False
    final: bool = False
    """Ends the task with the agent's own answer (no verifier decides): the critic's reject of it
    fails the attempt, so the reflector and the pivot handle a wrong answer like any failure."""
    repeatable: bool = False
    """An irreversible action that may run again with the same arguments in one run (a top-up that
    is meant to happen twice); otherwise the guard refuses the repeat (`pivotal.core.environments.once`)."""
    once_key: tuple[str, ...] = ()
    """The arguments that make two calls of an irreversible action the same, when not all of them
    are (`("order_id",)`: one refund per order, whatever the amount)."""


@dataclass
class StepResult:
    observation: str
    done: bool = False
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form details; `answer` (the agent's final answer) and `verified` (False: the agent
    declared success, nothing checked it) are read by the graph."""


@runtime_checkable
class Environment(Protocol):
    """`reset` → observation; `step` → StepResult. Everything else is optional."""

    def reset(self, task: Task) -> str: ...

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult: ...

    def describe_actions(self) -> list[ActionSpec]: ...


@runtime_checkable
class Restorable(Protocol):
    """Environments that can save and load their own state.

    The snapshot taken after each step is checkpointed with it, so a run resumed in another
    process (or forked in Studio) gets the environment back by `restore`, never by running
    its actions again. Whether a pivot may use it to rewind is `rewind`'s question: a tool
    adapter restores its call log, but the world its tools changed stays changed.
    """

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, snapshot: dict[str, Any]) -> None: ...


@runtime_checkable
class Idempotent(Protocol):
    """Environments whose actions reach the outside world (payments, files, tickets) and can
    recognise a repeat. Every new step goes through `step_once` with a key naming that step of
    that attempt of that run. A run killed after an action ran but before its checkpoint was
    written executes that one step again on resume, with the same key: `step_once` must not
    act twice for one key (return the first result instead). Without it a reversible step is
    at-least-once (the run's result says so: `at_least_once`); an irreversible one was noted before
    its tool ran and is not run again (core/environments/once.py `note_started`).
    """

    def step_once(self, key: str, name: str, arguments: dict[str, Any]) -> StepResult: ...


@runtime_checkable
class Compensating(Protocol):
    """Environments whose side-effecting actions can be undone by another action (saga pattern)."""

    def compensation(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The action that undoes `name(arguments)`, or None when nothing needs undoing."""
        ...


def rewind_mode(env: Environment) -> Rewind:
    """The environment's declared `rewind`, else `snapshot` for a Restorable one, else `forward`.

    Replay is never inferred: only an environment that says its actions are safe to repeat
    gets them repeated.
    """
    declared = getattr(env, "rewind", None)
    if declared is None:
        return "snapshot" if isinstance(env, Restorable) else "forward"
    if declared not in REWIND_MODES:
        raise PivotalError(f"{type(env).__name__}.rewind is {declared!r}; use one of {', '.join(REWIND_MODES)}")
    if declared == "snapshot" and not isinstance(env, Restorable):
        raise PivotalError(f"{type(env).__name__}.rewind is 'snapshot' but it has no snapshot()/restore()")
    if declared == "compensate" and not isinstance(env, Compensating):
        raise PivotalError(f"{type(env).__name__}.rewind is 'compensate' but it has no compensation()")
    return declared


def deterministic(env: Environment) -> bool:
    """Whether the same call from the same state always does the same: the environment's own
    `deterministic` when it declares one, else whether it rewinds by snapshot or replay (a world a
    snapshot puts back whole, or one that declares its actions safe to repeat).
    """
    declared = getattr(env, "deterministic", None)
    return bool(declared) if declared is not None else rewind_mode(env) in ("snapshot", "replay")


REWIND_WORDS: dict[str, str] = {
    "snapshot": "restored from a snapshot",
    "replay": "reset and the kept steps replayed",
    "compensate": "abandoned steps undone by compensating actions",
    "forward": "cannot go back: a retry goes on from the real state",
}
"""How a retry puts the world back, per rewind mode: `pivotal envs` shows it for each environment."""


class RewindWarning(UserWarning):
    """Issued by `arun` and `run_batch` with the `rewind_notice` line: filter it with `warnings`."""


def rewind_notice(env: Environment, env_name: str, retry: str, retries: int) -> str:
    """One line for the start of a run whose retries cannot rewind, else "".

    An environment without a way back makes `--retry pivotal` and `--retry full` the same run:
    each retry starts where the failed attempt left the world. The live trace said "nothing
    undone" at each pivot, but nothing said that the choice of strategy no longer mattered.
    """
    if retry == "none" or retries <= 0 or rewind_mode(env) != "forward":
        return ""
    way_back = getattr(env, "way_back", "give the environment snapshot()/restore() or rewind = 'replay'")
    return (
        f"note: {env_name} cannot go back (rewind: forward), so --retry {retry} rewinds nothing: each retry "
        "goes on from the real state with the failed attempt's steps still done (pivotal and full retry "
        f"behave alike); {way_back} for a retry that goes back"
    )


def declared_params(env: Environment) -> dict[str, Any] | None:
    """The parameters an environment takes (`params`: its pydantic model) with their defaults; None
    when it declares none.
    """
    schema = params_model(env)
    return None if schema is None else {name: field.default for name, field in schema.model_fields.items()}


def params_model(env: Environment) -> type[BaseModel] | None:
    """The pydantic model of the parameters an environment reads (its `params` attribute); None when
    it declares none, as an application's environment or a `ToolEnvironment` (whose verifier may
    read any key of `Task.params`) need not.
    """
    schema = getattr(env, "params", None)
    return schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None


def _declared_by_reader(env: Environment) -> bool:
    """Whether the `params` model is the one its `reset` reads: declared by the class whose `reset`
    runs, or below it. A subclass that overrides `reset` and inherits `params` may read more keys
    than its parent declares (a plugin's `GridWorld` that also reads `kind`), so it is not held to them.
    """
    if "params" in getattr(env, "__dict__", {}):
        return True
    declarer, reader = (next((c for c in type(env).__mro__ if name in vars(c)), None) for name in ("params", "reset"))
    return declarer is not None and reader is not None and issubclass(declarer, reader)


def check_params(env: Environment, task: Task) -> None:
    """The task's `params` against what its environment declares it reads: a misspelt key
    (`--param sise=4`) is refused in one line naming the closest parameter, and a bad value as
    `read_params` refuses it, before anything runs. Pydantic drops keys a model does not name, so
    the typo ran the default grid and exited 0. An environment that declares no `params` model
    cannot say what it reads, so its tasks' params pass unchecked.
    """
    schema = params_model(env)
    if schema is None or not _declared_by_reader(env):
        return
    known = list(schema.model_fields)
    for name in task.params:
        if name not in known:
            close = closest(name, known)
            hint = f"did you mean {close}? " if close else ""
            raise PivotalError(
                f"{task.env} has no parameter {name!r}: {hint}it takes {', '.join(known) or 'none'} "
                f"(see `pivotal envs`); fix the name (--param {close or 'NAME'}=VALUE)"
            )
    read_params(schema, task)


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


@runtime_checkable
class NoReturnOracle(Protocol):
    """An `Oracle` that also knows when the goal went out of reach (optional: the `sim` reflector
    then names the first mistake as its point of no return, the safe guess).
    """

    def last_recoverable(self, actions: list[tuple[str, dict[str, Any]]]) -> int:
        """The index of the last state, counted as the steps taken to reach it (0: the start), from
        which the goal was still reachable; that is the step after which it no longer was. When it
        stayed reachable throughout: the last step's index (a retry then redoes only that step).
        """
        ...


@runtime_checkable
class DistanceOracle(Protocol):
    """An environment that knows how far the goal is (optional). Two readers: the `sim` reflector
    fills its estimates of the steps still needed from it (without it `pivot="best"` falls back to
    the path's room), and the executor ends an attempt that can no longer reach the goal within its
    budget (`Context.loop_detection`), so no step is spent where continuing cannot succeed.
    """

    def steps_to_goal(self, actions: list[tuple[str, dict[str, Any]]]) -> int | None:
        """The fewest steps to the goal from the state these actions lead to from the start (a lower
        bound is enough: never more than the true number); None when the goal is out of reach from there.
        """
        ...


GOAL_STEPS = "goal_steps_left"
"""The `StepResult.info` key where a step records the environment's `steps_to_goal` after it (None:
out of reach); absent when the environment cannot say."""


APPROVAL_WORDS = ("*", "irreversible")
"""What `require_approval_for` may name besides actions: every action, every irreversible one."""


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name a misspelt one most likely meant, if any is close: what each refusal suggests."""
    close = get_close_matches(name, list(known), n=1, cutoff=0.5)
    return close[0] if close else None


def check_names(setting: str, names: Iterable[str], known: Iterable[str], *, what: str = "tool") -> None:
    """Refuse a safety setting that names no known action: a typo (`irreversible=["refnd"]`) would
    switch the safety off for the real one without a word. One line, naming the closest name.
    """
    known = list(dict.fromkeys(known))
    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if not unknown:
        return
    name = unknown[0]
    close = closest(name, known)
    hint = f"did you mean {close!r}? " if close else ""
    raise PivotalError(
        f"{setting} names {name!r}, which is no {what} here: {hint}the {what}s are {', '.join(known) or 'none'}; "
        "fix the name, or the setting guards nothing"
    )


def check_approvals(
    names: Iterable[str], actions: Iterable[str], *, what: str = "tool", irreversible: Iterable[str] | None = None
) -> None:
    """`require_approval_for`: action names, or its special words. `irreversible`, where known, the actions
    marked so: "irreversible" with none marked would ask before nothing, and say nothing.
    """
    names = list(names)
    check_names("require_approval_for", [n for n in names if n not in APPROVAL_WORDS], actions, what=what)
    if "irreversible" in names and irreversible is not None and not list(irreversible):
        raise PivotalError(
            f"require_approval_for names 'irreversible', but no {what} here is irreversible: mark them "
            f"(irreversible=['refund'], ActionSpec(irreversible=True)) or name them, or the setting guards nothing"
        )


def check_action(env: Environment, name: str, arguments: dict[str, Any]) -> str | None:
    """Deterministic pre-check: a reason to reject, or None.

    Runs before any LLM judgement because it is free and always right about what it covers. The
    reason is the critique the actor reads next, within the verdict's length (`fit_reason`).
    """
    reason = action_problem(env, name, arguments)
    return None if reason is None else fit_reason(reason, _called(name, arguments))


def action_problem(env: Environment, name: str, arguments: dict[str, Any]) -> str | None:
    """The pre-check's reason in full, for a caller that only asks whether the action is legal."""
    specs = {spec.name: spec for spec in env.describe_actions()}
    if name not in specs:
        return f"unknown action {name!r}; choose one of: {', '.join(specs)}"
    problem = _argument_problem(specs[name].parameters, arguments)
    if problem:
        return f"invalid arguments for {name}: {problem}"
    if isinstance(env, Prechecked):
        return env.check(name, arguments)
    return None


REASON_CHARS: int = next(
    rule.max_length for rule in Verdict.model_fields["diagnosis"].metadata if hasattr(rule, "max_length")
)
"""The longest reason a verdict holds (its `diagnosis`)."""
_SEPARATORS = ("\n", "; ", ", ")


def fit_reason(reason: str, proposed: str, limit: int = REASON_CHARS) -> str:
    """A reason that fits `limit` and keeps its use.

    Cut at the limit, a reason that lists the legal actions ("no such command; the commands that
    work here: go north, ..., examine antique trunk") lost the end of the list, which is where the
    command the actor meant could be. A long list is ranked instead: the items closest to what was
    proposed first, as many as fit, then how many were left out. Other long text is cut.
    """
    if len(reason) <= limit:
        return reason
    head, items = _listed(reason)
    ranked = sorted(items, key=lambda item: -_closeness(item, proposed))  # stable: ties keep their order
    kept: list[str] = []
    for item in ranked:
        if len(_ranked_line(head, [*kept, item], len(items))) > limit:
            break
        kept.append(item)
    if len(kept) < 2:
        return reason[: limit - 1] + "…"
    return _ranked_line(head, kept, len(items))


def _ranked_line(head: str, kept: list[str], total: int) -> str:
    return f"{head}{', '.join(kept)} (closest first; {total - len(kept)} more not shown)"


def _listed(reason: str) -> tuple[str, list[str]]:
    """The text before a list and the list's items, split on its most frequent separator."""
    separator = max(_SEPARATORS, key=reason.count)
    if reason.count(separator) < 2:
        return reason, []
    colons = [at for at in range(len(reason)) if reason.startswith(": ", at) and reason.count(separator, at) >= 2]
    head = reason[: colons[-1] + 2] if colons else ""
    items = [item.strip().removeprefix("- ") for item in reason[len(head) :].split(separator)]
    return head, [item for item in items if item]


def _closeness(item: str, proposed: str) -> float:
    """Shared words, then spelling: `examine trunk` is closest to `examine antique trunk`."""
    mine, theirs = set(item.lower().split()), set(proposed.lower().split())
    shared = len(mine & theirs) / len(mine | theirs) if mine | theirs else 0.0
    return shared + SequenceMatcher(None, item.lower(), proposed.lower()).ratio()


def _called(name: str, arguments: dict[str, Any]) -> str:
    return " ".join([name, *(str(value) for value in arguments.values())])


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
}


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
