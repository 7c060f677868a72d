"""The experience store: approved lessons in a Chroma collection on disk.

One client per store directory per process (a second client on the same directory can hang
on SQLite's busy timeout), with writes serialised, so concurrent runs share it safely.
Chroma calls block: async callers go through `asyncio.to_thread`.
"""

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory.lesson import Lesson
from pivotal.errors import PivotalError

COLLECTION = "pivotal_lessons"


@dataclass
class Recalled:
    id: str
    lesson: Lesson
    similarity: float


class ExperienceStore:
    def __init__(self, path: str) -> None:
        import chromadb
        from memory.embeddings import default_embedding

        self.path = path
        self._write_lock = threading.Lock()
        try:
            self.client = chromadb.PersistentClient(path=path)
            self.collection = self.client.get_or_create_collection(
                COLLECTION, embedding_function=default_embedding(),
                configuration={"hnsw": {"space": "cosine"}})
        except Exception as exc:  # noqa: BLE001 — chroma raises many types; the user needs one line
            raise PivotalError(f"cannot open the lesson store at {path}: {_one_line(exc)}; "
                               "check the path is a writable directory (--store / PIVOTAL_STORE_PATH)") from exc

    def add(self, lessons: list[Lesson]) -> list[str]:
        """Insert lessons; one already stored (same id) gains evidence instead of a duplicate."""
        if not lessons:
            return []
        with self._write_lock:
            merged = {lesson.id: lesson for lesson in lessons}
            existing = self.collection.get(ids=list(merged), include=["metadatas"])
            for lesson_id, metadata in zip(existing["ids"], existing["metadatas"] or []):
                old = Lesson.from_metadata(dict(metadata))
                merged[lesson_id] = old.model_copy(update={"evidence": old.evidence + merged[lesson_id].evidence})
            self.collection.upsert(ids=list(merged), documents=[l.document for l in merged.values()],
                                   metadatas=[l.metadata() for l in merged.values()])
        return list(merged)

    def search(self, text: str, *, family: str, k: int, min_similarity: float) -> list[Recalled]:
        """Approved lessons of this family closest to `text`, best first, above the floor."""
        if not text.strip() or self.collection.count() == 0:
            return []
        result = self.collection.query(
            query_texts=[text], n_results=k, include=["metadatas", "distances"],
            where={"$and": [{"status": "approved"}, {"family": family}]})
        found = []
        for lesson_id, metadata, distance in zip(result["ids"][0], result["metadatas"][0], result["distances"][0]):
            similarity = 1.0 - float(distance)
            if similarity >= min_similarity:
                found.append(Recalled(lesson_id, Lesson.from_metadata(dict(metadata)), similarity))
        return found

    def get(self, ids: list[str] | None = None) -> dict[str, Lesson]:
        result = self.collection.get(ids=ids, include=["metadatas"])
        return {i: Lesson.from_metadata(dict(m)) for i, m in zip(result["ids"], result["metadatas"] or [])}

    def count(self) -> int:
        return self.collection.count()


_stores: dict[str, ExperienceStore] = {}
_stores_lock = threading.Lock()


def open_store(path: str) -> ExperienceStore:
    """The process's one store for `path` (created on first use)."""
    resolved = _usable_directory(path)
    with _stores_lock:
        if resolved not in _stores:
            _stores[resolved] = ExperienceStore(resolved)
        return _stores[resolved]


def _usable_directory(path: str) -> str:
    directory = Path(path).expanduser().resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PivotalError(f"cannot create the lesson store directory {directory}: {exc.strerror}; "
                           "choose another --store / PIVOTAL_STORE_PATH") from None
    if not directory.is_dir():
        raise PivotalError(f"lesson store path {directory} is not a directory; choose another --store")
    probe = directory / ".pivotal-write-check"
    try:
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise PivotalError(f"lesson store directory {directory} is not writable ({exc.strerror}); "
                           "fix its permissions or choose another --store") from None
    return str(directory)


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]
