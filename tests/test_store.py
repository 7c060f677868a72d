"""The experience store on a real Chroma PersistentClient: dedup, recall, utility, eviction,
concurrency, bad stores. Every test uses its own folder.
"""

import signal
import subprocess
import sys
from pathlib import Path

import chromadb
import numpy as np
import pytest

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.graphs import run_batch
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy import mirror
from pivotal.memory.policy.journal import Journal
from pivotal.memory.policy.registry import close_stores, open_store
from pivotal.memory.storage.chroma import JOURNAL, PREFIX, collection_name
from pivotal.memory.storage.embeddings import MiniLMEmbedding, _cached_vector, embedding

ROOT = Path(__file__).resolve().parents[1]
DEDUP = 0.9


def lesson(
    text: str,
    *,
    kind: str = "guardrail",
    family: str = "files",
    situation: str = "reading files",
    run_id: str = "run-a",
    **fields,
) -> Lesson:
    return Lesson(kind=kind, situation=situation, text=text, outcome="failure", family=family, run_id=run_id, **fields)


@pytest.fixture
def store(tmp_path):
    return open_store(str(tmp_path / "store"))


# --- write path -------------------------------------------------------------------------------


def test_a_paraphrase_merges_into_the_stored_lesson_and_bumps_evidence(store):
    first = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    second = store.add([lesson("Before reading a file, make sure it exists.", run_id="run-b")], dedup_similarity=DEDUP)
    assert second[0].merged and second[0].id == first[0].id
    stored = store.get()
    assert len(stored) == 1 and stored[first[0].id].evidence == 2
    assert stored[first[0].id].source_runs.split() == ["run-a", "run-b"]


def test_different_lessons_kinds_and_families_stay_apart(store):
    store.add(
        [
            lesson("Avoid this: moving left hits the wall."),
            lesson("Avoid this: moving up hits the wall."),  # one key word differs: 0.81 similar
            lesson("Avoid this: moving left hits the wall.", kind="strategy"),
            lesson("Avoid this: moving left hits the wall.", family="other"),
        ],
        dedup_similarity=DEDUP,
    )
    assert store.count() == 4
    assert sorted(store.families()) == ["files", "other"]


def test_a_merge_keeps_the_more_specific_text_and_never_deletes(store):
    store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    written = store.add(
        [lesson("Check that the file exists before reading it, to avoid errors.", run_id="b")], dedup_similarity=0.8
    )
    kept = store.get()[written[0].id]
    assert written[0].merged and kept.text == "Check that the file exists before reading it, to avoid errors."
    assert kept.evidence == 2 and store.count() == 1


def test_keep_text_merges_evidence_without_touching_the_gated_text(store):
    store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    written = store.add(
        [lesson("Check that the file exists before reading it, to avoid errors.", run_id="b")],
        dedup_similarity=0.8,
        keep_text=True,
    )
    assert store.get()[written[0].id].text == "Check the file exists before reading it."


def test_the_same_run_written_twice_counts_once(store):
    """A resumed run may write its lessons again: evidence must not double."""
    [first] = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    [again] = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    assert again.id == first.id and not again.merged  # reported as the run's own insert, as before
    assert next(iter(store.get().values())).evidence == 1


def test_a_lesson_taught_again_is_matched_by_its_id_before_anything_is_embedded(store, monkeypatch):
    """The same kind, family, owner and text (a recipe taught again): dedup's match, at similarity
    1.0, costs no embedding; a new text is embedded as before.
    """
    [first] = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    _cached_vector.cache_clear()
    embedded: list[list[str]] = []
    real = MiniLMEmbedding.__call__
    monkeypatch.setattr(
        MiniLMEmbedding, "__call__", lambda self, input: embedded.append(list(input)) or real(self, input)
    )
    again = lesson("Check the file exists before reading it.", situation="opening files", run_id="run-b")
    match = store.duplicate(again, DEDUP)
    assert match is not None and match.lesson.id == first.id and match.similarity == 1.0 and embedded == []
    assert store.duplicate(lesson("Close the file once it is read.", run_id="run-b"), DEDUP) is None
    assert embedded == [["reading files\nClose the file once it is read."]]


# --- read path --------------------------------------------------------------------------------


def test_recall_filters_family_and_floor_and_ranks_by_similarity(store):
    store.add(
        [
            lesson("Check the file exists before reading it."),
            lesson("Close files after writing them.", situation="writing files"),
            lesson("Check the file exists before reading it.", family="other"),
        ],
        dedup_similarity=DEDUP,
    )
    found = store.search("about to read a file that may not exist", family="files", k=5, min_similarity=0.2)
    assert [r.lesson.text for r in found][0] == "Check the file exists before reading it."
    assert all(r.lesson.family == "files" for r in found)
    assert [r.similarity for r in found] == sorted((r.similarity for r in found), reverse=True)
    assert store.search("quarterly revenue of a bakery", family="files", k=5, min_similarity=0.5) == []
    assert store.search("read a file", family="unknown-family", k=5, min_similarity=0.0) == []


def test_retired_lessons_are_kept_but_never_recalled(store):
    written = store.add(
        [
            lesson(f"Check the file {name} exists before reading it.", situation=f"reading {name}")
            for name in ("a.txt", "b.txt", "c.txt")
        ],
        dedup_similarity=0.99,
    )
    assert len({w.id for w in written}) == 3
    retired = store.retire([written[0].id], "test")
    found = store.search("reading a.txt", family="files", k=3, min_similarity=0.0)
    assert retired[0] not in {r.id for r in found} and len(found) == 2
    assert store.get([retired[0]])[retired[0]].status == "retired"


def test_recall_still_fills_k_when_retired_lessons_crowd_the_neighbourhood(store):
    """Over-fetching without a filter can come back all retired; then recall asks Chroma with one."""
    lessons = [lesson(f"Check file {i} exists before reading it.", situation=f"reading file {i}") for i in range(12)]
    lessons.append(lesson("Close files after writing them.", situation="writing files"))
    written = store.add(lessons, dedup_similarity=0.999)
    store.retire([w.id for w in written[:12]], "test")
    found = store.search("reading file 3", family="files", k=1, min_similarity=0.0)
    assert [r.lesson.text for r in found] == ["Close files after writing them."]


# --- utility and eviction ---------------------------------------------------------------------


def test_outcomes_update_counts_and_utility_once_per_run(store):
    [w] = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    store.record_outcome("r1", "files", {w.id: (3, 3)}, success=True)
    store.record_outcome("r1", "files", {w.id: (3, 3)}, success=True)  # resumed run: no double count
    store.record_outcome("r2", "files", {w.id: (2, 0)}, success=False)
    scored = store.get()[w.id]
    assert (scored.retrievals, scored.successes, scored.step_retrievals, scored.step_approvals) == (2, 1, 5, 3)
    assert scored.utility == pytest.approx(((1 + 1) / 4 + (3 + 1) / 7) / 2, abs=1e-4)


def test_weak_lessons_retire_below_the_floor_only_after_enough_recalls(store):
    [weak, fresh] = store.add(
        [lesson("Check the file exists before reading it."), lesson("Close files after writing them.")],
        dedup_similarity=DEDUP,
    )
    for run in ("r1", "r2"):
        store.record_outcome(run, "files", {weak.id: (1, 0)}, success=False)
    assert store.enforce_limits(floor=0.3, min_retrievals=3, cap=100) == []
    store.record_outcome("r3", "files", {weak.id: (1, 0)}, success=False)
    assert store.enforce_limits(floor=0.3, min_retrievals=3, cap=100) == [weak.id]
    stored = store.get()
    assert stored[weak.id].status == "retired" and "below floor" in stored[weak.id].retired_reason
    assert stored[fresh.id].status == "approved"


def test_the_cap_retires_the_lowest_utility_first(store):
    written = store.add(
        [
            lesson(text)
            for text in (
                "Check the file exists before reading it.",
                "Close files after writing them.",
                "Never write outside the workspace folder.",
            )
        ],
        dedup_similarity=DEDUP,
    )
    store.record_outcome("r1", "files", {written[0].id: (1, 1)}, success=True)
    store.record_outcome("r2", "files", {written[1].id: (1, 0)}, success=False)
    retired = store.enforce_limits(floor=0.0, min_retrievals=99, cap=2)
    assert retired == [written[1].id]
    assert store.count() == 3 and store.count(status="approved") == 2


def _count_writes(store, family: str, monkeypatch) -> dict[str, int]:
    """Chroma write calls on one family's collection: each costs ~20 ms of fsync on disk."""
    collection = store.io.storage.collection(family, create=True)
    calls = {"upsert": 0, "update": 0}
    for name in calls:
        method = getattr(collection, name)

        def counted(*args, _name=name, _method=method, **kwargs):
            calls[_name] += 1
            return _method(*args, **kwargs)

        monkeypatch.setattr(collection, name, counted)
    return calls


def test_a_batch_writes_a_runs_lessons_and_evidence_at_once_and_defers_its_recall_scores(store, monkeypatch):
    known = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)[0]
    scored = store.add([lesson("Set a timeout on every socket you open.")], dedup_similarity=DEDUP)[0]
    store.flush()
    calls = _count_writes(store, "files", monkeypatch)
    with store.batch():
        store.add(
            [lesson("Close files after writing them.", run_id="r2"), lesson("Never write outside the workspace.")],
            dedup_similarity=DEDUP,
        )
        store.add(
            [lesson("Before reading a file, make sure it exists.", run_id="r2")], dedup_similarity=DEDUP, keep_text=True
        )
        store.record_outcome("r2", "files", {known.id: (2, 2), scored.id: (1, 1)}, success=True)
        assert calls == {"upsert": 0, "update": 0}
        assert Journal(str(Path(store.location) / JOURNAL)).read() == ([], [])  # nothing yet
    # the inserts; the merge's evidence and both scores are on disk in the folder's journal, their Chroma write waits
    assert calls == {"upsert": 1, "update": 0}
    journaled, records = Journal(str(Path(store.location) / JOURNAL)).read()
    assert {(x.id, x.evidence, x.retrievals) for x in journaled} == {(known.id, 2, 1), (scored.id, 1, 1)}
    kinds = {(r.kind, r.lesson) for r in records}
    assert kinds >= {("evidence", known.id), ("recall", known.id), ("recall", scored.id)}
    stored = store.get()
    assert len(stored) == 4
    assert stored[known.id].evidence == 2 and stored[known.id].retrievals == 1
    assert stored[scored.id].retrievals == 1  # a score alone waits, but reads see it
    store.flush()
    assert calls == {"upsert": 1, "update": 1}  # the evidence and the scores, together
    assert Journal(str(Path(store.location) / JOURNAL)).read() == ([], [])
    assert _reopened(store).get()[known.id].evidence == 2
    on_disk = _reopened(store).get()
    assert on_disk[known.id].evidence == 2 and on_disk[scored.id].retrievals == 1


def _reopened(store):
    """The same folder opened afresh: what reached the disk."""
    location = store.location
    close_stores()
    return open_store(location)


def test_journaled_runs_reach_chroma_every_defer_runs_lines(store, monkeypatch):
    """The journal is preallocated: a disk that fills shows only when Chroma is written, so that
    happens every DEFER_RUNS runs, not only at close (a batch must stop with the fault mid-way).
    """
    import pivotal.memory.policy.write_buffer as module

    known = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)[0]
    store.flush()
    calls = _count_writes(store, "files", monkeypatch)
    monkeypatch.setattr(module, "DEFER_RUNS", 2)
    for run in ("r2", "r3"):
        with store.batch():
            store.add(
                [lesson("Before reading a file, make sure it exists.", run_id=run)],
                dedup_similarity=DEDUP,
                keep_text=True,
            )
            store.record_outcome(run, "files", {known.id: (1, 1)}, success=True)
        if run == "r2":
            assert calls == {"upsert": 0, "update": 0}  # one journal line: Chroma waits
            assert Journal(str(Path(store.location) / JOURNAL)).read()[0]
    assert calls == {"upsert": 0, "update": 1}  # the second line: both runs' counts in one update
    assert Journal(str(Path(store.location) / JOURNAL)).read() == ([], [])
    stored = _reopened(store).get()[known.id]
    assert (stored.evidence, stored.retrievals) == (3, 2)


def test_deferred_counts_are_written_together_once_enough_gather(store, monkeypatch):
    import pivotal.memory.policy.write_buffer as module

    written = store.add(
        [lesson(f"Lesson number {n} about {topic}.") for n, topic in enumerate(["files", "sockets", "folders"])],
        dedup_similarity=DEDUP,
    )
    store.flush()
    calls = _count_writes(store, "files", monkeypatch)
    monkeypatch.setattr(module, "DEFER_LESSONS", 3)
    for index, w in enumerate(written[:2]):
        store.record_outcome(f"run-{index}", "files", {w.id: (1, 1)}, success=True)
    assert calls["update"] == 0
    store.record_outcome("run-2", "files", {written[2].id: (1, 0)}, success=False)
    assert calls["update"] == 1  # three lessons' counts in one call
    on_disk = _reopened(store).get()
    assert [on_disk[w.id].retrievals for w in written] == [1, 1, 1]


def test_deferred_counts_are_written_once_they_are_old_enough(store, monkeypatch):
    import pivotal.memory.policy.write_buffer as module

    (written,) = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    store.flush()
    calls = _count_writes(store, "files", monkeypatch)
    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    store.record_outcome("run-1", "files", {written.id: (1, 1)}, success=True)
    assert calls["update"] == 0
    now[0] += module.DEFER_SECONDS
    store.record_outcome("run-2", "files", {written.id: (1, 1)}, success=True)
    assert calls["update"] == 1
    assert _reopened(store).get()[written.id].retrievals == 2


def test_a_retirement_is_written_at_once_with_the_deferred_counts(store, monkeypatch):
    (written,) = store.add([lesson("Always delete the cache first.")], dedup_similarity=DEDUP)
    store.flush()
    calls = _count_writes(store, "files", monkeypatch)
    store.record_outcome("run-1", "files", {written.id: (2, 0)}, success=False)
    assert calls["update"] == 0
    store.retire([written.id], "test")
    assert calls["update"] == 1
    monkeypatch.undo()
    stored = _reopened(store).get()[written.id]  # nothing else was flushed: the retirement carried the counts
    assert stored.status == "retired" and stored.retrievals == 1


@pytest.mark.slow
def test_a_runs_evidence_survives_the_process_killed_before_chroma_has_it(tmp_path):
    """Killed (-9) right after a run's batch: its merge's evidence, recall score and records were
    in the journal only; the next process to open the folder writes them to Chroma before anything is read.
    """
    folder = tmp_path / "store"
    script = f"""
import os, signal
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import open_store
def lesson(text, run):
    return Lesson(kind="guardrail", situation="reading files", text=text, outcome="failure", family="files", run_id=run)
store = open_store({str(folder)!r})
(w,) = store.add([lesson("Check the file exists before reading it.", "run-a")], dedup_similarity=0.9)
store.flush()
with store.batch():
    store.add([lesson("Before reading a file, make sure it exists.", "run-b")], dedup_similarity=0.9, keep_text=True)
    store.record_outcome("run-b", "files", {{w.id: (2, 2)}}, success=True)
print(w.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    lesson_id = killed.stdout.split()[0]
    raw = chromadb.PersistentClient(path=str(folder)).get_collection(collection_name("files"))
    assert raw.get(ids=[lesson_id])["metadatas"][0]["evidence"] == 1  # Chroma had not been written
    del raw
    store = open_store(str(folder))
    stored = store.get()[lesson_id]
    assert stored.evidence == 2 and stored.source_runs.split() == ["run-a", "run-b"]
    assert (stored.retrievals, stored.step_approvals) == (1, 2)  # the run's recall score was journaled with it
    assert sorted(r.run for r in store.lineage(stored) if r.kind == "evidence") == ["run-a", "run-b"]
    assert Journal(str(folder / JOURNAL)).read() == ([], [])  # written to Chroma, then emptied


@pytest.mark.slow
def test_deferred_counts_reach_the_disk_when_the_process_exits_without_closing(tmp_path):
    folder = tmp_path / "store"
    script = f"""
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import open_store
store = open_store({str(folder)!r})
(w,) = store.add([Lesson(kind="guardrail", situation="reading files", text="Check the file exists before reading it.",
                         outcome="failure", family="files", run_id="run-a")], dedup_similarity=0.9)
store.flush()
store.record_outcome("run-b", "files", {{w.id: (2, 2)}}, success=True)
store.record_outcome("run-c", "files", {{w.id: (1, 0)}}, success=False)
"""
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=120)
    store = open_store(str(folder))
    (stored,) = store.get().values()
    assert stored.retrievals == 2 and stored.successes == 1
    assert store.family_runs("files") == (2, 1)


def test_reads_inside_a_batch_see_its_writes(store):
    with store.batch():
        (written,) = store.add([lesson("Close files after writing them.")], dedup_similarity=DEDUP)
        again = store.add([lesson("Close files after you write them.", run_id="r2")], dedup_similarity=DEDUP)
        assert again[0].merged and again[0].id == written.id  # matched against the held insert
        assert store.get([written.id])[written.id].evidence == 2
    assert store.get()[written.id].evidence == 2


def test_a_failed_batch_writes_nothing(store):
    with pytest.raises(RuntimeError), store.batch():
        store.add([lesson("Close files after writing them.")], dedup_similarity=DEDUP)
        raise RuntimeError("the run's writer failed half way")
    assert store.get() == {}
    store.add([lesson("Close files after writing them.")], dedup_similarity=DEDUP)
    assert len(store.get()) == 1


# --- concurrency ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_fifty_concurrent_runs_lose_no_lesson_and_duplicate_none(tmp_path):
    store_path = str(tmp_path / "store")
    tasks = [{"env": "gridworld", "params": {"seed": seed % 10}} for seed in range(50)]
    context = Context(
        model="sim:error=0.35,seed=3", lesson_model="sim", critic=False, max_steps=12, store_path=store_path
    )
    results = await run_batch(tasks, context, concurrency=50, checkpoint_path=":memory:")
    assert not [r.error for r in results if r.status == "error"]
    store = open_store(store_path)
    stored = store.get()
    assert sum(r.lessons["written"] for r in results) == len(stored) > 0  # every insert landed once
    assert sum(r.lessons["merged"] for r in results) > 0  # the same lessons recurred across runs
    # each insert is one piece of evidence and each merge adds one: nothing lost, nothing twice
    assert sum(lesson.evidence for lesson in stored.values()) == sum(
        r.lessons["written"] + r.lessons["merged"] for r in results
    )
    for lesson_ in stored.values():  # no two stored lessons are near-duplicates of each other
        match = [
            r
            for r in store.search(lesson_.document, family="gridworld", k=2, min_similarity=DEDUP)
            if r.id != lesson_.id and r.lesson.kind == lesson_.kind
        ]
        assert not match, (lesson_.text, match[0].lesson.text)


# --- bad stores -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_store_held_by_another_process_is_refused_clearly(tmp_path):
    folder = tmp_path / "store"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pivotal.memory.policy.registry import open_store; "
            "open_store(sys.argv[1]); print('open', flush=True); time.sleep(60)",
            str(folder),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(PivotalError, match=rf"in use by process {holder.pid}.*PIVOTAL_STORE_URL"):
            open_store(str(folder))
    finally:
        holder.kill()
        holder.wait()
    assert open_store(str(folder)).count() == 0  # free again once the holder is gone


def test_a_corrupt_store_is_refused_and_left_as_it_was(tmp_path):
    folder = tmp_path / "store"
    open_store(str(folder)).add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    close_stores()
    database = folder / "chroma.sqlite3"
    damaged = b"this is not a database" * 100
    database.write_bytes(damaged)
    with pytest.raises(
        PivotalError, match=r"lesson store .* is damaged \(file is not a database\).*nothing was changed"
    ):
        open_store(str(folder))
    assert database.read_bytes() == damaged


def test_a_collection_from_another_embedding_model_is_refused_and_kept(tmp_path):
    folder = tmp_path / "store"
    client = chromadb.PersistentClient(path=str(folder))
    foreign = client.create_collection(collection_name("files"), metadata={"family": "files"}, embedding_function=None)
    foreign.add(ids=["x"], embeddings=[[0.1, 0.2, 0.3]], documents=["three dimensions"])
    client.close()
    store = open_store(str(folder))
    with pytest.raises(PivotalError, match=r"cannot be used .*384 dimensions.*nothing was changed"):
        store.search("reading", family="files", k=3, min_similarity=0.0)
    with pytest.raises(PivotalError, match="cannot be used"):
        store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    close_stores()
    reopened = chromadb.PersistentClient(path=str(folder))
    assert reopened.get_collection(collection_name("files")).get(ids=["x"])["documents"] == ["three dimensions"]


class _BeforeInt8(MiniLMEmbedding):
    """The embedding function as stores made before int8 compute saved it: no `compute` in its config."""

    def __init__(self) -> None:
        super().__init__(compute="float")

    def get_config(self):
        return {"threads": 1}


def test_a_store_made_before_int8_keeps_comparing_float_vectors_and_new_families_get_int8(tmp_path):
    folder, old = tmp_path / "store", lesson("Check the file exists before reading it.")
    client = chromadb.PersistentClient(path=str(folder))
    made = client.create_collection(
        collection_name("files"),
        metadata={"family": "files"},
        embedding_function=_BeforeInt8(),
        configuration={"hnsw": {"space": "cosine"}},
    )
    made.add(ids=[old.id], documents=[old.document], metadatas=[old.metadata()])  # float vectors, by Chroma
    client.close()

    store = open_store(str(folder))
    [found] = store.search(old.document, family="files", k=1, min_similarity=0.0)
    assert found.similarity > 0.9999  # the query is embedded as the stored lesson was: float
    http = lesson("Retry the request once after a timeout.", family="http")
    [written] = store.add([http], dedup_similarity=DEDUP)
    [merged] = store.add([lesson("Check the file exists before reading it.", run_id="run-b")], dedup_similarity=DEDUP)
    assert merged.merged and merged.id == old.id
    close_stores()

    reopened = chromadb.PersistentClient(path=str(folder))
    lessons = [c for c in reopened.list_collections() if c.name.startswith(PREFIX)]  # not the ledger's
    configs = {c.name: c.configuration_json["embedding_function"]["config"] for c in lessons}
    assert configs[collection_name("files")] == {"threads": 1}  # untouched: still read as float
    assert configs[collection_name("http")]["compute"] == "int8"
    http_collection = reopened.get_collection(collection_name("http"))
    [stored] = http_collection.get(ids=[written.id], include=["embeddings"])["embeddings"]
    np.testing.assert_allclose(stored, embedding("int8")([http.document])[0], atol=1e-5)
    assert float(np.dot(stored, embedding("float")([http.document])[0])) < 0.9999  # not the float vector


def test_an_import_embeds_each_lesson_in_int8_as_a_query_would(store):
    imported = [lesson(f"Lesson number {i} about reading files.", situation=f"case {i}") for i in range(5)]
    store.put(imported)
    stored = store.io.storage.client.get_collection(collection_name("files")).get(include=["embeddings"])
    for lesson_id, vector in zip(stored["ids"], stored["embeddings"], strict=True):
        [match] = [item for item in imported if item.id == lesson_id]
        np.testing.assert_allclose(vector, embedding("int8")([match.document])[0], atol=1e-5)


def test_after_a_run_only_the_lessons_it_scored_are_checked_against_the_floor(store):
    [weak, other] = store.add(
        [lesson("Check the file exists before reading it."), lesson("Close files after writing them.")],
        dedup_similarity=DEDUP,
    )
    for run in ("r1", "r2", "r3"):
        store.record_outcome(run, "files", {other.id: (1, 0)}, success=False)
    scored = store.record_outcome("r4", "files", {weak.id: (1, 0)}, success=False)
    assert store.enforce_limits(floor=0.4, min_retrievals=1, cap=100, scored=scored) == [weak.id]
    assert store.get()[other.id].status == "approved"  # weak too, but not this run's business


# --- kept recall answers --------------------------------------------------------------------


def _texts(store, query: str = "reading files") -> list[str]:
    return [r.lesson.text for r in store.search(query, family="files", k=3, min_similarity=0.0)]


def test_a_kept_recall_answer_follows_a_lesson_retired_or_added(store):
    store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    assert _texts(store) == ["Check the file exists before reading it."]  # now kept for this query
    (stored,) = store.lessons(family="files")
    store.retire([stored.id], "test")
    assert _texts(store) == []
    store.add([lesson("Open files read-only unless writing.", run_id="run-b")], dedup_similarity=DEDUP)
    assert _texts(store) == ["Open files read-only unless writing."]


def test_counting_a_recall_keeps_the_answer_and_the_counts_stay_exact(store):
    store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    (found,) = store.search("reading files", family="files", k=3, min_similarity=0.0)
    store.record_outcome("run-z", "files", {found.id: (2, 1)}, success=True)
    assert _texts(store) == ["Check the file exists before reading it."]
    assert store.get([found.id])[found.id].retrievals == 1


def test_kept_answers_stay_equal_to_a_fresh_query_through_writes(store, tmp_path):
    """Each write places new lessons into the kept answers instead of dropping them; a cold store
    on the same folder (nothing kept) must give the same answers after every write.
    """
    queries = ["reading files", "writing files", "deleting a folder", "opening a socket"]
    texts = [
        "Check the file exists before reading it.",
        "Close files after writing them.",
        "Never delete a folder without listing it first.",
        "Open files read-only unless writing.",
        "Set a timeout on every socket you open.",
        "Write to a temporary file, then rename it.",
        "A folder that holds a .git directory is a repository: do not delete it.",
    ]
    for query in queries:
        _texts(store, query)  # kept from here on
    for index, text in enumerate(texts):
        written = store.add([lesson(text, run_id=f"run-{index}")], dedup_similarity=DEDUP)
        if index == 3:
            store.retire([written[0].id], "test")
        for query in queries:
            kept = store.search(query, family="files", k=3, min_similarity=0.0)
            store.shelf.forget_recall()
            fresh = store.search(query, family="files", k=3, min_similarity=0.0)
            assert [r.id for r in kept] == [r.id for r in fresh], (index, query)
            assert [round(r.similarity, 4) for r in kept] == [round(r.similarity, 4) for r in fresh]


def test_a_kept_answer_serves_every_instance_without_asking_chroma(store, monkeypatch):
    store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    store.search("reading files", family="files", k=3, min_similarity=0.0, instance="maze-a")
    collection = store.io.storage.collection("files", create=False)
    asked = []
    monkeypatch.setattr(collection, "query", lambda *a, **k: asked.append(k))
    found = store.search("reading files", family="files", k=3, min_similarity=0.0, instance="maze-b")
    assert [r.lesson.text for r in found] == ["Check the file exists before reading it."] and asked == []


def test_a_server_store_keeps_no_answers(tmp_path):
    """Another process may approve a lesson at any time: only a store this process owns keeps answers."""
    from pivotal.memory.policy.store import ExperienceStore
    from pivotal.memory.storage.chroma import on_client

    client = chromadb.PersistentClient(path=str(tmp_path / "shared"))
    shared = ExperienceStore(on_client(client, "shared", private=False))
    shared.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    assert _texts(shared) == ["Check the file exists before reading it."]
    other_writer = ExperienceStore(on_client(client, "shared", private=False))
    other_writer.add([lesson("Open files read-only unless writing.", run_id="run-b")], dedup_similarity=DEDUP)
    assert len(_texts(shared)) == 2


# --- lessons that hurt --------------------------------------------------------------------------


def _runs(store, lesson_id: str | None, outcomes: list[bool], prefix: str) -> list[Lesson]:
    scored = []
    for i, success in enumerate(outcomes):
        usage = {lesson_id: (2, 2)} if lesson_id else {}
        scored = store.record_outcome(f"{prefix}-{i}", "files", usage, success=success) or scored
    return scored


def test_a_lesson_whose_runs_fail_clearly_more_often_than_the_familys_others_is_retired(store):
    (written,) = store.add([lesson("Always delete the cache first.")], dedup_similarity=DEDUP)
    _runs(store, None, [True] * 10, "without")
    scored = _runs(store, written.id, [False] * 6, "with")
    retired = store.enforce_limits(floor=0.0, min_retrievals=3, cap=100, scored=scored)
    assert retired == [written.id]
    reason = store.get([written.id])[written.id].retired_reason
    assert reason.startswith("runs that recalled it succeeded 0/6") and "100% of the family's 10 other runs" in reason


def test_a_lesson_that_does_as_well_as_the_family_stays(store):
    (written,) = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    _runs(store, None, [True, False] * 5, "without")
    scored = _runs(store, written.id, [True, False, False, True, False, True], "with")
    assert store.enforce_limits(floor=0.0, min_retrievals=3, cap=100, scored=scored) == []


def test_a_resumed_run_counts_once_in_the_familys_record(store):
    store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    for _ in range(3):
        store.record_outcome("same-run", "files", {}, success=True)
    store.flush()
    assert _reopened(store).family_runs("files") == (1, 1)


@pytest.fixture
def unmirrored(monkeypatch) -> None:
    """The family is never read into memory (memory/policy/mirror.py reads a small one at its first
    query): Chroma answers every query, as it does a large family's first ones.
    """
    monkeypatch.setattr(mirror, "VECTORS_PER_QUERY", 1e-9)


def _spy_reads(store, family: str, monkeypatch) -> dict[str, list]:
    """What a private store asks Chroma to read: each `get`, and what each query includes."""
    collection = store.io.storage.collection(family, create=True)
    asked: dict[str, list] = {"get": [], "query": []}
    get, query = collection.get, collection.query

    def counted_get(*args, **kwargs):
        asked["get"].append(kwargs.get("ids"))
        return get(*args, **kwargs)

    def counted_query(*args, **kwargs):
        asked["query"].append(kwargs.get("include"))
        return query(*args, **kwargs)

    monkeypatch.setattr(collection, "get", counted_get)
    monkeypatch.setattr(collection, "query", counted_query)
    return asked


def _search_afresh(store, times: int) -> list:
    """A new situation each time: asked of Chroma, not kept."""
    for _ in range(times):
        store._near.forget()
        found = store.search("reading a file", family="files", k=1, min_similarity=0.0)
    return found


def test_once_the_lessons_it_knows_cover_its_queries_a_store_asks_chroma_for_distances_only(
    store, monkeypatch, unmirrored
):
    written = store.add(
        [lesson("Check the file exists before reading it."), lesson("Close files after writing them.")],
        dedup_similarity=DEDUP,
    )
    asked = _spy_reads(store, "files", monkeypatch)
    _search_afresh(store, 10)
    assert asked["query"][0] == ["metadatas", "distances"] and asked["query"][-1] == ["distances"]
    assert asked["get"] == []  # both lessons known since written: nothing more to read
    store.record_outcome("run-b", "files", {written[0].id: (1, 1)}, success=True)
    store.flush()
    found = _search_afresh(store, 1)
    assert found[0].lesson.text == "Check the file exists before reading it." and found[0].lesson.retrievals == 1
    assert asked["query"][-1] == ["distances"] and asked["get"] == []
    reopened = _reopened(store)  # a new process knows nothing: the first queries read the metadata
    asked = _spy_reads(reopened, "files", monkeypatch)
    assert _search_afresh(reopened, 10)[0].lesson.retrievals == 1
    assert asked["query"][0] == ["metadatas", "distances"] and asked["query"][-1] == ["distances"]
    assert asked["get"] == []


def test_a_store_whose_queries_find_lessons_it_does_not_know_reads_them_with_the_query(store, monkeypatch, unmirrored):
    """A get after a distances-only query costs more than the metadata read it saves."""
    store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    asked = _spy_reads(store, "files", monkeypatch)
    for _ in range(10):
        store.shelf.forget_recall()  # nothing known, as in a store far larger than what it keeps
        store.search("reading a file", family="files", k=1, min_similarity=0.0)
    assert asked["query"] == [["metadatas", "distances"]] * 10 and asked["get"] == []


def test_the_lessons_a_store_knows_stay_equal_to_what_chroma_holds(store):
    """Inserts, merges, scores (deferred, then flushed) and a retirement: the versions the store
    keeps in memory must be exactly the ones on disk after each.
    """
    texts = ["Check the file exists before reading it.", "Close files after writing them."]
    first = store.add([lesson(t) for t in texts], dedup_similarity=DEDUP)
    store.add([lesson("Before reading a file, make sure it exists.", run_id="r2")], dedup_similarity=DEDUP)
    store.record_outcome("r2", "files", {first[0].id: (2, 1), first[1].id: (1, 1)}, success=False)
    store.flush()
    store.retire([first[1].id], "test")
    collection = store.io.storage.collection("files", create=False)
    on_disk = collection.get(include=["metadatas"])
    stored = {i: Lesson.from_record(i, dict(m)) for i, m in zip(on_disk["ids"], on_disk["metadatas"], strict=True)}
    assert stored == {i: store.io.known[i] for i in stored}
    assert stored[first[0].id].evidence == 2 and stored[first[0].id].retrievals == 1
    assert stored[first[1].id].status == "retired"


def test_a_server_store_reads_every_lesson_from_chroma(tmp_path):
    """Another process may change a lesson at any time: only a store this process owns keeps them."""
    from pivotal.memory.policy.store import ExperienceStore
    from pivotal.memory.storage.chroma import on_client

    client = chromadb.PersistentClient(path=str(tmp_path / "shared"))
    shared = ExperienceStore(on_client(client, "shared", private=False))
    written = shared.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    ExperienceStore(on_client(client, "shared", private=False)).record_outcome(
        "run-b", "files", {written[0].id: (1, 1)}, success=True
    )
    assert shared.io.known == {}
    assert shared.search("reading files", family="files", k=1, min_similarity=0.0)[0].lesson.retrievals == 1


def test_a_read_that_a_write_overtook_is_not_kept(store, monkeypatch):
    """A search reads in its own thread while a run writes: the older version it read must not
    replace the newer one the store knows.
    """
    written = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)[0]
    store.shelf.forget_recall()  # nothing known: the next get reads Chroma
    collection = store.io.storage.collection("files", create=False)
    get, overtaken = collection.get, []

    def slow_get(*args, **kwargs):
        found = get(*args, **kwargs)
        if not overtaken:  # the retirement lands while this read is on its way back
            overtaken.append(written.id)
            store.retire([written.id], "test")
        return found

    monkeypatch.setattr(collection, "get", slow_get)
    assert store.get([written.id])[written.id].status == "approved"  # what that read saw
    assert overtaken == [written.id] and store.io.known[written.id].status == "retired"
    assert store.get([written.id])[written.id].status == "retired"


def test_a_lesson_read_back_from_chroma_equals_the_one_written(store):
    """Chroma keeps ~15 significant digits of a float; about one time.time() in eight has more.
    The creation time is kept to the millisecond so the copy in memory matches the disk.
    """
    written = [lesson(f"Lesson number {n} about files.", created_at=1796139886.2185519 + n / 7) for n in range(40)]
    store.add(written, dedup_similarity=1.01)
    on_disk = store.io.storage.collection("files", create=False).get(include=["metadatas"])
    times = {i: m["created_at"] for i, m in zip(on_disk["ids"], on_disk["metadatas"], strict=True)}
    assert times == {w.id: store.io.known[w.id].created_at for w in written}
