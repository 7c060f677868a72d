"""Lessons in a LangGraph store (`BaseStore`): the app's `InMemoryStore`, `PostgresStore`, or
the server's store under `langgraph dev`.

The seam between the lesson policy (memory/store.py `ExperienceStore`: dedup, the gate's shortcut,
utility, scope, owners and the shared tier, retirement, caps) and where lessons are kept is the
handful of collection calls memory/lesson_io.py makes (`LessonCollection` below). A Chroma
collection has them; `StoreCollection` gives them to one family's namespace of a LangGraph store,
so the policy is the same code on both.

Layout: each family's lessons are items of `(*namespace, family)`, keyed by lesson id, valued by
the lesson's fields plus `document` (what is embedded: situation and text), so an app's nodes read
them with `runtime.store.search((*namespace, family), query=...)` and Studio's memory view shows
them. The family's run record (the baseline a lesson's runs are compared with) is one item of
`(*namespace[:-1], namespace[-1] + "_runs")` keyed by family, outside the lessons' prefix.

Similarity: with an index the store ranks (`store.search(query=...)`, the index's own score);
`embeddings.langgraph_index()` gives it Pivotal's MiniLM, which the similarity thresholds were
measured with. Without an index Pivotal ranks the family's items itself, embedding each one's
`document` with the same MiniLM (cached per text): every lesson is read for every query.
"""

from collections.abc import Iterator
from itertools import product
from typing import Any, Protocol

import numpy as np
from langgraph.store.base import BaseStore, Item

from pivotal.memory.collections import PREFIX, collection_name

PAGE = 1000
INDEXED = ["document"]
"""The field the store's index embeds, whatever fields its own config names."""


class LessonCollection(Protocol):
    """What the lesson policy asks of one family's storage: Chroma's collection calls, the few it uses."""

    name: str

    @property
    def metadata(self) -> dict[str, Any]: ...
    def count(self) -> int: ...
    def get(self, ids: list[str] | None = None, where: dict[str, Any] | None = None, include: Any = ()) -> Any: ...
    def query(
        self, query_embeddings: Any, n_results: int, where: Any = None, include: Any = (), **text: Any
    ) -> Any: ...
    def delete(self, ids: list[str]) -> None: ...
    def upsert(self, ids: list[str], documents: list[str], metadatas: list[Any], embeddings: Any = None) -> None: ...
    def update(self, ids: list[str], metadatas: list[Any]) -> None: ...
    def modify(self, metadata: dict[str, Any]) -> None: ...


class StoreClient:
    """Chroma's client calls the policy makes (open, list), over a namespace of a LangGraph store."""

    def __init__(self, store: BaseStore, namespace: tuple[str, ...]) -> None:
        self.store = store
        self.namespace = namespace
        self.records = (*namespace[:-1], f"{namespace[-1]}_runs")
        from pivotal.memory.ledger import StoreLedger

        self.ledger = StoreLedger(store, namespace)
        """The evidence ledger's records (memory/ledger.py), beside the lessons."""

    def get_or_create_collection(self, name: str, *, metadata: dict[str, Any], **_: Any) -> "StoreCollection":
        family = metadata["family"]
        if self.store.get(self.records, family) is None:
            self.store.put(self.records, family, {"family": family}, index=False)
        return StoreCollection(self, family)

    def get_collection(self, name: str, **_: Any) -> "StoreCollection":
        return next(c for c in self.list_collections() if c.name == name)

    def list_collections(self) -> list["StoreCollection"]:
        return [StoreCollection(self, item.value["family"]) for item in _all(self.store, self.records, None)]


class StoreCollection:
    """One family's lessons as a `LessonCollection`."""

    ranks_text = True
    """`query` wants the query's text too: a store's index embeds text, not Pivotal's vectors."""

    def __init__(self, client: StoreClient, family: str) -> None:
        self.client = client
        self.store = client.store
        self.family = family
        self.name = collection_name(family)
        self.namespace = (*client.namespace, family_label(family))
        from pivotal.memory.embeddings import NEW_COMPUTE, MiniLMEmbedding, embedding

        self.configuration_json = {
            "embedding_function": {"name": MiniLMEmbedding.name(), "config": embedding(NEW_COMPUTE).get_config()},
            "hnsw": {"space": "cosine"},
        }

    @property
    def metadata(self) -> dict[str, Any]:
        record = self.store.get(self.client.records, self.family)
        return {**(record.value if record is not None else {}), "family": self.family}

    def modify(self, metadata: dict[str, Any]) -> None:
        self.store.put(self.client.records, self.family, {**metadata, "family": self.family}, index=False)

    def count(self) -> int:
        return sum(1 for _ in _all(self.store, self.namespace, None))

    def get(self, ids: list[str] | None = None, where: dict[str, Any] | None = None, include: Any = ()) -> Any:
        if ids is not None:
            items = [item for key in ids if (item := self.store.get(self.namespace, key)) is not None]
        else:
            items = [item for flt in _filters(where) for item in _all(self.store, self.namespace, flt)]
        return {"ids": [item.key for item in items], "metadatas": [_fields(item) for item in items]}

    def delete(self, ids: list[str]) -> None:
        for key in ids:
            self.store.delete(self.namespace, key)

    def upsert(self, ids: list[str], documents: list[str], metadatas: list[Any], embeddings: Any = None) -> None:
        for key, document, fields in zip(ids, documents, metadatas, strict=True):
            self.store.put(self.namespace, key, {**fields, "document": document}, index=INDEXED)

    def update(self, ids: list[str], metadatas: list[Any]) -> None:
        """Counts and status: the stored `document` is kept. It is put with its index again (a put
        without one may drop the item's vector); Pivotal's MiniLM answers it from its cache.
        """
        for key, fields in zip(ids, metadatas, strict=True):
            stored = self.store.get(self.namespace, key)
            if stored is not None:
                self.store.put(self.namespace, key, {**stored.value, **fields}, index=INDEXED)

    def query(
        self, query_embeddings: Any, n_results: int, where: Any = None, include: Any = (), query_texts: Any = None
    ) -> Any:
        vector = np.asarray(query_embeddings[0], dtype=np.float32)
        text = query_texts[0] if query_texts else ""
        hits = {hit[0].key: hit for flt in _filters(where) for hit in self._nearest(text, vector, flt, n_results)}
        found = sorted(hits.values(), key=lambda hit: -hit[1])[:n_results]
        return {
            "ids": [[item.key for item, _ in found]],
            "distances": [[1.0 - score for _, score in found]],
            "metadatas": [[_fields(item) for item, _ in found]],
        }

    def _nearest(self, text: str, vector: np.ndarray, flt: dict[str, Any] | None, n: int) -> list[tuple[Item, float]]:
        if text:
            hits = self.store.search(self.namespace, query=text, filter=flt, limit=n)
            ranked: list[tuple[Item, float]] = [(hit, hit.score) for hit in hits if hit.score is not None]
            if len(ranked) == len(hits):  # the store has an index
                return [(hit, score) for hit, score in ranked if hit.namespace == self.namespace]
        from pivotal.memory.embeddings import NEW_COMPUTE, query_vector

        items = list(_all(self.store, self.namespace, flt))
        scored = [(item, float(np.dot(vector, query_vector(item.value["document"], NEW_COMPUTE)))) for item in items]
        return sorted(scored, key=lambda hit: -hit[1])[:n]


def family_label(family: str) -> str:
    """A namespace label may not hold a dot or be empty; other families keep their own name (Studio shows it)."""
    return family if family and "." not in family else collection_name(family)[len(PREFIX) :]


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


def _filters(where: dict[str, Any] | None) -> list[dict[str, Any] | None]:
    """Chroma's `where` as the store's equality filters: `$and` joins them, each `$in` becomes one
    filter per value (a store filter has no `$in`); their results together are what Chroma finds.
    """
    if not where:
        return [None]
    terms = where["$and"] if "$and" in where else [where]
    fixed: dict[str, Any] = {}
    choices: list[list[tuple[str, Any]]] = []
    for term in terms:
        for key, value in term.items():
            if isinstance(value, dict) and "$in" in value:
                choices.append([(key, v) for v in value["$in"]])
            else:
                fixed[key] = value
    return [{**fixed, **dict(chosen)} for chosen in product(*choices)]
