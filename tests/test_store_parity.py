"""One lesson policy, every storage backend: the same cases on each row of the backend table
(memory/storage/__init__.py `BACKENDS`), so a new backend is one file and one row there, and
runs here without a line of this module changing. A backend that keeps lessons in the run's
LangGraph store runs on each kind of store: InMemoryStore with Pivotal's index, InMemoryStore
without one, and PostgresStore at 127.0.0.1 when it answers (its non-vector path, as the server
has no pgvector). Chroma runs on a PersistentClient folder.

The first cases go through the policy (`ExperienceStore`); the storage cases below call the
seam itself (memory/storage/base.py `LessonStorage`, `RecordStorage`).
"""

import uuid
from collections.abc import Iterator

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.graphs import build_graph
from pivotal.memory.lesson import SHARED, Lesson
from pivotal.memory.lesson.ledger import Record
from pivotal.memory.policy.registry import lesson_store, open_store
from pivotal.memory.policy.rules import NO_QUARANTINE
from pivotal.memory.policy.store import ExperienceStore
from pivotal.memory.storage import BACKENDS, backend
from pivotal.memory.storage.base import Only
from pivotal.memory.storage.embeddings import langgraph_index

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
DEDUP = 0.9
GRAPH_STORES = ["indexed", "plain", "postgres"]
"""The LangGraph stores a backend that keeps lessons in the run's store is run on."""


def _rows() -> Iterator[object]:
    """Every backend of the table, each kind of graph store for one that lives in the run's store."""
    for name in BACKENDS:
        if backend(name).IN_GRAPH_STORE:
            yield from (pytest.param((name, kind), id=f"{name}-{kind}") for kind in GRAPH_STORES)
        else:
            yield pytest.param((name, None), id=name)


def lesson(text: str, *, family: str = "files", run_id: str = "run-a", **fields) -> Lesson:
    situation = fields.pop("situation", "reading files")
    return Lesson(
        kind=fields.pop("kind", "guardrail"),
        situation=situation,
        text=text,
        outcome="failure",
        family=family,
        run_id=run_id,
        **fields,
    )


def _postgres() -> Iterator[BaseStore]:
    psycopg = pytest.importorskip("psycopg")
    from langgraph.store.postgres import PostgresStore

    try:
        psycopg.connect(POSTGRES, connect_timeout=3).close()
    except psycopg.OperationalError:
        pytest.skip("no Postgres at 127.0.0.1:5432")
    with PostgresStore.from_conn_string(POSTGRES) as store:
        store.setup()
        yield store


def _graph_store(kind: str | None) -> Iterator[BaseStore | None]:
    if kind == "postgres":
        yield from _postgres()
    else:
        yield None if kind is None else InMemoryStore(index=langgraph_index() if kind == "indexed" else None)


@pytest.fixture(params=list(_rows()))
def store(request, tmp_path) -> Iterator[ExperienceStore]:
    """The row's backend on a store of its own: a fresh folder, a fresh namespace."""
    name, kind = request.param
    context = Context(
        store_path=str(tmp_path / "store"),
        lessons_backend=name,
        lessons_namespace=("pivotal", f"parity{uuid.uuid4().hex}"),
    )
    for graph_store in _graph_store(kind):
        yield lesson_store(context, graph_store)


def test_every_backend_of_the_table_is_a_row_here():
    """What makes a new backend two files: its module, and its row in the table, which this suite reads."""
    rows = [param.values[0][0] for param in _rows()]
    assert set(rows) == set(BACKENDS) and {"chroma", "langgraph"} <= set(rows)
    for name in BACKENDS:
        module = backend(name)
        assert all(callable(getattr(module, part)) for part in ("settings", "identity", "connect"))
        assert isinstance(module.IN_GRAPH_STORE, bool)


def test_a_lesson_written_is_recalled(store):
    [written] = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    store.add([lesson("Close files after writing them.", situation="writing files")], dedup_similarity=DEDUP)
    found = store.search("about to read a file that may not exist", family="files", k=2, min_similarity=0.2)
    assert found[0].id == written.id and found[0].lesson.text == "Check the file exists before reading it."
    assert [r.similarity for r in found] == sorted((r.similarity for r in found), reverse=True)
    assert store.search("quarterly revenue of a bakery", family="files", k=5, min_similarity=0.5) == []


def test_a_near_duplicate_merges_into_the_stored_lesson(store):
    [first] = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    paraphrase = lesson("Before reading a file, make sure it exists.", run_id="run-b")
    assert store.duplicate(paraphrase, DEDUP).lesson.id == first.id  # what the dedup node asks before the gate
    [second] = store.add([paraphrase], dedup_similarity=DEDUP)
    assert second.merged and second.id == first.id
    stored = store.get()
    assert len(stored) == 1 and stored[first.id].evidence == 2


def test_a_lesson_of_one_family_is_not_recalled_in_another(store):
    store.add([lesson("Check the file exists before reading it.", family="a")], dedup_similarity=DEDUP)
    assert store.search("reading files", family="b", k=3, min_similarity=0.0) == []
    assert len(store.search("reading files", family="a", k=3, min_similarity=0.0)) == 1
    assert store.families() == ["a"]


def test_a_task_lesson_is_recalled_only_in_the_instance_that_taught_it(store):
    store.add([lesson("Go down twice, then right.", level="task", instances="maze-a")], dedup_similarity=DEDUP)
    assert len(store.search("reading files", family="files", k=3, min_similarity=0.0, instance="maze-a")) == 1
    assert store.search("reading files", family="files", k=3, min_similarity=0.0, instance="maze-b") == []


def test_an_outcome_updates_utility_once_per_run(store):
    [w] = store.add([lesson("Check the file exists before reading it.")], dedup_similarity=DEDUP)
    with store.batch():  # as the memory writer scores a run
        store.record_outcome("r1", "files", {w.id: (3, 3)}, success=True)
    store.record_outcome("r1", "files", {w.id: (3, 3)}, success=True)  # a resumed run counts once
    store.record_outcome("r2", "files", {w.id: (2, 0)}, success=False)
    store.flush()
    scored = store.get()[w.id]
    assert (scored.retrievals, scored.successes, scored.step_retrievals, scored.step_approvals) == (2, 1, 5, 3)
    assert scored.utility == pytest.approx(((1 + 1) / 4 + (3 + 1) / 7) / 2, abs=1e-4)


def test_eviction_keeps_the_store_at_its_cap(store):
    texts = [
        "Check the file exists before reading it.",
        "Close files after writing them.",
        "Never write outside the workspace folder.",
    ]
    written = store.add([lesson(text) for text in texts], dedup_similarity=DEDUP)
    store.record_outcome("r1", "files", {written[0].id: (1, 1)}, success=True)
    store.record_outcome("r2", "files", {written[1].id: (1, 0)}, success=False)
    assert store.enforce_limits(floor=0.0, min_retrievals=99, cap=2) == [written[1].id]
    assert store.count() == 3 and store.count(status="approved") == 2
    assert written[1].id not in {r.id for r in store.search("files", family="files", k=3, min_similarity=0.0)}


# --- the seam itself ------------------------------------------------------------------------
ALICE = "acme/lessons"


def test_the_storage_puts_reads_updates_counts_and_deletes_lessons(store):
    lessons = store.storage.lessons
    first, second = lesson("Check the file exists before reading it."), lesson("Close every socket you open.")
    assert lessons.families() == [] and not lessons.has("files") and lessons.family_record("files") is None
    lessons.put("files", [first], [lessons.vector("files", first.document)])
    lessons.put("files", [second], None)  # an import: the backend embeds it, if it embeds at all
    assert lessons.families() == ["files"] and lessons.has("files") and lessons.holds("files")
    assert lessons.family_record("files") is not None
    assert {x.id: x for x in lessons.read("files", None)} == {first.id: first, second.id: second}
    assert lessons.read("files", [second.id, "not-stored"]) == [second]
    retired = first.model_copy(update={"status": "retired", "retrievals": 2})
    lessons.update("files", [retired])
    assert lessons.read("files", [first.id]) == [retired]
    assert lessons.count("files") == 2 and lessons.count("files", Only(status="retired")) == 1
    lessons.delete("files", [first.id])
    assert [x.id for x in lessons.read("files", None)] == [second.id] and lessons.count("files") == 1


def test_the_nearest_lessons_come_best_first_and_only_those_asked_for(store):
    lessons = store.storage.lessons
    rows = [
        lesson("Check the file exists before reading it.", owner=ALICE),
        lesson("Check the file exists before reading it.", owner=SHARED),
        lesson("Close every socket you open.", owner=ALICE, kind="skill"),
        lesson("Go down twice, then right.", owner=ALICE, level="task", instances="maze-a"),
        lesson("Never delete the backup.", owner="globex/lessons", status="retired"),
    ]
    lessons.put("files", rows, [lessons.vector("files", x.document) for x in rows])
    text = "about to read a file that may not exist"
    vector = lessons.vector("files", text)

    def ids(only: Only | None, n: int = 10) -> set[str]:
        return {near.id for near in lessons.nearest("files", text, vector, n, only, lessons=False)}

    found = lessons.nearest("files", text, vector, 10, None, lessons=True)
    assert {near.id: near.lesson for near in found} == {x.id: x for x in rows}
    assert [near.similarity for near in found] == sorted((near.similarity for near in found), reverse=True)
    assert found[0].lesson.text == "Check the file exists before reading it." and 0.3 < found[0].similarity <= 1.0
    assert all(near.lesson is None for near in lessons.nearest("files", text, vector, 3, None, lessons=False))
    assert len(ids(None, n=2)) == 2
    assert ids(Only(status="retired")) == {rows[4].id} and ids(Only(kind="skill")) == {rows[2].id}
    assert ids(Only(owners=(ALICE, SHARED))) == {x.id for x in rows[:4]}
    assert ids(Only(owners=(ALICE,), scopes=("", "maze-b"))) == {rows[0].id, rows[2].id}
    assert ids(Only(status="approved", kind="guardrail", owners=(ALICE, SHARED), scopes=("", "maze-a"))) == {
        rows[0].id,
        rows[1].id,
        rows[3].id,
    }
    assert lessons.nearest("other", text, vector, 3, None, lessons=True) == []


def test_the_ledger_keeps_each_record_once_and_reads_by_lesson_and_kind(store):
    records = store.storage.records
    merged = Record(kind="evidence", lesson="lesson-1", family="files", run="r1", weight=1, text="Check it.")
    scored = Record(kind="recall", lesson="lesson-2", family="files", run="r1", recalls=1, successes=1)
    run = Record(kind="run", family="files", run="r1", successes=1)
    records.append([merged, scored, run])
    records.append([merged])  # the same run written again (a resume): the same record

    def kept(found: list[Record]) -> dict[str, dict]:
        return {r.id: r.model_dump(exclude={"at"}) for r in found}

    assert kept(records.read("files")) == kept([merged, scored, run])
    assert kept(records.read("files", ["lesson-1"])) == kept([merged])
    assert kept(records.read("files", kind="run")) == kept([run])
    assert records.read("files", []) == [] and records.read("other") == []
    records.delete("files", [merged.id])
    assert kept(records.read("files")) == kept([scored, run])


# --- through the graph ----------------------------------------------------------------------

FAILING = dict(model="sim:error=0.35,seed=8", lesson_model="sim", critic=False, max_steps=12)
TASK = {"task": {"env": "gridworld", "params": {"seed": 7}}}


async def test_a_run_writes_lessons_the_app_reads_from_its_store_and_the_next_run_recalls_them(tmp_path):
    store = InMemoryStore(index=langgraph_index())
    graph = build_graph(store=store)
    context = Context(store_path=str(tmp_path / "chroma"), **FAILING, **NO_QUARANTINE)
    first = await graph.ainvoke(TASK, context=context)
    assert first["counters"]["lessons_written"] >= 1

    namespace = ("pivotal", "lessons", "gridworld")
    items = store.search(namespace, query="a wall blocks the way", limit=50)  # as another node of the app would
    assert len(items) == first["counters"]["lessons_written"]
    assert all(item.score is not None and item.value["run_id"] == first["run_id"] for item in items)
    assert open_store(str(tmp_path / "chroma")).count() == 0  # Chroma untouched

    second = await graph.ainvoke(TASK, context=context)
    assert set(second["recalled"]) & {item.key for item in items}


async def test_the_app_chooses_the_namespace_and_chroma_stays_available(tmp_path):
    store = InMemoryStore(index=langgraph_index())
    graph = build_graph(store=store)
    own = Context(store_path=str(tmp_path / "chroma"), lessons_namespace=["desk", "memories"], **FAILING)
    first = await graph.ainvoke(TASK, context=own)
    assert len(store.search(("desk", "memories", "gridworld"), limit=50)) == first["counters"]["lessons_written"] > 0
    assert store.search(("pivotal", "lessons"), limit=50) == []

    chroma = Context(store_path=str(tmp_path / "chroma"), lessons_backend="chroma", **FAILING)
    second = await graph.ainvoke(TASK, context=chroma)
    assert open_store(str(tmp_path / "chroma")).count() == second["counters"]["lessons_written"] > 0


async def test_a_langgraph_backend_without_a_store_is_refused_in_one_line(tmp_path):
    context = Context(store_path=str(tmp_path / "chroma"), lessons_backend="langgraph", **FAILING)
    with pytest.raises(PivotalError, match="has no LangGraph store"):
        await build_graph().ainvoke(TASK, context=context)


def test_an_agent_compiled_with_a_store_keeps_its_lessons_there():
    from langchain_core.tools import tool

    from pivotal import create_pivotal_agent

    @tool
    def ping(text: str) -> str:
        """Echo the text."""
        return text

    store = InMemoryStore(index=langgraph_index())
    agent = create_pivotal_agent("sim", [ping], store=store)
    assert agent.store is store  # the store every node's runtime gets


def test_a_thread_saved_with_a_namespace_resumes_with_the_same_one():
    """A checkpoint keeps the settings as JSON: the namespace comes back equal, not contradicting the caller's."""
    import json

    saved = json.loads(json.dumps(Context(lessons_namespace=("desk", "memories")).saved()))
    resumed = Context.resumed(saved, Context(lessons_namespace=("desk", "memories")))
    assert resumed.lessons_namespace == ["desk", "memories"]


SAME_CASES = [
    test_a_lesson_written_is_recalled,
    test_a_near_duplicate_merges_into_the_stored_lesson,
    test_a_lesson_of_one_family_is_not_recalled_in_another,
    test_a_task_lesson_is_recalled_only_in_the_instance_that_taught_it,
    test_an_outcome_updates_utility_once_per_run,
    test_eviction_keeps_the_store_at_its_cap,
    test_the_storage_puts_reads_updates_counts_and_deletes_lessons,
    test_the_nearest_lessons_come_best_first_and_only_those_asked_for,
    test_the_ledger_keeps_each_record_once_and_reads_by_lesson_and_kind,
]


def _fresh() -> Context:
    return Context(lessons_backend="dicts", lessons_namespace=("pivotal", uuid.uuid4().hex), **FAILING, **NO_QUARANTINE)


def test_a_new_backend_is_one_module_and_one_row(monkeypatch):
    """tests/dict_backend.py, added to the table and nothing else: the same cases pass on it."""
    monkeypatch.setitem(BACKENDS, "dicts", "dict_backend")  # the row
    for case in SAME_CASES:
        case(lesson_store(_fresh()))


@pytest.mark.slow
async def test_a_run_through_the_graph_keeps_and_recalls_its_lessons_on_the_new_backend(monkeypatch):
    """Preflight, recall, dedup and the writer find the new row too: no node, runner or Context changed."""
    monkeypatch.setitem(BACKENDS, "dicts", "dict_backend")
    context = _fresh()
    first = await build_graph().ainvoke(TASK, context=context)
    kept = lesson_store(context).get()
    assert first["counters"]["lessons_written"] == len(kept) > 0
    second = await build_graph().ainvoke(TASK, context=context)
    assert set(second["recalled"]) & set(kept)


_PG_WRITER = """
import sys
from langgraph.store.postgres import PostgresStore
from pivotal.core.context import Context
from pivotal.memory.policy.registry import lesson_store
from pivotal.memory.lesson import Lesson
with PostgresStore.from_conn_string(sys.argv[1]) as pg:
    store = lesson_store(Context(lessons_namespace=("pivotal", sys.argv[2])), pg)
    for i in range(int(sys.argv[4])):
        run = f"{sys.argv[3]}-{i}"
        lesson = Lesson(kind="guardrail", situation="reading files", text="Check the file exists before reading it.",
                        outcome="failure", family="files", run_id=run)
        store.add([lesson], dedup_similarity=0.9)
        store.record_outcome(run, "files", {lesson.id: (1, 1)}, success=True)
"""


@pytest.mark.slow
def test_writers_in_several_processes_on_one_postgres_store_lose_no_count(tmp_path):
    """The LangGraph backend counts from the same ledger: 4 processes, 2 temporary folders, one PostgresStore."""
    import os
    import subprocess
    import sys

    stores = _postgres()
    next(stores)  # skips when no Postgres answers; the table exists after its setup
    label, writers, merges = f"race{uuid.uuid4().hex}", 4, 8
    procs = []
    for n in range(writers):
        machine = tmp_path / f"machine-{n % 2}"
        machine.mkdir(exist_ok=True)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _PG_WRITER, POSTGRES, label, f"p{n}", str(merges)],
                env={**os.environ, "TMPDIR": str(machine)},
            )
        )
    assert [proc.wait(timeout=180) for proc in procs] == [0] * writers
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(POSTGRES) as pg:
        [stored] = lesson_store(Context(lessons_namespace=("pivotal", label)), pg).get().values()
    assert (stored.evidence, stored.retrievals, stored.successes) == (writers * merges,) * 3
