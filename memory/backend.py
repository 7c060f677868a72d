"""Which storage a run's lessons use: Chroma, or the run's LangGraph store (Context.lessons_backend)."""

import threading
from typing import Any

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.memory.registry import open_store, opened_store
from pivotal.memory.store import ExperienceStore

_in_stores: dict[tuple[int, tuple[str, ...]], tuple[Any, ExperienceStore]] = {}
"""One policy object per (LangGraph store, namespace), keeping the store alive beside it."""
_lock = threading.Lock()


def uses_graph_store(context: Context, store: Any) -> bool:
    """The "auto" backend takes the run's store when it has one; "langgraph" insists on one."""
    if context.lessons_backend == "langgraph" and store is None:
        raise PivotalError(
            'lessons_backend is "langgraph" but the run has no LangGraph store: compile with '
            "build_graph(store=...) / create_pivotal_agent(..., store=...), or set lessons_backend to auto or chroma"
        )
    return context.lessons_backend != "chroma" and store is not None


def lesson_store(context: Context, store: Any = None) -> ExperienceStore:
    """The run's lessons, opened on first use (Chroma may read the disk: call it from a thread)."""
    if not uses_graph_store(context, store):
        return open_store(context.store_path, context.store_url)
    return opened_lesson_store(context, store) or _open_in(store, tuple(context.lessons_namespace))


def opened_lesson_store(context: Context, store: Any = None) -> ExperienceStore | None:
    """The run's lessons when already open, without touching the disk."""
    if not uses_graph_store(context, store):
        return opened_store(context.store_path, context.store_url)
    held = _in_stores.get((id(store), tuple(context.lessons_namespace)))
    return held[1] if held is not None and held[0] is store else None


def _open_in(store: Any, namespace: tuple[str, ...]) -> ExperienceStore:
    """Not private: the app's nodes, other runs and other processes (a Postgres store, the
    server's) write the same namespace, so nothing read is kept and counts are written at once.
    """
    from pivotal.memory.langgraph_store import StoreClient

    with _lock:
        held = _in_stores.get((id(store), namespace))
        if held is None or held[0] is not store:
            location = f"langgraph store {type(store).__name__}:{'/'.join(namespace)}"
            held = (store, ExperienceStore(location, StoreClient(store, namespace), private=False))
            _in_stores[(id(store), namespace)] = held
        return held[1]
