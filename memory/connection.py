"""Opening Chroma: a folder on disk (locked to this process) or a `chroma run` server."""

import fcntl
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pivotal.core.checkpoints import damage
from pivotal.core.errors import PivotalError, make_folder

LOCK_FILE = ".pivotal.lock"
DATABASE = "chroma.sqlite3"
SERVER_HINT = (
    "start one with `chroma run --path DIR --host 127.0.0.1 --port PORT`, or unset PIVOTAL_STORE_URL / --store-url"
)


def usable_directory(path: str) -> str:
    directory = Path(path).expanduser().resolve()
    make_folder(
        directory,
        f"cannot create the lesson store directory {directory}",
        "choose another --store / PIVOTAL_STORE_PATH",
    )
    if not directory.is_dir():
        raise PivotalError(f"lesson store path {directory} is not a directory; choose another --store")
    return str(directory)


def connect_folder(directory: str) -> tuple[Any, Callable[[], None]]:
    """A PersistentClient, after taking the folder's lock so a second process fails fast and clearly."""
    release_lock = _lock_folder(directory)
    problem = _damage(directory)
    if problem:
        release_lock()
        raise PivotalError(
            f"lesson store {directory} is damaged ({problem}): restore it from a backup (`pivotal lessons "
            "export` makes one) or point PIVOTAL_STORE_PATH elsewhere; nothing was changed"
        )
    import chromadb

    try:
        client = chromadb.PersistentClient(path=directory)
        client.list_collections()  # a corrupt database fails here, not in the middle of a run
    except Exception as exc:  # Chroma raises many types; the user needs one line
        release_lock()
        raise PivotalError(
            f"cannot open the lesson store at {directory}: {one_line(exc)}; the folder may "
            "be damaged or not a Chroma store — nothing was changed; move it aside or "
            "choose another --store"
        ) from exc

    def release() -> None:
        client.close()  # type: ignore[attr-defined]  # chromadb types it as ClientAPI, which omits close(); its Client has it
        release_lock()

    return client, release


def _damage(directory: str) -> str:
    """Checked before Chroma opens the folder: it takes a 0-byte or missing database for a new
    store and starts an empty one over the lessons, and only fails on a damaged page mid-run.
    """
    database = Path(directory) / DATABASE
    if not database.exists():
        indexes = [p for p in Path(directory).iterdir() if p.is_dir() and _uuid(p.name)]
        return f"{DATABASE} is missing beside its index folders" if indexes else ""
    return damage(database, expect_data=True)


def _uuid(name: str) -> bool:
    """Chroma names a collection's index folder by its segment's UUID."""
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True


def connect_server(url: str) -> tuple[Any, Callable[[], None]]:
    """An HttpClient to a Chroma server, checked with a heartbeat before any run starts."""
    import chromadb

    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise PivotalError(f"store URL {url!r} is not an http(s) URL like http://127.0.0.1:8000")
    port = parsed.port or (443 if parsed.scheme == "https" else 8000)
    try:
        client = chromadb.HttpClient(host=parsed.hostname, port=port, ssl=parsed.scheme == "https")
        client.heartbeat()
    except Exception as exc:  # noqa: BLE001 — the client raises many types; the user needs one line
        raise PivotalError(
            f"the lesson store server at {url} is not reachable ({one_line(exc)}); {SERVER_HINT}"
        ) from None
    return client, lambda: None


def _lock_folder(directory: str) -> Callable[[], None]:
    path = os.path.join(directory, LOCK_FILE)
    try:
        handle = open(path, "a+")
    except OSError as exc:
        raise PivotalError(
            f"lesson store directory {directory} is not writable ({exc.strerror}); "
            "fix its permissions or choose another --store"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise PivotalError(
            f"lesson store {directory} is in use by {holder}; one process opens a store "
            "folder at a time — wait for it, or share the store through a Chroma server "
            "(PIVOTAL_STORE_URL)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}")
    handle.flush()

    def release() -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()

    return release


def one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]
