"""Lessons to and from JSONL: backups, moving a store, reviewing lessons outside Pivotal."""

import json
from dataclasses import dataclass, field
from typing import IO, Any

from pydantic import ValidationError

from pivotal.core.secrets import secret_values
from pivotal.memory import policy, provenance
from pivotal.memory.ledger import digest
from pivotal.memory.lesson import DEFAULT_OWNER, Lesson
from pivotal.memory.store import ExperienceStore

MAX_ROW_CHARS = 64_000
"""A lesson row is a few hundred characters of text plus bounded counters and run ids; a longer
line is refused before it is parsed."""


@dataclass
class ImportReport:
    imported: int = 0
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
        lesson, problem = _parse(line)
        if lesson is None:
            report.bad_rows.append((number, problem))
            continue
        if lesson.id in seen:
            report.bad_rows.append((number, problem or f"repeats id {lesson.id} of line {seen[lesson.id]}"))
            continue
        seen[lesson.id] = number
        good.append(_earned(lesson.redacted(values), source, owner, digest(line.strip())))
    store.put(good)
    report.imported = len(good)
    return report


def _parse(line: str) -> tuple[Lesson | None, str]:
    """The row's lesson, or what is wrong with it."""
    if len(line) > MAX_ROW_CHARS:
        return None, f"row longer than {MAX_ROW_CHARS} characters"
    try:
        lesson = Lesson.model_validate(json.loads(line, parse_constant=_no_constant))
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
