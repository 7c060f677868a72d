"""One owner per thread, across processes and machines: a lease in the checkpointer's own database.

A thread's checkpoints say where its run is, not who runs it. Two processes given the same thread
(two machines given the same batch, a resume typed twice) each read the same checkpoint and go on
from it, so every action after it would run twice. Before a run reads its thread, it takes the
thread's row in `pivotal_leases` (one table, in the SQLite file or the Postgres database the
checkpoints are in); it renews the row every third of `PIVOTAL_LEASE_S` while it runs and releases
it at the end. Another process finds the row held and waits (`busy="wait"`) or gives up with one
line (`busy="skip"`: `ThreadBusy`). It takes the row over only when its owner stopped renewing it
(the lease ran out: a machine lost, a process frozen) or, on the same machine, when the owner's
process is gone (a kill -9, so a resume right after it need not wait out the lease). The run taken
over goes on from the thread's checkpoint with the run id and attempt saved there, so its
idempotency keys are the ones its first owner used.

An owner that could not renew in time (its loop or its database stalled past the lease) may
already have a successor: its run is cancelled and ends with `LeaseLost`, and until a renewal has
gone through again it writes no checkpoint (the saver's writes are fenced), so a process that wakes
from a freeze cannot put its stale step on top of its successor's. The clock is the database's, so
machines need not agree on the time.
Savers other than LangGraph's async SQLite and Postgres ones (in memory, an application's own)
hold no lease: they are not shared between processes. A graph an app invokes itself (`ainvoke`,
`astream`) holds the lease for the call (`invocation_lease`), as the runners do.
"""

import asyncio
import contextvars
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Checkpointer

from pivotal.core.errors import PivotalError
from pivotal.core.logs import logger
from pivotal.core.settings import settings

Busy = Literal["wait", "skip"]
WAIT_POLL_S = 0.5
TABLE = """CREATE TABLE IF NOT EXISTS pivotal_leases (
    thread_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    done BOOLEAN NOT NULL DEFAULT FALSE
)"""
"""`expires_at` in Unix seconds of the database's clock; 0 once released. `done`: released by an owner
that had finished the run and reported its result, so a batch process need not report it again."""
SETUP_LOCK = 0x5069766F4C6561
"""Postgres advisory lock ("PivoLea"): processes creating the table at once do it one at a time."""


class ThreadBusy(PivotalError):
    """Another process owns the thread (or finished it and reported it): this one left it alone."""


class LeaseLost(PivotalError):
    """This process stopped renewing its lease long enough for another to take the thread over."""


@dataclass
class Lease:
    thread_id: str
    owner: str
    ttl: float
    db: "_Database | None"
    done: bool = False
    """Set by the holder once the run ended and its result was reported: released with the row."""
    lost: bool = False
    renewed: float = field(default_factory=time.monotonic)
    released: bool = False
    """Its holder ended (a stream abandoned mid-way may leave it in its task's context: it counts for nothing)."""
    first_write: Callable[[], Awaitable[None]] | None = None
    """Awaited once, after the run's first checkpoint is written and before any node of it runs."""

    async def keep(self, holder: asyncio.Task[Any]) -> None:
        """Renew until cancelled; when the row is gone to another owner, or renewing failed for a
        whole lease, stop the holder's run before it acts again.
        """
        while self.db is not None:
            await asyncio.sleep(self.ttl / 3)
            try:
                ours = await self.db.change(RENEW, (self.ttl, self.thread_id, self.owner)) == 1
            except Exception as exc:  # noqa: BLE001 — a blip of the database: try again until the lease runs out
                logger().info("lease_renewal_failed", thread_id=self.thread_id, error=f"{type(exc).__name__}: {exc}")
                ours = time.monotonic() - self.renewed < self.ttl
                if ours:
                    continue
            if not ours:
                self.lost = True
                holder.cancel()
                return
            self.renewed = time.monotonic()

    def current(self) -> bool:
        """Renewed within the lease: nobody else can have taken the thread since."""
        return not self.lost and time.monotonic() - self.renewed < self.ttl

    async def release(self) -> None:
        self.released = True
        if self.db is not None and not self.lost:
            try:
                await self.db.change(RELEASE, (self.done, self.thread_id, self.owner))
            except Exception as exc:  # noqa: BLE001 — unreleased, the lease simply runs out
                # not a warning: the fault that caused it (a database gone) is the command's own one line
                logger().info("lease_release_failed", thread_id=self.thread_id, error=f"{type(exc).__name__}: {exc}")


@asynccontextmanager
async def thread_lease(
    saver: Checkpointer,
    thread_id: str,
    busy: Busy = "wait",
    first_write: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Lease]:
    """Hold the thread's lease for the body: taken (or waited for, or refused with `ThreadBusy`),
    renewed in the background, released at the end. Raises `LeaseLost` when the lease went to
    another process while the body ran. `first_write` is awaited after the body's first
    checkpoint is written (a batch records there that the task started).
    """
    db = await _database(saver)
    lease = Lease(thread_id, _new_owner(), settings().lease_s, db, first_write=first_write)
    if db is not None:
        await _take(db, lease, busy)
    holder = asyncio.current_task()
    assert holder is not None
    keeper = asyncio.create_task(lease.keep(holder))
    token = _holding.set(lease)
    try:
        yield lease
    except asyncio.CancelledError:
        if lease.lost and holder.uncancel() == 0:
            raise LeaseLost(
                f"thread {thread_id!r} went to another process: this one could not renew its lease for "
                f"{lease.ttl:g} s (PIVOTAL_LEASE_S), so it stopped; the other carries the run on"
            ) from None
        raise
    finally:
        with suppress(ValueError):  # a stream abandoned mid-way is closed later, from another context
            _holding.reset(token)
        keeper.cancel()
        with suppress(asyncio.CancelledError):
            await keeper
        await lease.release()


@asynccontextmanager
async def invocation_lease(saver: Checkpointer, config: RunnableConfig | None) -> AsyncIterator[None]:
    """The thread's lease around a graph invoked directly (`ainvoke`, `astream`), as `arun` holds it:
    an app that runs one thread from two processes (two workers given the same chat, a retried
    request) runs its turns one after the other instead of both going on from the same checkpoint.
    Nothing to do without a thread, for a saver that holds no lease, or inside a run that holds it.
    """
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if saver is None or thread is None or holding(thread):
        yield
        return
    async with thread_lease(saver, str(thread)):
        yield


def holding(thread: object) -> bool:
    """Whether the run in this context holds the thread's lease (a runner's: `arun`, `resume`, a batch)."""
    held = _holding.get()
    return held is not None and held.thread_id == str(thread) and not held.released


async def _take(db: "_Database", lease: Lease, busy: Busy) -> None:
    warned = False
    while True:
        row = await db.row(READ, (lease.thread_id,))
        if row is None:
            if await db.change(INSERT, (lease.thread_id, lease.owner, lease.ttl)) == 1:
                lease.renewed = time.monotonic()
                return
            continue  # another process inserted it first: look again
        owner, left, released, done = row[0], float(row[1]), float(row[2]) == 0, bool(row[3])
        if released and done and busy == "skip" and not _same_process(owner):
            raise ThreadBusy(f"thread {lease.thread_id!r} was finished and reported by {_who(owner)}")
        if left <= 0 or _gone(owner):
            if await db.change(TAKE, (lease.owner, lease.ttl, lease.thread_id, owner)) == 1:
                lease.renewed = time.monotonic()
                if not released:
                    logger().warning("lease_taken_over", thread_id=lease.thread_id, previous=owner)
                return
            continue  # someone else took it over in between
        if busy == "skip":
            raise ThreadBusy(f"thread {lease.thread_id!r} is being run by {_who(owner)} (lease {left:.0f} s left)")
        if not warned:
            logger().warning("lease_waiting", thread_id=lease.thread_id, owner=owner, left_s=round(left, 1))
            warned = True
        await asyncio.sleep(min(WAIT_POLL_S, max(left, 0.05)))


# --- who owns it ------------------------------------------------------------------------------
def _machine() -> str:
    """Host name and boot id: a process id means something only on the machine, and boot, it ran on."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()}/{boot.read_text().strip() if boot.is_file() else ''}"


def _new_owner() -> str:
    """One owner per lease taken, so two runs of one thread in one process exclude each other too."""
    return f"{_machine()}|{os.getpid()}|{uuid.uuid4().hex[:12]}"


def _parts(owner: str) -> tuple[str, int]:
    machine, _, rest = owner.partition("|")
    pid = rest.partition("|")[0]
    return machine, int(pid) if pid.isdigit() else -1


def _same_process(owner: str) -> bool:
    return _parts(owner) == (_machine(), os.getpid())


def _gone(owner: str) -> bool:
    """The owner ran on this machine and its process no longer exists (killed, crashed)."""
    machine, pid = _parts(owner)
    if machine != _machine() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _who(owner: str) -> str:
    machine, pid = _parts(owner)
    return f"process {pid} on {machine.partition('/')[0]}"


# --- the table, in either database ------------------------------------------------------------
READ = "SELECT owner, expires_at - {now}, expires_at, done FROM pivotal_leases WHERE thread_id = ?"
INSERT = (
    "INSERT INTO pivotal_leases (thread_id, owner, expires_at, done) VALUES (?, ?, {now} + ?, FALSE) "
    "ON CONFLICT (thread_id) DO NOTHING"
)
TAKE = "UPDATE pivotal_leases SET owner = ?, expires_at = {now} + ?, done = FALSE WHERE thread_id = ? AND owner = ?"
RENEW = "UPDATE pivotal_leases SET expires_at = {now} + ? WHERE thread_id = ? AND owner = ?"
RELEASE = "UPDATE pivotal_leases SET expires_at = 0, done = ? WHERE thread_id = ? AND owner = ?"


class ConnectedSaver(Protocol):
    """What the lease table needs of LangGraph's async SQLite and Postgres savers: their connection (or
    pool) and the lock they take around it, so a lease's statements never interleave with a checkpoint's.
    """

    conn: Any
    lock: asyncio.Lock

    async def setup(self) -> None: ...


class _Database:
    """The saver's own connection (SQLite) or pool (Postgres), used between its queries."""

    def __init__(self, saver: ConnectedSaver, postgres: bool) -> None:
        self.saver, self.postgres = saver, postgres
        self.now = "extract(epoch from clock_timestamp())::double precision" if postgres else SQLITE_NOW

    def sql(self, template: str) -> str:
        text = template.format(now=self.now)
        return text.replace("?", "%s") if self.postgres else text

    async def row(self, template: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return await self._run(template, params, fetch=True)

    async def change(self, template: str, params: tuple[Any, ...]) -> int:
        return await self._run(template, params, fetch=False)

    async def _run(self, template: str, params: tuple[Any, ...], fetch: bool) -> Any:
        if self.postgres:
            return await self._postgres(self.sql(template), params, fetch)
        async with self.saver.lock:
            cursor = await self.saver.conn.execute(self.sql(template), params)
            found = await cursor.fetchone() if fetch else cursor.rowcount
            await self.saver.conn.commit()
        return tuple(found) if fetch and found is not None else found

    async def _postgres(self, sql: str, params: tuple[Any, ...], fetch: bool) -> Any:
        from psycopg import AsyncConnection
        from psycopg.rows import tuple_row
        from psycopg_pool import AsyncConnectionPool

        async def on(connection: AsyncConnection[Any]) -> Any:
            async with connection.cursor(row_factory=tuple_row) as cursor:
                await cursor.execute(sql, params)
                found = await cursor.fetchone() if fetch else cursor.rowcount
            if not connection.autocommit:  # an application's connection: each statement stands alone
                await connection.commit()
            return found

        if isinstance(self.saver.conn, AsyncConnectionPool):
            async with self.saver.conn.connection() as connection:
                return await on(connection)
        async with self.saver.lock:
            return await on(self.saver.conn)


SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_holding: contextvars.ContextVar[Lease | None] = contextvars.ContextVar("pivotal_lease", default=None)
"""The lease of the run in this task: LangGraph's writes, made from the run's own tasks, see it."""
READY = "_pivotal_leases"
"""The saver's attribute holding its `_Database` once the table is there: set up once per saver."""


async def _database(saver: Checkpointer) -> _Database | None:
    """The lease table beside the saver's checkpoints, created on first use; None for a saver of
    another kind (in memory, or an application's own), which no other process shares.
    """
    kind = type(saver).__name__
    if not isinstance(saver, BaseCheckpointSaver) or kind not in ("AsyncSqliteSaver", "AsyncPostgresSaver"):
        return None
    if (known := getattr(saver, READY, None)) is not None:
        return known
    connected = cast(ConnectedSaver, saver)
    db = _Database(connected, postgres=kind == "AsyncPostgresSaver")
    _fence(saver)
    if db.postgres:
        await _create_postgres(db)
    else:
        await connected.setup()  # connects the saver's connection
        async with connected.lock:
            await connected.conn.execute(TABLE)
            await connected.conn.commit()
    setattr(saver, READY, db)
    return db


def _fence(saver: BaseCheckpointSaver) -> None:
    """Every checkpoint write of a leased run first asks whether its lease is still current."""
    for name in ("aput", "aput_writes"):
        write = getattr(saver, name)

        async def fenced(*args: Any, _write: Any = write, _name: str = name, **kwargs: Any) -> Any:
            lease = _holding.get()
            if lease is not None and not lease.released and not lease.current():
                raise LeaseLost(
                    f"thread {lease.thread_id!r}: this process went {lease.ttl:g} s (PIVOTAL_LEASE_S) without "
                    "renewing its lease, so another may have taken it over; its checkpoint was not written"
                )
            written = await _write(*args, **kwargs)
            if lease is not None and _name == "aput" and (told := lease.first_write) is not None:
                lease.first_write = None
                await told()
            return written

        setattr(saver, name, fenced)


async def _create_postgres(db: _Database, table: str = TABLE) -> None:
    """`CREATE TABLE IF NOT EXISTS` races with itself across processes; one at a time, it cannot
    (graphs/busy.py creates its table beside this one the same way).
    """
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    async def on(connection: AsyncConnection[Any]) -> None:
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
            await connection.execute(table)

    if isinstance(db.saver.conn, AsyncConnectionPool):
        async with db.saver.conn.connection() as connection:
            await on(connection)
        return
    async with db.saver.lock:
        await on(db.saver.conn)
