"""A private store answers nearest-lesson queries from its vectors in memory (memory/policy/mirror.py):
the same lessons, in the same order, as the backend's own query — filtered or not, and after every
kind of write — on a real Chroma folder, with far fewer calls to it.
"""

import random

import numpy as np
import pytest
from langgraph.store.memory import InMemoryStore

from pivotal.memory.lesson import SHARED, Lesson
from pivotal.memory.policy import mirror
from pivotal.memory.policy.mirror import Rows, matches
from pivotal.memory.policy.registry import open_store
from pivotal.memory.policy.store import ExperienceStore
from pivotal.memory.storage.base import Only
from pivotal.memory.storage.chroma import ChromaLessons
from pivotal.memory.storage.langgraph import on_store

OWNER = "acme/lessons"
SITUATIONS = ["a locked door", "a dark corridor", "a slippery floor", "a hole ahead", "a wall to the left"]
TEXTS = ["Open it with the key.", "Walk slowly and look.", "Go around it.", "Step back first.", "Turn right."]


def lesson(i: int, rng: random.Random) -> Lesson:
    return Lesson(
        kind=rng.choice(["skill", "strategy", "guardrail"]),
        family="maze",
        outcome="failure",
        situation=f"{rng.choice(SITUATIONS)} (place {i})",
        text=f"{rng.choice(TEXTS)} Case {i}.",
        status=rng.choice(["approved", "approved", "pending", "retired"]),
        owner=rng.choice([OWNER, OWNER, SHARED, "globex/lessons"]),
        instances=rng.choice(["", "", "maze-1", "maze-2"]),
        level="task",
        run_id=f"run-{i}",
    )


FILTERS = [
    None,
    Only(status="approved"),
    Only(status="approved", owners=(OWNER, SHARED), scopes=("", "maze-1")),
    Only(kind="skill", owners=(OWNER,)),
    Only(status="pending", scopes=("maze-2",)),
]


@pytest.fixture
def store(tmp_path, monkeypatch) -> ExperienceStore:
    monkeypatch.setattr(mirror, "VECTORS_PER_QUERY", 10**6)  # mirrored from the first query
    rng = random.Random(7)
    opened = open_store(str(tmp_path / "store"))
    opened.put([lesson(i, rng) for i in range(120)])
    return opened


def both(store: ExperienceStore, text: str, n: int, only: Only | None) -> tuple[list, list]:
    """(the mirror's answer, the backend's) for one query."""
    vector = store.io.storage.vector("maze", text)
    mirrored = store.shelf.query("maze", vector, n, only, text)
    assert store.shelf.mirror is not None and store.shelf.mirror.rows("maze") is not None
    # the backend's answer as the store gives it: in the versions it has yet to write (a deferred score)
    backend = [(store.buffer.held(lesson), s) for lesson, s in store.io.query("maze", vector, n, only, text)]
    return mirrored, backend


def same(mirrored: list[tuple[Lesson, float]], backend: list[tuple[Lesson, float]]) -> None:
    assert [lesson.id for lesson, _ in mirrored] == [lesson.id for lesson, _ in backend]
    assert [lesson for lesson, _ in mirrored] == [lesson for lesson, _ in backend]
    assert np.allclose([s for _, s in mirrored], [s for _, s in backend], atol=1e-4)


@pytest.mark.parametrize("only", FILTERS, ids=["any", "approved", "recall", "kind-owner", "scope"])
@pytest.mark.parametrize("text", ["a locked door", "the floor is slippery here", "Turn right. Case 7."])
def test_the_mirror_answers_as_the_backend_does(store, text, only):
    for n in (1, 3, 12):
        same(*both(store, text, n, only))


def test_the_mirror_stays_true_after_each_kind_of_write(store):
    text, recall = "a hole ahead", FILTERS[2]
    same(*both(store, text, 12, recall))
    new = Lesson(kind="skill", family="maze", outcome="failure", situation="a hole ahead", text="Jump it.", owner=OWNER)
    [added] = store.add([new], dedup_similarity=0.99)
    assert not added.merged
    found, backend = both(store, text, 12, None)
    same(found, backend)
    assert added.id in [lesson.id for lesson, _ in found]
    approved = [lesson for lesson, _ in both(store, text, 12, recall)[0]]
    store.retire([approved[0].id], "test")  # a status change: out of the approved answer
    found, backend = both(store, text, 12, recall)
    same(found, backend)
    assert approved[0].id not in [lesson.id for lesson, _ in found]
    store.record_outcome("run-x", "maze", {approved[1].id: (2, 2)}, success=True)  # a deferred score
    [(scored, _)] = [pair for pair in both(store, text, 12, recall)[0] if pair[0].id == approved[1].id]
    assert scored.retrievals == approved[1].retrievals + 1
    store.put([lesson(500, random.Random(1)).model_copy(update={"status": "approved", "instances": ""})])  # import
    same(*both(store, text, 12, recall))
    store.shelf.remove("maze", [approved[1].id])  # a revocation deletes
    found, backend = both(store, text, 12, recall)
    same(found, backend)
    assert approved[1].id not in [lesson.id for lesson, _ in found]


def test_a_filter_the_nearest_rows_do_not_meet_is_left_to_the_backend(store, monkeypatch):
    monkeypatch.setattr(mirror, "SCAN_MAX", 4)
    rows = store.shelf._mirrored("maze")
    assert rows is not None
    rare = Only(status="pending", kind="guardrail", owners=("globex/lessons",))
    vector = store.io.storage.vector("maze", "a locked door")
    assert rows.nearest(np.asarray(vector), 3, rare, store.shelf._read_ids("maze")) is None
    same(*both(store, "a locked door", 3, rare))


def _asking(tmp_path, monkeypatch, lessons: int) -> tuple[ExperienceStore, list[int]]:
    """A store of `lessons` approved lessons, and the list its Chroma queries are counted in."""
    calls: list[int] = []
    nearest = ChromaLessons.nearest
    monkeypatch.setattr(ChromaLessons, "nearest", lambda *a, **k: calls.append(1) or nearest(*a, **k))
    store = open_store(str(tmp_path / "store"))
    store.put([lesson(i, random.Random(i)).model_copy(update={"status": "approved"}) for i in range(lessons)])
    return store, calls


def test_recall_asks_chroma_until_reading_the_family_costs_no_more_than_its_queries(tmp_path, monkeypatch):
    monkeypatch.setattr(mirror, "VECTORS_PER_QUERY", 10)  # 40 lessons cost 4 queries to read
    store, calls = _asking(tmp_path, monkeypatch, 40)
    for i in range(60):
        store.search(f"{SITUATIONS[i % 5]} number {i}", family="maze", k=3, min_similarity=0.0, owner=OWNER)
    assert len(calls) == 4 and store.shelf.mirror is not None and store.shelf.mirror.rows("maze") is not None


def test_a_family_smaller_than_one_query_is_read_at_its_first(tmp_path, monkeypatch):
    store, calls = _asking(tmp_path, monkeypatch, 40)  # 40 vectors cost less than a query (VECTORS_PER_QUERY)
    for i in range(10):
        store.search(f"{SITUATIONS[i % 5]} number {i}", family="maze", k=3, min_similarity=0.0, owner=OWNER)
    assert calls == []


def test_a_family_too_big_is_never_read_and_left_to_the_backend(store, monkeypatch):
    """Its size is known before a read: a read of MIRROR_MAX + 1 rows (~0.6 s) that keeps nothing is never made."""
    reads = []
    with_vectors = ChromaLessons.with_vectors
    monkeypatch.setattr(ChromaLessons, "with_vectors", lambda *a, **k: reads.append(1) or with_vectors(*a, **k))
    monkeypatch.setattr(mirror, "MIRROR_MAX", 50)
    monkeypatch.setattr("pivotal.memory.policy.shelf.MIRROR_MAX", 50)
    store.shelf.forget_recall()
    for i in range(5):
        store.add([lesson(900 + i, random.Random(i))], dedup_similarity=0.99)
        found = store.search(SITUATIONS[i], family="maze", k=3, min_similarity=0.0, owner=OWNER)
        assert found
    assert reads == [] and store.shelf.mirror is not None and store.shelf.mirror.rows("maze") is None


def test_a_shared_store_is_never_mirrored():
    shared = ExperienceStore(on_store(InMemoryStore(), ("lessons",)))
    assert shared.shelf.mirror is None


def test_rows_place_new_and_rewritten_texts():
    rows = Rows.of(["a"], np.asarray([[1.0, 0.0]], dtype=np.float32))
    rows = rows.written(["b", "a"], [[0.0, 1.0], [0.6, 0.8]])
    assert rows.ids == ("a", "b") and np.allclose(rows.vectors, [[0.6, 0.8], [0.0, 1.0]])
    assert Rows.of([], np.empty((0, 0), np.float32)).written(["c"], [[1.0, 0.0]]).ids == ("c",)


def test_the_filter_reads_only_as_the_backends_do():
    stored = Lesson(kind="skill", family="f", outcome="failure", situation="s", text="t", owner=OWNER)
    assert matches(stored, Only()) and matches(stored, Only(owners=(OWNER, SHARED), scopes=("",)))
    assert not matches(stored, Only(status="retired")) and not matches(stored, Only(scopes=("maze-1",)))
