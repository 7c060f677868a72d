"""A private store's vectors in memory, for nearest-lesson queries without asking the backend.

Step recall asks a nearest-lesson query on almost every step, and dedup one per lesson. In Chroma
each costs ~8 ms whatever the collection holds (the call, not the search), and where a family's
nearest lessons are mostly not recallable (other mazes' lessons, ones still in quarantine) recall
asked twice, the second time filtered: most of a memory-on step's store time went there
(benchmarks/bench_batch.py `--overhead-only`). A store no other process writes (a folder, locked
to this process) knows every change to its lessons, so once a family has been asked as many
queries as reading it costs (VECTORS_PER_QUERY) it reads the family's ids and vectors once (~20-30 ms
per 1,000 lessons; reading their fields too would cost ~0.5 s, so they are not) and ranks by a dot
product in memory, exact where Chroma's index is approximate. The lessons themselves come from the store's reads (known
ones need no disk): a filter is applied to the best rows in order, and when the first
SCAN_MAX rows do not hold enough that pass it, the backend is asked as before.

Kept true by the store's own writes (memory/policy/shelf.py calls `written` wherever it writes
a text); a write it cannot place (an import embedded by the backend, a deletion) drops the family,
which is read again later. A shared store (a server, a LangGraph store) is never mirrored: other
writers change it unseen.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pivotal.memory.lesson import Lesson
from pivotal.memory.storage.base import Only

MIRROR_MAX = 20_000
"""Families larger than this are queried in the backend (20k × 384 floats ≈ 30 MB, ~2 s to read)."""
VECTORS_PER_QUERY = 100
"""One backend query costs about as much as reading this many of a family's vectors (Chroma on a
folder, CPU of the whole process: a query of 12 lessons 2.9-3.7 ms, the vectors 22-38 µs each, one
query as much as 97-136 vectors from 100 to 10,000 lessons; benchmarks/bench_chroma_costs.py). A
family is read once it has been asked as many queries as reading it costs, rent or buy: its queries
and its read then cost at most about twice the cheaper of the two, however many queries follow, and
a short run on a large family never pays the read. The fixed 16 queries this replaced read 1,000
lessons after twice their break-even (7 queries) and 10,000 after a sixth of theirs (~100 queries
for a read of ~0.4 s)."""
SCAN_MAX = 64
"""Rows a filtered query reads in order before it leaves the rest to the backend's filter."""

Read = Callable[[list[str]], dict[str, Lesson]]
"""The store's read of lessons by id, in their latest versions (held, deferred, known)."""


@dataclass(frozen=True)
class Rows:
    """One family's ids and unit vectors, row for row; replaced whole on each write, so a reader
    in another thread always sees one consistent version.
    """

    ids: tuple[str, ...]
    vectors: np.ndarray
    at: dict[str, int]

    @staticmethod
    def of(ids: list[str], vectors: np.ndarray) -> "Rows":
        return Rows(tuple(ids), vectors, {lesson_id: i for i, lesson_id in enumerate(ids)})

    def nearest(self, vector: np.ndarray, n: int, only: Only | None, read: Read) -> list[tuple[Lesson, float]] | None:
        """The `n` lessons most alike to `vector` (cosine) that `only` lets through, best first;
        None when the first SCAN_MAX rows hold fewer than `n` of them and there are more rows.
        """
        if not self.ids or n <= 0:
            return []
        similarity = self.vectors @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-similarity, kind="stable")
        found: list[tuple[Lesson, float]] = []
        step = n if only is None else max(4 * n, 16)
        for start in range(0, min(len(order), SCAN_MAX if only is not None else n), step):
            chunk = [self.ids[i] for i in order[start : start + step]]
            lessons = read(chunk)
            for lesson_id in chunk:
                lesson = lessons.get(lesson_id)
                if lesson is not None and (only is None or matches(lesson, only)):
                    found.append((lesson, float(similarity[self.at[lesson_id]])))
                    if len(found) == n:
                        return found
        scanned_all = only is None or len(order) <= SCAN_MAX
        return found if scanned_all else None

    def written(self, ids: list[str], vectors: list[list[float]]) -> "Rows":
        """Texts stored with these vectors: new rows appended, rewritten ones replaced."""
        matrix, at, rows = self.vectors, dict(self.at), list(self.ids)
        added: list[np.ndarray] = []
        for lesson_id, vector in zip(ids, vectors, strict=True):
            row = at.get(lesson_id)
            if row is None:
                at[lesson_id] = len(rows)
                rows.append(lesson_id)
                added.append(np.asarray(vector, dtype=np.float32))
                continue
            if matrix is self.vectors:
                matrix = matrix.copy()
            matrix[row] = np.asarray(vector, dtype=np.float32)
        if added:
            matrix = np.vstack([matrix, *added]) if len(matrix) else np.vstack(added)
        return Rows(tuple(rows), matrix, at)


def matches(lesson: Lesson, only: Only) -> bool:
    """`only` as the backends read it (memory/storage/base.py `Only`): every field set must match."""
    return (
        (only.status is None or lesson.status == only.status)
        and (only.kind is None or lesson.kind == only.kind)
        and (not only.owners or lesson.owner in only.owners)
        and (not only.scopes or lesson.scope in only.scopes)
    )


class Mirror:
    """The mirrored families of one private store."""

    def __init__(self) -> None:
        self._rows: dict[str, Rows | None] = {}
        """A family's rows; None: not mirrored (too big, or a backend without `with_vectors`)."""
        self._versions: dict[str, int] = {}
        self._asked: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        """Each family's lesson count when it was first asked: what reading it would cost."""
        self._lock = threading.Lock()

    def rows(self, family: str) -> Rows | None:
        return self._rows.get(family)

    def wanted(self, family: str, size: Callable[[], int]) -> bool:
        """Whether to read the family now: not tried yet, and asked (this one counted) more often
        than reading its `size()` vectors costs in queries. `size` is asked once, when the family is
        first asked; a family larger than MIRROR_MAX is then left to the backend without a read.
        """
        if family in self._rows:
            return False
        if family not in self._sizes:
            self._sizes[family] = size()
            if self._sizes[family] > MIRROR_MAX:
                with self._lock:
                    self._rows[family] = None
                return False
        self._asked[family] = self._asked.get(family, 0) + 1
        return self._asked[family] > self._sizes[family] / VECTORS_PER_QUERY

    def version(self, family: str) -> int:
        return self._versions.get(family, 0)

    def keep(self, family: str, read: tuple[list[str], np.ndarray] | None, version: int) -> None:
        """A family as read; kept only if no write to it landed meanwhile (it may be missing)."""
        with self._lock:
            if self.version(family) == version:
                self._rows[family] = Rows.of(*read) if read is not None else None

    def written(self, lessons: list[Lesson], vectors: list[list[float]]) -> None:
        """Texts stored (new or rewritten) with their vectors; a count or status changes no row."""
        by_family: dict[str, list[int]] = {}
        for index, lesson in enumerate(lessons):
            by_family.setdefault(lesson.family, []).append(index)
        with self._lock:
            for family, indexes in by_family.items():
                self._versions[family] = self.version(family) + 1
                rows = self._rows.get(family)
                if rows is None:  # not read yet, or not mirrored: a family too big is not read again
                    continue
                self._rows[family] = rows.written([lessons[i].id for i in indexes], [vectors[i] for i in indexes])

    def forget(self, families: set[str] | None = None) -> None:
        """Lessons written without vectors at hand, or deleted: their families are read again."""
        with self._lock:
            for family in (set(self._rows) | set(self._versions)) if families is None else families:
                self._versions[family] = self.version(family) + 1
                self._rows.pop(family, None)
                self._asked.pop(family, None)
                self._sizes.pop(family, None)
