"""A lesson backend in one file: lessons and ledger records in this process's dictionaries.

Not Pivotal's: tests/test_store_parity.py adds it to the backend table (one row) and runs it
through the same cases as the real backends, and a graph run on it, to show that a new backend
needs this module and that row, and nothing else changed.
"""

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record
from pivotal.memory.storage.base import Near, Only, Storage, Vector
from pivotal.memory.storage.embeddings import query_vector

IN_GRAPH_STORE = False


def _admits(lesson: Lesson, only: Only | None) -> bool:
    if only is None:
        return True
    fields = lesson.metadata()
    return (
        all(fields[name] == value for name, value in only.equal().items())
        and (not only.owners or lesson.owner in only.owners)
        and (not only.scopes or lesson.scope in only.scopes)
    )


class DictLessons:
    def __init__(self) -> None:
        self.kept: dict[str, dict[str, Lesson]] = {}

    def families(self) -> list[str]:
        return sorted(self.kept)

    def has(self, family: str, *, create: bool = False) -> bool:
        if create:
            self.kept.setdefault(family, {})
        return family in self.kept

    def holds(self, family: str) -> bool:
        return bool(self.kept.get(family))

    def known_to_hold(self, family: str) -> bool:
        return self.holds(family)

    def vector(self, family: str, text: str) -> list[float]:
        return query_vector(text)

    def put(self, family: str, lessons: list[Lesson], vectors: list[list[float]] | None) -> None:
        self.kept.setdefault(family, {}).update((lesson.id, lesson) for lesson in lessons)

    def update(self, family: str, lessons: list[Lesson], stored: Mapping[str, Lesson] | None = None) -> None:
        self.put(family, lessons, None)

    def read(self, family: str, ids: list[str] | None) -> list[Lesson]:
        kept = self.kept.get(family, {})
        return list(kept.values()) if ids is None else [kept[i] for i in ids if i in kept]

    def nearest(
        self, family: str, text: str, vector: Vector, n: int, only: Only | None, *, lessons: bool
    ) -> list[Near]:
        query = np.asarray(vector, dtype=np.float32)
        scored = [
            (float(np.dot(query, query_vector(lesson.document))), lesson)
            for lesson in self.kept.get(family, {}).values()
            if _admits(lesson, only)
        ]
        scored.sort(key=lambda pair: -pair[0])
        return [Near(lesson.id, similarity, lesson if lessons else None) for similarity, lesson in scored[:n]]

    def delete(self, family: str, ids: list[str]) -> None:
        for lesson_id in ids:
            self.kept.get(family, {}).pop(lesson_id, None)

    def count(self, family: str, only: Only | None = None) -> int:
        return sum(1 for lesson in self.kept.get(family, {}).values() if _admits(lesson, only))

    def family_record(self, family: str) -> dict[str, Any] | None:
        return {"family": family} if family in self.kept else None


class DictRecords:
    def __init__(self) -> None:
        self.kept: dict[str, dict[str, Record]] = {}

    def append(self, records: list[Record]) -> None:
        for record in records:
            self.kept.setdefault(record.family, {})[record.id] = record

    def read(self, family: str, lessons: list[str] | None = None, *, kind: str | None = None) -> list[Record]:
        return [
            record
            for record in self.kept.get(family, {}).values()
            if (lessons is None or record.lesson in lessons) and (kind is None or record.kind == kind)
        ]

    def delete(self, family: str, ids: list[str]) -> None:
        for record_id in ids:
            self.kept.get(family, {}).pop(record_id, None)


def settings(context: Any, graph_store: Any) -> tuple[str, ...]:
    return tuple(context.lessons_namespace)


def identity(settings: tuple[str, ...]) -> Hashable:
    return settings


def connect(identity: Hashable, settings: tuple[str, ...]) -> Storage:
    return Storage(f"dictionaries {'/'.join(settings)}", DictLessons(), DictRecords(), private=False)
