"""The process's open lesson stores, one per store its settings name (a folder, a server URL, a
LangGraph store's namespace): opened on first use through the backend table
(memory/storage/__init__.py), found again without touching the disk, closed (their folder locks
released) and flushed at exit. Apart from the store so what is open, and what closes it, is read
and tested alone (tests/test_store_parts.py).

Which backend a run uses is `Context.lessons_backend`: a row of the table, or "auto", the run's
LangGraph store when it has one, else Chroma.
"""

import atexit
import sys
import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.memory.policy.store import ExperienceStore
from pivotal.memory.storage import backend
from pivotal.memory.storage.base import one_line

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

AUTO = ("langgraph", "chroma")
"""What "auto" picks: the first backend the run can use (one that keeps lessons in the run's
LangGraph store needs the run to have one)."""

_stores: dict[tuple[str, Hashable], ExperienceStore] = {}
"""Each open store by its backend and identity (two spellings of one folder are one store)."""
_opened: dict[tuple[str, Hashable], ExperienceStore] = {}
"""Stores by the backend and settings they were opened with, for `opened_lesson_store`."""
_stores_lock = threading.Lock()


def backend_name(context: Context, graph_store: "BaseStore | None" = None) -> str:
    """The backend the run's lessons use: `lessons_backend`, with "auto" resolved."""
    if context.lessons_backend != "auto":
        backend(context.lessons_backend)  # a name not in the table is refused in one line
        return context.lessons_backend
    return next(name for name in AUTO if graph_store is not None or not backend(name).IN_GRAPH_STORE)


def uses_graph_store(context: Context, store: "BaseStore | None") -> bool:
    """Whether the run's lessons live in its LangGraph store (the app's to open); a backend that
    needs one refuses a run without one.
    """
    name = backend_name(context, store)
    backend(name).settings(context, store)
    return backend(name).IN_GRAPH_STORE


def lesson_store(context: Context, store: "BaseStore | None" = None) -> ExperienceStore:
    """The run's lessons, opened on first use (a backend may read the disk: call it from a thread)."""
    name = backend_name(context, store)
    return _open(name, backend(name).settings(context, store))


def opened_lesson_store(context: Context, store: "BaseStore | None" = None) -> ExperienceStore | None:
    """The run's lessons when already open, without touching the disk."""
    name = backend_name(context, store)
    return _opened.get((name, backend(name).settings(context, store)))


def open_store(path: str, url: str = "") -> ExperienceStore:
    """The process's one Chroma store for this folder (or server URL), opened on first use."""
    return _open("chroma", (path, url))


def opened_store(path: str, url: str = "") -> ExperienceStore | None:
    """The Chroma store already open for these settings, without touching the disk: nodes call
    this first on every step and go to a thread only when it is not open yet.
    """
    return _opened.get(("chroma", (path, url)))


def _open(name: str, settings: Any) -> ExperienceStore:
    if (store := _opened.get((name, settings))) is not None:
        return store
    chosen = backend(name)
    identity = (name, chosen.identity(settings))
    with _stores_lock:
        if identity not in _stores:
            _stores[identity] = ExperienceStore(chosen.connect(identity[1], settings))
        _opened[(name, settings)] = _stores[identity]
        return _stores[identity]


def check_memory(context: Context, graph_store: "BaseStore | None" = None, *, open_now: bool = True) -> None:
    """What a run with memory needs, before its first action: its store opens (folder writable,
    server reachable) and the embedding model is installed. The first embedding comes after the
    run's side effects, too late to find a missing wheel. A store in the app's LangGraph store is
    the app's to open: without one at hand (`open_now` False, or none given) it opens at first use.
    """
    name = backend_name(context, graph_store)
    if open_now and (graph_store is not None or not backend(name).IN_GRAPH_STORE):
        lesson_store(context, graph_store)
    try:
        from pivotal.memory.storage.embeddings import model_path, tokenizer_path
        from pivotal.memory.storage.quantize import cache_folder

        model_path(), tokenizer_path()
        cache_folder()  # where the store's first embedding makes its int8 model
    except (ImportError, RuntimeError) as exc:
        raise PivotalError(f"memory is on but its embedding model cannot load: {exc} (or turn memory off)") from None


def close_store(path: str = "", url: str = "") -> None:
    """Release one Chroma store (its folder lock too), e.g. before its folder is deleted."""
    with _stores_lock:
        store = _stores.pop(("chroma", backend("chroma").identity((path, url))), None)
        _forget_opened(store)
    if store is not None:
        store.close()


def close_stores() -> None:
    """Release every store this process opened (their folder locks too)."""
    with _stores_lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
        _opened.clear()


@atexit.register
def _flush_stores() -> None:
    """Deferred counts reach the disk when the process ends normally, closed or not."""
    for store in list(_stores.values()):
        journal = store.shelf.journal
        if journal is not None and not journal.path.parent.exists():
            continue  # its folder was deleted while open (a temporary store): there is nowhere to write
        try:
            store.flush()
        except Exception as exc:  # noqa: BLE001 — at exit a traceback helps no one; say what was lost
            if not store.faulted:
                print(
                    f"pivotal: lesson counts of {store.location} not written at exit: {one_line(exc)}", file=sys.stderr
                )


def _forget_opened(store: ExperienceStore | None) -> None:
    for settings in [s for s, opened in _opened.items() if opened is store]:
        del _opened[settings]
