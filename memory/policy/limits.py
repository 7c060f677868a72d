"""What the store's rules (memory/policy/rules.py) are applied with: each family's run record (the
baseline a lesson's runs are compared with) and each owner's count of approved and of pending
lessons (so the whole store is scanned for a cap only when an owner may be over one). Both backends keep them the
same way, as both read and write through the same ledger and store calls; no storage is
called here but through them. Tested alone in tests/test_store_parts.py.
"""

from collections.abc import Iterable
from typing import Any

from pivotal.memory.lesson import DEFAULT_OWNER, Lesson
from pivotal.memory.lesson.ledger import Record, family_runs
from pivotal.memory.policy import rules
from pivotal.memory.policy.shelf import Shelf
from pivotal.memory.policy.write_buffer import WriteBuffer
from pivotal.memory.storage.base import RecordStorage


class FamilyRuns:
    """Runs and successes per family: those counted before the ledger (the collection's metadata,
    no longer written) and its run records since, a private store's folded once and kept.
    """

    def __init__(self, ledger: RecordStorage, buffer: WriteBuffer, *, private: bool) -> None:
        self._ledger = ledger
        self._buffer = buffer
        self._private = private
        self._runs: dict[str, tuple[set[str], int]] = {}
        """A private store's family run records as folded: the ids counted, and how many succeeded."""

    def count(self, family: str, run_id: str, success: bool) -> Record:
        """The run's record, counted once: a resumed run writes the same record again."""
        record = Record(kind="run", family=family, run=run_id, successes=int(success))
        if self._private:
            seen, successes = self._folded(family)
            if record.id not in seen:
                seen.add(record.id)
                self._runs[family] = (seen, successes + int(success))
        return record

    def of(self, family: str, before: dict[str, Any]) -> tuple[int, int]:
        """(runs, successes) of the family; `before`: its family record (`LessonStorage.family_record`)."""
        if self._private:
            seen, successes = self._folded(family)
            runs = len(seen), successes
        else:
            runs = family_runs([*self._ledger.read(family, kind="run"), *self._buffer.records.values()])
        return int(before.get("runs", 0)) + runs[0], int(before.get("run_successes", 0)) + runs[1]

    def forget(self) -> None:
        """Fold the records again at the next use (a revocation deleted some)."""
        self._runs.clear()

    def _folded(self, family: str) -> tuple[set[str], int]:
        if family not in self._runs:
            records = self._ledger.read(family, kind="run")
            self._runs[family] = ({r.id for r in records}, sum(r.successes for r in records))
        return self._runs[family]


class OwnerCounts:
    """Each owner's lessons of one status (approved, pending), once a cap scan counted them, kept
    up to date by this process's own writes (retired lessons stay stored, so the stored count says
    nothing once any was retired).
    """

    def __init__(self, status: str) -> None:
        self.status = status
        self._counts: dict[str, int] = {}

    def known(self, owner: str) -> int | None:
        return self._counts.get(owner)

    def added(self, lessons: Iterable[Lesson]) -> None:
        for lesson in lessons:
            if lesson.owner in self._counts and lesson.status == self.status:
                self._counts[lesson.owner] += 1

    def retired(self, owner: str, count: int) -> None:
        if owner in self._counts:
            self._counts[owner] -= count

    def counted(self, owner: str, count: int) -> None:
        self._counts[owner] = count

    def forget(self) -> None:
        """Lessons changed in ways not counted (an import, a retirement by id, a revocation)."""
        self._counts.clear()


class Limits:
    """The policy applied to a store's lessons: weak ones retired, each owner held to its cap of
    approved lessons and its quarantine's of pending ones (`rules.pending_cap`).
    """

    def __init__(self, shelf: Shelf, runs: FamilyRuns) -> None:
        self.shelf = shelf
        self.runs = runs
        self.approved = OwnerCounts("approved")
        self.pending = OwnerCounts("pending")

    def added(self, lessons: list[Lesson]) -> None:
        self.approved.added(lessons)
        self.pending.added(lessons)

    def confirmed(self, lesson: Lesson) -> None:
        """A merge took `lesson` out of quarantine: one pending less, one approved more."""
        self.pending.retired(lesson.owner, 1)
        self.approved.added([lesson])

    def family_runs(self, family: str) -> tuple[int, int]:
        record = self.shelf.io.storage.family_record(family)
        return (0, 0) if record is None else self.runs.of(family, record)

    def enforce(
        self, *, floor: float, min_retrievals: int, cap: int, scored: list[Lesson] | None, owner: str
    ) -> list[Lesson]:
        """The lessons retired, as written. `scored`: only these can newly fall below the floor.
        The store is scanned for the caps only when `owner` may be over one: once counted, not
        again while this process's writes keep the counts (in a store no one else writes; the
        default owner's everywhere, as before owners).
        """
        candidates = scored if scored is not None else self._owned(owner)
        weak = []
        runs: dict[str, tuple[int, int]] = {}
        for lesson in (c for c in candidates if c.status == "approved"):
            if lesson.family not in runs:
                runs[lesson.family] = self.family_runs(lesson.family)
            reason = rules.weak(lesson, floor=floor, min_retrievals=min_retrievals, family_runs=runs[lesson.family])
            if reason:
                weak.append(rules.retired(lesson, reason))
                self.approved.retired(lesson.owner, 1)
        self.shelf.update(weak)
        over = self._over_caps(cap, owner) if self._may_exceed(cap, owner) else []
        self.shelf.update(over)
        return [*weak, *over]

    def forget(self) -> None:
        self.runs.forget()
        self.approved.forget()
        self.pending.forget()

    def _may_exceed(self, cap: int, owner: str) -> bool:
        approved, pending = self.approved.known(owner), self.pending.known(owner)
        if approved is not None and pending is not None:
            return approved > cap or pending > rules.pending_cap(cap)
        # the stored count misses a batch's inserts, and counts every owner's lessons
        return (
            self.shelf.buffer.pending is not None
            or owner != DEFAULT_OWNER
            or self.shelf.count() > rules.pending_cap(cap)
        )

    def _over_caps(self, cap: int, owner: str) -> list[Lesson]:
        """The oldest pending lessons beyond the quarantine's cap, and the weakest approved beyond
        `cap`: each held to its own, so unconfirmed lessons, however many, never push out one
        that runs confirmed.
        """
        owned = self._owned(owner)
        unconfirmed, pending = rules.over_quarantine(owned, cap)
        gone, approved = rules.over_cap(owned, cap)
        if self.shelf.private or owner == DEFAULT_OWNER:  # elsewhere other writers add an owner's lessons unseen
            self.approved.counted(owner, approved)
            self.pending.counted(owner, pending)
        return [*unconfirmed, *gone]

    def _owned(self, owner: str) -> list[Lesson]:
        """`owner`'s own lessons, every family's (not the shared tier's: those are no one's to cap)."""
        return [lesson for lesson in self.shelf.lessons(family=None, owner=None) if lesson.owner == owner]
