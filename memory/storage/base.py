"""The storage seam: what the lesson policy (memory/policy/) asks of the place its lessons and their
ledger records are kept, in Pivotal's words, so a backend is one file that answers it
(memory/storage/chroma.py, memory/storage/langgraph.py) and one row in the table
(memory/storage/__init__.py `BACKENDS`). Each backend turns `Only` into its own query language
inside its own file: nothing above this seam spells a backend's filter syntax.

Lessons are kept a family at a time: recall, dedup and the ledger always ask within one family.
"""

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pydantic import ValidationError

from pivotal.core.errors import PivotalError
from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record

if TYPE_CHECKING:  # LangGraph's store module loads only where a backend uses it
    from langgraph.store.base import BaseStore

    from pivotal.core.context import Context


Vector = np.ndarray | list[float]
"""An embedding: a text's, as `LessonStorage.vector` made it."""


@dataclass(frozen=True)
class Only:
    """Which lessons a count or a nearest-neighbour query wants: every field set must match
    (None, or an empty tuple: any value). `owners` and `scopes` match a lesson whose field is
    one of them.
    """

    status: str | None = None
    kind: str | None = None
    owners: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()

    def equal(self) -> dict[str, str]:
        """The fields that must be one value."""
        return {name: value for name, value in (("status", self.status), ("kind", self.kind)) if value is not None}


@dataclass(frozen=True)
class Near:
    """A stored lesson near a query: its id and cosine similarity, and the lesson when asked for."""

    id: str
    similarity: float
    lesson: Lesson | None = None


class LessonStorage(Protocol):
    """One store's lessons."""

    def families(self) -> list[str]:
        """Every family stored, sorted."""
        ...

    def has(self, family: str, *, create: bool = False) -> bool:
        """Whether the family is stored; `create` makes it (its run record needs it before its first lesson)."""
        ...

    def holds(self, family: str) -> bool:
        """Whether the family ever held a lesson: an empty store should not pay for an embedding."""
        ...

    def known_to_hold(self, family: str) -> bool:
        """`holds`, as far as this process already knows: nothing is read."""
        ...

    def vector(self, family: str, text: str) -> list[float]:
        """`text`'s vector as the family's lessons are compared with (cached per text)."""
        ...

    def put(self, family: str, lessons: list[Lesson], vectors: list[list[float]] | None) -> None:
        """New texts (or lessons replaced whole). `vectors`: each document's, already made by
        `vector`; None: the backend embeds them itself, if it embeds at all.
        """
        ...

    def update(self, family: str, lessons: list[Lesson], stored: Mapping[str, Lesson] | None = None) -> None:
        """Counts, utility, status: the text is unchanged and is not embedded again. `stored`: the
        versions the backend holds now, where the caller knows them for sure (a private store): a
        backend that merges a row's fields may write only those that differ.
        """
        ...

    def read(self, family: str, ids: list[str] | None) -> list[Lesson]:
        """The lessons of `ids` that are stored (all the family's when None)."""
        ...

    def nearest(
        self, family: str, text: str, vector: Vector, n: int, only: Only | None, *, lessons: bool
    ) -> list[Near]:
        """The `n` lessons nearest to `text` (`vector` as `vector` made it), best first; without
        the lessons themselves unless `lessons` (reading them is most of a small query's cost).
        """
        ...

    def delete(self, family: str, ids: list[str]) -> None: ...

    def count(self, family: str, only: Only | None = None) -> int: ...

    def family_record(self, family: str) -> dict[str, Any] | None:
        """The family's own record (None when the family is not stored): before the ledger it
        held the family's run counts (`runs`, `run_successes`), kept as a baseline.
        """
        ...


class HeldVectors(Protocol):
    """What a backend may also offer (Chroma does): a family's lesson ids with their stored vectors,
    read once so a store this process alone writes can answer nearest-lesson queries in memory
    (memory/policy/mirror.py). A backend without it is queried as usual.
    """

    def with_vectors(self, family: str, limit: int) -> tuple[list[str], np.ndarray] | None:
        """Every lesson id of the family and its vector (one row each, in order); None when the
        family holds more than `limit` (too big to keep in memory) or is not stored.
        """
        ...


class RecordStorage(Protocol):
    """The evidence ledger's records (memory/lesson/ledger.py), a family at a time, only ever added."""

    def append(self, records: list[Record]) -> None: ...

    def read(self, family: str, lessons: list[str] | None = None, *, kind: str | None = None) -> list[Record]:
        """The family's records, of these lessons only (None: all), of one kind only."""
        ...

    def delete(self, family: str, ids: list[str]) -> None: ...


@dataclass
class Storage:
    """One open store: its lessons, their records, and how it is shared."""

    location: str
    """What the user knows it by (a folder, a server URL, a store and namespace): errors name it."""
    lessons: LessonStorage
    records: RecordStorage
    private: bool
    """No other process writes it: what this process read or wrote of it stays true."""
    release: Callable[[], None] | None = None
    """Closes it (a folder's lock released)."""
    journal: str = ""
    """A file only this process writes (in a locked folder) where a private store makes a run's
    evidence durable before the backend has it (memory/policy/journal.py); "": none.
    """


class Backend(Protocol):
    """What a backend module gives the table (memory/storage/__init__.py): a module with these
    names is a backend.
    """

    IN_GRAPH_STORE: bool
    """Its lessons live in the run's LangGraph store (the app's to open): a run without one cannot use it."""

    def settings(self, context: "Context", graph_store: "BaseStore | None") -> Hashable:
        """What names the run's store, read from its settings without touching anything."""
        ...

    def identity(self, settings: Any) -> Hashable:
        """The one store these settings name (two spellings of a folder are one), without touching anything."""
        ...

    def connect(self, identity: Any, settings: Any) -> Storage:
        """Open it: checked, so a bad one fails here in one line, before any work."""
        ...


def lesson_from(location: str, lesson_id: str, fields: dict[str, Any]) -> Lesson:
    """A stored lesson from its fields, or one line saying the store holds something else."""
    try:
        return Lesson.from_record(lesson_id, dict(fields or {}))
    except ValidationError as exc:
        raise PivotalError(
            f"lesson store {location}: record {lesson_id!r} is not a Pivotal lesson "
            f"({exc.error_count()} invalid fields, first: {exc.errors()[0]['loc']}); "
            "was this collection written by another tool?"
        ) from None


def one_line(error: BaseException) -> str:
    """A backend's error as the one line the user reads."""
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]
