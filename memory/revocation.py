"""What revoking a source takes back from one lesson, decided from its ledger records alone
(memory/ledger.py); the store removes and rewrites what this decides (`ExperienceStore.revoke`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from pivotal.memory.ledger import Record, fold
from pivotal.memory.lesson import Lesson, better_text


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
    report.reduced.append((lesson.model_copy(update=update), gone))
