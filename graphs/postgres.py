"""Postgres checkpoints: processes on one machine or many share one database, so a run paused or
killed in one of them goes on in another. SQLite stays the embedded default; this needs the
optional driver (`pip install 'pivotal[postgres]'`).

Connections carry what LangGraph's saver expects: autocommit (each checkpoint commits on its own,
so a killed process leaves no half-written one), no server-side prepared statements (a pooler such
as PgBouncer would hand them to the wrong session), and rows as dicts (the saver reads columns by name).
"""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from pivotal.core.errors import PivotalError
from pivotal.core.secrets import redact

POOL_SIZE = 10
"""Connections per process. A task holds one only while its checkpoint is read or written (about a
millisecond), so a batch of 64 in flight rarely waits, and 10 workers stay within Postgres's default
`max_connections` (100)."""
CONNECT_TIMEOUT_S = 10
"""An unreachable server is reported after this long, not after libpq's default of never."""
SETUP_LOCK = 0x5069766F74616C
"""Advisory lock key ("Pivotal"): workers starting together create the tables one at a time."""
SETUP_WAIT_S = 120
INSTALL = "Postgres checkpoints need the driver: pip install 'pivotal[postgres]'"


@asynccontextmanager
async def open_postgres(url: str) -> AsyncIterator[BaseCheckpointSaver]:
    """LangGraph's `AsyncPostgresSaver` on a connection pool, its tables created or migrated first."""
    saver_class, pool_class, connection_class = _driver()
    await _setup(url, saver_class, connection_class)
    pool = pool_class(url, min_size=1, max_size=POOL_SIZE, kwargs=_connection_options(), open=False)
    try:
        await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 — psycopg's and the pool's own errors alike: one line
        await pool.close()
        raise PivotalError(_unreachable(url, exc)) from None
    saver = saver_class(pool)
    # The saver takes one lock around every query, which a single connection needs; on a pool each
    # query has its own connection, so up to POOL_SIZE may run at once (a batch at concurrency 64
    # ran 2x faster: benchmarks/bench_scale.py).
    saver.lock = asyncio.Semaphore(POOL_SIZE)
    try:
        yield saver
    finally:
        await pool.close()


def _driver() -> tuple[Any, Any, Any]:
    """The saver, the pool and the connection classes, imported only when a URL asks for them."""
    try:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg_pool import AsyncConnectionPool
    except ImportError:
        raise PivotalError(INSTALL) from None
    return AsyncPostgresSaver, AsyncConnectionPool, AsyncConnection


def _connection_options() -> dict[str, Any]:
    from psycopg.rows import dict_row

    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


async def _setup(url: str, saver_class: Any, connection_class: Any) -> None:
    """Reach the server and create (or migrate) the checkpoint tables, once per open: the first
    connection is where a wrong host, port, database or password shows, with psycopg's own words.
    """
    from psycopg import Error

    try:
        async with await connection_class.connect(
            url, connect_timeout=CONNECT_TIMEOUT_S, **_connection_options()
        ) as connection:
            await _take_setup_lock(connection)  # released on close
            await saver_class(connection).setup()
    except Error as exc:
        raise PivotalError(_unreachable(url, exc)) from None


async def _take_setup_lock(connection: Any) -> None:
    """Polled, never waited on: a session blocked in `pg_advisory_lock` holds a transaction open, and
    the setup's `CREATE INDEX CONCURRENTLY` in the lock holder waits for every open transaction to
    end, so two processes setting up a new database at once waited on each other for ever.
    """
    deadline = time.monotonic() + SETUP_WAIT_S
    while True:
        row = await (await connection.execute("SELECT pg_try_advisory_lock(%s) AS got", (SETUP_LOCK,))).fetchone()
        if row["got"]:
            return
        if time.monotonic() > deadline:
            raise PivotalError(
                f"another process has been setting up the checkpoint tables for over {SETUP_WAIT_S} s; "
                "check it (pg_stat_activity) and try again"
            )
        await asyncio.sleep(0.1)


def _unreachable(url: str, exc: BaseException) -> str:
    """One line naming the server and psycopg's reason, with any password in either redacted."""
    words = " ".join(str(exc).split())[:300] or type(exc).__name__
    return (
        f"cannot use the Postgres checkpoints at {redact(url)}: {redact(words)}; check the URL "
        "(postgresql://USER@HOST:PORT/DATABASE) and that the server is running"
    )
