"""A private store's evidence journal: what a run's merges changed, appended to one file in the
store's folder and fsynced, so the Chroma write can wait with the recall scores.

Why: a run's evidence (the counts a merge adds to a stored lesson, and its ledger records) must
survive a crash at the run's end, and a Chroma metadata update costs ~20-40 ms on disk whatever
it holds, once per run: the largest part of a memory-on step's cost left after the mirror
(benchmarks/bench_batch.py `--overhead-only`). An append and an fsync of one line cost ~5 ms.
The folder is locked to this process (memory/storage/chroma.py), so no other writer reads Chroma
meanwhile; this process reads the deferred versions (memory/policy/write_buffer.py).

The journal holds, for each lesson, the last version written to it, and every record; it is
emptied once the store has written them to Chroma (`ExperienceStore.flush`), and a store opened
on a folder whose journal is not empty (the last process was killed) writes it to Chroma first.
A lesson written to Chroma by another path while journaled (retired, confirmed, a new text) is
flushed first, so a journaled version never overwrites a newer one. A torn last line (a crash
mid-append) is the one append that had not returned: it is skipped.
"""

import json
import os
import threading
from pathlib import Path

from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record


class Journal:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.ids: set[str] = set()
        """Lessons journaled since the journal was last emptied: their Chroma rows are behind."""
        self._records: set[str] = set()
        """Records journaled since: each goes in once."""
        self._lock = threading.Lock()

    def append(self, lessons: list[Lesson], records: list[Record]) -> None:
        """One line, on disk when this returns (records journaled before are left out)."""
        records = [record for record in records if record.id not in self._records]
        if not lessons and not records:
            return
        line = json.dumps(
            {
                "lessons": [lesson.model_dump(mode="json") for lesson in lessons],
                "records": [record.model_dump(mode="json") for record in records],
            }
        )
        with self._lock:
            created = not self.path.exists()
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            if created:  # the file's name is on disk too
                _sync_folder(self.path.parent)
            self.ids.update(lesson.id for lesson in lessons)
            self._records.update(record.id for record in records)

    def holds(self, records: list[Record]) -> bool:
        """Whether every one of these records is journaled."""
        return all(record.id in self._records for record in records)

    def read(self) -> tuple[list[Lesson], list[Record]]:
        """Each lesson's last journaled version and every record, as appended."""
        if not self.path.exists():
            return [], []
        lessons: dict[str, Lesson] = {}
        records: dict[str, Record] = {}
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # torn by a crash mid-append: that append never returned
                    continue
                lessons.update((lesson["id"], Lesson.model_validate(lesson)) for lesson in entry["lessons"])
                records.update((record["id"], Record.model_validate(record)) for record in entry["records"])
        return list(lessons.values()), list(records.values())

    def clear(self) -> None:
        """Everything journaled is in the backend now."""
        with self._lock:
            if self.path.exists():
                with open(self.path, "w", encoding="utf-8") as handle:
                    os.fsync(handle.fileno())
            self.ids, self._records = set(), set()


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
