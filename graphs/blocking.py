"""Sync calls (`invoke`, `stream`, `batch`) on a graph whose nodes are async.

Each node has a sync twin that runs the async node on one private event loop, in a daemon
thread, and waits for it. The caller's own loop (a notebook's, a server's) is never re-entered,
and LangGraph's sync loop keeps the caller's sync checkpointer (SqliteSaver). One loop for the
process, never one per call: the models built per event loop (core/models/roles.py) and the
HTTP clients they hold stay alive between nodes. The node runs in the caller's context
variables, so `interrupt()`, `get_runtime()` and the caller's callbacks see its config.
"""

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_starting = threading.Lock()


def run_blocking(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`await function(*args)` on the private loop, from a thread that may not wait on a loop."""
    # run_coroutine_threadsafe schedules through call_soon_threadsafe, which copies the calling
    # thread's context variables into the task: the node's config travels with it
    future = asyncio.run_coroutine_threadsafe(_awaited(function, *args), _private_loop())
    try:
        return future.result()
    except BaseException:
        future.cancel()  # the caller gave up (KeyboardInterrupt): stop the node too
        raise


async def _awaited(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await function(*args)


def _private_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _starting:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="pivotal-sync-nodes", daemon=True).start()
            _loop = loop
    return _loop
