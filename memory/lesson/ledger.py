"""The evidence ledger: every merge, recall score and run count as its own record.

Why records instead of counters: a counter in a lesson's metadata is read, changed and written
back, and Chroma has no transactions, so two writers on two machines that merge into one lesson
at once keep one of the two counts (a lock file on one machine's temporary folder cannot see the
other machine). A record is only ever added, under an id that names what it counts (lesson, what
happened, run), so writers never touch each other's records, and the same run written twice (a
resume) writes the same record again. Counts and utility are folded from the records
(`fold`); the lesson's own fields hold the last fold, which a store one process owns keeps exact
and a shared store folds again when it is read.

The records are also the lesson's lineage: which runs, imports or people it came from, the hash of
what each distilled it from, the text each one gave, so `pivotal lessons revoke` can take a source
back out and rebuild the lesson from what is left.

Where records are kept is the storage's (memory/storage/base.py `RecordStorage`): one backend
file each, as for the lessons.
"""

import hashlib
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from pivotal.memory.lesson import Lesson, Origin, utility

RecordKind = Literal["evidence", "recall", "run", "carried"]

RECENT = 32
"""Run ids a folded lesson lists (newest last): the records themselves keep every one."""


class Record(BaseModel):
    """One thing that happened to a lesson (or, for kind "run", to its family)."""

    id: str = ""
    kind: RecordKind
    lesson: str = ""
    """The lesson's id; "" for a family's run record."""
    family: str
    owner: str = ""
    run: str = ""
    origin: Origin = "run"
    source: str = ""
    """The import file or the person, for origin "import" / "person"."""
    digest: str = ""
    """Hash of what the lesson was distilled from (the run's trajectory, the import row)."""
    at: float = Field(default_factory=time.time)
    weight: int = 0
    """Evidence it adds: 1 for a run; an import's is capped (memory/policy/transfer.py IMPORT_PRIOR)."""
    recalls: int = 0
    successes: int = 0
    steps: int = 0
    approved: int = 0
    situation: str = ""
    text: str = ""
    """The text this source gave (evidence): revocation rebuilds the lesson from the texts left."""
    merged_from: str = ""
    """The id the candidate had on its own, when it merged into a lesson of another text."""
    witness: str = ""
    """The run's independence key (owner, thread, task: `policy.witness`) when its outcome agreed
    with the lesson's: what takes a lesson out of quarantine."""

    def model_post_init(self, _: Any) -> None:
        if not self.id:
            source = self.run or self.source or self.digest or uuid.uuid4().hex  # nothing names it: its own
            self.id = record_id(self.kind, self.lesson or self.family, source)

    def metadata(self) -> dict[str, Any]:
        return self.model_dump(exclude={"id"})


def evidence(lesson: Lesson, into: str, *, agrees: bool = True) -> Record:
    """`lesson`'s run (or import, or person) giving evidence to the stored lesson `into`;
    `agrees`: its outcome is the stored lesson's, so its run is a witness too.
    """
    return Record(
        kind="evidence",
        lesson=into,
        family=lesson.family,
        owner=lesson.owner,
        run=lesson.run_id,
        origin=lesson.origin,
        source=lesson.source,
        digest=lesson.digest,
        at=time.time(),
        weight=lesson.evidence,
        situation=lesson.situation,
        text=lesson.text,
        merged_from=lesson.id if lesson.id != into else "",
        witness=" ".join(lesson.witnesses.split()[-1:]) if agrees else "",
    )


def carried(lesson: Lesson) -> Record:
    """The counts a lesson stored before the ledger had, as one record (one id per lesson, so
    two writers carrying it at once write the same record).
    """
    return Record(
        id=record_id("carried", lesson.id, ""),
        kind="carried",
        lesson=lesson.id,
        family=lesson.family,
        owner=lesson.owner,
        origin="carried",
        run=lesson.source_runs,
        source=lesson.scored_runs,
        at=lesson.created_at,
        weight=lesson.evidence,
        recalls=lesson.retrievals,
        successes=lesson.successes,
        steps=lesson.step_retrievals,
        approved=lesson.step_approvals,
        situation=lesson.situation,
        text=lesson.text,
    )


def recall(lesson: Lesson, run: str, *, success: bool, steps: int, approved: int) -> Record:
    """A run that recalled `lesson`: shown for `steps` steps, `approved` of them approved."""
    return Record(
        kind="recall",
        lesson=lesson.id,
        family=lesson.family,
        owner=lesson.owner,
        run=run,
        recalls=1,
        successes=int(success),
        steps=steps,
        approved=approved,
    )


def record_id(kind: str, subject: str, source: str) -> str:
    """What the record counts names it: the same run's record written twice is one record."""
    return hashlib.sha256(f"{kind}|{subject}|{source}".encode()).hexdigest()[:32]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Counts:
    """A lesson's counters as its records add them up."""

    evidence: int = 0
    retrievals: int = 0
    successes: int = 0
    step_retrievals: int = 0
    step_approvals: int = 0
    source_runs: list[str] = field(default_factory=list)
    scored_runs: list[str] = field(default_factory=list)
    witnesses: list[str] = field(default_factory=list)

    def fields(self) -> dict[str, Any]:
        counters = {
            "retrievals": self.retrievals,
            "successes": self.successes,
            "step_retrievals": self.step_retrievals,
            "step_approvals": self.step_approvals,
        }
        return {
            **counters,
            "evidence": self.evidence,
            "utility": utility(**counters),
            "source_runs": " ".join(self.source_runs[-RECENT:]),
            "scored_runs": " ".join(self.scored_runs[-RECENT:]),
            "witnesses": " ".join(list(dict.fromkeys(self.witnesses))[-RECENT:]),
        }


def fold(records: Iterable[Record]) -> dict[str, Counts]:
    """Each lesson's counts, from its records (any order; each id counted once)."""
    unique = {record.id: record for record in records}
    counts: dict[str, Counts] = {}
    for record in sorted(unique.values(), key=lambda r: (r.at, r.id)):
        if record.kind == "run":
            continue
        total = counts.setdefault(record.lesson, Counts())
        total.evidence += record.weight
        total.retrievals += record.recalls
        total.successes += record.successes
        total.step_retrievals += record.steps
        total.step_approvals += record.approved
        if record.kind == "carried":
            total.source_runs += record.run.split()
            total.scored_runs += record.source.split()
        elif record.kind == "evidence" and record.run:
            total.source_runs.append(record.run)
        if record.kind == "evidence" and record.witness:
            total.witnesses.append(record.witness)
        elif record.kind == "recall":
            total.scored_runs.append(record.run)
    return counts


def family_runs(records: Iterable[Record]) -> tuple[int, int]:
    """(runs, successes) of a family's run records."""
    runs = {r.id: r for r in records if r.kind == "run"}.values()
    return len(runs), sum(r.successes for r in runs)
