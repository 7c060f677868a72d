"""`pivotal lessons list|show|export|import|retire|stats` on a real store folder."""

import json

import pytest

from pivotal.cli import main
from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.registry import close_stores, open_store

TEXTS = [
    "Check the file exists before reading it.",
    "Close files after writing them.",
    "Never write outside the workspace folder.",
]


@pytest.fixture
def store_dir(tmp_path):
    folder = str(tmp_path / "store")
    store = open_store(folder)
    store.add(
        [
            Lesson(kind="guardrail", situation="file work", text=text, outcome="failure", family=family, run_id="r1")
            for text, family in zip(TEXTS, ["files", "files", "workspace"], strict=False)
        ],
        dedup_similarity=0.9,
    )
    store.record_outcome("r2", "files", {next(iter(store.get(family="files"))): (2, 1)}, success=True)
    close_stores()  # the CLI opens it as a user would
    return folder


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_export_then_import_keeps_the_lessons_and_none_of_their_counts(capsys, store_dir, tmp_path):
    """What a file says a lesson earned, it has not earned here: ids and texts round-trip, the
    counters start at the import prior and the lessons wait, pending, for a run to confirm them.
    """
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert cli(capsys, "lessons", "export", str(first), "--store", store_dir)[0] == 0
    assert cli(capsys, "lessons", "import", str(first), "--store", str(tmp_path / "copy"))[0] == 0
    assert cli(capsys, "lessons", "export", str(second), "--store", str(tmp_path / "copy"))[0] == 0
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    copied = [json.loads(line) for line in second.read_text().splitlines()]
    assert sorted(r["text"] for r in rows) == sorted(TEXTS) and any(r["retrievals"] == 1 for r in rows)
    assert [(r["id"], r["text"]) for r in copied] == [(r["id"], r["text"]) for r in rows]
    assert {(r["status"], r["evidence"], r["retrievals"], r["utility"], r["origin"]) for r in copied} == {
        ("pending", 1, 0, 0.5, "import")
    }


@pytest.mark.parametrize("claimed", [{"evidence": -5}, {"utility": 7.5}, {"evidence": 10**9, "retrievals": 10**9}])
def test_an_imported_rows_counters_are_never_taken_as_given(capsys, tmp_path, claimed):
    row = {"kind": "guardrail", "situation": "file work", "text": TEXTS[0], "outcome": "failure", "family": "files"}
    rows = tmp_path / "claims.jsonl"
    rows.write_text(json.dumps({**row, **claimed, "status": "approved"}) + "\n")
    cli(capsys, "lessons", "import", str(rows), "--store", str(tmp_path / "copy"))
    [stored] = open_store(str(tmp_path / "copy")).lessons()
    assert (stored.evidence, stored.retrievals, stored.utility, stored.status) == (1, 0, 0.5, "pending")
    assert open_store(str(tmp_path / "copy")).search(TEXTS[0], family="files", k=3, min_similarity=0.0) == []


def test_runs_whose_gated_lessons_match_a_pending_import_confirm_it_once_enough_agree(capsys, tmp_path):
    row = {"kind": "guardrail", "situation": "file work", "text": TEXTS[0], "outcome": "failure", "family": "files"}
    rows = tmp_path / "one.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    cli(capsys, "lessons", "import", str(rows), "--store", str(tmp_path / "copy"))
    store = open_store(str(tmp_path / "copy"))
    runs = [
        Lesson(
            kind="guardrail",
            situation="file work",
            text="Check that the file exists before you read it.",
            outcome="failure",
            family="files",
            run_id=f"r{n}",
            witnesses=f"thread-{n}",
        )
        for n in range(3)  # a guardrail needs three independent runs (Context.confirmations_guardrail)
    ]
    [written] = store.add(runs[:1], dedup_similarity=0.8)
    stored = store.get()[written.id]
    assert stored.status == "pending" and stored.text == runs[0].text and stored.evidence == 2
    store.add(runs[1:], dedup_similarity=0.8)
    stored = store.get()[written.id]
    assert stored.status == "approved" and stored.evidence == 4
    assert [r.origin for r in store.lineage(stored)] == ["import", "run", "run", "run"]


def test_import_reports_bad_rows_by_line_and_imports_the_good_ones(capsys, store_dir, tmp_path):
    exported = tmp_path / "a.jsonl"
    cli(capsys, "lessons", "export", str(exported), "--store", store_dir)
    good = exported.read_text().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        "\n".join([good[0], "{not json", json.dumps({"kind": "rumour", "text": "x"}), good[1], good[0]]) + "\n"
    )
    code, _, err = cli(capsys, "lessons", "import", str(mixed), "--store", str(tmp_path / "copy"))
    assert code == 2
    assert f"{mixed}:2: skipped: not JSON" in err and f"{mixed}:3: skipped: kind" in err
    assert f"{mixed}:5: skipped: repeats id" in err and "of line 1" in err
    assert "imported 2 lessons for pivotal/lessons, skipped 3 bad rows" in err
    assert len(open_store(str(tmp_path / "copy")).get()) == 2


def test_list_show_retire_and_stats(capsys, store_dir):
    code, out, _ = cli(capsys, "lessons", "list", "--store", store_dir, "--family", "files")
    ids = [line.split()[0] for line in out.splitlines()]
    assert code == 0 and len(ids) == 2
    code, out, _ = cli(capsys, "lessons", "show", ids[0], "--store", store_dir)
    assert code == 0 and json.loads(out)["id"] == ids[0]
    assert cli(capsys, "lessons", "retire", ids[0], "--reason", "wrong advice", "--store", store_dir)[0] == 0
    _, out, _ = cli(capsys, "lessons", "list", "--store", store_dir, "--status", "retired", "--json")
    [retired] = [json.loads(line) for line in out.splitlines()]
    assert retired["id"] == ids[0] and retired["retired_reason"] == "wrong advice"
    code, out, _ = cli(capsys, "lessons", "stats", "--store", store_dir)
    stats = json.loads(out)
    assert code == 0 and stats["disk_bytes"] > 0
    assert stats["families"]["files"]["approved"] == 1 and stats["families"]["files"]["retired"] == 1
    assert stats["families"]["workspace"]["approved"] == 1


def test_unknown_ids_and_missing_files_are_one_line_errors(capsys, store_dir, tmp_path):
    code, _, err = cli(capsys, "lessons", "show", "nope", "--store", store_dir)
    assert code == 2 and "no lesson with id 'nope'" in err
    code, _, err = cli(capsys, "lessons", "import", str(tmp_path / "missing.jsonl"), "--store", store_dir)
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
