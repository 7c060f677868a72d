"""Nearest lessons kept per recall query, and kept true as lessons are written.

Step recall asks the same few situations again and again (a maze has a handful of
surroundings), across runs and across instances, while every run also writes lessons. Throwing
the kept answers away at each write left them little to serve; instead each kept list is the
exact best-first top of the family's collection and stays so: a new or reworded lesson is
placed by its similarity to the kept query vector, a changed count or status replaces the
lesson in place. Only for a store no other process writes.
"""

import threading
from dataclasses import dataclass, replace

import numpy as np

from pivotal.memory.lesson import Lesson

MAX_KEPT = 4096
"""Queries kept per store (a few KB each): more distinct situations than this start over."""


@dataclass(frozen=True)
class Neighbours:
    vector: np.ndarray
    found: tuple[tuple[Lesson, float], ...]
    """(lesson, similarity), best first: the top of the collection, whatever their status."""
    complete: bool
    """The collection held no more lessons than these when asked (so a new one always belongs)."""


class NeighbourCache:
    """Entries are replaced, never changed, so a reader in another thread sees a whole answer."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, int], Neighbours] = {}
        self._versions: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, family: str, text: str, n: int) -> Neighbours | None:
        return self._kept.get((family, text, n))

    def version(self, family: str) -> int:
        return self._versions.get(family, 0)

    def keep(self, family: str, text: str, n: int, answer: Neighbours, version: int) -> None:
        """Kept only if no write to the family landed while Chroma was asked (it may be missing)."""
        with self._lock:
            if self.version(family) != version:
                return
            if len(self._kept) >= MAX_KEPT:
                self._kept = {}
            self._kept[(family, text, n)] = answer

    def written(self, lessons: list[Lesson], vectors: list[list[float]] | None) -> None:
        """Lessons upserted (with their vectors) or updated in counts and status (vectors None)."""
        if not lessons:
            return
        with self._lock:
            families = {lesson.family for lesson in lessons}
            for family in families:
                self._versions[family] = self.version(family) + 1
            self._kept = {
                key: self._refreshed(answer, key, lessons, vectors) if key[0] in families else answer
                for key, answer in self._kept.items()
            }

    def forget(self, families: set[str] | None = None) -> None:
        """Lessons written without vectors at hand (an import): their families start over."""
        with self._lock:
            for family in families or set(self._versions):
                self._versions[family] = self.version(family) + 1
            self._kept = {k: a for k, a in self._kept.items() if families is not None and k[0] not in families}

    @staticmethod
    def _refreshed(
        answer: Neighbours, key: tuple[str, str, int], lessons: list[Lesson], vectors: list[list[float]] | None
    ) -> Neighbours:
        family, _, n = key
        found = list(answer.found)
        for index, lesson in enumerate(lessons):
            if lesson.family != family:
                continue
            at = next((i for i, (kept, _) in enumerate(found) if kept.id == lesson.id), None)
            if vectors is None:
                if at is not None:
                    found[at] = (lesson, found[at][1])
                continue
            if at is not None:
                del found[at]  # a new text: placed again by its new vector
            similarity = float(np.dot(answer.vector, np.asarray(vectors[index], dtype=np.float32)))
            if answer.complete or (found and similarity > found[-1][1]):
                found.append((lesson, similarity))
                found.sort(key=lambda pair: -pair[1])
        complete = answer.complete and len(found) <= n
        return replace(answer, found=tuple(found if complete else found[:n]), complete=complete)
