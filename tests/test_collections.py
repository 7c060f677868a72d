"""memory/storage/chroma.py's collections alone: a store's per-family Chroma collections on a real PersistentClient."""

import chromadb
import pytest

from pivotal.core.errors import PivotalError
from pivotal.memory.storage.chroma import PREFIX, SYNC_THRESHOLD, ChromaRecords, Collections, collection_name
from pivotal.memory.storage.embeddings import default_embedding


def test_names_are_valid_for_chroma_and_keep_families_apart():
    assert collection_name("grid world!") != collection_name("grid-world")
    assert collection_name("").startswith(f"{PREFIX}default-")
    assert all(len(collection_name(f)) <= 512 for f in ("x" * 1000, "é" * 10))


def test_a_family_is_opened_once_and_listed_once_it_exists(tmp_path):
    collections = Collections(chromadb.PersistentClient(str(tmp_path)), str(tmp_path))
    assert collections.collection("gridworld", create=False) is None and collections.of_family(None) == []
    made = collections.collection("gridworld", create=True)
    assert collections.opened("gridworld") is made and collections.of_family(None) == [made]
    assert not collections.holds_lessons(made) and not collections.filled(made)
    made.add(ids=["a"], documents=["x"], embeddings=[[0.1] * 384], metadatas=[{"family": "gridworld"}])
    assert collections.holds_lessons(made) and collections.filled(made)
    assert len(collections.vector("gridworld", "in a maze")) == 384


def test_a_collection_under_the_prefix_that_names_no_family_is_not_listed_as_one(tmp_path):
    """Families are read from their collections' metadata; one without it (made by hand, or by another
    tool under the same prefix) is not a family, and listing the store's families still works.
    """
    client = chromadb.PersistentClient(str(tmp_path))
    client.create_collection(f"{PREFIX}by-hand", metadata={"made by": "hand"})
    collections = Collections(client, str(tmp_path))
    made = collections.collection("gridworld", create=True)
    assert collections.of_family(None) == [made]


def test_a_collection_made_with_another_distance_is_refused_in_one_line(tmp_path):
    client = chromadb.PersistentClient(str(tmp_path))
    client.create_collection(collection_name("gridworld"), configuration={"hnsw": {"space": "l2"}})
    with pytest.raises(PivotalError, match="cannot be used .*point --store at another folder") as caught:
        Collections(client, str(tmp_path)).collection("gridworld", create=False)
    assert "\n" not in str(caught.value)


def _sync_threshold(collection) -> int:
    return collection.configuration_json["hnsw"]["sync_threshold"]


def test_a_new_family_and_its_ledger_write_their_index_every_sync_threshold_records(tmp_path):
    """Chroma's default (1,000) made each write read back up to 1,000 records (SYNC_THRESHOLD)."""
    client = chromadb.PersistentClient(str(tmp_path))
    assert SYNC_THRESHOLD < 1000
    assert _sync_threshold(Collections(client, str(tmp_path)).collection("gridworld", create=True)) == SYNC_THRESHOLD
    assert _sync_threshold(ChromaRecords(client)._collection("gridworld", create=True)) == SYNC_THRESHOLD


def test_a_family_made_with_chromas_default_is_changed_once_when_opened(tmp_path):
    client = chromadb.PersistentClient(str(tmp_path))
    client.create_collection(
        collection_name("gridworld"),
        embedding_function=default_embedding(),
        configuration={"hnsw": {"space": "cosine"}},
    )
    client.create_collection(
        collection_name("lake"),
        embedding_function=default_embedding(),
        configuration={"hnsw": {"space": "cosine", "sync_threshold": 50}},
    )
    assert _sync_threshold(client.get_collection(collection_name("gridworld"))) == 1000
    collections = Collections(client, str(tmp_path))
    assert _sync_threshold(collections.collection("gridworld", create=False)) == SYNC_THRESHOLD
    assert _sync_threshold(client.get_collection(collection_name("gridworld"))) == SYNC_THRESHOLD  # stored
    assert _sync_threshold(collections.collection("lake", create=True)) == 50  # a lower one chosen stays


def test_a_ledger_made_with_chromas_default_is_changed_once_when_opened(tmp_path):
    client = chromadb.PersistentClient(str(tmp_path))
    name = "pivotal-ledger-" + collection_name("gridworld").split("-", 2)[2]
    client.create_collection(name, embedding_function=None, metadata={"family": "gridworld", "ledger": True})
    assert _sync_threshold(ChromaRecords(client)._collection("gridworld", create=False)) == SYNC_THRESHOLD
    assert _sync_threshold(client.get_collection(name)) == SYNC_THRESHOLD
