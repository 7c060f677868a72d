"""Where runs keep their checkpoints: SQLite on disk, Postgres, or memory, opened from one path or URL.

Every part that reads or writes threads outside a graph an application built (the run API, batches,
Ray workers, `pivotal resume`, `pivotal fork`, `pivotal critic`) opens its saver here, so all of them
agree on the file, its durability and redaction.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from pivotal.core.checkpoints import check_file, is_postgres
from pivotal.core.errors import PivotalError, make_folder
from pivotal.core.secrets import redacting
from pivotal.core.settings import settings
from pivotal.graphs.builder import build_graph
from pivotal.graphs.postgres import open_postgres


@asynccontextmanager
async def open_checkpointer(path: str | os.PathLike[str] | None = None) -> AsyncIterator[BaseCheckpointSaver]:
    """SQLite on disk, so an interrupted run can resume; a `postgresql://` URL, so processes on
    several machines share the runs; `":memory:"` keeps nothing.
    """
    path = os.fspath(path) if path else settings().checkpoint_path
    if path == ":memory:":
        yield redacting(InMemorySaver())
        return
    if is_postgres(path):
        async with open_postgres(path) as saver:
            yield redacting(saver)
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    check_file(path)  # a damaged file is refused in one line, never opened over and replaced
    make_folder(
        Path(path).parent,
        f"cannot create the checkpoint folder for {path}",
        "set PIVOTAL_CHECKPOINT_PATH to a writable file",
    )
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        # WAL (LangGraph's choice) with synchronous=NORMAL: a commit is in the OS's hands before the
        # next step starts, so a killed process loses nothing; only a power loss or OS crash can drop
        # the last steps' checkpoints, which idempotency keys then cover. FULL fsyncs every commit.
        await saver.conn.execute(f"PRAGMA synchronous={settings().checkpoint_sync.upper()}")
        yield redacting(saver)


@asynccontextmanager
async def graph_over(
    checkpointer: BaseCheckpointSaver | None, checkpoint_path: str | os.PathLike[str] | None, graph: Any = None
) -> AsyncIterator[Any]:
    """An application's own graph as it is; else the graph over the given checkpointer, or over one
    opened (and closed) for this call.
    """
    if graph is not None:
        await _runs_async(graph.checkpointer)
        yield graph
        return
    if checkpointer is not None:
        yield build_graph(checkpointer=checkpointer)
        return
    async with open_checkpointer(checkpoint_path) as saver:
        yield build_graph(checkpointer=saver)


async def _runs_async(saver: object) -> None:
    """The run API drives a graph with `astream`: an application's saver without async methods
    (LangGraph's `SqliteSaver`) would fail at the graph's first checkpoint, deep inside LangGraph.
    """
    if not isinstance(saver, BaseCheckpointSaver):
        return
    try:
        await saver.aget_tuple({"configurable": {"thread_id": "", "checkpoint_ns": ""}})
    except NotImplementedError:
        raise PivotalError(
            f"the graph's checkpointer ({type(saver).__name__}) has no async methods, and run/arun/run_batch/resume "
            f"run the graph asynchronously: build it with the async twin (AsyncSqliteSaver for SqliteSaver, "
            f"AsyncPostgresSaver for PostgresSaver), or call the graph's own invoke/stream"
        ) from None
