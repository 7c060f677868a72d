"""A folder store's evidence ledger in its own SQLite file (memory/storage/ledger_file.py): what a
run's writes leave there, records a folder kept in Chroma before it moved in once, a damaged file.
"""

import chromadb
import pytest

from pivotal.core.errors import PivotalError
from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record
from pivotal.memory.policy.registry import close_stores, open_store
from pivotal.memory.storage.chroma import LEDGER, LEDGER_PREFIX, ChromaRecords
from pivotal.memory.storage.ledger_file import CHUNK, LedgerFile

DEDUP = 0.9


def lesson(text: str, run_id: str) -> Lesson:
    return Lesson(
        kind="guardrail", situation="reading files", text=text, outcome="failure", family="files", run_id=run_id
    )


def _ledger_collections(folder) -> list[str]:
    client = chromadb.PersistentClient(path=str(folder))
    try:
        return [c.name for c in client.list_collections() if c.name.startswith(LEDGER_PREFIX)]
    finally:
        client.close()


def test_a_folder_stores_its_records_in_the_ledger_file_and_reads_them_back_after_a_restart(tmp_path):
    folder = tmp_path / "store"
    store = open_store(str(folder))
    first = store.add([lesson("Check the file exists before reading it.", "run-a")], dedup_similarity=DEDUP)[0]
    store.add([lesson("Before reading a file, make sure it exists.", "run-b")], dedup_similarity=DEDUP)
    store.record_outcome("run-b", "files", {first.id: (1, 1)}, success=True)
    store.flush()
    close_stores()
    assert (folder / LEDGER).is_file() and _ledger_collections(folder) == []  # none in Chroma
    reopened = open_store(str(folder))
    kinds = sorted(r.kind for r in reopened.lineage(reopened.get()[first.id]))
    assert kinds.count("evidence") == 2 and "recall" in kinds
    assert reopened.get()[first.id].evidence == 2
    close_stores()


def test_records_a_folder_kept_in_chroma_move_to_the_ledger_file_once(tmp_path):
    """A folder written before the ledger file: its records are read from Chroma, written to the
    file, and the Chroma collections dropped, so a second opening finds them once, in the file.
    """
    folder = tmp_path / "store"
    client = chromadb.PersistentClient(path=str(folder))
    old = [Record(kind="evidence", lesson=f"lesson-{i}", family="files", run=f"r{i}", weight=1) for i in range(3)]
    old.append(Record(kind="run", family="files", run="r0", successes=1))
    old.append(Record(kind="evidence", lesson="lesson-9", family="mail", run="r9", weight=1))
    ChromaRecords(client).append(old)
    client.close()
    assert len(_ledger_collections(folder)) == 2
    for _ in range(2):
        store = open_store(str(folder))
        records = store.storage.records
        assert {r.id for r in records.read("files")} == {r.id for r in old[:4]}
        assert [r.id for r in records.read("files", kind="run")] == [old[3].id]
        assert [r.id for r in records.read("mail", ["lesson-9"])] == [old[4].id]
        close_stores()
        assert _ledger_collections(folder) == []


def test_the_ledger_file_reads_by_lesson_past_a_statements_parameter_cap_and_deletes(tmp_path):
    ledger = LedgerFile(str(tmp_path / LEDGER))
    records = [Record(kind="recall", lesson=f"l{i}", family="files", run="r1", recalls=1) for i in range(CHUNK + 7)]
    ledger.append(records + records[:3])  # one written twice (a resumed run's) is kept once
    wanted = [r.lesson for r in records]
    assert len(ledger.read("files", wanted)) == CHUNK + 7 and ledger.read("files", []) == []
    ledger.delete("files", [r.id for r in records[: CHUNK + 1]])
    assert [r.id for r in ledger.read("files")] == [r.id for r in records[CHUNK + 1 :]]
    assert ledger.read("other") == []
    ledger.close()


def test_a_damaged_ledger_file_stops_the_stores_opening_with_what_to_do(tmp_path):
    folder = tmp_path / "store"
    open_store(str(folder))
    close_stores()
    path = folder / LEDGER
    path.write_bytes(b"this is not a database, it is a note someone left here " * 40)
    with pytest.raises(PivotalError, match=r"evidence ledger .* cannot be opened .*restore the folder from a backup"):
        open_store(str(folder))
    assert path.read_bytes().startswith(b"this is not a database")  # nothing was changed
    path.unlink()
    open_store(str(folder))  # the folder's lock was released: it opens once the file is moved aside
    close_stores()
