"""A folder store's evidence ledger (memory/lesson/ledger.py) in one SQLite file beside Chroma's.

Why: a record written to a Chroma collection costs ~0.65-0.9 ms on disk (a log row, a row per
field, a place in a vector index nothing queries), and gridworld runs append ~7 records each: ~75
ms of every ten runs' memory work (benchmarks/bench_batch.py `--overhead-only`). One SQLite
transaction takes a flush's records in about a millisecond. The folder is locked to this process
(memory/storage/chroma.py), so nothing else writes the file; a server's clients share their
records in Chroma (`ChromaRecords`), where each of them can read the others'.

Records a folder kept in Chroma collections before this file are moved here when it is opened
(memory/storage/chroma.py `moved_ledger`): copied in one transaction, then their collections
dropped. A crash between the two copies them again, which changes nothing: a record's id is its
key, as in Chroma.
"""

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from pivotal.core.errors import PivotalError
from pivotal.memory.lesson.ledger import Record

CHUNK = 500
"""Ids per statement: SQLite caps a statement's parameters (32,766 since 3.32, 999 before)."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS records"
    " (id TEXT PRIMARY KEY, family TEXT NOT NULL, lesson TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS records_by_lesson ON records (family, lesson)",
    "CREATE INDEX IF NOT EXISTS records_by_kind ON records (family, kind)",
)


class LedgerFile:
    """`RecordStorage` (memory/storage/base.py) in an SQLite file; a record's fields as JSON, with
    the ones reads filter by (family, lesson, kind) in columns of their own.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def check(self) -> None:
        """A file already there is opened now, so a damaged one stops the store's opening, as a
        damaged Chroma database does, not a run's first record.
        """
        if os.path.exists(self.path):
            self._connection()

    def _connection(self) -> sqlite3.Connection:
        """Opened at first use: a folder never asked for a record has no file. Full sync: the
        ledger holds what the journal hands it (memory/policy/journal.py), which is emptied after.
        """
        if self._db is None:
            try:
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                for statement in _SCHEMA:
                    db.execute(statement)
            except sqlite3.DatabaseError as exc:
                raise PivotalError(
                    f"the lesson store's evidence ledger {self.path} cannot be opened ({exc}): restore the folder "
                    "from a backup (`pivotal lessons export` makes one) or move the file aside; nothing was changed"
                ) from None
            self._db = db
        return self._db

    def append(self, records: list[Record]) -> None:
        """Each record once by id; one written again (a resumed run's) replaces itself, as Chroma's upsert did."""
        rows = [
            (record.id, record.family, record.lesson, record.kind, record.model_dump_json(exclude={"id"}))
            for record in {record.id: record for record in records}.values()
        ]
        if not rows:
            return
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?)", rows)

    def read(self, family: str, lessons: list[str] | None = None, *, kind: str | None = None) -> list[Record]:
        if lessons == []:
            return []
        where, parameters = "family = ?", [family]
        if kind is not None:
            where, parameters = f"{where} AND kind = ?", [*parameters, kind]
        with self._lock:
            db = self._connection()
            if lessons is None:
                found = db.execute(f"SELECT id, body FROM records WHERE {where} ORDER BY rowid", parameters).fetchall()
            else:
                found = [
                    row
                    for chunk in _chunks(sorted(set(lessons)))
                    for row in db.execute(
                        f"SELECT id, body FROM records WHERE {where} AND lesson IN ({', '.join('?' * len(chunk))})"
                        " ORDER BY rowid",
                        [*parameters, *chunk],
                    ).fetchall()
                ]
        return [Record.model_validate({**json.loads(body), "id": record_id}) for record_id, body in found]

    def delete(self, family: str, ids: list[str]) -> None:
        with self._transaction() as db:
            for chunk in _chunks(ids):
                marks = ", ".join("?" * len(chunk))
                db.execute(f"DELETE FROM records WHERE family = ? AND id IN ({marks})", [family, *chunk])

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """All of it or none of it: a failed append leaves the journal's records to be written again."""
        with self._lock:
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _chunks(ids: list[str]) -> Iterable[list[str]]:
    return (ids[start : start + CHUNK] for start in range(0, len(ids), CHUNK))
