"""A store's Chroma collections, one per task family: named, opened, checked, and the embedding
compute each was made with. Apart from the store's read and write paths, so what a collection
is (and why one is refused) is read in one place and tested alone (tests/test_collections.py).
"""

import hashlib
import re
from typing import TYPE_CHECKING, Any

from pivotal.core.errors import PivotalError, store_server_gone
from pivotal.memory.connection import one_line

if TYPE_CHECKING:
    from pivotal.memory.embeddings import Compute  # onnxruntime loads only once a store embeds

PREFIX = "pivotal-lessons-"


class Collections:
    def __init__(self, client: Any, location: str) -> None:
        self.client = client
        self.location = location
        self._opened: dict[str, Any] = {}
        self._computes: dict[str, Compute] = {}
        """Each opened family's embedding compute (memory/embeddings.py `Compute`), from its collection's config."""
        self._filled: set[str] = set()

    def collection(self, family: str, *, create: bool) -> Any:
        """The family's collection (made when `create`), or None when it has none yet."""
        if family in self._opened:
            return self._opened[family]
        from pivotal.memory.embeddings import compute_of, default_embedding

        name = collection_name(family)
        try:
            if create:
                collection = self.client.get_or_create_collection(
                    name,
                    embedding_function=default_embedding(),
                    metadata={"family": family},
                    configuration={"hnsw": {"space": "cosine"}},
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
            c.metadata.get("family") for c in self.client.list_collections() if c.name.startswith(PREFIX) and c.metadata
        ]
        return [self.collection(f, create=False) for f in sorted(families)]

    def holds_lessons(self, collection: Any) -> bool:
        """Lessons are retired, never deleted: a collection that held one always will."""
        if collection.name not in self._filled and collection.count() > 0:
            self._filled.add(collection.name)
        return collection.name in self._filled

    def filled(self, collection: Any) -> bool:
        """Known to hold lessons, without asking Chroma."""
        return collection.name in self._filled

    def compute(self, family: str) -> "Compute":
        """What the family's collection was made with; a family not stored yet gets the new one."""
        from pivotal.memory.embeddings import NEW_COMPUTE  # onnxruntime loads only once a store embeds

        return self._computes.get(family, NEW_COMPUTE)

    def embedder(self, family: str) -> Any:
        from pivotal.memory.embeddings import embedding

        return embedding(self.compute(family))

    def vector(self, family: str, text: str) -> list[float]:
        """`text`'s vector as the family's collection compares it (cached: see `query_vector`)."""
        from pivotal.memory.embeddings import query_vector

        return query_vector(text, self.compute(family))

    def _check_compatible(self, collection: Any, family: str) -> None:
        """A collection made with another embedding model or distance would give wrong neighbours."""
        from pivotal.memory.embeddings import MiniLMEmbedding

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
