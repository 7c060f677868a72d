"""A store's lesson reads, writes and queries, one call per family's collection: the only code
that calls a collection's `get`/`query`/`upsert`/`update`/`delete`, and turns its metadata into
lessons (memory/lesson.py). The collection is Chroma's or a LangGraph store's
(memory/langgraph_store.py): both answer the same calls. Apart from the store's policy so what is
read and written, and the known versions it keeps, are tested alone (tests/test_store_parts.py).
"""

from collections.abc import Iterator
from typing import Any

import numpy as np
from pydantic import ValidationError

from pivotal.core.errors import PivotalError
from pivotal.memory.collections import Collections, collection_name
from pivotal.memory.known import KnownLessons
from pivotal.memory.lesson import DEFAULT_OWNER, SHARED, Lesson

KNOWN_ENOUGH = 0.8
"""Queries leave the lessons' metadata out once this share of what they find is known."""


class LessonIO:
    def __init__(self, client: Any, location: str, *, private: bool) -> None:
        self.location = location
        self.collections = Collections(client, location)
        self.private = private
        """No other process writes it: what this process read or wrote of it stays true."""
        self.known = KnownLessons()
        """The stored version of lessons this process read or wrote, in a private store (memory/known.py)."""

    def collection(self, family: str, *, create: bool) -> Any:
        return self.collections.collection(family, create=create)

    def upsert(self, lessons: list[Lesson], *, embedded: bool) -> None:
        """`embedded`: each text was just embedded (to look for its duplicate), so its cached
        vector goes along instead of embedding it again; else the texts are embedded in one batch.
        """
        for collection, group in self._by_collection(lessons):
            documents = [lesson.document for lesson in group]
            family = group[0].family
            if embedded:
                vectors = [self.collections.vector(family, d) for d in documents]
            else:
                vectors = self.collections.embedder(family)(documents)
            collection.upsert(
                ids=[lesson.id for lesson in group],
                documents=documents,
                metadatas=[lesson.metadata() for lesson in group],
                embeddings=vectors,
            )
            self._remember(group)

    def update(self, lessons: list[Lesson]) -> None:
        """Counts, utility, status: the text is unchanged, so it must not be embedded again (an
        upsert with documents re-embeds every one: most of a run's store time went there).
        """
        for collection, group in self._by_collection(lessons):
            collection.update(ids=[lesson.id for lesson in group], metadatas=[lesson.metadata() for lesson in group])
            self._remember(group)

    def delete(self, family: str, ids: list[str]) -> None:
        collection = self.collection(family, create=False)
        if collection is not None and ids:
            collection.delete(ids=ids)
        self.known.forget(ids)

    def read(self, collection: Any, ids: list[str] | None) -> list[Lesson]:
        """What the collection holds for `ids` (all when None); the versions this process knows need no read."""
        kept = {} if ids is None else self.known.look(ids)
        # an id hashes its family (`lesson_id`): a lesson known in another family is not in this one
        known = [lesson for lesson in kept.values() if lesson and collection_name(lesson.family) == collection.name]
        missing = None if ids is None else [i for i, lesson in kept.items() if lesson is None]
        if missing == []:
            return known
        writes = self.known.writes
        result = collection.get(ids=missing, include=["metadatas"])
        read = [self._lesson(i, m) for i, m in zip(result["ids"], result["metadatas"] or [], strict=True)]
        if ids is not None:
            self._remember(read, read_after=writes)
        return known + read

    def query(
        self, collection: Any, vector: np.ndarray | list[float], n: int, where: dict[str, Any] | None, text: str
    ) -> list[tuple[Lesson, float]]:
        """The `n` nearest lessons to `text` (`vector` as this store embeds it), any status unless
        `where` says, with their cosine similarity. A LangGraph store's index embeds the text itself
        (memory/langgraph_store.py); Chroma is given the vector only.

        A private store asks for ids and distances only once the lessons it knows cover what its
        queries find (KNOWN_ENOUGH): the lessons then come from `read`, which reads the few it
        lacks in one more call. Where they do not (a large store, a new process), that call would
        cost more than reading the metadata with the query (benchmarks/bench_store.py).
        """
        known_first = self.private and self.known.coverage >= KNOWN_ENOUGH
        include = ["distances"] if known_first else ["metadatas", "distances"]
        writes = self.known.writes
        texts = {"query_texts": [text]} if getattr(collection, "ranks_text", False) else {}
        result = collection.query(query_embeddings=[vector], n_results=n, where=where, include=include, **texts)
        ids, distances = result["ids"][0], result["distances"][0]
        if self.private:
            self.known.seen(ids)
        if known_first:
            lessons = {lesson.id: lesson for lesson in self.read(collection, ids)}
        else:
            lessons = {i: self._lesson(i, m) for i, m in zip(ids, result["metadatas"][0], strict=True)}
            self._remember(list(lessons.values()), read_after=writes)
        return [(lessons[i], 1.0 - float(d)) for i, d in zip(ids, distances, strict=True) if i in lessons]

    def _remember(self, lessons: list[Lesson], *, read_after: int | None = None) -> None:
        if self.private:
            self.known.remember(lessons, read_after=read_after)

    def _by_collection(self, lessons: list[Lesson]) -> Iterator[tuple[Any, list[Lesson]]]:
        """Each family's collection with its lessons; Chroma refuses a batch that repeats an id: the last wins."""
        by_family: dict[str, dict[str, Lesson]] = {}
        for lesson in lessons:
            by_family.setdefault(lesson.family, {})[lesson.id] = lesson
        for family, unique in by_family.items():
            yield self.collection(family, create=True), list(unique.values())

    def _lesson(self, lesson_id: str, metadata: Any) -> Lesson:
        try:
            return Lesson.from_record(lesson_id, dict(metadata or {}))
        except ValidationError as exc:
            raise PivotalError(
                f"lesson store {self.location}: record {lesson_id!r} is not a Pivotal lesson "
                f"({exc.error_count()} invalid fields, first: {exc.errors()[0]['loc']}); "
                "was this collection written by another tool?"
            ) from None


def where(*terms: dict[str, Any]) -> dict[str, Any] | None:
    """Chroma's `where` for all of `terms`: one alone as it is, several under `$and`."""
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else {"$and": list(terms)}


def owned(owner: str, *, shared: bool) -> list[dict[str, Any]]:
    """The `where` term for `owner`'s lessons (and the shared tier's). None for the default
    owner: lessons stored before owners have no `owner` field for Chroma to match, and are its;
    the lessons found are filtered by owner after the query instead.
    """
    if owner == DEFAULT_OWNER:
        return []
    return [{"owner": {"$in": [owner, SHARED]}}] if shared else [{"owner": owner}]
