"""`pivotal lessons list|show|export|import|retire|stats` on a real store folder."""

import json

import pytest

from pivotal.cli import main
from pivotal.memory.lesson import Lesson
from pivotal.memory.store import close_stores, open_store

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


def test_export_then_import_round_trips_exactly(capsys, store_dir, tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert cli(capsys, "lessons", "export", str(first), "--store", store_dir)[0] == 0
    assert cli(capsys, "lessons", "import", str(first), "--store", str(tmp_path / "copy"))[0] == 0
    assert cli(capsys, "lessons", "export", str(second), "--store", str(tmp_path / "copy"))[0] == 0
    assert first.read_text() == second.read_text()
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    assert sorted(r["text"] for r in rows) == sorted(TEXTS) and any(r["retrievals"] == 1 for r in rows)


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
    assert "imported 2 lessons, skipped 3 bad rows" in err
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
