"""The lesson store's recall depends on these vectors, so check them for real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import chromadb
import numpy as np
import pytest

from pivotal.core.errors import PivotalError
from pivotal.core.settings import settings
from pivotal.memory.storage import quantize
from pivotal.memory.storage.embeddings import (
    COMPUTES,
    DIMENSIONS,
    MiniLMEmbedding,
    default_embedding,
    embedding,
    model_file,
)

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


@pytest.mark.parametrize("compute", COMPUTES)
def test_batch_equals_one_by_one(compute) -> None:
    """A lesson embedded in an import's batch must meet the same text embedded alone as a query."""
    ef = MiniLMEmbedding(compute=compute)
    batched = np.stack(ef(TEXTS))
    single = np.stack([ef([text])[0] for text in TEXTS])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_int8_vectors_stay_close_to_the_float_ones_and_rank_alike() -> None:
    int8, float32 = np.stack(embedding("int8")(TEXTS)), np.stack(embedding("float")(TEXTS))
    alike = [float(np.dot(a, b)) for a, b in zip(int8, float32, strict=True)]
    assert np.median(alike) >= 0.99 and min(alike) >= 0.96  # the lowest: "ok", two tokens
    cat, paraphrase, tax = int8[:3]
    assert _cosine(cat, paraphrase) > _cosine(cat, tax) + 0.3
    np.testing.assert_array_equal(np.argsort(-(int8 @ int8[0])), np.argsort(-(float32 @ float32[0])))


def test_embed_query_str_gives_floats_and_list_keeps_chroma_contract() -> None:
    ef = default_embedding()
    query = ef.embed_query("The cat sits on the mat")
    assert isinstance(query, list) and len(query) == DIMENSIONS
    assert all(isinstance(x, float) for x in query)
    np.testing.assert_allclose(query, ef.embed_query([TEXTS[0]])[0], atol=1e-6)


def test_config_round_trip() -> None:
    ef = MiniLMEmbedding(threads=2)
    rebuilt = MiniLMEmbedding.build_from_config(ef.get_config())
    assert rebuilt.get_config() == {"threads": 2, "compute": "int8"}
    assert not ef.is_legacy()
    assert ef.default_space() == "cosine"


def test_a_config_saved_before_int8_builds_the_float_model() -> None:
    assert MiniLMEmbedding.build_from_config({"threads": 1}).compute == "float"


def test_compute_is_checked_and_never_changes_on_an_update() -> None:
    with pytest.raises(ValueError, match="compute must be one of int8, float"):
        MiniLMEmbedding(compute="int4")
    ef = MiniLMEmbedding(compute="float")
    ef.validate_config_update({"threads": 1}, {"threads": 2})
    with pytest.raises(ValueError, match="compute cannot change"):
        ef.validate_config_update({"threads": 1}, {"threads": 1, "compute": "int8"})


@pytest.mark.slow
def test_the_int8_model_is_made_once_in_the_cache_folder_and_reused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PIVOTAL_CACHE_DIR", str(tmp_path / "cache"))
    settings.cache_clear()
    try:
        made = model_file("int8")
        assert made.parent == tmp_path / "cache" and made.stat().st_size > 10e6
        monkeypatch.setattr(quantize, "_convert", lambda *_: pytest.fail("converted again"))
        assert model_file("int8") == made
        assert not [p for p in made.parent.iterdir() if p.name.startswith(".convert-")]  # no scratch left
    finally:
        settings.cache_clear()


_CONVERT = """
import os, sys, onnxruntime
from pivotal.memory.storage.embeddings import model_file
made = model_file("int8")
onnxruntime.InferenceSession(str(made), providers=["CPUExecutionProvider"])  # whole, not half written
print(made, os.stat(made).st_ino, os.stat(made).st_mtime_ns)
"""


@pytest.mark.slow
def test_processes_starting_together_on_an_empty_cache_convert_once(tmp_path) -> None:
    """A fresh machine's first batch (or a fresh HOME) starts several processes that each need the
    int8 model at once: one converts, the others wait for it and load the same whole file.
    """
    env = {**os.environ, "PIVOTAL_CACHE_DIR": str(tmp_path / "cache")}
    starts = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    printed = [finished_line(process) for process in starts]
    assert len(set(printed)) == 1, printed  # one path, inode and mtime: converted once, never replaced under a reader
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == [
        Path(printed[0].split()[0]).name
    ]


def finished_line(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return out.strip()


@pytest.mark.slow
def test_two_conversions_make_the_same_model_byte_for_byte(tmp_path) -> None:
    """Machines convert on their own (Ray workers, a shared Chroma server): they must agree."""
    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    for target in (first, second):
        quantize._convert(model_file("float"), target)
    assert first.read_bytes() == second.read_bytes()


def test_an_unwritable_cache_folder_is_one_clear_line(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PIVOTAL_CACHE_DIR", str(blocker / "cache"))
    settings.cache_clear()
    try:
        with pytest.raises(PivotalError, match="cannot create the cache folder .* set PIVOTAL_CACHE_DIR"):
            model_file("int8")
    finally:
        settings.cache_clear()


_REOPEN = """
import sys
import pivotal.memory.storage.embeddings  # registers the embedding function by name
import chromadb
client = chromadb.PersistentClient(path=sys.argv[1])
collection = client.get_collection("lessons")
print(type(collection.configuration["embedding_function"]).__name__)
result = collection.query(query_texts=["a kitten resting on a rug"], n_results=1)
print(result["ids"][0][0])
"""


@pytest.mark.slow
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
