"""The Chroma backend: lessons in a folder on disk (locked to this process) or a `chroma run`
server, one collection per task family, and the ledger's records in a collection per family beside
it on a server (a folder keeps them in a file of its own: memory/storage/ledger_file.py).
Chroma's `where` syntax is spoken here only (`where_of`).

Why a collection per family: recall always filters by family, and a Chroma metadata filter
costs ~35 ms at 10k lessons while an unfiltered nearest-neighbour query costs ~3 ms
(benchmarks/bench_store.py).

Read in this order: opening Chroma (a folder or a server), the collections (named, opened,
checked, and the embedding compute each was made with; tested alone in tests/test_collections.py),
the lessons on them (`ChromaLessons`), the records (`ChromaRecords`), and the names the backend
table reads (memory/storage/__init__.py).
"""

import fcntl
import hashlib
import os
import re
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import numpy as np
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from pivotal.core.checkpoints import damage
from pivotal.core.errors import PivotalError, make_folder, store_server_gone
from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record
from pivotal.memory.storage.base import Near, Only, RecordStorage, Storage, Vector, lesson_from, one_line
from pivotal.memory.storage.ledger_file import LedgerFile
from pivotal.memory.storage.vector_file import VectorFile

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection
    from langgraph.store.base import BaseStore

    from pivotal.core.context import Context
    from pivotal.memory.storage.embeddings import Compute  # onnxruntime loads only once a store embeds


def _behind(exc: BaseException) -> bool:
    """A `chroma run` server with other processes writing can answer a read whose ids its vector
    index has not caught up with yet ("Error finding id"): the same read a moment later succeeds.
    One of four processes sharing a server failed a run on it in CI.
    """
    return type(exc).__name__ == "InternalError" and "Error finding id" in str(exc)


read_again = retry(
    retry=retry_if_exception(_behind), stop=stop_after_attempt(4), wait=wait_exponential(0.05, max=0.5), reraise=True
)
"""For reads only (a read changes nothing, so asking again is safe); any other error is raised at once."""

# ---- opening Chroma ------------------------------------------------------------------------
LOCK_FILE = ".pivotal.lock"
LEDGER = "pivotal-ledger.sqlite3"
"""The evidence ledger's file in a store's folder (memory/storage/ledger_file.py)."""
JOURNAL = "pivotal-evidence.journal"
"""The evidence journal's file in a store's folder (memory/policy/journal.py)."""
VECTORS = "pivotal-vectors.bin"
"""The vectors of texts a store's process embedded, for the next one (memory/storage/vector_file.py)."""
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


# ---- the collections -------------------------------------------------------------------------
PREFIX = "pivotal-lessons-"
SYNC_THRESHOLD = 100
"""Log records a collection's vector index takes in before Chroma writes the index to disk
(Chroma's default is 1,000). Until then each write reads back every record the index has not yet
written, each with a lesson's whole metadata, so a write cost more the longer since the last one:
a metadata update of 20 lessons took ~11 ms of CPU after a write of the index and ~33 ms by the
1,000th record; 28 ms on average at 1,000 lessons and 32 ms at 10,000, against 13 and 14 ms at 100
(benchmarks/bench_chroma_costs.py, results/chroma_costs.json). Most of it runs in Chroma's own
threads, where a profile of the calling thread does not see it. At 20 the index is written five
times as often and a write costs a little more again."""


def sync_often(collection: "Collection") -> "Collection":
    """`collection`, its index written every SYNC_THRESHOLD records: a collection made before (or by
    Chroma's default) is changed once when opened. Chroma reads the setting when a process first
    uses the collection, so this comes before any read or write of it. A lower setting someone chose
    stays; a collection that refuses the change is used as it is (the setting is only a cost).
    """
    hnsw = (collection.configuration_json or {}).get("hnsw") or {}
    if hnsw.get("sync_threshold", SYNC_THRESHOLD) > SYNC_THRESHOLD:
        try:
            collection.modify(configuration={"hnsw": {"sync_threshold": SYNC_THRESHOLD}})
        except Exception as exc:  # noqa: BLE001 — a cost, not a fault: the collection works either way
            if store_server_gone(exc):
                raise  # the server's fault: a batch stops on it (see core/errors.py)
    return collection


class Collections:
    def __init__(self, client: "ClientAPI", location: str, vectors: VectorFile | None = None) -> None:
        self.client = client
        self.location = location
        self.vectors = vectors
        """A private store's file of the vectors it embedded (memory/storage/vector_file.py); None: none."""
        self._opened: dict[str, Any] = {}
        self._computes: dict[str, Compute] = {}
        """Each opened family's embedding compute (memory/storage/embeddings.py `Compute`), from its
        collection's config."""
        self._filled: set[str] = set()

    def collection(self, family: str, *, create: bool) -> Any:
        """The family's collection (made when `create`), or None when it has none yet."""
        if family in self._opened:
            return self._opened[family]
        from pivotal.memory.storage.embeddings import compute_of, default_embedding

        name = collection_name(family)
        try:
            if create:
                collection = self.client.get_or_create_collection(
                    name,
                    # Chroma types this over Embeddable (texts or images); ours embeds texts, all it is given
                    embedding_function=default_embedding(),  # type: ignore[arg-type]
                    metadata={"family": family},
                    configuration={"hnsw": {"space": "cosine", "sync_threshold": SYNC_THRESHOLD}},
                )
            elif name in {c.name for c in self.client.list_collections()}:
                collection = self.client.get_collection(name)  # built from its own config (its compute)
            else:
                return None
        except Exception as exc:  # Chroma raises many types; the user needs one line
            if store_server_gone(exc):
                raise  # the server's fault, not the collection's: a batch stops on it (see core/errors.py)
            raise self._unusable(family, one_line(exc)) from exc
        self._check_compatible(collection, family)
        sync_often(collection)
        self._computes[family] = compute_of(collection.configuration_json["embedding_function"].get("config") or {})
        self._opened[family] = collection
        return collection

    def opened(self, family: str) -> Any:
        """The family's collection if this process opened it already (no disk), else None."""
        return self._opened.get(family)

    def of_family(self, family: str | None) -> list[Any]:
        """The family's collection, or every family's (None), as far as they exist."""
        if family is not None:
            collection = self.collection(family, create=False)
            return [collection] if collection is not None else []
        families = [
            str(c.metadata["family"])
            for c in self.client.list_collections()
            if c.name.startswith(PREFIX) and c.metadata and c.metadata.get("family")
        ]
        return [self.collection(f, create=False) for f in sorted(families)]

    def holds_lessons(self, collection: "Collection") -> bool:
        """Lessons are retired, never deleted: a collection that held one always will."""
        if collection.name not in self._filled and collection.count() > 0:
            self._filled.add(collection.name)
        return collection.name in self._filled

    def filled(self, collection: "Collection") -> bool:
        """Known to hold lessons, without asking Chroma."""
        return collection.name in self._filled

    def compute(self, family: str) -> "Compute":
        """What the family's collection was made with; a family not stored yet gets the new one."""
        from pivotal.memory.storage.embeddings import NEW_COMPUTE  # onnxruntime loads only once a store embeds

        return self._computes.get(family, NEW_COMPUTE)

    def embedder(self, family: str) -> Any:
        from pivotal.memory.storage.embeddings import embedding

        return embedding(self.compute(family))

    def vector(self, family: str, text: str) -> list[float]:
        """`text`'s vector as the family's collection compares it (cached: see `query_vector`), kept
        in a private store's folder for the next process.
        """
        from pivotal.memory.storage.embeddings import model_tag, query_vector

        if self.vectors is not None:
            return self.vectors.vector(text, self.compute(family), query_vector, model_tag())
        return query_vector(text, self.compute(family))

    def _check_compatible(self, collection: "Collection", family: str) -> None:
        """A collection made with another embedding model or distance would give wrong neighbours."""
        from pivotal.memory.storage.embeddings import MiniLMEmbedding

        config = collection.configuration_json or {}
        embedder = (config.get("embedding_function") or {}).get("name")
        space = (config.get("hnsw") or {}).get("space")
        if embedder != MiniLMEmbedding.name() or space != "cosine":
            raise self._unusable(
                family,
                f"its embedding function is {embedder!r} with {space!r} distance, "
                f"Pivotal needs {MiniLMEmbedding.name()!r} (384 dimensions, cosine)",
            )

    def _unusable(self, family: str, why: str) -> PivotalError:
        return PivotalError(
            f"lesson store {self.location}: the collection for family {family!r} cannot be "
            f"used ({why}); nothing was changed — point --store at another folder, or move "
            "the old one aside"
        )


def collection_name(family: str) -> str:
    """Chroma allows 3–512 chars of [a-zA-Z0-9._-]; the hash keeps distinct families apart."""
    slug = re.sub(r"[^a-zA-Z0-9_-]+", "-", family).strip("-_")[:48] or "default"
    return f"{PREFIX}{slug}-{hashlib.sha256(family.encode()).hexdigest()[:8]}"


def where_of(only: Only | None) -> dict[str, Any] | None:
    """Chroma's `where` for `only`: one term alone as it is, several under `$and`; a field that may
    be one of several values under `$in`.
    """
    if only is None:
        return None
    terms: list[dict[str, Any]] = [{name: value} for name, value in only.equal().items()]
    for name, values in (("owner", only.owners), ("scope", only.scopes)):
        if values:
            terms.append({name: values[0]} if len(values) == 1 else {name: {"$in": list(values)}})
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else {"$and": terms}


# ---- the lessons ------------------------------------------------------------------------------
class ChromaLessons(Collections):
    """`LessonStorage` (memory/storage/base.py) on a store's collections: a lesson's id is the
    Chroma id, its document what is embedded, its metadata its fields.
    """

    def families(self) -> list[str]:
        return [c.metadata["family"] for c in self.of_family(None)]

    def has(self, family: str, *, create: bool = False) -> bool:
        return self.collection(family, create=create) is not None

    def holds(self, family: str) -> bool:
        collection = self.collection(family, create=False)
        return collection is not None and self.holds_lessons(collection)

    def known_to_hold(self, family: str) -> bool:
        collection = self.opened(family)
        return collection is not None and self.filled(collection)

    def put(self, family: str, lessons: list[Lesson], vectors: list[list[float]] | None) -> None:
        collection = self.collection(family, create=True)
        documents = [lesson.document for lesson in lessons]
        collection.upsert(
            ids=[lesson.id for lesson in lessons],
            documents=documents,
            metadatas=[lesson.metadata() for lesson in lessons],
            embeddings=vectors if vectors is not None else self.embedder(family)(documents),
        )

    def update(self, family: str, lessons: list[Lesson], stored: Mapping[str, Lesson] | None = None) -> None:
        """Without documents: an upsert with them re-embeds every one (most of a run's store time went there).

        With `stored`, only the fields that changed: Chroma merges a row's fields, and an update
        costs ~3 ms a call, ~0.2 ms a lesson and ~0.02 ms a field more (31 fields a lesson; a run's
        scores change 5-7 of them: 30 lessons 21 -> 13 ms). A lesson with none changed is left out.
        """
        known = stored or {}
        changed = {lesson.id: fields for lesson in lessons if (fields := lesson.metadata(since=known.get(lesson.id)))}
        if changed:
            self.collection(family, create=True).update(ids=list(changed), metadatas=list(changed.values()))

    def read(self, family: str, ids: list[str] | None) -> list[Lesson]:
        collection = self.collection(family, create=False)
        if collection is None:
            return []
        result = read_again(collection.get)(ids=ids, include=["metadatas"])
        return [lesson_from(self.location, i, m) for i, m in zip(result["ids"], result["metadatas"] or [], strict=True)]

    def nearest(
        self, family: str, text: str, vector: Vector, n: int, only: Only | None, *, lessons: bool
    ) -> list[Near]:
        """Chroma is given the vector only (it was embedded as the collection compares)."""
        collection = self.collection(family, create=False)
        if collection is None:
            return []
        include = ["metadatas", "distances"] if lessons else ["distances"]
        result = read_again(collection.query)(
            query_embeddings=[vector], n_results=n, where=where_of(only), include=include
        )
        ids, distances = result["ids"][0], result["distances"][0]
        found = result["metadatas"][0] if lessons else [None] * len(ids)
        return [
            Near(i, 1.0 - float(d), lesson_from(self.location, i, m) if lessons else None)
            for i, d, m in zip(ids, distances, found, strict=True)
        ]

    def with_vectors(self, family: str, limit: int) -> tuple[list[str], np.ndarray] | None:
        """`HeldVectors` (memory/storage/base.py): at most `limit` + 1 rows are read to know. The
        lessons' fields are not read (~5x the vectors' cost in Chroma).
        """
        collection = self.collection(family, create=False)
        if collection is None:
            return None
        result = read_again(collection.get)(limit=limit + 1, include=["embeddings"])
        ids = list(result["ids"])
        if len(ids) > limit:
            return None
        vectors = np.asarray(result["embeddings"], dtype=np.float32) if ids else np.empty((0, 0), np.float32)
        return ids, vectors

    def delete(self, family: str, ids: list[str]) -> None:
        collection = self.collection(family, create=False)
        if collection is not None and ids:
            collection.delete(ids=ids)

    def count(self, family: str, only: Only | None = None) -> int:
        collection = self.collection(family, create=False)
        if collection is None:
            return 0
        if only is None:
            return collection.count()
        return len(read_again(collection.get)(where=where_of(only), include=[])["ids"])

    def family_record(self, family: str) -> dict[str, Any] | None:
        collection = self.collection(family, create=False)
        return None if collection is None else dict(collection.metadata or {})


# ---- the records ------------------------------------------------------------------------------
LEDGER_PREFIX = "pivotal-ledger-"


class ChromaRecords:
    """`RecordStorage` in a Chroma collection per family beside the lessons' one (never queried by
    vector: each record gets the same one-number embedding Chroma requires).
    """

    def __init__(self, client: "ClientAPI") -> None:
        self.client = client
        self._collections: dict[str, Any] = {}

    def _collection(self, family: str, *, create: bool) -> Any:
        if family in self._collections:
            return self._collections[family]
        name = LEDGER_PREFIX + collection_name(family).split("-", 2)[2]
        if create:
            collection = self.client.get_or_create_collection(
                name,
                embedding_function=None,
                metadata={"family": family, "ledger": True},
                configuration={"hnsw": {"sync_threshold": SYNC_THRESHOLD}},
            )
        elif name in {c.name for c in self.client.list_collections()}:
            collection = self.client.get_collection(name, embedding_function=None)
        else:
            return None
        self._collections[family] = sync_often(collection)
        return collection

    def append(self, records: list[Record]) -> None:
        by_family: dict[str, dict[str, Record]] = {}
        for record in records:
            by_family.setdefault(record.family, {})[record.id] = record
        for family, unique in by_family.items():
            collection = self._collection(family, create=True)
            rows = list(unique.values())
            for start in range(0, len(rows), 500):
                chunk = rows[start : start + 500]
                collection.upsert(
                    ids=[r.id for r in chunk], metadatas=[r.metadata() for r in chunk], embeddings=[[1.0]] * len(chunk)
                )

    def read(self, family: str, lessons: list[str] | None = None, *, kind: str | None = None) -> list[Record]:
        collection = self._collection(family, create=False)
        if collection is None or lessons == []:
            return []
        terms: list[dict[str, Any]] = []
        if lessons is not None:
            terms.append({"lesson": {"$in": lessons}})
        if kind is not None:
            terms.append({"kind": kind})
        where = terms[0] if len(terms) == 1 else ({"$and": terms} if terms else None)
        return _records(collection, where)

    def delete(self, family: str, ids: list[str]) -> None:
        collection = self._collection(family, create=False)
        if collection is not None and ids:
            collection.delete(ids=ids)


def moved_ledger(client: "ClientAPI", ledger: RecordStorage) -> None:
    """The records a folder kept in its Chroma collections (before memory/storage/ledger_file.py),
    written to `ledger`, then their collections dropped; a folder without any pays one listing.
    """
    for listed in client.list_collections():
        if not listed.name.startswith(LEDGER_PREFIX) or not (listed.metadata or {}).get("ledger"):
            continue  # not a ledger of ours: left as it is
        # read by its own name, whatever family named it
        ledger.append(_records(client.get_collection(listed.name, embedding_function=None), None))
        client.delete_collection(listed.name)


def _records(collection: "Collection", where: dict[str, Any] | None) -> list[Record]:
    """A ledger collection's records (those `where` matches), as `ChromaRecords.append` wrote them."""
    found = read_again(collection.get)(where=where, include=["metadatas"])
    return [Record(id=i, **m) for i, m in zip(found["ids"], found["metadatas"] or [], strict=True)]


# ---- what the backend table reads (memory/storage/base.py `Backend`) --------------------------
IN_GRAPH_STORE = False


def settings(context: "Context", graph_store: "BaseStore | None") -> tuple[str, str]:
    """A folder (`store_path`) or, when set, a server (`store_url`)."""
    return context.store_path, context.store_url


def identity(settings: tuple[str, str]) -> str:
    """The server's URL, or the folder's full path."""
    path, url = settings
    return url.rstrip("/") if url else str(Path(path).expanduser().resolve())


def connect(identity: str, settings: tuple[str, str]) -> Storage:
    """A folder is locked to this process (private); a server's other clients write it too."""
    if settings[1]:
        client, release = connect_server(identity)
        return on_client(client, identity, private=False, release=release)
    folder = usable_directory(identity)
    client, release = connect_folder(folder)
    ledger = LedgerFile(os.path.join(folder, LEDGER))
    try:
        ledger.check()
        moved_ledger(client, ledger)
    except BaseException:
        ledger.close()
        release()
        raise

    def closed() -> None:
        ledger.close()
        release()

    return on_client(
        client,
        identity,
        private=True,
        release=closed,
        journal=os.path.join(folder, JOURNAL),
        vectors=os.path.join(folder, VECTORS),
        records=ledger,
    )


def on_client(
    client: "ClientAPI",
    location: str,
    *,
    private: bool,
    release: Callable[[], None] | None = None,
    journal: str = "",
    vectors: str = "",
    records: RecordStorage | None = None,
) -> Storage:
    """The storage of a Chroma client already open; `journal`: see `Storage.journal`; `vectors`: a
    file in a folder only this process writes, where the texts it embeds keep their vectors;
    `records`: where the ledger is kept, when not in the client's own collections (a folder's file).
    """
    kept = VectorFile(vectors) if vectors else None
    ledger = records if records is not None else ChromaRecords(client)
    return Storage(location, ChromaLessons(client, location, kept), ledger, private, release, journal)
