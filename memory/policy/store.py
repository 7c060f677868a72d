"""The experience store: the lesson policy over any storage backend (memory/storage/: Chroma, a
LangGraph store), lessons kept a task family at a time.

The small API the nodes, the `pivotal lessons` CLI, the runners and import/export call (17
methods, nothing else of the store): batch · add · duplicate · search · kept · get · lessons · put
· record_outcome · enforce_limits · retire · lineage · revoke · flush · close · fault_reported;
reports and tests also read families · count · family_runs.
Open one with memory/policy/registry.py: `lesson_store` (the run's backend, `Context.lessons_backend`)
or `open_store` (a Chroma folder or server).

Recall over-fetches from the family and drops retired lessons itself: a metadata filter costs
more than the nearest-neighbour query (Chroma: ~35 ms against ~3 ms at 10k lessons,
benchmarks/bench_store.py).

One storage per store per process, with every read-modify-write under one lock, so concurrent
runs neither lose nor duplicate lessons. Storage calls block: async callers use `asyncio.to_thread`.

Its parts, each tested alone (tests/test_store_parts.py and their own): reads, writes and queries
(memory/policy/lesson_io.py), the writes yet to be made (memory/policy/write_buffer.py), both
together as this process sees them (memory/policy/shelf.py), the rules (memory/policy/rules.py)
and how they are applied (memory/policy/limits.py), revocation (memory/policy/revocation.py), the
kept recall answers (memory/policy/neighbours.py), the open stores (memory/policy/registry.py),
import/export (memory/policy/transfer.py); the lesson and its forms (memory/lesson/), its ledger
records (memory/lesson/ledger.py); where both are kept (memory/storage/).
"""

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pivotal.memory.lesson import DEFAULT_OWNER, Found, Lesson
from pivotal.memory.lesson.ledger import Record, evidence, recall
from pivotal.memory.lesson.provenance import documented
from pivotal.memory.policy import revocation, rules
from pivotal.memory.policy.journal import Journal
from pivotal.memory.policy.lesson_io import LessonIO, owned
from pivotal.memory.policy.limits import FamilyRuns, Limits
from pivotal.memory.policy.neighbours import NeighbourCache
from pivotal.memory.policy.revocation import Revoked
from pivotal.memory.policy.shelf import OVERFETCH, Shelf
from pivotal.memory.policy.write_buffer import WriteBuffer
from pivotal.memory.storage.base import Only, Storage

BATCH = 500


@dataclass
class Match:
    """A stored lesson that a new one would merge into."""

    lesson: Lesson
    similarity: float


@dataclass
class Written:
    id: str
    merged: bool
    """True when the lesson joined an existing near-duplicate instead of being inserted."""


class ExperienceStore:
    def __init__(self, storage: Storage) -> None:
        self.location = storage.location
        self.storage = storage
        self._release = storage.release
        self._lock = threading.RLock()
        """This process's threads take turns; other processes and machines need no lock, as
        what they count goes to the ledger as records of their own (memory/lesson/ledger.py).
        Reentrant, as `batch()` holds it around the writes it makes."""
        self._ledger = storage.records
        private = storage.private
        self._private = private
        """No other process writes it (a folder is locked to its process): what this process
        remembers of it stays true. A server's other clients approve lessons this one never hears of."""
        self.io = LessonIO(storage.lessons, storage.location, private=private)
        self.buffer = WriteBuffer()
        self._near = NeighbourCache() if private else None
        journal = Journal(storage.journal) if private and storage.journal else None
        """A private store's evidence, durable before Chroma has it (memory/policy/journal.py)."""
        self.shelf = Shelf(self.io, self.buffer, self._ledger, self._near, private=private, journal=journal)
        self.shelf.replay()  # what a killed process journaled, before anything is read
        self._limits = Limits(self.shelf, FamilyRuns(self._ledger, self.buffer, private=private))
        self.faulted = False
        """A storage fault already stopped the work and was reported (see `fault_reported`)."""

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One run's lesson writes (inserts, merges, retirements) as one upsert and one update per
        family at the end, its recall scores deferred (memory/policy/write_buffer.py): each Chroma write
        call costs ~10-20 ms on disk whatever it holds, and a run made five or six. In a private
        store with a journal (a folder) the run's evidence, scores and records are one fsynced
        journal line instead, written to Chroma with later runs' (memory/policy/journal.py).
        Reads inside see the held writes; a failure writes none of them.
        Call it from one thread: it holds the store's lock throughout.
        """
        with self._lock:
            if not self.buffer.start():  # already inside one
                yield
                return
            try:
                yield
                texts, updates, scores, evidence = self.buffer.take()
                self.shelf.put(texts)
                if self.shelf.journal is None:
                    self.shelf.update(updates + evidence)  # evidence: written with the run, never deferred
                    self.shelf.update(scores, counts_only=True)
                else:  # the run's counts and records in one journal line; Chroma waits for them all
                    self.shelf.update(updates)
                    self.shelf.journaled(scores + evidence)
                if not self._private:
                    self.shelf.write_records()
            finally:
                self.buffer.end()

    def flush(self) -> None:
        """Write the deferred counts now: at close, at a batch's end, at exit. They leave memory
        only once written, so a failed write is tried again at the next flush.
        """
        with self._lock:
            self.shelf.flush()

    def fault_reported(self) -> None:
        """A storage fault already stopped the work and was reported (a batch says it in one line):
        if the deferred counts cannot be written at exit either, that is the same fault, not news.
        """
        self.faulted = True

    # ---- write path -------------------------------------------------------------------------
    def duplicate(self, lesson: Lesson, threshold: float) -> Match | None:
        """The stored lesson `lesson` merges into: same kind and family, at least `threshold` alike.

        The one place a lesson is matched against the store: dedup (part of distill's node entry)
        asks it before the gate, `add` asks it again under the store's lock before writing.
        """
        found = self.shelf.nearest(lesson)
        return Match(*found) if found is not None and found[1] >= threshold else None

    def add(self, lessons: Iterable[Lesson], *, dedup_similarity: float, keep_text: bool = False) -> list[Written]:
        """Insert each lesson, or merge it into a stored one of the same kind and family at least
        `dedup_similarity` alike (evidence +1, the more specific text kept unless `keep_text`,
        used for candidates the gate did not read). Nothing is deleted. Each one is also an
        evidence record in the ledger, which is what the evidence is counted from.
        """
        written = []
        counted: dict[str, Lesson] = {}  # merges that change only counts, written together at the end
        confirmed: set[str] = set()  # ...of which these changed the status too
        with self._lock:
            for lesson in map(with_provenance, lessons):
                match = self.duplicate(lesson, dedup_similarity)
                if match is None:
                    self.buffer.note([evidence(lesson, lesson.id)])
                    self.shelf.put([lesson])
                    self._limits.added([lesson])
                    written.append(Written(lesson.id, merged=False))
                    continue
                stored = self.buffer.carried(counted.get(match.lesson.id, match.lesson))
                self.buffer.note([evidence(lesson, stored.id, agrees=lesson.outcome == stored.outcome)])
                merged = stored.merged_with(lesson, keep_text=keep_text)
                if stored.status == "pending" and merged.status == "approved":
                    self._limits.confirmed(merged)
                if merged != stored:  # the same run again (a resume) changes nothing
                    if merged.document == stored.document:
                        counted[merged.id] = merged
                        if merged.status != stored.status:
                            confirmed.add(merged.id)
                    else:
                        counted.pop(merged.id, None)
                        self.shelf.put([merged])
                # ...but is reported as before: inserted if this run created the lesson, else merged
                written.append(Written(match.lesson.id, merged=match.lesson.run_id != lesson.run_id))
            # evidence: written with the run (a private store's to its journal), never left in memory;
            # a status changed goes to the backend at once, so its filtered queries see it
            self.shelf.update([merged for merged in counted.values() if merged.id in confirmed])
            self.shelf.update([merged for merged in counted.values() if merged.id not in confirmed], evidence=True)
            if self.buffer.pending is None:
                self.shelf.write_records()
        return written

    def put(self, lessons: list[Lesson]) -> list[Lesson]:
        """Store lessons exactly as given (import, share): no dedup, ids and counts kept. An
        imported one (origin "import") is also its evidence record, and never replaces a stored
        lesson of its id: a file cannot rewrite what runs built (nor another owner's lesson).
        Returns the lessons written (an import already stored is not).
        """
        with self._lock:
            imported = [lesson.id for lesson in lessons if lesson.origin == "import"]
            stored = set(self.get(imported)) if imported else set()
            lessons = [lesson for lesson in lessons if lesson.origin != "import" or lesson.id not in stored]
            self.buffer.note([evidence(lesson, lesson.id) for lesson in lessons if lesson.origin == "import"])
            for start in range(0, len(lessons), BATCH):
                self.shelf.put(lessons[start : start + BATCH], embedded=False)
            self.shelf.write_records()
            self._limits.forget()  # replaced lessons may change status either way: count again
        return lessons

    # ---- read path --------------------------------------------------------------------------
    def search(
        self, text: str, *, family: str, k: int, min_similarity: float, instance: str = "", owner: str = DEFAULT_OWNER
    ) -> list[Found]:
        """Approved lessons of this family closest to `text` that apply to `instance` (general
        ones, and those this instance taught), best first, above the floor; `owner`'s own and the
        shared tier's only.

        The query is embedded once (and cached) for both queries below; the collection's size is
        never asked (`count()` costs more than the nearest-neighbour query at 100k lessons), only
        whether it has ever held a lesson, since an empty store should not pay for an embedding.
        In a store this process owns, the nearest lessons of each query are kept and kept true
        as lessons are written (memory/policy/neighbours.py): situations repeat within and across runs.
        """
        if not text.strip() or not self.io.storage.holds(family):
            return []
        near = self.shelf.neighbours(family, text, k * OVERFETCH)
        found = _recallable(near.found, instance, owner)
        if len(found) < k and not near.complete:  # the rest of the top may hold more that apply
            only = Only(status="approved", owners=owned(owner, shared=True), scopes=("", instance) if instance else ())
            found = _recallable(self.shelf.query(family, near.vector, k, only, text), instance, owner)
        return [r for r in found if r.similarity >= min_similarity][:k]

    def kept(
        self, text: str, *, family: str, k: int, min_similarity: float, instance: str = "", owner: str = DEFAULT_OWNER
    ) -> list[Found] | None:
        """`search`'s answer when it is at hand (no disk, no embedding), else None: recall
        then needs no thread.
        """
        near = self._near.get(family, text, k * OVERFETCH) if self._near is not None else None
        if not self.io.storage.known_to_hold(family) or near is None:
            return None
        found = _recallable(near.found, instance, owner)
        if len(found) < k and not near.complete:
            return None
        return [r for r in found if r.similarity >= min_similarity][:k]

    def get(
        self, ids: list[str] | None = None, *, family: str | None = None, owner: str | None = None
    ) -> dict[str, Lesson]:
        """`owner`: only its lessons and the shared tier's (None: every owner's, as the nodes ask by id)."""
        return self.shelf.get(ids, family=family, owner=owner)

    def lessons(self, *, family: str | None = None, owner: str | None = None) -> Iterator[Lesson]:
        """`owner`: only its lessons and the shared tier's (None: every owner's)."""
        return self.shelf.lessons(family=family, owner=owner)

    def count(self, *, status: str | None = None) -> int:
        return self.shelf.count(status=status)

    def families(self) -> list[str]:
        return self.shelf.families()

    # ---- utility and eviction (memory/policy/rules.py, memory/policy/limits.py) -------------
    def record_outcome(
        self, run_id: str, family: str, usage: dict[str, tuple[int, int]], *, success: bool
    ) -> list[Lesson]:
        """Score every lesson a run recalled: usage maps id → (steps shown, steps approved); and
        count the run in its family's record, the baseline a lesson's runs are compared with.
        Each is a ledger record; a shared store writes them at once, a private one defers them
        with the recall scores.
        """
        with self._lock:
            if self.io.storage.has(family):  # else nothing to compare with
                run = self._limits.runs.count(family, run_id, success)
                journaled = self.shelf.journal is not None and self.buffer.pending is not None  # at the batch's end
                if self._private and self.buffer.defer(durable=journaled):
                    self.flush()
                self.buffer.note([run])
            current = self.get(list(usage), family=family) if usage else {}
            scored = []
            for i, stored in current.items():
                lesson = self.buffer.carried(stored)
                shown, approved = usage[i]
                self.buffer.note([recall(lesson, run_id, success=success, steps=shown, approved=approved)])
                scored.append(lesson.scored(run_id, success=success, steps=shown, approved_steps=approved))
            self.shelf.update(scored, counts_only=True)
            if not self._private and self.buffer.pending is None:
                self.shelf.write_records()
        return scored

    def family_runs(self, family: str) -> tuple[int, int]:
        """(runs, successes) of the family, the baseline `rules.hurts` compares a lesson's runs with."""
        return self._limits.family_runs(family)

    def enforce_limits(
        self,
        *,
        floor: float,
        min_retrievals: int,
        cap: int,
        scored: list[Lesson] | None = None,
        owner: str = DEFAULT_OWNER,
    ) -> list[str]:
        """Retire lessons whose utility fell below `floor` after enough recalls, or that hurt, then
        the lowest utility until at most `cap` of `owner`'s own stay approved (memory/policy/limits.py).
        `scored`: the lessons whose utility just changed (None: all of `owner`'s). Retired ones are kept.
        """
        with self._lock:
            retired = self._limits.enforce(
                floor=floor, min_retrievals=min_retrievals, cap=cap, scored=scored, owner=owner
            )
        return [lesson.id for lesson in retired]

    def retire(self, ids: list[str], reason: str, *, owner: str | None = None) -> list[str]:
        with self._lock:
            found = self.get(ids, owner=owner)
            self.shelf.update([rules.retired(lesson, reason) for lesson in found.values()])
            self._limits.forget()
        return list(found)

    # ---- lineage and revocation -------------------------------------------------------------
    def lineage(self, lesson: Lesson) -> list[Record]:
        """What the lesson was built from and what happened to it, oldest first."""
        with self._lock:
            self.flush()
            records = self._ledger.read(lesson.family, [lesson.id])
        return sorted(records, key=lambda r: (r.at, r.id))

    def revoke(self, revoked: Callable[[Record], bool], *, owner: str, dry_run: bool = False) -> Revoked:
        """Take back what the records `revoked` picks gave: a lesson built only from them goes
        (with its records), one that has other sources loses their evidence, recall scores and
        text. Only `owner`'s own lessons are touched; those stored before the ledger have no
        known sources and count as built from something else.
        """
        with self._lock:
            self.flush()
            report = revocation.revoke(self.shelf, revoked, owner=owner, dry_run=dry_run)
            if not dry_run:
                self.shelf.forget_recall()
                self._limits.forget()
        return report

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._release:
                self._release()
                self._release = None


def _recallable(found: Iterable[tuple[Lesson, float]], instance: str, owner: str) -> list[Found]:
    return [
        Found(lesson.id, lesson, similarity)
        for lesson, similarity in found
        if lesson.status == "approved" and lesson.applies_to(instance) and lesson.visible_to(owner)
    ]


def with_provenance(lesson: Lesson) -> Lesson:
    """A lesson written without provenance (a program's own `ExperienceStore.add`) as a file's: every
    word a document's, no advice, so it reaches a prompt only as quoted data. The writer and the
    import give theirs; nothing reaches the store as advice that no run checked.
    """
    if lesson.provenance:
        return lesson
    return lesson.model_copy(update=documented(lesson.model_dump()))
