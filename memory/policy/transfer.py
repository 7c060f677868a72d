"""Lessons to and from JSONL: backups, moving a store, reviewing lessons outside Pivotal."""

import json
from dataclasses import dataclass, field
from typing import IO, Any

from pydantic import ValidationError

from pivotal.core.secrets import secret_values
from pivotal.memory.lesson import DEFAULT_OWNER, Lesson, lesson_id, provenance
from pivotal.memory.lesson.ledger import digest
from pivotal.memory.policy import rules as policy
from pivotal.memory.policy.store import ExperienceStore

MAX_ROW_CHARS = 64_000
"""A lesson row is a few hundred characters of text plus bounded counters and run ids; a longer
line is refused before it is parsed."""


@dataclass
class ImportReport:
    imported: int = 0
    """Rows stored as new lessons of the owner."""
    already: int = 0
    """Good rows whose lesson the owner already holds (the same file imported twice): left as they are."""
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    """(line number, what was wrong) for every row that was skipped."""


IMPORT_PRIOR: dict[str, Any] = {
    "evidence": 1,
    "retrievals": 0,
    "successes": 0,
    "step_retrievals": 0,
    "step_approvals": 0,
    "utility": 0.5,
    "source_runs": "",
    "scored_runs": "",
    "run_id": "",
}
"""What an imported row's counters become, whatever it says: one piece of evidence (the file),
no recalls, a new lesson's utility. A file is one source, not the runs it claims: its counts are
taken as given by no one (evidence -5 or 10^9, utility 7.5), and its run ids could block a real
run's evidence as a "resume"."""


def export_lessons(store: ExperienceStore, out: IO[str], *, family: str | None = None, owner: str | None = None) -> int:
    """Every lesson, retired ones too, in a stable order, so two exports of one store are identical."""
    found = store.lessons(family=family, owner=owner)
    lessons = sorted(found, key=lambda lesson: (lesson.family, lesson.created_at, lesson.id))
    for lesson in lessons:
        out.write(json.dumps(lesson.model_dump(exclude={"ledgered"}), ensure_ascii=False, sort_keys=True) + "\n")
    return len(lessons)


def import_lessons(
    store: ExperienceStore, lines: IO[str], *, source: str = "", owner: str = DEFAULT_OWNER
) -> ImportReport:
    """Good rows are stored with their ids and text (a secret in the text blanked), as `owner`'s,
    their counters reset to IMPORT_PRIOR, and held as pending: recalled only once a run's own
    lesson, gated like any, merges into it (a retired row stays retired). Bad rows are reported,
    not fatal.

    An imported lesson would reach every later prompt that recalls it, the same as one a run
    wrote, so each row passes the same poisoning screen and length cap as the gate of a run, and
    the gate's reading of a run before it is recalled. Each is one evidence record of origin
    "import" from `source`, so `pivotal lessons revoke --source FILE` can take the file back.
    """
    report, good, values = ImportReport(), [], secret_values()
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        lesson, problem = _parse(line, owner)
        if lesson is None:
            report.bad_rows.append((number, problem))
            continue
        if lesson.id in seen:
            report.bad_rows.append((number, problem or f"repeats id {lesson.id} of line {seen[lesson.id]}"))
            continue
        seen[lesson.id] = number
        good.append(_earned(lesson.redacted(values), source, owner, digest(line.strip())))
    stored = store.put(good)
    report.imported = len(stored)
    report.already = len(good) - len(stored)
    return report


def owned_id(lesson: Lesson, row: dict[str, Any], owner: str) -> str:
    """The lesson's id as `owner`'s. A row exported by the same owner keeps its id (a round trip
    changes nothing); any other row, or one without an id, gets the id a run of `owner` would give
    its text. An id hashes its owner (`lesson_id`), so one file imported into two tenants makes two
    lessons, and no row can reach another owner's lesson by its id.
    """
    if row.get("id") and row.get("owner", DEFAULT_OWNER) == owner:
        return lesson.id
    return lesson_id(lesson.kind, lesson.family, lesson.text, owner)


def _parse(line: str, owner: str) -> tuple[Lesson | None, str]:
    """The row's lesson as `owner`'s (its id `owned_id`), or what is wrong with it."""
    if len(line) > MAX_ROW_CHARS:
        return None, f"row longer than {MAX_ROW_CHARS} characters"
    try:
        row = json.loads(line, parse_constant=_no_constant)
        lesson = Lesson.model_validate(row)
        lesson = lesson.model_copy(update={"id": owned_id(lesson, row, owner)})
        json.dumps(lesson.model_dump(), ensure_ascii=False).encode()
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    except ValidationError as exc:
        return None, "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in exc.errors()[:3])
    except UnicodeEncodeError:
        return None, "holds a lone surrogate (\\ud800-\\udfff), which is not text"
    except (RecursionError, ValueError) as exc:
        return None, f"not a lesson ({exc})"
    problem = lesson.problem()
    return (None, f"poisoning screen: {problem}") if problem else (lesson, "")


def _no_constant(name: str) -> float:
    """NaN and Infinity are not JSON; Python's reader takes them, and a NaN utility would never retire."""
    raise ValueError(f"{name} is not a JSON number")


def _earned(lesson: Lesson, source: str, owner: str, row_digest: str) -> Lesson:
    """A file wrote every word of the row: no advice of its own (`provenance.documented`), no
    witness, and the quarantine of a new lesson of its kind (`policy.needs`) whatever it claims.
    """
    documented = lesson.model_copy(update=provenance.documented(lesson.model_dump()))
    return documented.model_copy(
        update={
            **IMPORT_PRIOR,
            "needs": policy.needs(lesson),  # the row as written: a rule it claims as advice needs more
            "witnesses": "",
            "status": "retired" if lesson.status == "retired" else "pending",
            "owner": owner,
            "origin": "import",
            "source": source,
            "digest": row_digest,
            "ledgered": True,
        }
    )
