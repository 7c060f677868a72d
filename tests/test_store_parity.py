"""One lesson policy, several storages: the same scenarios on Chroma (a PersistentClient folder)
and on LangGraph stores (InMemoryStore with Pivotal's index, InMemoryStore without one, and
PostgresStore at 127.0.0.1 when it answers: its non-vector path, as the server has no pgvector).
"""

import uuid
from collections.abc import Iterator

import pytest
from langgraph.store.memory import InMemoryStore

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.graphs import build_graph
from pivotal.memory.backend import lesson_store
from pivotal.memory.embeddings import langgraph_index
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy import NO_QUARANTINE
from pivotal.memory.registry import open_store
from pivotal.memory.store import ExperienceStore

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
DEDUP = 0.9
BACKENDS = ["chroma", "langgraph-indexed", "langgraph-plain", "postgres"]


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


def _postgres() -> Iterator[ExperienceStore]:
    psycopg = pytest.importorskip("psycopg")
    from langgraph.store.postgres import PostgresStore

    try:
        psycopg.connect(POSTGRES, connect_timeout=3).close()
    except psycopg.OperationalError:
        pytest.skip("no Postgres at 127.0.0.1:5432")
    with PostgresStore.from_conn_string(POSTGRES) as store:
        store.setup()
        yield lesson_store(Context(lessons_namespace=("pivotal", f"parity{uuid.uuid4().hex}")), store)


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path) -> Iterator[ExperienceStore]:
    if request.param == "chroma":
        yield open_store(str(tmp_path / "store"))
    elif request.param == "postgres":
        yield from _postgres()
    else:
        index = langgraph_index() if request.param == "langgraph-indexed" else None
        yield lesson_store(Context(), InMemoryStore(index=index))


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


_PG_WRITER = """
import sys
from langgraph.store.postgres import PostgresStore
from pivotal.core.context import Context
from pivotal.memory.backend import lesson_store
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
