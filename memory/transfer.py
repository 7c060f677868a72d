"""Lessons to and from JSONL: backups, moving a store, reviewing lessons outside Pivotal."""

import json
from dataclasses import dataclass, field
from typing import IO

from pydantic import ValidationError

from pivotal.core.secrets import redact, secret_values
from pivotal.memory.lesson import Lesson
from pivotal.memory.screen import screen_lesson
from pivotal.memory.store import ExperienceStore

MAX_ROW_CHARS = 64_000
"""A lesson row is a few hundred characters of text plus bounded counters and run ids; a longer
line is refused before it is parsed."""


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
    """Good rows are stored as written (ids, counts, status; only a secret in the text is blanked);
    bad rows are reported, not fatal.

    An imported lesson reaches every later prompt that recalls it, the same as one a run wrote,
    so each row passes the same poisoning screen and length cap as the gate of a run.
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
        good.append(_without_secrets(lesson, values))
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
    problem = screen_lesson(lesson.situation, lesson.text)
    return (None, f"poisoning screen: {problem}") if problem else (lesson, "")


def _no_constant(name: str) -> float:
    """NaN and Infinity are not JSON; Python's reader takes them, and a NaN utility would never retire."""
    raise ValueError(f"{name} is not a JSON number")


def _without_secrets(lesson: Lesson, values: list[str]) -> Lesson:
    return lesson.model_copy(
        update={"situation": redact(lesson.situation, values), "text": redact(lesson.text, values)}
    )
