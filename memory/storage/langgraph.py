"""The LangGraph store backend: lessons in a LangGraph store (`BaseStore`): the app's
`InMemoryStore`, `PostgresStore`, or the server's store under `langgraph dev`. It answers the
storage seam (memory/storage/base.py) in the store's own terms: items, namespaces, equality
filters, `search(query=...)`.

Layout: each family's lessons are items of `(*namespace, family)`, keyed by lesson id, valued by
the lesson's fields plus `document` (what is embedded: situation and text), so an app's nodes read
them with `runtime.store.search((*namespace, family), query=...)` and Studio's memory view shows
them. The family's run record (the baseline a lesson's runs are compared with) is one item of
`(*namespace[:-1], namespace[-1] + "_runs")` keyed by family, outside the lessons' prefix; the
ledger's records are items of `(*namespace[:-1], namespace[-1] + "_ledger", family)`, unindexed.

Similarity: with an index the store ranks (`store.search(query=...)`, the index's own score);
`embeddings.langgraph_index()` gives it Pivotal's MiniLM, which the similarity thresholds were
measured with. Without an index Pivotal ranks the family's items itself, embedding each one's
`document` with the same MiniLM (cached per text): every lesson is read for every query.

Not private: the app's nodes, other runs and other processes (a Postgres store, the server's)
write the same namespace, so the policy keeps nothing read and writes counts at once.
"""

import hashlib
import re
from collections.abc import Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from langgraph.store.base import BaseStore, Item

from pivotal.core.errors import PivotalError
from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record
from pivotal.memory.storage.base import Near, Only, Storage, Vector, lesson_from

if TYPE_CHECKING:
    from pivotal.core.context import Context

PAGE = 1000
INDEXED = ["document"]
"""The field the store's index embeds, whatever fields its own config names."""


class StoreLessons:
    """`LessonStorage` (memory/storage/base.py) on a namespace of a LangGraph store."""

    def __init__(self, store: BaseStore, namespace: tuple[str, ...], location: str) -> None:
        self.store = store
        self.namespace = namespace
        self.location = location
        self.runs = (*namespace[:-1], f"{namespace[-1]}_runs")
        """Each family's record, keyed by family: the families stored, and their run baseline."""
        self._filled: set[str] = set()
        self._stored: set[str] = set()
        """Families seen stored: a family is never deleted, so it is not asked about again."""

    def _space(self, family: str) -> tuple[str, ...]:
        return (*self.namespace, family_label(family))

    def families(self) -> list[str]:
        return sorted(item.value["family"] for item in _all(self.store, self.runs, None))

    def has(self, family: str, *, create: bool = False) -> bool:
        if family not in self._stored and self.store.get(self.runs, family) is not None:
            self._stored.add(family)
        if family not in self._stored and create:
            self.store.put(self.runs, family, {"family": family}, index=False)
            self._stored.add(family)
        return family in self._stored

    def holds(self, family: str) -> bool:
        """Lessons are retired, not deleted: a family that held one is taken to hold one still."""
        if family not in self._filled and next(_all(self.store, self._space(family), None), None) is not None:
            self._filled.add(family)
        return family in self._filled

    def known_to_hold(self, family: str) -> bool:
        return family in self._filled

    def vector(self, family: str, text: str) -> list[float]:
        from pivotal.memory.storage.embeddings import query_vector

        return query_vector(text)

    def put(self, family: str, lessons: list[Lesson], vectors: list[list[float]] | None) -> None:
        """The store's index embeds the `document` itself: Pivotal's vectors are not handed over."""
        self.has(family, create=True)
        for lesson in lessons:
            self.store.put(
                self._space(family), lesson.id, {**lesson.metadata(), "document": lesson.document}, index=INDEXED
            )

    def update(self, family: str, lessons: list[Lesson], stored: Mapping[str, Lesson] | None = None) -> None:
        """The stored `document` is kept. It is put with its index again (a put without one may
        drop the item's vector); Pivotal's MiniLM answers it from its cache. `stored` goes unused: a
        LangGraph store puts an item whole, so it is read here and put with every field.
        """
        self.has(family, create=True)
        for lesson in lessons:
            item = self.store.get(self._space(family), lesson.id)
            if item is not None:
                self.store.put(self._space(family), lesson.id, {**item.value, **lesson.metadata()}, index=INDEXED)

    def read(self, family: str, ids: list[str] | None) -> list[Lesson]:
        if ids is None:
            items = list(_all(self.store, self._space(family), None))
        else:
            items = [item for key in ids if (item := self.store.get(self._space(family), key)) is not None]
        return [lesson_from(self.location, item.key, _fields(item)) for item in items]

    def nearest(
        self, family: str, text: str, vector: Vector, n: int, only: Only | None, *, lessons: bool
    ) -> list[Near]:
        query = np.asarray(vector, dtype=np.float32)
        hits = {hit[0].key: hit for flt in _filters(only) for hit in self._nearest(family, text, query, flt, n)}
        found = sorted(hits.values(), key=lambda hit: -hit[1])[:n]
        return [
            Near(item.key, score, lesson_from(self.location, item.key, _fields(item)) if lessons else None)
            for item, score in found
        ]

    def _nearest(
        self, family: str, text: str, vector: np.ndarray, flt: dict[str, Any] | None, n: int
    ) -> list[tuple[Item, float]]:
        space = self._space(family)
        if text:
            hits = self.store.search(space, query=text, filter=flt, limit=n)
            ranked: list[tuple[Item, float]] = [(hit, hit.score) for hit in hits if hit.score is not None]
            if len(ranked) == len(hits):  # the store has an index
                return [(hit, score) for hit, score in ranked if hit.namespace == space]
        from pivotal.memory.storage.embeddings import query_vector

        items = list(_all(self.store, space, flt))
        scored = [(item, float(np.dot(vector, query_vector(item.value["document"])))) for item in items]
        return sorted(scored, key=lambda hit: -hit[1])[:n]

    def delete(self, family: str, ids: list[str]) -> None:
        for key in ids:
            self.store.delete(self._space(family), key)

    def count(self, family: str, only: Only | None = None) -> int:
        return sum(1 for flt in _filters(only) for _ in _all(self.store, self._space(family), flt))

    def family_record(self, family: str) -> dict[str, Any] | None:
        record = self.store.get(self.runs, family)
        return None if record is None else dict(record.value)


class StoreRecords:
    """`RecordStorage`: the ledger's records as unindexed items, a namespace per family."""

    def __init__(self, store: BaseStore, namespace: tuple[str, ...]) -> None:
        self.store = store
        self.namespace = (*namespace[:-1], f"{namespace[-1]}_ledger")

    def _space(self, family: str) -> tuple[str, ...]:
        return (*self.namespace, family_label(family))

    def append(self, records: list[Record]) -> None:
        for record in records:
            self.store.put(self._space(record.family), record.id, record.metadata(), index=False)

    def read(self, family: str, lessons: list[str] | None = None, *, kind: str | None = None) -> list[Record]:
        base = {"kind": kind} if kind is not None else {}
        filters = [{**base, "lesson": lesson} for lesson in lessons] if lessons is not None else [base or None]
        items = [item for flt in filters for item in _all(self.store, self._space(family), flt)]
        return [Record(id=item.key, **item.value) for item in items]

    def delete(self, family: str, ids: list[str]) -> None:
        for key in ids:
            self.store.delete(self._space(family), key)


def family_label(family: str) -> str:
    """A namespace label may not hold a dot or be empty: such a family is spelt as a slug and a
    hash of its name (the hash keeps distinct families apart); the others keep their own name
    (Studio shows it).
    """
    if family and "." not in family:
        return family
    slug = re.sub(r"[^a-zA-Z0-9_-]+", "-", family).strip("-_")[:48] or "default"
    return f"{slug}-{hashlib.sha256(family.encode()).hexdigest()[:8]}"


def _all(store: BaseStore, namespace: tuple[str, ...], flt: dict[str, Any] | None) -> Iterator[Item]:
    """Every item of exactly this namespace matching `flt` (a search covers the namespaces below it too)."""
    offset = 0
    while True:
        page = store.search(namespace, filter=flt, limit=PAGE, offset=offset)
        yield from (item for item in page if item.namespace == namespace)
        if len(page) < PAGE:
            return
        offset += PAGE


def _fields(item: Item) -> dict[str, Any]:
    return {key: value for key, value in item.value.items() if key != "document"}


def _filters(only: Only | None) -> list[dict[str, Any] | None]:
    """`only` as the store's filters, which match one value a field: a query that allows several
    owners or scopes is one filter per pair of them, and what they find together is the answer.
    """
    if only is None:
        return [None]
    equal: dict[str, Any] = only.equal()
    owners: tuple[str | None, ...] = only.owners or (None,)
    scopes: tuple[str | None, ...] = only.scopes or (None,)
    filters = [
        {**equal, **({"owner": owner} if owner is not None else {}), **({"scope": scope} if scope is not None else {})}
        for owner in owners
        for scope in scopes
    ]
    return [flt or None for flt in filters]


# ---- what the backend table reads (memory/storage/base.py `Backend`) --------------------------
IN_GRAPH_STORE = True


def settings(context: "Context", graph_store: BaseStore | None) -> tuple[BaseStore, tuple[str, ...]]:
    """The run's store and `lessons_namespace`."""
    if graph_store is None:
        raise PivotalError(
            'lessons_backend is "langgraph" but the run has no LangGraph store: compile with '
            "build_graph(store=...) / create_pivotal_agent(..., store=...), or set lessons_backend to auto or chroma"
        )
    return graph_store, tuple(context.lessons_namespace)


def identity(settings: tuple[BaseStore, tuple[str, ...]]) -> Hashable:
    """The store object itself: the registry holds it, so its id is not reused while it is open."""
    store, namespace = settings
    return id(store), namespace


def connect(identity: Hashable, settings: tuple[BaseStore, tuple[str, ...]]) -> Storage:
    return on_store(*settings)


def on_store(store: BaseStore, namespace: tuple[str, ...]) -> Storage:
    """The storage of a namespace of a LangGraph store."""
    location = f"langgraph store {type(store).__name__}:{'/'.join(namespace)}"
    return Storage(location, StoreLessons(store, namespace, location), StoreRecords(store, namespace), private=False)
