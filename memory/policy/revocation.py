"""What revoking a source takes back from one lesson, decided from its ledger records alone
(memory/lesson/ledger.py), and the lessons and records removed and rewritten as decided (`revoke`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from pivotal.memory.lesson import Lesson, better_text
from pivotal.memory.lesson.ledger import Record, fold
from pivotal.memory.policy.shelf import Shelf


@dataclass
class Revoked:
    """Lessons removed (with all their records), lessons kept with the revoked records taken out
    of them (the lesson as it becomes, and the records that go), and family run records removed.
    """

    removed: list[tuple[Lesson, list[Record]]] = field(default_factory=list)
    reduced: list[tuple[Lesson, list[Record]]] = field(default_factory=list)
    runs: int = 0


def take_back(lesson: Lesson, records: list[Record], revoked: Callable[[Record], bool], report: Revoked) -> None:
    """Built only from revoked sources: it goes. Else its counts are folded from the records
    left, and a text a revoked source gave goes back to the best text the others gave.
    """
    gone = [r for r in records if revoked(r)]
    if not gone:
        return
    sources = [r for r in records if r.kind in ("evidence", "carried") and r not in gone]
    if not sources:
        report.removed.append((lesson, records))
        return
    counts = fold(r for r in records if r not in gone)[lesson.id]
    update = counts.fields()
    if lesson.text in {r.text for r in gone} - {r.text for r in sources}:
        best = sorted(sources, key=lambda r: (r.at, r.id))[0]
        for record in sorted(sources, key=lambda r: (r.at, r.id))[1:]:
            best = record if better_text(record.text, best.text) else best
        update.update(text=best.text, situation=best.situation)
    if lesson.status == "approved" and len(set(update["witnesses"].split())) < lesson.needs:
        update["status"] = "pending"  # a revoked run had confirmed it: back in quarantine
    report.reduced.append((lesson.model_copy(update=update), gone))


def revoke(shelf: Shelf, revoked: Callable[[Record], bool], *, owner: str, dry_run: bool) -> Revoked:
    """`ExperienceStore.revoke`, its deferred writes flushed: each family's `owner`'s lessons
    decided from their records, then (unless `dry_run`) removed and rewritten.
    """
    report = Revoked()
    for family in shelf.families():
        records = shelf.ledger.read(family)
        runs = [r.id for r in records if r.kind == "run" and revoked(r)]
        by_lesson: dict[str, list[Record]] = {}
        for record in records:
            by_lesson.setdefault(record.lesson, []).append(record)
        for lesson in shelf.lessons(family=family, owner=owner):
            if lesson.owner == owner:
                take_back(lesson, by_lesson.get(lesson.id, []), revoked, report)
        report.runs += len(runs)
        if not dry_run:
            _apply(shelf, family, report, runs)
    return report


def _apply(shelf: Shelf, family: str, report: Revoked, runs: list[str]) -> None:
    removed = [(lesson, records) for lesson, records in report.removed if lesson.family == family]
    reduced = [(lesson, gone) for lesson, gone in report.reduced if lesson.family == family]
    shelf.remove(family, [lesson.id for lesson, _ in removed])
    shelf.ledger.delete(family, [r.id for _, records in [*removed, *reduced] for r in records] + runs)
    shelf.put([lesson for lesson, _ in reduced], embedded=False)
