"""What a store has yet to write: a `batch()`'s held lessons (this thread's), the recall scores a
private store defers, and the ledger records that go with them. Each Chroma write costs ~10-20 ms
on disk whatever it holds, so writes wait here and leave together; reads see them meanwhile.
Apart from the store so what is held, and which version wins, is tested alone
(tests/test_store_parts.py). No storage calls here: the store writes what it takes from it.
"""

import threading
import time
from collections.abc import Iterable

import numpy as np

from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record, carried

DEFER_LESSONS = 64
DEFER_SECONDS = 5.0
"""Recall statistics (the lessons a run recalled, scored with its outcome; the family's run
record) wait in memory until this many lessons or seconds have gathered, the batch ends or the
store closes: each Chroma write costs ~10-17 ms whatever it holds, and every run made two for
them. A crash (kill -9) loses at most these statistics, never a lesson, its evidence, text or status.
"""

DEFER_RUNS = 8
"""Journaled runs (memory/policy/journal.py) before Chroma is written with them. The journal is
preallocated, so a store whose disk fills shows it only when Chroma is written: this many runs
bound how long a batch goes on before it stops with the fault (tests/test_batch_faults.py), where
waiting for DEFER_LESSONS let a whole batch finish and fail only at exit. A run made one Chroma
metadata update (~20-40 ms) before the journal; now one per this many runs.
"""

Held = dict[str, tuple[Lesson, list[float] | None]]
"""Each held lesson's latest version, with its vector when its text is new (an upsert), without
when only counts or status changed (an update)."""


class WriteBuffer:
    def __init__(self) -> None:
        self._batch = threading.local()
        self.deferred: dict[str, Lesson] = {}
        """Scored versions not yet written (DEFER_LESSONS); a private store only."""
        self._volatile_since: float | None = None
        """When the oldest deferral that is in memory only (not journaled) was made."""
        self.records: dict[str, Record] = {}
        """Ledger records not yet written: with a batch's writes, or deferred with the recall scores."""

    @property
    def pending(self) -> Held | None:
        """This thread's `batch()` writes, or None outside one: other threads read what is stored."""
        return getattr(self._batch, "pending", None)

    def start(self) -> bool:
        """Begin holding this thread's writes; False when a batch already holds them."""
        if self.pending is not None:
            return False
        self._batch.pending, self._batch.counts_only, self._batch.evidence = {}, set(), set()
        return True

    def take(self) -> tuple[list[Lesson], list[Lesson], list[Lesson], list[Lesson]]:
        """The held writes, and holding ends: (new texts, full updates, recall scores only,
        evidence only: a merge's counts, its text and status unchanged).
        """
        pending, counts_only, evidence = self.pending or {}, self._batch.counts_only, self._batch.evidence
        self.end()
        texts = [lesson for lesson, vector in pending.values() if vector is not None]
        updates = [lesson for lesson, vector in pending.values() if vector is None]
        full = [lesson for lesson in updates if lesson.id not in counts_only and lesson.id not in evidence]
        scores = [lesson for lesson in updates if lesson.id in counts_only]
        return texts, full, scores, [lesson for lesson in updates if lesson.id in evidence]

    def end(self) -> None:
        self._batch.pending = None

    def hold(self, lesson: Lesson, vector: list[float]) -> None:
        """A lesson whose text is new: written with its vector (an upsert)."""
        assert self.pending is not None
        self.pending[lesson.id] = (lesson, vector)
        self._batch.counts_only.discard(lesson.id)
        self._batch.evidence.discard(lesson.id)

    def hold_update(self, lessons: list[Lesson], *, counts_only: bool, evidence: bool = False) -> None:
        """Lessons whose text is unchanged; one inserted in this batch stays an insert, with its
        latest counts. What an update is takes the widest of its writes: insert > full > evidence
        (counts a merge adds, status unchanged) > recall scores only.
        """
        assert self.pending is not None
        marked = self._batch.counts_only | self._batch.evidence
        for lesson in lessons:
            held = self.pending.get(lesson.id)
            if evidence and (held is None or lesson.id in marked):
                self._batch.counts_only.discard(lesson.id)
                self._batch.evidence.add(lesson.id)
            elif not counts_only and not evidence:
                self._batch.counts_only.discard(lesson.id)
                self._batch.evidence.discard(lesson.id)
            elif counts_only and held is None:  # a held insert, full update or evidence stays what it is
                self._batch.counts_only.add(lesson.id)
            self.pending[lesson.id] = (lesson, held[1] if held is not None else None)

    def held(self, lesson: Lesson) -> Lesson:
        """The version a `batch()` or a deferred write has yet to write, if any."""
        pending = self.pending
        if pending and lesson.id in pending:
            return pending[lesson.id][0]
        return self.deferred.get(lesson.id, lesson)

    def joined(self, stored: list[Lesson], ids: list[str] | None, family: str) -> list[Lesson]:
        """`stored` (lessons of `family`) in their held versions, and the held lessons of that
        family not stored yet (of `ids`, or all when None).
        """
        stored = [self.held(lesson) for lesson in stored]
        if not self.pending:
            return stored
        known, wanted = {lesson.id for lesson in stored}, set(ids) if ids is not None else None
        held = [
            lesson
            for lesson, _ in self.pending.values()
            if lesson.id not in known and (wanted is None or lesson.id in wanted) and lesson.family == family
        ]
        return stored + held

    def nearest_held(self, lesson: Lesson, vector: list[float]) -> tuple[Lesson, float] | None:
        """Among the held new texts: the most alike of `lesson`'s family, kind and owner, in scope."""
        if not self.pending:
            return None
        if lesson.id in self.pending:
            return self.pending[lesson.id][0], 1.0
        query = np.asarray(vector)
        alike = [
            (held, float(np.dot(query, held_vector)))
            for held, held_vector in self.pending.values()
            if held_vector is not None
            and held.family == lesson.family
            and held.kind == lesson.kind
            and held.owner == lesson.owner
            and (not lesson.scope or held.scope in ("", lesson.scope))
        ]
        return max(alike, key=lambda found: found[1], default=None)

    def defer(self, lessons: Iterable[Lesson] = (), *, durable: bool = False, journaled_runs: int = 0) -> bool:
        """Keep these recall scores back; True when enough have waited to be written now.
        `durable`: they (and the records noted so far) are in the store's journal
        (memory/policy/journal.py): a crash loses none of them, so not their age makes them
        due but their number, or `journaled_runs` (the journal's lines) reaching DEFER_RUNS.
        """
        if not durable and self._volatile_since is None:
            self._volatile_since = time.monotonic()
        self.deferred.update((lesson.id, lesson) for lesson in lessons)
        aged = self._volatile_since is not None and time.monotonic() - self._volatile_since >= DEFER_SECONDS
        return len(self.deferred) >= DEFER_LESSONS or aged or journaled_runs >= DEFER_RUNS

    def flushed(self) -> None:
        """The deferred versions are written."""
        self.deferred, self._volatile_since = {}, None

    def written(self, ids: Iterable[str]) -> None:
        """What is written now carries any deferred counts of these lessons (or replaced them)."""
        for lesson_id in ids:
            self.deferred.pop(lesson_id, None)

    def note(self, records: list[Record]) -> None:
        """Keep what happened to a lesson for the ledger (written with the lesson)."""
        self.records.update((record.id, record) for record in records)

    def carried(self, stored: Lesson) -> Lesson:
        """A lesson stored before the ledger, as the ledger will count it: one record carrying
        the counts it had, before anything is added to them, so none is lost or counted twice.
        """
        if stored.ledgered:
            return stored
        self.records.setdefault(carried(stored).id, carried(stored))
        return stored.model_copy(update={"ledgered": True})
