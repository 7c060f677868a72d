"""Lessons to and from JSONL: backups, moving a store, reviewing lessons outside Pivotal."""

import json
from dataclasses import dataclass, field
from typing import IO

from pydantic import ValidationError

from memory.lesson import Lesson
from memory.store import ExperienceStore


@dataclass
class ImportReport:
    imported: int = 0
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    """(line number, what was wrong) for every row that was skipped."""


def export_lessons(store: ExperienceStore, out: IO[str], *, family: str | None = None) -> int:
    """Every lesson, retired ones too, in a stable order, so two exports of one store are identical."""
    lessons = sorted(store.lessons(family=family), key=lambda lesson: (lesson.family, lesson.created_at, lesson.id))
    for lesson in lessons:
        out.write(json.dumps(lesson.model_dump(), ensure_ascii=False, sort_keys=True) + "\n")
    return len(lessons)


def import_lessons(store: ExperienceStore, lines: IO[str]) -> ImportReport:
    """Good rows are stored exactly as written (ids, counts, status); bad rows are reported, not fatal."""
    report, good, seen = ImportReport(), [], {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            lesson = Lesson.model_validate(json.loads(line))
            if lesson.id in seen:
                report.bad_rows.append((number, f"repeats id {lesson.id} of line {seen[lesson.id]}"))
                continue
            seen[lesson.id] = number
            good.append(lesson)
        except json.JSONDecodeError as exc:
            report.bad_rows.append((number, f"not JSON ({exc.msg} at column {exc.colno})"))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in exc.errors()[:3])
            report.bad_rows.append((number, problems))
    store.put(good)
    report.imported = len(good)
    return report
