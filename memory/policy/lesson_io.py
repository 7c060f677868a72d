"""A store's lesson reads, writes and queries, one call per family: the only code that calls the
storage's lesson calls (memory/storage/base.py `LessonStorage`), whatever backend answers them.
Apart from the store's policy so what is read and written, and the known versions it keeps, are
tested alone (tests/test_store_parts.py).
"""

from collections.abc import Iterator

import numpy as np

from pivotal.memory.lesson import DEFAULT_OWNER, SHARED, Lesson
from pivotal.memory.policy.known import KnownLessons
from pivotal.memory.storage.base import LessonStorage, Only

KNOWN_ENOUGH = 0.8
"""Queries leave the lessons themselves out once this share of what they find is known."""


class LessonIO:
    def __init__(self, storage: LessonStorage, location: str, *, private: bool) -> None:
        self.location = location
        self.storage = storage
        self.private = private
        """No other process writes it: what this process read or wrote of it stays true."""
        self.known = KnownLessons()
        """The stored version of lessons this process read or wrote, in a private store (memory/policy/known.py)."""

    def upsert(self, lessons: list[Lesson], *, embedded: bool) -> None:
        """`embedded`: each text was just embedded (to look for its duplicate), so its cached
        vector goes along instead of embedding it again; else the storage embeds them in one batch.
        """
        for family, group in by_family(lessons):
            vectors = [self.storage.vector(family, lesson.document) for lesson in group] if embedded else None
            self.storage.put(family, group, vectors)
            self._remember(group)

    def update(self, lessons: list[Lesson]) -> None:
        """Counts, utility, status: the text is unchanged, so it must not be embedded again."""
        for family, group in by_family(lessons):
            self.storage.update(family, group, self._stored(group))
            self._remember(group)

    def _stored(self, lessons: list[Lesson]) -> dict[str, Lesson] | None:
        """What a private store knows it holds of these lessons (`known`, exact: no other process
        writes it), so a backend writes only what changed; None elsewhere (others write a server).
        """
        if not self.private:
            return None
        return {i: lesson for i, lesson in self.known.look(lesson.id for lesson in lessons).items() if lesson}

    def delete(self, family: str, ids: list[str]) -> None:
        self.storage.delete(family, ids)
        self.known.forget(ids)

    def read(self, family: str, ids: list[str] | None) -> list[Lesson]:
        """What the family holds for `ids` (all when None); the versions this process knows need no read."""
        kept = {} if ids is None else self.known.look(ids)
        # an id hashes its family (`lesson_id`): a lesson known in another family is not in this one
        known = [lesson for lesson in kept.values() if lesson and lesson.family == family]
        missing = None if ids is None else [i for i, lesson in kept.items() if lesson is None]
        if missing == []:
            return known
        writes = self.known.writes
        read = self.storage.read(family, missing)
        if ids is not None:
            self._remember(read, read_after=writes)
        return known + read

    def query(
        self, family: str, vector: np.ndarray | list[float], n: int, only: Only | None, text: str
    ) -> list[tuple[Lesson, float]]:
        """The `n` nearest lessons to `text` (`vector` as this store embeds it), any status unless
        `only` says, with their cosine similarity.

        A private store asks for ids and similarities only once the lessons it knows cover what its
        queries find (KNOWN_ENOUGH): the lessons then come from `read`, which reads the few it
        lacks in one more call. Where they do not (a large store, a new process), that call would
        cost more than reading the lessons with the query (benchmarks/bench_store.py).
        """
        known_first = self.private and self.known.coverage >= KNOWN_ENOUGH
        writes = self.known.writes
        found = self.storage.nearest(family, text, vector, n, only, lessons=not known_first)
        ids = [near.id for near in found]
        if self.private:
            self.known.seen(ids)
        if known_first:
            lessons = {lesson.id: lesson for lesson in self.read(family, ids)}
        else:
            lessons = {near.id: near.lesson for near in found if near.lesson is not None}
            self._remember(list(lessons.values()), read_after=writes)
        return [(lessons[near.id], near.similarity) for near in found if near.id in lessons]

    def _remember(self, lessons: list[Lesson], *, read_after: int | None = None) -> None:
        if self.private:
            self.known.remember(lessons, read_after=read_after)


def by_family(lessons: list[Lesson]) -> Iterator[tuple[str, list[Lesson]]]:
    """Each family with its lessons; a backend may refuse a batch that repeats an id: the last wins."""
    by_family: dict[str, dict[str, Lesson]] = {}
    for lesson in lessons:
        by_family.setdefault(lesson.family, {})[lesson.id] = lesson
    for family, unique in by_family.items():
        yield family, list(unique.values())


def owned(owner: str, *, shared: bool) -> tuple[str, ...]:
    """The owners whose lessons a query asks for: `owner`'s (and the shared tier's). None for the
    default owner: lessons stored before owners have no `owner` field for a backend to match, and
    are its; the lessons found are filtered by owner after the query instead.
    """
    if owner == DEFAULT_OWNER:
        return ()
    return (owner, SHARED) if shared else (owner,)
