"""The lessons a private store last read or wrote, as it stored them: a `get` of one needs no read,
and while they cover what queries find, a query asks Chroma for ids and distances only (reading
each result's metadata is most of a small query's cost). Apart from the store so its one rule,
a read that a write overtook is not kept, is read and tested alone (tests/test_known.py).
"""

import threading
from collections.abc import Iterable

from pivotal.memory.lesson import Lesson

MAX_KNOWN = 5_000
"""Lessons kept (~3 KB each): more start over."""


class KnownLessons:
    def __init__(self, limit: int = MAX_KNOWN) -> None:
        self._limit = limit
        self._lessons: dict[str, Lesson] = {}
        self.coverage = 0.0
        """Share of the lessons recent queries found that were known (a moving average)."""
        self.writes = 0
        """Writes made so far: a read that a write overtook is not kept (it may be the older version)."""
        self._lock = threading.Lock()

    def __getitem__(self, lesson_id: str) -> Lesson:
        return self._lessons[lesson_id]

    def __contains__(self, lesson_id: object) -> bool:
        return lesson_id in self._lessons

    def __len__(self) -> int:
        return len(self._lessons)

    def __eq__(self, other: object) -> bool:
        """Equal to the mapping of the lessons it holds: `{}` when it knows none."""
        return self._lessons == (other._lessons if isinstance(other, KnownLessons) else other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dict

    def look(self, ids: Iterable[str]) -> dict[str, Lesson | None]:
        """Each id's known version or None, in one look: another thread may start over meanwhile."""
        lessons = self._lessons
        return {i: lessons.get(i) for i in ids}

    def remember(self, lessons: list[Lesson], *, read_after: int | None = None) -> None:
        """Written lessons, once Chroma holds them (a failed write leaves the stored version known);
        read ones only if no write landed since `read_after`.
        """
        with self._lock:
            if read_after is None:
                self.writes += 1
            elif read_after != self.writes:
                return
            if len(self._lessons) + len(lessons) > self._limit:
                self._lessons = {}
            self._lessons.update((lesson.id, lesson) for lesson in lessons)

    def seen(self, ids: list[str]) -> None:
        """A query found `ids`: the coverage moves halfway to the share of them known."""
        if ids:
            self.coverage += 0.5 * (sum(i in self._lessons for i in ids) / len(ids) - self.coverage)

    def forget(self, ids: Iterable[str] | None = None) -> None:
        """These lessons (deleted), or all of them and the coverage (a process starting cold)."""
        if ids is None:
            self._lessons, self.coverage = {}, 0.0
            return
        for lesson_id in ids:
            self._lessons.pop(lesson_id, None)
