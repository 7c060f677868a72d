"""A private store keeps the vectors of the texts it embedded in its folder, for the next process:
read back exactly, never another model's or compute's, a torn or damaged record embedded again.
"""

import numpy as np

from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import close_store, open_store
from pivotal.memory.storage import vector_file
from pivotal.memory.storage.chroma import VECTORS
from pivotal.memory.storage.embeddings import MiniLMEmbedding, _cached_vector
from pivotal.memory.storage.vector_file import RECORD, VectorFile

SITUATION = "a narrow corridor, a hole to the south, the goal two rows down"


def _stored(path: str) -> None:
    lesson = Lesson(
        kind="guardrail",
        situation="in a narrow corridor",
        text="Step away from the hole first.",
        outcome="failure",
        family="gridworld",
        run_id="r1",
    )
    open_store(path).put([lesson])


def test_a_second_process_on_the_folder_embeds_no_situation_the_first_one_did(tmp_path, monkeypatch):
    path = str(tmp_path / "store")
    _stored(path)
    first = open_store(path).search(SITUATION, family="gridworld", k=3, min_similarity=0.0)
    close_store(path)
    _cached_vector.cache_clear()  # a new process: nothing in memory
    embedded: list[list[str]] = []
    real = MiniLMEmbedding.__call__
    monkeypatch.setattr(
        MiniLMEmbedding, "__call__", lambda self, input: embedded.append(list(input)) or real(self, input)
    )
    again = open_store(path).search(SITUATION, family="gridworld", k=3, min_similarity=0.0)
    assert embedded == []
    assert [(f.id, f.similarity) for f in again] == [(f.id, f.similarity) for f in first]
    assert (tmp_path / "store" / VECTORS).stat().st_size % RECORD == 0
    storage = open_store(path).shelf.io.storage
    _cached_vector.cache_clear()
    kept = storage.vector("gridworld", SITUATION)
    storage.vectors.forget(on_disk=True)
    assert kept == storage.vector("gridworld", SITUATION)  # read back exactly as embedded
    assert embedded == [[SITUATION]]


def test_a_torn_or_damaged_record_is_embedded_again_and_the_rest_read_back(tmp_path):
    path = tmp_path / "vectors.bin"
    asked: list[str] = []

    def embed(text: str, compute: str) -> list[float]:
        asked.append(text)
        return [float(len(text) + i) for i in range(vector_file.DIMENSIONS)]

    kept = VectorFile(str(path))
    for text in ("one", "two", "three"):
        kept.vector(text, "int8", embed, "model 1")
    data = bytearray(path.read_bytes())
    data[5] ^= 0xFF  # the first record damaged
    path.write_bytes(bytes(data[:-7]))  # the last one torn, as by a kill mid-append
    asked.clear()
    reopened = VectorFile(str(path))
    assert len(reopened) == 1
    assert reopened.vector("two", "int8", embed, "model 1") == embed("two", "int8")[:]
    asked.remove("two")  # the call just above, not the file's
    for text in ("one", "three"):
        reopened.vector(text, "int8", embed, "model 1")
    assert asked == ["one", "three"]
    assert path.stat().st_size % RECORD == 0 and len(VectorFile(str(path))) == 3


def test_another_model_or_compute_never_reads_these_vectors_and_the_file_stops_growing(tmp_path, monkeypatch):
    path = tmp_path / "vectors.bin"
    asked: list[tuple[str, str]] = []

    def embed(text: str, compute: str) -> list[float]:
        asked.append((text, compute))
        return list(np.full(vector_file.DIMENSIONS, 0.5))

    kept = VectorFile(str(path))
    kept.vector("a", "int8", embed, "model 1")
    kept.vector("a", "float", embed, "model 1")
    kept.vector("a", "int8", embed, "model 2")
    kept.vector("a", "int8", embed, "model 1")
    assert asked == [("a", "int8"), ("a", "float"), ("a", "int8")]
    kept.vector("short", "int8", lambda text, compute: [0.5] * 10, "model 1")  # another model's size
    assert len(VectorFile(str(path))) == 3  # not kept: its record would misalign every later one
    monkeypatch.setattr(vector_file, "MAX_VECTORS", 3)
    kept.vector("b", "int8", embed, "model 1")
    assert len(VectorFile(str(path))) == 3 and path.stat().st_size == 3 * RECORD


def test_a_read_only_folder_embeds_as_before(tmp_path):
    missing = tmp_path / "gone" / "vectors.bin"  # no folder to write in
    kept = VectorFile(str(missing))
    assert kept.vector("a", "int8", lambda text, compute: [1.0] * vector_file.DIMENSIONS, "m") == [1.0] * 384
    assert not missing.exists()
