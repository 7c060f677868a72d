"""Checkpoint files: refusing a damaged one, measuring one, and pruning what nothing needs.

Every run saves a checkpoint after each graph step (PIVOTAL_CHECKPOINT_PATH, by default
.pivotal/checkpoints.sqlite), and each one holds the run's whole state, so a file grows by
steps × state size and LangGraph never trims it. What needs what:

- `pivotal batch --resume` and `pivotal resume` read only a thread's latest checkpoint (and
  the writes pending on it), so a finished run needs just that one to be read back;
- a run that can still go on (stopped mid-way, or waiting for a person's approval) needs its
  latest checkpoint and pending writes, and a fork ("time travel", Studio) needs the history;
  `prune` never touches such a thread, nor the history of anything it was not asked to prune.

Pivotal's state keeps every channel whole in each checkpoint (no `DeltaChannel`), which is
what makes a finished thread's latest checkpoint enough on its own.
"""

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from pivotal.core.errors import PivotalError

HEADER = b"SQLite format 3\x00"
TRIGGERS = ("branch:to:", "join:", "__start__", "__pregel_tasks")
"""Channels whose value starts a node: a checkpoint holding one has steps left to run."""
LOCK_WAIT_S = 5.0
WHERE = "runs write to PIVOTAL_CHECKPOINT_PATH (default .pivotal/checkpoints.sqlite); pass --checkpoints PATH"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""A checkpoint location with one of these is a Postgres database (shared by processes and machines), not a file."""


def is_postgres(location: str | None) -> bool:
    """Whether checkpoints go to Postgres: the file checks and `stats`/`prune` are SQLite's own."""
    return bool(location and location.lower().startswith(POSTGRES_SCHEMES))


@dataclass(frozen=True)
class Stats:
    path: str
    threads: int
    finished: int
    """Threads that ended: prune may keep only their latest checkpoint."""
    checkpoints: int
    writes: int
    bytes: int
    """The file and its write-ahead log."""
    prunable: int
    """Checkpoints `prune` would delete."""

    @property
    def bytes_per_step(self) -> int:
        """One checkpoint per graph step: what each step of a run adds to the file."""
        return self.bytes // self.checkpoints if self.checkpoints else 0


@dataclass(frozen=True)
class Pruned:
    threads: int
    """Finished threads whose history was deleted."""
    left_whole: int
    """Threads that can still go on (stopped, or waiting for approval): never touched."""
    checkpoints: int
    writes: int
    freed_estimate: int
    """Bytes of checkpoint and write data deleted (or, in a dry run, that would be)."""
    bytes_before: int
    bytes_after: int


@dataclass(frozen=True)
class _Thread:
    id: str
    finished: bool
    updated: datetime
    checkpoints: int
    namespaces: int


def check_file(path: str | Path, *, expect_data: bool = False) -> None:
    """Refuse a checkpoint file SQLite cannot read, before anything opens it: opened as it is,
    every run of a batch fails alone with "file is not a database", and the file is never fixed.

    A missing or 0-byte file is a new database (SQLite writes its header on first use). Where
    the file must already hold runs (a resume), pass `expect_data`: a 0-byte file was then
    truncated, and treating it as new would silently start every run again from nothing.
    """
    problem = damage(path, expect_data=expect_data)
    if problem:
        raise PivotalError(
            f"checkpoint file {path} is damaged ({problem}): restore it from a backup, or move it "
            "aside to start afresh (the runs in it cannot then be resumed); nothing was changed"
        )


def damage(path: str | Path, *, expect_data: bool = False) -> str:
    """What is wrong with a SQLite file, in a few words; "" when it is sound, absent, or merely busy.

    Read-only: the header, then `PRAGMA quick_check` (the b-tree structure: 33 ms for 100 MB),
    so a file that fails stays exactly as it was for whoever restores it.
    """
    file = Path(path)
    if not file.exists():
        return ""
    if not file.is_file():
        return "not a file"
    if file.stat().st_size == 0:
        return "empty: 0 bytes" if expect_data else ""
    with file.open("rb") as head:
        if head.read(len(HEADER)) != HEADER:
            return "file is not a database"
    try:
        with closing(sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, timeout=LOCK_WAIT_S)) as db:
            found = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.OperationalError:
        return ""  # locked or unopenable is not damage: the real opener says what it is
    except sqlite3.DatabaseError as exc:
        return str(exc)
    problems = [line for row in found for line in row.splitlines() if line != "ok" and not line.startswith("***")]
    return f"quick_check: {problems[0][:200]}" if problems else ""


def stats(path: str | Path) -> Stats:
    with _said(path), closing(_open(path)) as db:
        threads = _threads(db)
        writes = db.execute("SELECT count(*) FROM writes").fetchone()[0] if threads else 0
    return Stats(
        path=str(path),
        threads=len(threads),
        finished=sum(t.finished for t in threads),
        checkpoints=sum(t.checkpoints for t in threads),
        writes=writes,
        bytes=file_bytes(path),
        prunable=sum(t.checkpoints - t.namespaces for t in threads if t.finished),
    )


def prune(
    path: str | Path,
    *,
    keep: Literal["latest", "history"] = "latest",
    older_than: timedelta | None = None,
    threads: Iterable[str] | None = None,
    dry_run: bool = False,
) -> Pruned:
    """Keep only the latest checkpoint of each finished thread, delete the rest and their
    writes, then VACUUM so the file really shrinks.

    `older_than`: only threads whose last step is at least that old (a recent run may still be
    inspected or forked). `threads`: only these thread ids. `keep="history"` deletes nothing and
    only compacts the file. Threads that can still go on are never touched: resume needs their
    pending writes, and their history is what a fork starts from. One transaction: a prune
    that fails or is stopped changes nothing.
    """
    if keep not in ("latest", "history"):
        raise PivotalError(f"keep must be 'latest' or 'history' (got {keep!r})")
    wanted = set(threads) if threads is not None else None
    try:
        cutoff = datetime.now(UTC) - older_than if older_than is not None else None
    except OverflowError:  # older than the calendar: nothing is
        cutoff = datetime.min.replace(tzinfo=UTC)

    def chosen(thread: _Thread) -> bool:
        return (
            keep == "latest"
            and thread.finished
            and (wanted is None or thread.id in wanted)
            and (cutoff is None or thread.updated <= cutoff)
        )

    before = file_bytes(path)
    with _said(path), closing(_open(path)) as db:
        found, pruned, deleted = _delete(db, chosen, dry_run)
        if found and not dry_run:
            with _said(path, "the old checkpoints were deleted, but "):
                _compact(db)
    return Pruned(
        threads=pruned,
        left_whole=sum(not t.finished for t in found),
        checkpoints=deleted[0],
        writes=deleted[1],
        freed_estimate=deleted[2],
        bytes_before=before,
        bytes_after=before if dry_run else file_bytes(path),
    )


def file_bytes(path: str | Path) -> int:
    """The database and its write-ahead log: both are on disk until the next checkpoint of the log."""
    return sum(p.stat().st_size for p in (Path(path), Path(f"{path}-wal")) if p.is_file())


def _open(path: str | Path) -> sqlite3.Connection:
    if not Path(path).is_file():
        raise PivotalError(f"no checkpoint file at {path}: {WHERE}")
    check_file(path)
    db = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and not {"checkpoints", "writes"} <= tables:
        db.close()
        raise PivotalError(f"{path} is a SQLite database but holds no LangGraph checkpoints; {WHERE}")
    return db


def _threads(db: sqlite3.Connection) -> list[_Thread]:
    """Every thread, and whether its latest checkpoint is an end: no node left to run, no write
    pending on it (an interrupt waiting for a person is one).
    """
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'checkpoints'").fetchone():
        return []  # a new, empty file
    counts = {
        row[0]: row[1:]
        for row in db.execute(
            "SELECT thread_id, count(*), count(DISTINCT checkpoint_ns) FROM checkpoints GROUP BY thread_id"
        )
    }
    pending = set(db.execute("SELECT DISTINCT thread_id, checkpoint_id FROM writes WHERE checkpoint_ns = ''"))
    serde, found = JsonPlusSerializer(), []
    # SQLite takes the other columns of a max() group from the row that holds the max
    for thread, latest, kind, blob in db.execute(
        "SELECT thread_id, max(checkpoint_id), type, checkpoint FROM checkpoints "
        "WHERE checkpoint_ns = '' GROUP BY thread_id"
    ):
        checkpoint = serde.loads_typed((kind, blob))
        ended = (thread, latest) not in pending and not any(
            name.startswith(TRIGGERS) for name in checkpoint.get("channel_values") or {}
        )
        found.append(_Thread(thread, ended, datetime.fromisoformat(checkpoint["ts"]), *counts[thread]))
    return found


def _delete(
    db: sqlite3.Connection, chosen: Callable[[_Thread], bool], dry_run: bool
) -> tuple[list[_Thread], int, tuple[int, int, int]]:
    """(every thread, threads pruned, (checkpoints, writes, bytes of data) deleted), all read and
    deleted in one write transaction, so no run can finish or go on in between; a dry run rolls
    the same deletes back.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        found = _threads(db)
        pruned = [thread.id for thread in found if chosen(thread)]
        deleted = [_delete_history(db, thread) for thread in pruned]
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("ROLLBACK" if dry_run or not pruned else "COMMIT")
    totals = [sum(column) for column in zip(*deleted, strict=True)] or [0, 0, 0]
    return found, len(pruned), (totals[0], totals[1], totals[2])


def _delete_history(db: sqlite3.Connection, thread: str) -> tuple[int, int, int]:
    """Every checkpoint of the thread but the latest (per namespace), and the writes left without one."""
    old = (
        "thread_id = ? AND (checkpoint_ns, checkpoint_id) NOT IN (SELECT checkpoint_ns, "
        "max(checkpoint_id) FROM checkpoints WHERE thread_id = ? GROUP BY checkpoint_ns)"
    )
    unmatched = (
        "thread_id = ? AND (checkpoint_ns, checkpoint_id) NOT IN "
        "(SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = ?)"
    )
    both = (thread, thread)
    freed = db.execute(
        f"SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints WHERE {old}", both
    ).fetchone()[0]
    checkpoints = db.execute(f"DELETE FROM checkpoints WHERE {old}", both).rowcount
    freed += db.execute(f"SELECT coalesce(sum(length(value)), 0) FROM writes WHERE {unmatched}", both).fetchone()[0]
    writes = db.execute(f"DELETE FROM writes WHERE {unmatched}", both).rowcount
    # the kept checkpoint is now the first: no parent pointing at a deleted one
    db.execute("UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ?", (thread,))
    return checkpoints, writes, freed


def _compact(db: sqlite3.Connection) -> None:
    """Deleted rows only free pages inside the file; VACUUM gives them back to the disk."""
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("VACUUM")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@contextmanager
def _said(path: str | Path, done: str = "") -> Iterator[None]:
    """A live run or batch holds the file: say so in one line instead of SQLite's "database is locked"."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise PivotalError(f"{done}checkpoint file {path} cannot be used: {exc}") from None
        raise PivotalError(
            f"{done}checkpoint file {path} is in use by another process (a run or batch writing to it): "
            "prune it again once that has finished"
        ) from None
