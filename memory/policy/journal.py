"""A private store's evidence journal: what a run's merges changed, one line written to one file in
the store's folder and synced (`fdatasync`), so the Chroma write can wait with the recall scores.

Why: a run's evidence (the counts a merge adds to a stored lesson, and its ledger records) must
survive a crash at the run's end, and a Chroma metadata update costs ~20-40 ms on disk whatever
it holds, once per run: the largest part of a memory-on step's cost left after the mirror
(benchmarks/bench_batch.py `--overhead-only --journal-ab`). A line and one data sync cost a few ms.
The folder is locked to this process (memory/storage/chroma.py), so no other writer reads Chroma
meanwhile; this process reads the deferred versions (memory/policy/write_buffer.py).

The journal holds, for each lesson, the last version written to it, and every record; it is
emptied once the store has written them to Chroma (`ExperienceStore.flush`: every DEFER_RUNS
lines, at a batch's end, at close), and a store opened
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

SIZE = 1 << 22
"""The file is this long (4 MB) from its first line on, zeros past what is written, so an append
overwrites blocks the file already has and `fdatasync` writes the data alone. An append that grew
the file made each fsync commit the filesystem's own journal too, which waits for every other
process's writes: on a busy disk that cost more than the Chroma write it replaced. A line that
does not fit grows the file (zeros written and fsynced first); it is emptied at each flush."""


class Journal:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.ids: set[str] = set()
        """Lessons journaled since the journal was last emptied: their Chroma rows are behind."""
        self._records: set[str] = set()
        """Records journaled since: each goes in once."""
        self._end = 0
        """Where the next line goes: the bytes before it are lines, the rest zeros."""
        self.lines = 0
        """Lines appended since the journal was last emptied (one per run's batch)."""
        self._lock = threading.Lock()

    def append(self, lessons: list[Lesson], records: list[Record]) -> None:
        """One line, on disk when this returns (records journaled before are left out)."""
        records = [record for record in records if record.id not in self._records]
        if not lessons and not records:
            return
        line = json.dumps(  # JSON escapes control characters: a line never holds a zero byte
            {
                "lessons": [lesson.model_dump(mode="json") for lesson in lessons],
                "records": [record.model_dump(mode="json") for record in records],
            }
        )
        data = (line + "\n").encode()
        with self._lock:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                size = os.fstat(descriptor).st_size
                if self._end + len(data) > size:
                    self._zeros(descriptor, size, max(SIZE, 2 * (self._end + len(data))) - size)
                os.pwrite(descriptor, data, self._end)
                os.fdatasync(descriptor)
            finally:
                os.close(descriptor)
            self._end += len(data)
            self.lines += 1
            self.ids.update(lesson.id for lesson in lessons)
            self._records.update(record.id for record in records)

    def _zeros(self, descriptor: int, at: int, length: int) -> None:
        """The file grown by `length` zero bytes, on disk with its new size (and its name, when new)."""
        chunk = b"\0" * (1 << 20)
        for offset in range(at, at + length, len(chunk)):
            os.pwrite(descriptor, chunk[: min(len(chunk), at + length - offset)], offset)
        os.fsync(descriptor)
        if at == 0:
            _sync_folder(self.path.parent)

    def holds(self, records: list[Record]) -> bool:
        """Whether every one of these records is journaled."""
        return all(record.id in self._records for record in records)

    def read(self) -> tuple[list[Lesson], list[Record]]:
        """Each lesson's last journaled version and every record, as appended."""
        if not self.path.exists():
            return [], []
        written = self.path.read_bytes()
        used = written.find(b"\0")
        used = len(written) if used < 0 else used
        self._end = max(self._end, used)
        lessons: dict[str, Lesson] = {}
        records: dict[str, Record] = {}
        for line in written[:used].split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:  # torn by a crash mid-append (that append never returned), or the end
                continue
            lessons.update((lesson["id"], Lesson.model_validate(lesson)) for lesson in entry["lessons"])
            records.update((record["id"], Record.model_validate(record)) for record in entry["records"])
        return list(lessons.values()), list(records.values())

    def clear(self) -> None:
        """Everything journaled is in the backend now: the lines written over with zeros."""
        with self._lock:
            if self._end and self.path.exists():
                descriptor = os.open(self.path, os.O_RDWR)
                try:
                    os.pwrite(descriptor, b"\0" * self._end, 0)
                    os.fdatasync(descriptor)
                finally:
                    os.close(descriptor)
            self._end, self.lines = 0, 0
            self.ids, self._records = set(), set()


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
