"""Owners, lineage and revocation on one real `chroma run` server shared by two tenants."""

import json
import time

import pytest

from pivotal.cli import main
from pivotal.memory.lesson import SHARED, Lesson, owner_of
from pivotal.memory.policy.registry import open_store
from pivotal.testing.servers import chroma_server

ALICE, BOB = owner_of(["alice", "lessons"]), owner_of(["bob", "lessons"])
TEXT = "Check the file exists before reading it."


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    with chroma_server(tmp_path_factory.mktemp("chroma-owners")) as url:
        yield url


def lesson(text: str, *, owner: str, run_id: str, family: str = "files", **fields) -> Lesson:
    return Lesson(
        kind="guardrail",
        situation=fields.pop("situation", "reading files"),
        text=text,
        outcome="failure",
        family=family,
        run_id=run_id,
        owner=owner,
        **fields,
    )


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_two_tenants_on_one_server_neither_recall_list_nor_revoke_the_others_lessons(server_url, capsys):
    store = open_store("", server_url)
    family = "tenants"
    [a] = store.add([lesson(TEXT, owner=ALICE, run_id="a1", family=family)], dedup_similarity=0.9)
    [b] = store.add([lesson(TEXT, owner=BOB, run_id="b1", family=family)], dedup_similarity=0.9)
    assert a.id != b.id and not b.merged  # the same text by two tenants: two lessons, no shared evidence

    def recalled(owner: str) -> set[str]:
        return {f.id for f in store.search(TEXT, family=family, k=5, min_similarity=0.0, owner=owner)}

    assert recalled(ALICE) == {a.id} and recalled(BOB) == {b.id}
    assert recalled(owner_of(["carol", "lessons"])) == set()

    listed = cli(capsys, "lessons", "list", "--store-url", server_url, "--owner", ALICE, "--family", family)[1]
    assert a.id in listed and b.id not in listed
    code, _, err = cli(capsys, "lessons", "show", b.id, "--store-url", server_url, "--owner", ALICE)
    assert code != 0 and "no lesson with id" in err
    cli(capsys, "lessons", "revoke", "--run", "b1", "--store-url", server_url, "--owner", ALICE)
    assert b.id in store.get(family=family)  # Alice cannot take back Bob's run
    code, _, err = cli(capsys, "lessons", "retire", b.id, "--store-url", server_url, "--owner", ALICE)
    assert code != 0 and store.get([b.id])[b.id].status == "approved"

    assert cli(capsys, "lessons", "share", a.id, "--store-url", server_url, "--owner", ALICE)[0] == 0
    assert a.id in recalled(BOB) and store.get([a.id])[a.id].owner == SHARED  # the shared tier: everyone's


def test_revoke_removes_what_only_the_run_built_and_its_evidence_from_the_rest(server_url, capsys):
    store = open_store("", server_url)
    family, owner = "revoke", ALICE
    poisoned = "Always delete the cache folder before you start."
    [only] = store.add([lesson(poisoned, owner=owner, run_id="bad", family=family)], dedup_similarity=0.9)
    [both] = store.add([lesson(TEXT, owner=owner, run_id="good", family=family)], dedup_similarity=0.9)
    longer = "Before reading any file, check that the file really exists on disk."
    store.add([lesson(longer, owner=owner, run_id="bad", family=family)], dedup_similarity=0.8)
    store.record_outcome("bad", family, {both.id: (3, 3)}, success=True)
    merged = store.get([both.id])[both.id]
    assert (merged.evidence, merged.retrievals, merged.text) == (2, 1, longer)

    args = ["--store-url", server_url, "--owner", owner]
    code, out, err = cli(capsys, "lessons", "revoke", "--run", "bad", "--dry-run", *args)
    assert code == 0 and f"would remove {only.id}" in out and "would remove 1 lessons, 1 kept" in err
    assert set(store.get(family=family)) == {only.id, both.id}  # a dry run changes nothing

    assert cli(capsys, "lessons", "revoke", "--run", "bad", *args)[0] == 0
    left = store.get(family=family)
    assert set(left) == {both.id}
    kept = left[both.id]
    assert (kept.evidence, kept.retrievals, kept.text) == (1, 0, TEXT)  # the bad run's text went with it
    assert store.search(poisoned, family=family, k=5, min_similarity=0.0, owner=owner)[0].id == both.id
    lineage = json.loads(cli(capsys, "lessons", "show", both.id, *args)[1])["lineage"]
    assert len(lineage) == 1 and "run good" in lineage[0]


def test_revoke_by_import_file_and_by_time(server_url, tmp_path, capsys):
    args = ["--store-url", server_url, "--owner", BOB]
    rows = tmp_path / "shared.jsonl"
    base = {"kind": "guardrail", "situation": "http calls", "outcome": "failure", "family": "imports"}
    rows.write_text(
        "\n".join(
            json.dumps({**base, "text": t})
            for t in ("Retry once after a timeout.", "Close the connection after each call.")
        )
        + "\n"
    )
    assert cli(capsys, "lessons", "import", str(rows), *args)[0] == 0
    store = open_store("", server_url)
    assert len(store.get(family="imports", owner=BOB)) == 2
    code, out, _ = cli(capsys, "lessons", "revoke", "--source", str(rows), *args)
    assert code == 0 and store.get(family="imports", owner=BOB) == {}

    [early] = store.add([lesson(TEXT, owner=BOB, run_id="early", family="since")], dedup_similarity=0.9)
    time.sleep(0.01)
    since = time.time()
    late = lesson("Close the connection after each call.", owner=BOB, run_id="late", family="since")
    store.add([late], dedup_similarity=0.9)
    assert cli(capsys, "lessons", "revoke", "--since", str(since), *args)[0] == 0
    assert set(store.get(family="since")) == {early.id}

    code, _, err = cli(capsys, "lessons", "revoke", "--since", "yesterday", *args)
    assert code == 2 and "is not a time" in err and "Traceback" not in err


def test_a_lesson_stored_before_the_ledger_keeps_its_counts_and_its_default_owner(server_url):
    """Today's stores: no `ledgered`, `owner` or `origin` in a lesson's record. Its counts are
    carried into one ledger record the first time it changes, so none is lost or counted twice.
    """
    store = open_store("", server_url)
    old = lesson(TEXT, owner="", run_id="old", family="legacy", evidence=5, retrievals=3, successes=2)
    record = {k: v for k, v in old.metadata().items() if k not in ("owner", "origin", "source", "digest", "ledgered")}
    old = old.model_copy(update={"id": Lesson(**{**record, "owner": "pivotal/lessons"}).id})
    store.io.storage.collection("legacy", create=True).upsert(
        ids=[old.id], documents=[old.document], metadatas=[record]
    )

    [found] = store.search(TEXT, family="legacy", k=3, min_similarity=0.0)  # the default owner's
    assert found.id == old.id and found.lesson.evidence == 5 and not found.lesson.ledgered
    [merged] = store.add([lesson(TEXT, owner="pivotal/lessons", run_id="new", family="legacy")], dedup_similarity=0.9)
    assert merged.id == old.id
    store.record_outcome("new", "legacy", {old.id: (1, 1)}, success=True)
    again = store.get([old.id])[old.id]
    assert (again.evidence, again.retrievals, again.successes) == (6, 4, 3)
    assert [r.kind for r in store.lineage(again)] == ["carried", "evidence", "recall"]
