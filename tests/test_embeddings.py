"""The lesson store's recall depends on these vectors, so check them for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import chromadb
import numpy as np

from memory.embeddings import DIMENSIONS, MiniLMEmbedding, default_embedding

REPO_ROOT = Path(__file__).resolve().parents[1]

TEXTS = [
    "The cat sits on the mat",
    "A cat is sitting on a mat",
    "Quarterly tax filing deadlines",
    "ok",
    "Retry the deployment with exponential backoff when the upstream API "
    "returns a 503, and record the lesson so the critic can cite it later.",
]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_vectors_are_384_dim_unit_norm_float32() -> None:
    vectors = default_embedding()(TEXTS)
    assert len(vectors) == len(TEXTS)
    for vector in vectors:
        assert vector.shape == (DIMENSIONS,)
        assert vector.dtype == np.float32
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_paraphrase_is_closer_than_unrelated() -> None:
    cat, paraphrase, tax = default_embedding()(TEXTS[:3])
    assert _cosine(cat, paraphrase) > _cosine(cat, tax) + 0.3


def test_batch_equals_one_by_one() -> None:
    ef = MiniLMEmbedding()
    batched = np.stack(ef(TEXTS))
    single = np.stack([ef([text])[0] for text in TEXTS])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_embed_query_str_gives_floats_and_list_keeps_chroma_contract() -> None:
    ef = default_embedding()
    query = ef.embed_query("The cat sits on the mat")
    assert isinstance(query, list) and len(query) == DIMENSIONS
    assert all(isinstance(x, float) for x in query)
    np.testing.assert_allclose(query, ef.embed_query([TEXTS[0]])[0], atol=1e-6)


def test_config_round_trip() -> None:
    ef = MiniLMEmbedding(threads=2)
    rebuilt = MiniLMEmbedding.build_from_config(ef.get_config())
    assert rebuilt.get_config() == {"threads": 2}
    assert not ef.is_legacy()
    assert ef.default_space() == "cosine"


_REOPEN = """
import sys
import memory.embeddings  # registers the embedding function by name
import chromadb
client = chromadb.PersistentClient(path=sys.argv[1])
collection = client.get_collection("lessons")
print(type(collection.configuration["embedding_function"]).__name__)
result = collection.query(query_texts=["a kitten resting on a rug"], n_results=1)
print(result["ids"][0][0])
"""


def test_reopened_collection_finds_embedding_in_new_process(tmp_path: Path) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path))
    collection = client.create_collection("lessons", embedding_function=MiniLMEmbedding())
    collection.add(ids=["cat", "tax"], documents=[TEXTS[0], TEXTS[2]])
    client.close()

    proc = subprocess.run(
        [sys.executable, "-c", _REOPEN, str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["MiniLMEmbedding", "cat"]
