"""Environments by name: the built-ins plus whatever an application registers."""

from collections.abc import Callable

from pivotal.core.environments.base import (
    ActionSpec,
    Environment,
    Idempotent,
    Oracle,
    Prechecked,
    Restorable,
    StepResult,
    check_action,
    deterministic,
)
from pivotal.core.errors import PivotalError

Factory = Callable[[], Environment]


def _gridworld() -> Environment:
    from pivotal.core.environments.gridworld import GridWorld

    return GridWorld()


def _frozenlake() -> Environment:
    from pivotal.core.environments.frozenlake import FrozenLake

    return FrozenLake()


def _taxi() -> Environment:
    from pivotal.core.environments.taxi import Taxi

    return Taxi()


def _configs() -> Environment:
    from pivotal.core.environments.configs import ConfigCopy

    return ConfigCopy()


def _minesweeper() -> Environment:
    from pivotal.core.environments.minesweeper import Minesweeper

    return Minesweeper()


_FACTORIES: dict[str, Factory] = {
    "gridworld": _gridworld,
    "frozenlake": _frozenlake,
    "taxi": _taxi,
    "configs": _configs,
    "minesweeper": _minesweeper,
}


def register_environment(name: str, factory: Factory) -> None:
    """Make `factory` available as `Task(env=name)` and `pivotal run --env name`."""
    _FACTORIES[name] = factory


def environment_names() -> list[str]:
    return sorted(_FACTORIES)


def make_environment(name: str) -> Environment:
    require_environment(name)
    return _FACTORIES[name]()


def require_environment(name: str) -> None:
    """One line when this process has no environment of that name (its module not imported)."""
    if name not in _FACTORIES:
        raise PivotalError(
            f"unknown environment {name!r}; choose one of {', '.join(environment_names())} "
            "or register yours with register_environment() (an agent: build it in this process first)"
        )


__all__ = [
    "ActionSpec",
    "Environment",
    "Idempotent",
    "Oracle",
    "Prechecked",
    "Restorable",
    "StepResult",
    "check_action",
    "deterministic",
    "environment_names",
    "make_environment",
    "require_environment",
    "register_environment",
]
