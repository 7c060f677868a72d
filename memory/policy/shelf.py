"""A store's lessons as this process sees them: what is stored (memory/policy/lesson_io.py) with
what it has yet to write on top (memory/policy/write_buffer.py), counts folded from the ledger where
others write too, and the kept recall answers (memory/policy/neighbours.py) kept true by every write. The store's
policy reads and writes through here only, so a held or deferred version is never missed.
"""

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from pivotal.memory.lesson import DEFAULT_OWNER, Lesson
from pivotal.memory.lesson.ledger import fold
from pivotal.memory.policy.journal import Journal
from pivotal.memory.policy.lesson_io import LessonIO, by_family, owned
from pivotal.memory.policy.mirror import MIRROR_MAX, Mirror, Rows
from pivotal.memory.policy.neighbours import NeighbourCache, Neighbours
from pivotal.memory.policy.write_buffer import WriteBuffer
from pivotal.memory.storage.base import Only, RecordStorage

OVERFETCH = 4
"""Recall asks for k × this many neighbours, so retired ones can be dropped unfiltered; dedup
asks the default owner's nearest this many (its lessons are not filtered by owner)."""


class Shelf:
    def __init__(
        self,
        io: LessonIO,
        buffer: WriteBuffer,
        ledger: RecordStorage,
        near: NeighbourCache | None,
        *,
        private: bool,
        journal: Journal | None = None,
    ) -> None:
        self.io = io
        self.buffer = buffer
        self.ledger = ledger
        self.near = near
        self.private = private
        self.journal = journal if private else None
        """Where a private store's evidence is durable before Chroma has it (memory/policy/journal.py)."""
        self.mirror = Mirror() if private else None
        """The families this process alone writes, in memory for nearest-lesson queries (memory/policy/mirror.py)."""

    def put(self, lessons: list[Lesson], *, embedded: bool = True) -> None:
        """New texts: held in a batch, else written now. `embedded`: see `LessonIO.upsert`."""
        if self.buffer.pending is not None and embedded:
            for lesson in lessons:
                self.io.storage.has(lesson.family, create=True)  # the family's run record needs it now
                self.buffer.hold(lesson, self.io.storage.vector(lesson.family, lesson.document))
            return
        self._catch_up(lessons)
        self.buffer.written(lesson.id for lesson in lessons)
        self.io.upsert(lessons, embedded=embedded)
        if self.near is not None and embedded:
            vectors = [self.io.storage.vector(lesson.family, lesson.document) for lesson in lessons]
            self.near.written(lessons, vectors)
        elif self.near is not None:
            self.near.forget({lesson.family for lesson in lessons})
        if self.mirror is not None and embedded:
            self.mirror.written(lessons, [self.io.storage.vector(lesson.family, lesson.document) for lesson in lessons])
        elif self.mirror is not None:
            self.mirror.forget({lesson.family for lesson in lessons})

    def update(self, lessons: list[Lesson], *, counts_only: bool = False, evidence: bool = False) -> None:
        """Counts, utility, status, the text unchanged: held in a batch, else written now.
        `counts_only`: nothing but recall scores changed, so a private store defers the write.
        `evidence`: a merge's counts, status unchanged: a private store with a journal makes them
        durable there and defers the Chroma write as well.
        """
        if self.buffer.pending is not None:
            self.buffer.hold_update(lessons, counts_only=counts_only, evidence=evidence)
            return
        if counts_only and self.private:
            if self.buffer.defer(lessons):
                self.flush()
        elif evidence and self.journal is not None:
            self.journaled(lessons)
            return
        else:
            self._catch_up(lessons)
            self.buffer.written(lesson.id for lesson in lessons)  # this version carries the deferred counts too
            self.io.update(lessons)
        if self.near is not None:
            self.near.written(lessons, None)

    def journaled(self, lessons: list[Lesson]) -> None:
        """A private store's counts (a run's evidence and recall scores, status and text
        unchanged) and the records noted so far: on disk in the journal, in Chroma at the next flush.
        """
        assert self.journal is not None
        self.journal.append(lessons, list(self.buffer.records.values()))
        if self.buffer.defer(lessons, durable=True, journaled_runs=self.journal.lines):
            self.flush()
        if self.near is not None:
            self.near.written(lessons, None)

    def flush(self) -> None:
        """The deferred counts and records: they leave memory only once written, so a failed
        write is tried again at the next flush; the journal is emptied once they are.
        """
        self.io.update(list(self.buffer.deferred.values()))
        self.buffer.flushed()
        self.write_records()
        if self.journal is not None:
            self.journal.clear()

    def _catch_up(self, lessons: list[Lesson]) -> None:
        """Before Chroma is written another way for a journaled lesson (retired, confirmed, a new
        text), what the journal holds goes first: a journaled version must never be replayed
        over a newer row after a crash.
        """
        if self.journal is not None and self.journal.ids.intersection(lesson.id for lesson in lessons):
            self.flush()

    def replay(self) -> None:
        """A journal the last process left (it was killed before writing it to Chroma): its
        lessons' versions and records are written now, before anything is read.
        """
        if self.journal is None:
            return
        lessons, records = self.journal.read()
        for family, group in by_family(lessons):
            stored = {lesson.id for lesson in self.io.storage.read(family, [lesson.id for lesson in group])}
            self.io.update([lesson for lesson in group if lesson.id in stored])  # one revoked since is gone
        if records:
            self.ledger.append(records)
        self.journal.clear()

    def write_records(self) -> None:
        if self.buffer.records:
            self.ledger.append(list(self.buffer.records.values()))
            self.buffer.records = {}

    def remove(self, family: str, ids: list[str]) -> None:
        """Lessons deleted (a revocation): their deferred counts go with them."""
        if self.journal is not None and self.journal.ids.intersection(ids):
            self.flush()
        self.io.delete(family, ids)
        self.buffer.written(ids)
        if self.mirror is not None:
            self.mirror.forget({family})

    def read(self, family: str, ids: list[str] | None) -> list[Lesson]:
        """The family's lessons of `ids` (all when None) in their latest versions, held ones too."""
        return self.buffer.joined(self.io.read(family, ids), ids, family)

    def query(
        self, family: str, vector: np.ndarray | list[float], n: int, only: Only | None, text: str
    ) -> list[tuple[Lesson, float]]:
        """`LessonIO.query`, each lesson in its latest version; in a shared store a pending one
        with the status its ledger gives (`_settled`), so recall sees a lesson confirmed at once.
        """
        rows = self._mirrored(family)
        mirrored = rows.nearest(np.asarray(vector), n, only, self._read_ids(family)) if rows is not None else None
        if mirrored is not None:  # a private store: nothing to settle from a ledger others write
            return mirrored
        found = [(self.buffer.held(lesson), s) for lesson, s in self.io.query(family, vector, n, only, text)]
        settled = self._settled(family, [lesson for lesson, _ in found])
        return [(settled.get(lesson.id, lesson), s) for lesson, s in found]

    def _mirrored(self, family: str) -> Rows | None:
        """The family's rows in memory (memory/policy/mirror.py), read once it has been asked as
        many queries as reading it costs; None when it is not (yet) mirrored.
        """
        if self.mirror is None:
            return None
        read = getattr(self.io.storage, "with_vectors", None)
        if read is not None and self.mirror.wanted(family, lambda: self.io.storage.count(family)):
            version = self.mirror.version(family)
            self.mirror.keep(family, read(family, MIRROR_MAX), version)
        return self.mirror.rows(family)

    def _read_ids(self, family: str) -> Callable[[list[str]], dict[str, Lesson]]:
        """Lessons by id in their latest versions, as a query returns them."""
        return lambda ids: {lesson.id: lesson for lesson in self.read(family, ids)}

    def nearest(self, lesson: Lesson) -> tuple[Lesson, float] | None:
        """The stored (or held) lesson of the same kind, family and owner most like `lesson`, any status.

        Its own id stored (the same kind, family, owner and text: a recipe taught again) is the
        answer before anything is embedded, when no new text is held that could match it better
        (the order below then gives the same answer): ~6 ms of CPU per lesson a run teaches again.
        """
        if not self.buffer.pending and self.io.storage.holds(lesson.family):
            exact = self.read(lesson.family, [lesson.id])
            if exact:
                return exact[0], 1.0
        vector = self.io.storage.vector(lesson.family, lesson.document)
        held = self.buffer.nearest_held(lesson, vector)
        if held is not None and held[1] >= 1.0:
            return held
        if not self.io.storage.holds(lesson.family):
            return held
        exact = self.read(lesson.family, [lesson.id]) if self.buffer.pending else []
        if exact:
            return exact[0], 1.0
        # a lesson one maze taught merges only where it would be recalled
        scopes = ("", lesson.scope) if lesson.scope else ()
        only = Only(kind=lesson.kind, owners=owned(lesson.owner, shared=False), scopes=scopes)
        # the default owner's are not filtered (`owned`): the nearest few are asked for, and its own kept
        n = OVERFETCH if lesson.owner == DEFAULT_OWNER else 1
        found = self.query(lesson.family, vector, n, only, lesson.document)
        stored = next((f for f in found if f[0].owner == lesson.owner), None)
        return max((f for f in (held, stored) if f is not None), key=lambda f: f[1], default=None)

    def neighbours(self, family: str, text: str, n: int) -> Neighbours:
        """The family's top `n` for `text`, any status; kept (see memory/policy/neighbours.py) in a private store."""
        kept = self.near.get(family, text, n) if self.near is not None else None
        if kept is not None:
            return kept
        version = self.near.version(family) if self.near is not None else 0
        vector = np.asarray(self.io.storage.vector(family, text), dtype=np.float32)
        found = self.query(family, vector, n, None, text)
        answer = Neighbours(vector, tuple(found), complete=len(found) < n)
        if self.near is not None:
            self.near.keep(family, text, n, answer, version)
        return answer

    def get(self, ids: list[str] | None, *, family: str | None, owner: str | None) -> dict[str, Lesson]:
        found: dict[str, Lesson] = {}
        for stored in self._families(family):
            found.update((lesson.id, lesson) for lesson in self._visible(stored, ids, owner))
        return found

    def lessons(self, *, family: str | None, owner: str | None) -> Iterator[Lesson]:
        for stored in self._families(family):
            yield from self._visible(stored, None, owner)

    def count(self, *, status: str | None = None) -> int:
        only = Only(status=status) if status is not None else None
        return sum(self.io.storage.count(family, only) for family in self.families())

    def families(self) -> list[str]:
        return self.io.storage.families()

    def _families(self, family: str | None) -> list[str]:
        """The family, or every family's (None), as far as they are stored."""
        if family is None:
            return self.families()
        return [family] if self.io.storage.has(family) else []

    def forget_recall(self) -> None:
        """Drop the kept recall answers and known lessons: benchmarks measure a process that starts cold."""
        if self.near is not None:
            self.near.forget()
        if self.mirror is not None:
            self.mirror.forget()
        self.io.known.forget()

    def forget_vectors(self, *, on_disk: bool) -> None:
        """Drop the vectors kept of texts embedded so far, as a new process on this folder would
        start (benchmarks); `on_disk`: the folder's file of them too, as the first process would.
        """
        vectors = getattr(self.io.storage, "vectors", None)
        if vectors is not None:
            vectors.forget(on_disk=on_disk)

    def _visible(self, family: str, ids: list[str] | None, owner: str | None) -> Iterable[Lesson]:
        lessons = self._folded(self.read(family, ids), ids)
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
            lesson.model_copy(update=counts[lesson.id].fields()).settled()
            if lesson.ledgered and lesson.id in counts
            else lesson
            for lesson in lessons
        ]

    def _settled(self, family: str, lessons: list[Lesson]) -> dict[str, Lesson]:
        """A shared store's pending `lessons` folded (`_folded`), by id: a lesson's status is
        written with its row, and two writers confirming it at once each wrote "pending" (each
        row has its own witness, the ledger both). Only pending ones: the rest need no ledger read.
        """
        pending = [lesson for lesson in lessons if lesson.status == "pending" and lesson.ledgered]
        if self.private or not pending:
            return {}
        return {lesson.id: lesson for lesson in self._folded(pending, [lesson.id for lesson in pending])}
