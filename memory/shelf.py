"""A store's lessons as this process sees them: what is stored (memory/lesson_io.py) with what it
has yet to write on top (memory/write_buffer.py), counts folded from the ledger where others write
too, and the kept recall answers (memory/neighbours.py) kept true by every write. The store's
policy reads and writes through here only, so a held or deferred version is never missed.
"""

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from pivotal.memory.ledger import ChromaLedger, StoreLedger, fold
from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson_io import LessonIO
from pivotal.memory.neighbours import NeighbourCache
from pivotal.memory.write_buffer import WriteBuffer


class Shelf:
    def __init__(
        self,
        io: LessonIO,
        buffer: WriteBuffer,
        ledger: ChromaLedger | StoreLedger,
        near: NeighbourCache | None,
        *,
        private: bool,
    ) -> None:
        self.io = io
        self.buffer = buffer
        self.ledger = ledger
        self.near = near
        self.private = private

    def put(self, lessons: list[Lesson], *, embedded: bool = True) -> None:
        """New texts: held in a batch, else written now. `embedded`: see `LessonIO.upsert`."""
        if self.buffer.pending is not None and embedded:
            for lesson in lessons:
                self.io.collection(lesson.family, create=True)  # the family's run record needs it now
                self.buffer.hold(lesson, self.io.collections.vector(lesson.family, lesson.document))
            return
        self.buffer.written(lesson.id for lesson in lessons)
        self.io.upsert(lessons, embedded=embedded)
        if self.near is not None and embedded:
            vectors = [self.io.collections.vector(lesson.family, lesson.document) for lesson in lessons]
            self.near.written(lessons, vectors)
        elif self.near is not None:
            self.near.forget({lesson.family for lesson in lessons})

    def update(self, lessons: list[Lesson], *, counts_only: bool = False) -> None:
        """Counts, utility, status, the text unchanged: held in a batch, else written now.
        `counts_only`: nothing but recall scores changed, so a private store defers the write.
        """
        if self.buffer.pending is not None:
            self.buffer.hold_update(lessons, counts_only=counts_only)
            return
        if counts_only and self.private:
            if self.buffer.defer(lessons):
                self.flush()
        else:
            self.buffer.written(lesson.id for lesson in lessons)  # this version carries the deferred counts too
            self.io.update(lessons)
        if self.near is not None:
            self.near.written(lessons, None)

    def flush(self) -> None:
        """The deferred counts and records: they leave memory only once written, so a failed
        write is tried again at the next flush.
        """
        self.io.update(list(self.buffer.deferred.values()))
        self.buffer.deferred = {}
        self.write_records()

    def write_records(self) -> None:
        if self.buffer.records:
            self.ledger.append(list(self.buffer.records.values()))
            self.buffer.records = {}

    def remove(self, family: str, ids: list[str]) -> None:
        """Lessons deleted (a revocation): their deferred counts go with them."""
        self.io.delete(family, ids)
        self.buffer.written(ids)

    def read(self, collection: Any, ids: list[str] | None) -> list[Lesson]:
        """The collection's lessons of `ids` (all when None) in their latest versions, held ones too."""
        return self.buffer.joined(self.io.read(collection, ids), ids, collection.name)

    def query(
        self, collection: Any, vector: np.ndarray | list[float], n: int, where: dict[str, Any] | None, text: str
    ) -> list[tuple[Lesson, float]]:
        """`LessonIO.query`, each lesson in its latest version."""
        return [(self.buffer.held(lesson), s) for lesson, s in self.io.query(collection, vector, n, where, text)]

    def get(self, ids: list[str] | None, *, family: str | None, owner: str | None) -> dict[str, Lesson]:
        found: dict[str, Lesson] = {}
        for collection in self.io.collections.of_family(family):
            found.update((lesson.id, lesson) for lesson in self._visible(collection, ids, owner))
        return found

    def lessons(self, *, family: str | None, owner: str | None) -> Iterator[Lesson]:
        for collection in self.io.collections.of_family(family):
            yield from self._visible(collection, None, owner)

    def count(self, *, status: str | None = None) -> int:
        collections = self.io.collections.of_family(None)
        if status is None:
            return sum(c.count() for c in collections)
        return sum(len(c.get(where={"status": status}, include=[])["ids"]) for c in collections)

    def families(self) -> list[str]:
        return [c.metadata["family"] for c in self.io.collections.of_family(None)]

    def forget_recall(self) -> None:
        """Drop the kept recall answers and known lessons: benchmarks measure a process that starts cold."""
        if self.near is not None:
            self.near.forget()
        self.io.known.forget()

    def _visible(self, collection: Any, ids: list[str] | None, owner: str | None) -> Iterable[Lesson]:
        lessons = self._folded(self.read(collection, ids), ids)
        return (lesson for lesson in lessons if owner is None or lesson.visible_to(owner))

    def _folded(self, lessons: list[Lesson], ids: list[str] | None) -> list[Lesson]:
        """A shared store's lessons with their counts folded from the ledger: the counts in a
        lesson's own fields are the last writer's, and two writers at once each wrote their own.
        A private store's are exact (it is the only writer), and held writes are newer than both.
        """
        if self.private or not lessons:
            return lessons
        family = lessons[0].family
        wanted = [lesson.id for lesson in lessons if lesson.ledgered] if ids is not None else None
        counts = fold([*self.ledger.read(family, wanted), *self.buffer.records.values()])
        return [
            lesson.model_copy(update=counts[lesson.id].fields()) if lesson.ledgered and lesson.id in counts else lesson
            for lesson in lessons
        ]
