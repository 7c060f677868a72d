"""Server mode: a real `chroma run` on 127.0.0.1, started by the test, shared by several processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pivotal.core.context import Context
from pivotal.core.errors import PivotalError
from pivotal.graphs import arun
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import open_store
from pivotal.memory.policy.rules import NO_QUARANTINE
from pivotal.testing.servers import chroma_server, free_port

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    with chroma_server(tmp_path_factory.mktemp("chroma-server")) as url:
        yield url


def test_the_store_works_against_a_chroma_server(server_url):
    store = open_store("", server_url)
    first, paraphrase = (
        Lesson(
            kind="guardrail", situation="reading files", text=text, outcome="failure", family="server-unit", run_id=run
        )
        for text, run in (
            ("Check the file exists before reading it.", "r1"),
            ("Before reading a file, make sure that it exists.", "r2"),
        )
    )
    store.add([first], dedup_similarity=0.9)
    assert store.add([paraphrase], dedup_similarity=0.9)[0].merged
    [found] = store.search("about to read a file", family="server-unit", k=3, min_similarity=0.2)
    assert found.id == first.id and found.lesson.evidence == 2
    assert found.lesson.text == paraphrase.text  # more distinct words: the more specific text wins


async def test_a_run_writes_and_a_later_run_recalls_through_the_server(server_url):
    context = Context(
        model="sim:error=0.35,seed=14",
        lesson_model="sim",
        critic=False,
        max_steps=12,
        store_url=server_url,
        store_path="/nonexistent/never-used",
        **NO_QUARANTINE,
    )
    first = await arun(
        {"env": "gridworld", "params": {"seed": 7}, "family": "server-run"}, context, checkpoint_path=":memory:"
    )
    assert first.lessons["written"] >= 1
    later = await arun(
        {"env": "gridworld", "params": {"seed": 3}, "family": "server-run"}, context, checkpoint_path=":memory:"
    )  # seed 2 recalled nothing once steps_to_goal ended doomed attempts (the sim's path changed); 3 recalls
    assert later.lessons["recalled"] >= 1
    assert not Path("/nonexistent/never-used").exists()


@pytest.mark.slow
def test_several_processes_share_one_server_and_lose_no_lesson(server_url):
    """A store folder admits one process; a server admits many."""
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pivotal.cli",
                "run",
                "--env",
                "gridworld",
                "--seed",
                str(seed),
                "--family",
                "server-procs",
                "--model",
                f"sim:error=0.35,seed={seed}",
                "--lesson-model",
                "sim",
                "--no-critic",
                "--max-steps",
                "12",
                "--store-url",
                server_url,
                "--checkpoints",
                ":memory:",
                "--json",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(4)
    ]
    results = []
    for process in runs:
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    stored = open_store("", server_url).get(family="server-procs")
    assert (
        sum(lesson.evidence for lesson in stored.values())
        == sum(r["lessons"]["written"] + r["lessons"]["merged"] for r in results)
        > 0
    )


def test_a_server_that_is_down_is_refused_with_what_to_do():
    with pytest.raises(PivotalError, match=r"not reachable.*chroma run --path"):
        open_store("", f"http://127.0.0.1:{free_port()}")


_MERGE = """
import sys
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import open_store
store = open_store("", sys.argv[1])
for i in range(int(sys.argv[3])):
    run = f"{sys.argv[2]}-{i}"
    lesson = Lesson(kind="guardrail", situation="reading files", text="Check the file exists before reading it.",
                    outcome="failure", family="server-race", run_id=run)
    store.add([lesson], dedup_similarity=0.9)
    store.record_outcome(run, "server-race", {lesson.id: (2, 1)}, success=i % 2 == 0)
"""


@pytest.mark.slow
def test_writers_on_two_machines_merging_into_one_lesson_at_once_lose_no_count(server_url, tmp_path):
    """Each merge and each recall score is a ledger record of its own: 4 processes in 2 temporary
    folders (two machines: no lock file they could share), the server spelt two ways, 12 runs
    each. Before the ledger, a lock file per URL spelling in the temporary folder kept them apart
    on one machine only: two folders lost 19 and 16 of 48, the other spelling 20.
    """
    writers, merges = 4, 12
    spellings = [server_url, server_url.replace("127.0.0.1", "localhost")]
    procs = []
    for n in range(writers):
        machine = tmp_path / f"machine-{n % 2}"
        machine.mkdir(exist_ok=True)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _MERGE, spellings[n // 2], f"p{n}", str(merges)],
                cwd=ROOT,
                env={**os.environ, "TMPDIR": str(machine)},
            )
        )
    assert [proc.wait(timeout=180) for proc in procs] == [0] * writers
    [lesson] = open_store("", server_url).get(family="server-race").values()
    runs = writers * merges
    assert (lesson.evidence, lesson.retrievals, lesson.successes) == (runs, runs, runs // 2)
    assert (lesson.step_retrievals, lesson.step_approvals) == (2 * runs, runs)
    assert open_store("", server_url).family_runs("server-race") == (runs, runs // 2)


@pytest.mark.slow
def test_two_writers_confirming_a_lesson_at_once_through_the_server_approve_it(server_url):
    """Two stores on the server (its two spellings: two clients), each reading the lesson's row
    before the other writes: each row says "pending" with its own witness, the ledger holds both,
    and each reader, a third one too, sees the lesson approved and recalls it.
    """
    from pivotal.memory.policy.rules import CONFIRMATIONS, quarantined

    def confirming(witness: str) -> Lesson:
        lesson = Lesson(
            kind="guardrail",
            situation="deleting files",
            text="Check the path before deleting it.",
            outcome="success",
            family="server-confirm",
            run_id=f"run-{witness}",
        )
        return quarantined(lesson, witness_key=witness, confirmations=CONFIRMATIONS)  # needs 3

    first, second = open_store("", server_url), open_store("", server_url.replace("127.0.0.1", "localhost"))
    assert first is not second
    first.add([confirming("thread-a")], dedup_similarity=0.9)
    with first.batch():
        first.add([confirming("thread-b")], dedup_similarity=0.9)
        with second.batch():
            second.add([confirming("thread-c")], dedup_similarity=0.9)
    lesson_id = confirming("thread-a").id
    for reader in (first, second, open_store("", server_url)):
        stored = reader.get([lesson_id])[lesson_id]
        assert (stored.status, len(stored.witnesses.split())) == ("approved", 3)
        found = reader.search("about to delete a file", family="server-confirm", k=3, min_similarity=0.0)
        assert [r.id for r in found] == [lesson_id]


def test_a_read_the_server_answers_before_its_index_caught_up_is_asked_again_and_nothing_else_is():
    """One of four processes sharing a server failed its run on Chroma's "Error finding id" (a read
    meeting ids its vector index had not caught up with); the same read a moment later succeeds.
    """
    from chromadb.errors import InternalError

    from pivotal.memory.storage.chroma import read_again

    behind = InternalError("Error executing plan: Internal error: Error finding id")
    answers: list[object] = [behind, behind, {"ids": [["l1"]]}]

    def query() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert read_again(query)() == {"ids": [["l1"]]} and answers == []

    def broken() -> object:
        raise InternalError("Error executing plan: Internal error: disk I/O error")

    tries: list[int] = []

    def always_behind() -> object:
        tries.append(1)
        raise behind

    with pytest.raises(InternalError, match="disk I/O"):
        read_again(broken)()
    with pytest.raises(InternalError, match="finding id"):
        read_again(always_behind)()
    assert len(tries) == 4
