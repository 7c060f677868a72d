"""The world a role call is about, handed by the node that makes the call.

Models that answer from the environment itself (the `sim` models) read it from here for the
duration of one call; every other model ignores it. The node gives it (`ask_role(world=...)`),
so the models layer never reaches into the run machinery's table of live environments.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from pivotal.core.environments.base import Environment


class World(Protocol):
    """What a model may read of the run's environment: the instance, the actions applied so far,
    and the observation the task started from.
    """

    env: Environment
    applied: list[tuple[str, dict[str, Any]]]
    first_observation: str


_current: ContextVar[World | None] = ContextVar("pivotal_world", default=None)


@contextmanager
def given(world: World | None) -> Iterator[None]:
    """The world for the calls made inside this block (tasks and threads started in it inherit it)."""
    token = _current.set(world)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> World | None:
    return _current.get()
