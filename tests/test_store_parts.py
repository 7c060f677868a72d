"""The store's parts, each alone: reads and writes against a real Chroma folder, the write buffer,
the family runs and approved counts, the open-store registry; then one policy on both backends
for owners (two tenants, the shared tier, a cap per owner).
"""

import chromadb
import pytest
from langgraph.store.memory import InMemoryStore

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.memory.lesson import SHARED, Lesson
from pivotal.memory.policy import write_buffer
from pivotal.memory.policy.lesson_io import LessonIO, owned
from pivotal.memory.policy.limits import FamilyRuns, OwnerCounts
from pivotal.memory.policy.registry import close_store, lesson_store, open_store, opened_store
from pivotal.memory.policy.store import ExperienceStore
from pivotal.memory.policy.write_buffer import WriteBuffer
from pivotal.memory.storage.base import Only
from pivotal.memory.storage.chroma import ChromaLessons, ChromaRecords, where_of
from pivotal.memory.storage.embeddings import langgraph_index, query_vector
from pivotal.memory.storage.langgraph import on_store

DEDUP = 0.9
ALICE, BOB = "acme/lessons", "globex/lessons"


def lesson(text: str, *, owner: str = "pivotal/lessons", run_id: str = "run-a", **fields) -> Lesson:
    return Lesson(
        kind=fields.pop("kind", "guardrail"),
        situation=fields.pop("situation", "reading files"),
        text=text,
        outcome="failure",
        family=fields.pop("family", "files"),
        run_id=run_id,
        owner=owner,
        **fields,
    )


@pytest.fixture
def io(tmp_path) -> LessonIO:
    return LessonIO(ChromaLessons(chromadb.PersistentClient(path=str(tmp_path / "io")), "io"), "io", private=True)


# ---- reads and writes (memory/policy/lesson_io.py) -----------------------------------------------------
def test_the_io_writes_reads_and_queries_lessons_in_a_real_folder(io):
    first, second = lesson("Check the file exists before reading it."), lesson("Close every socket you open.")
    io.upsert([first, second], embedded=False)
    assert {x.id for x in io.read("files", None)} == {first.id, second.id}
    [(found, similarity)] = io.query("files", query_vector(first.document, io.storage.compute("files")), 1, None, "")
    assert found.id == first.id and similarity > 0.99


def test_an_update_changes_the_metadata_and_keeps_the_text_and_its_vector(io):
    stored = lesson("Check the file exists before reading it.")
    io.upsert([stored], embedded=False)
    collection = io.storage.collection("files", create=False)
    before = collection.get(ids=[stored.id], include=["embeddings", "documents"])
    io.update([stored.model_copy(update={"status": "retired"})])
    after = collection.get(ids=[stored.id], include=["embeddings", "documents", "metadatas"])
    assert after["metadatas"][0]["status"] == "retired" and after["documents"] == before["documents"]
    assert list(after["embeddings"][0]) == list(before["embeddings"][0])


def test_a_private_update_writes_only_the_fields_that_changed_and_every_field_reads_back(io, tmp_path, monkeypatch):
    """Chroma merges a row's fields, and each field costs; a lesson with nothing changed is no write."""
    stored, other = lesson("Check the file exists before reading it."), lesson("Close every socket you open.")
    io.upsert([stored, other], embedded=False)
    collection = io.storage.collection("files", create=False)
    sent: list[dict] = []
    update = collection.update
    monkeypatch.setattr(collection, "update", lambda **kw: (sent.append(kw), update(**kw))[1])
    scored = stored.model_copy(update={"retrievals": 3, "utility": 0.75, "scored_runs": "run-b run-c"})
    io.update([scored, other])
    assert sent == [
        {"ids": [stored.id], "metadatas": [{"retrievals": 3, "utility": 0.75, "scored_runs": "run-b run-c"}]}
    ]
    io.update([scored])
    assert len(sent) == 1  # nothing changed since: no call
    reopened = LessonIO(ChromaLessons(chromadb.PersistentClient(path=str(tmp_path / "io")), "io"), "io", private=True)
    assert reopened.read("files", [stored.id, other.id]) == [scored, other]


def test_a_shared_store_writes_every_field_as_others_may_have_written_it(tmp_path, monkeypatch):
    io = LessonIO(ChromaLessons(chromadb.PersistentClient(path=str(tmp_path / "io")), "io"), "io", private=False)
    stored = lesson("Check the file exists before reading it.")
    io.upsert([stored], embedded=False)
    collection = io.storage.collection("files", create=False)
    sent: list[dict] = []
    monkeypatch.setattr(collection, "update", lambda **kw: sent.append(kw))
    io.update([stored.model_copy(update={"retrievals": 3})])
    assert sent[0]["metadatas"][0] == stored.model_copy(update={"retrievals": 3}).metadata()


def test_a_lessons_changed_fields_are_its_fields_that_differ_from_a_stored_version():
    stored = lesson("Check the file exists before reading it.", instances="maze-1")
    assert stored.metadata(since=stored) == {}
    assert stored.model_copy(update={"evidence": 2}).metadata(since=stored) == {"evidence": 2}
    assert stored.model_copy(update={"instances": ""}).metadata(since=stored) == {"instances": "", "scope": ""}


def test_a_read_of_a_known_lesson_needs_no_call_and_a_delete_forgets_it(io, monkeypatch):
    stored = lesson("Check the file exists before reading it.")
    io.upsert([stored], embedded=False)
    collection = io.storage.collection("files", create=False)
    monkeypatch.setattr(collection, "get", lambda **_: pytest.fail("a known lesson was read again"))
    assert io.read("files", [stored.id]) == [stored]
    monkeypatch.undo()
    io.delete("files", [stored.id])
    assert stored.id not in io.known and io.read("files", [stored.id]) == []


def test_a_record_another_tool_wrote_is_refused_in_one_line(io):
    io.storage.collection("files", create=True).upsert(ids=["x"], documents=["hello"], metadatas=[{"kind": "nonsense"}])
    with pytest.raises(PivotalError) as refused:
        io.read("files", None)
    assert "'x' is not a Pivotal lesson" in str(refused.value) and "\n" not in str(refused.value)


def test_where_joins_terms_and_the_default_owner_is_not_filtered():
    """The policy asks in Pivotal's words (`Only`); Chroma's `where` is spelt in its backend only."""
    assert where_of(None) is None and where_of(Only()) is None and where_of(Only(kind="skill")) == {"kind": "skill"}
    assert where_of(Only(status="approved", kind="skill")) == {"$and": [{"status": "approved"}, {"kind": "skill"}]}
    assert owned("pivotal/lessons", shared=True) == ()
    assert where_of(Only(owners=owned(ALICE, shared=True))) == {"owner": {"$in": [ALICE, SHARED]}}
    assert where_of(Only(owners=owned(ALICE, shared=False))) == {"owner": ALICE}


# ---- the writes yet to be made (memory/policy/write_buffer.py) ---------------------------------------
def test_the_buffer_holds_a_batch_and_splits_it_into_texts_updates_scores_and_evidence():
    buffer = WriteBuffer()
    new, changed, scored = lesson("one"), lesson("two"), lesson("three")
    assert buffer.start() and not buffer.start()  # a batch inside a batch holds nothing of its own
    buffer.hold(new, [1.0, 0.0])
    buffer.hold_update([new.model_copy(update={"retrievals": 1})], counts_only=True)  # an insert stays one
    buffer.hold_update([changed], counts_only=False)
    buffer.hold_update([scored], counts_only=True)
    merged, confirmed = lesson("four"), lesson("five")
    buffer.hold_update([merged.model_copy(update={"retrievals": 1})], counts_only=True)
    buffer.hold_update([merged], counts_only=False, evidence=True)  # a score, then a merge's evidence
    buffer.hold_update([confirmed], counts_only=False, evidence=True)
    buffer.hold_update([confirmed.model_copy(update={"status": "approved"})], counts_only=False)
    buffer.hold_update([changed.model_copy(update={"evidence": 2})], counts_only=False, evidence=True)
    texts, updates, scores, evidence = buffer.take()
    assert [x.id for x in texts] == [new.id] and texts[0].retrievals == 1
    assert [x.id for x in updates] == [changed.id, confirmed.id] and updates[0].evidence == 2
    assert scores == [scored] and evidence == [merged] and buffer.pending is None


def test_the_held_version_wins_and_the_nearest_held_is_the_same_owners():
    buffer = WriteBuffer()
    stored = lesson("Check the file exists.")
    buffer.defer([stored.model_copy(update={"retrievals": 3})])
    assert buffer.held(stored).retrievals == 3
    buffer.start()
    buffer.hold(lesson("Check the file exists.", owner=BOB), [1.0, 0.0])
    assert buffer.nearest_held(lesson("Check the file.", owner=ALICE), [1.0, 0.0]) is None
    assert buffer.nearest_held(lesson("Check the file.", owner=BOB), [1.0, 0.0])[1] == 1.0
    assert [x.owner for x in buffer.joined([], None, "files")] == [BOB]  # not stored yet


def test_deferred_scores_are_due_once_enough_gather(monkeypatch):
    monkeypatch.setattr(write_buffer, "DEFER_LESSONS", 2)
    buffer = WriteBuffer()
    assert not buffer.defer([lesson("one")])
    assert buffer.defer([lesson("two")])
    buffer.written([lesson("one").id])
    assert list(buffer.deferred) == [lesson("two").id]


# ---- what the policy is applied with (memory/policy/limits.py) ---------------------------------------
def test_a_resumed_run_counts_once_in_its_familys_runs(tmp_path):
    runs = FamilyRuns(ChromaRecords(chromadb.PersistentClient(path=str(tmp_path / "l"))), WriteBuffer(), private=True)
    first = runs.count("files", "run-1", True)
    assert runs.count("files", "run-1", True).id == first.id
    runs.count("files", "run-2", False)
    assert runs.of("files", {"runs": 3, "run_successes": 1}) == (5, 2)  # before the ledger, and since


def test_approved_counts_move_only_once_counted():
    counts = OwnerCounts("approved")
    counts.added([lesson("one", owner=ALICE)])
    assert counts.known(ALICE) is None
    counts.counted(ALICE, 2)
    counts.added([lesson("two", owner=ALICE), lesson("three", owner=BOB)])
    counts.retired(ALICE, 1)
    assert (counts.known(ALICE), counts.known(BOB)) == (2, None)
    counts.forget()
    assert counts.known(ALICE) is None


# ---- the open stores (memory/policy/registry.py) -----------------------------------------------------
def test_a_folder_opens_once_and_closing_releases_it(tmp_path):
    folder = str(tmp_path / "store")
    assert opened_store(folder) is None
    store = open_store(folder)
    assert open_store(folder) is store and opened_store(folder) is store
    close_store(folder)
    assert opened_store(folder) is None and open_store(folder) is not store


def test_a_folder_that_is_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(PivotalError) as refused:
        open_store(str(tmp_path / "file"))
    assert "\n" not in str(refused.value)


# ---- one policy for owners on both backends ---------------------------------------------------
@pytest.fixture(params=["chroma", "langgraph-indexed", "langgraph-plain"])
def store(request, tmp_path):
    if request.param == "chroma":
        return open_store(str(tmp_path / "store"))
    index = langgraph_index() if request.param == "langgraph-indexed" else None
    return lesson_store(Context(), InMemoryStore(index=index))


TEXT = "Check the file exists before reading it."


def _recalled(store, owner: str) -> set[str]:
    return {f.id for f in store.search(TEXT, family="files", k=5, min_similarity=0.0, owner=owner)}


def test_two_owners_on_one_backend_neither_recall_list_nor_revoke_the_others(store):
    [a] = store.add([lesson(TEXT, owner=ALICE, run_id="a1")], dedup_similarity=DEDUP)
    [b] = store.add([lesson(TEXT, owner=BOB, run_id="b1")], dedup_similarity=DEDUP)
    assert a.id != b.id and not b.merged
    assert _recalled(store, ALICE) == {a.id} and _recalled(store, BOB) == {b.id}
    assert [x.id for x in store.lessons(owner=ALICE)] == [a.id] and set(store.get([b.id], owner=ALICE)) == set()
    assert store.revoke(lambda record: record.run == "b1", owner=ALICE).removed == []
    assert b.id in store.get()
    assert store.retire([b.id], "not yours", owner=ALICE) == [] and store.get([b.id])[b.id].status == "approved"


def test_a_lesson_shared_is_recalled_and_listed_by_both_owners(store):
    [a] = store.add([lesson(TEXT, owner=ALICE)], dedup_similarity=DEDUP)
    store.put([store.get([a.id])[a.id].model_copy(update={"owner": SHARED})])
    assert a.id in _recalled(store, ALICE) and a.id in _recalled(store, BOB)
    assert a.id in {x.id for x in store.lessons(owner=BOB)}


def test_the_cap_counts_each_owners_own_lessons(store):
    texts = ["Close every socket you open.", "Never delete the backup.", "Read the log before acting."]
    store.add([lesson(t, owner=ALICE) for t in texts], dedup_similarity=DEDUP)
    [b] = store.add([lesson(TEXT, owner=BOB)], dedup_similarity=DEDUP)
    retired = store.enforce_limits(floor=0.0, min_retrievals=99, cap=1, owner=ALICE)
    assert len(retired) == 2 and b.id not in retired
    approved = [x for x in store.lessons() if x.status == "approved"]
    assert sorted(x.owner for x in approved) == sorted([ALICE, BOB])


def test_an_owner_under_its_cap_is_counted_once_not_scanned_at_every_run(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "store"))
    store.add([lesson(TEXT, owner=ALICE)], dedup_similarity=DEDUP)
    store.enforce_limits(floor=0.0, min_retrievals=99, cap=5, scored=[], owner=ALICE)
    scans = []
    lessons = store.lessons
    monkeypatch.setattr(store, "lessons", lambda **kw: scans.append(kw) or lessons(**kw))
    store.add([lesson("Close every socket you open.", owner=ALICE)], dedup_similarity=DEDUP)
    assert store.enforce_limits(floor=0.0, min_retrievals=99, cap=5, scored=[], owner=ALICE) == []
    assert scans == []


def test_an_owner_in_a_store_others_write_is_scanned_for_its_cap_each_time():
    """Other processes add an owner's lessons to a shared store unseen: its count would go stale."""
    store = lesson_store(Context(), InMemoryStore())
    store.add([lesson(TEXT, owner=ALICE)], dedup_similarity=DEDUP)
    store.enforce_limits(floor=0.0, min_retrievals=99, cap=1, scored=[], owner=ALICE)
    other = ExperienceStore(on_store(store.storage.lessons.store, ("pivotal", "lessons")))
    other.add([lesson("Close every socket you open.", owner=ALICE)], dedup_similarity=DEDUP)
    assert len(store.enforce_limits(floor=0.0, min_retrievals=99, cap=1, scored=[], owner=ALICE)) == 1
