"""Tenants and import files: a lesson's identity holds its owner, so one file imports into several
owners (issue 41: the second import printed "imported 37" and stored 0), each owner's export and
import round-trip, and `lessons revoke --source` finds a file however its path is typed.
"""

import json
import os

import pytest

from pivotal.cli import main
from pivotal.memory.lesson import owner_of
from pivotal.memory.policy.registry import close_stores, open_store

ACME, BETA = owner_of(["acme", "lessons"]), owner_of(["beta", "lessons"])
BASE = {"kind": "guardrail", "situation": "http calls", "outcome": "failure", "family": "imports"}
TEXTS = ["Retry once after a timeout.", "Close the connection after each call.", "Send one request at a time."]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def rows(tmp_path):
    """Rows without ids, and one with the id a default-owner export gives it."""
    path = tmp_path / "p.jsonl"
    lines = [json.dumps({**BASE, "text": t}) for t in TEXTS[:2]]
    lines.append(json.dumps({**BASE, "text": TEXTS[2], "id": "0123456789abcdef01234567", "owner": "pivotal/lessons"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_one_file_imports_into_two_owners_as_two_lessons_each_and_none_crosses(capsys, tmp_path, rows):
    store_dir = str(tmp_path / "store")
    code, _, err = cli(capsys, "lessons", "import", str(rows), "--store", store_dir, "--owner", ACME)
    assert code == 0 and f"imported 3 lessons for {ACME}" in err
    code, _, err = cli(capsys, "lessons", "import", str(rows), "--store", store_dir, "--owner", BETA)
    assert code == 0 and f"imported 3 lessons for {BETA}" in err
    code, _, err = cli(capsys, "lessons", "import", str(rows), "--store", store_dir, "--owner", BETA)
    assert code == 0 and f"imported 0 lessons for {BETA}, 3 already stored" in err  # said, not silent

    store = open_store(store_dir)
    everyone = store.get(family="imports")
    assert len(everyone) == 6
    acme, beta = store.get(family="imports", owner=ACME), store.get(family="imports", owner=BETA)
    assert {lesson.owner for lesson in acme.values()} == {ACME} and {lesson.owner for lesson in beta.values()} == {BETA}
    assert not set(acme) & set(beta)  # 0 crossings: no id is both owners'
    assert sorted(lesson.text for lesson in acme.values()) == sorted(lesson.text for lesson in beta.values())
    close_stores()


@pytest.mark.slow  # three stores opened and embedded: ~1.7 s
def test_each_owners_export_imports_back_unchanged(capsys, tmp_path, rows):
    """Round trip per tenant: an owner's own export keeps its ids in a new store of the same owner."""
    store_dir = str(tmp_path / "store")
    for owner in (ACME, BETA):
        cli(capsys, "lessons", "import", str(rows), "--store", store_dir, "--owner", owner)
    for owner in (ACME, BETA):
        out, again = tmp_path / f"{owner.replace('/', '-')}.jsonl", tmp_path / "again.jsonl"
        assert cli(capsys, "lessons", "export", str(out), "--store", store_dir, "--owner", owner)[0] == 0
        copy = str(tmp_path / f"copy-{owner.replace('/', '-')}")
        assert cli(capsys, "lessons", "import", str(out), "--store", copy, "--owner", owner)[0] == 0
        assert cli(capsys, "lessons", "export", str(again), "--store", copy, "--owner", owner)[0] == 0
        first = [json.loads(line) for line in out.read_text().splitlines()]
        second = [json.loads(line) for line in again.read_text().splitlines()]
        assert len(first) == 3 and {r["owner"] for r in first} == {owner}
        keep = ("id", "text", "owner", "kind", "family", "status")
        assert [{k: r[k] for k in keep} for r in second] == [{k: r[k] for k in keep} for r in first]


def test_revoke_source_matches_the_file_however_its_path_is_typed(capsys, tmp_path, rows, monkeypatch):
    store_dir = str(tmp_path / "store")
    monkeypatch.chdir(tmp_path)
    os.symlink(rows, tmp_path / "link.jsonl")
    cli(capsys, "lessons", "import", "./p.jsonl", "--store", store_dir, "--owner", ACME)
    cli(capsys, "lessons", "import", "p.jsonl", "--store", store_dir, "--owner", BETA)

    for typed in (str(rows), "link.jsonl", "./p.jsonl"):
        code, _, err = cli(
            capsys, "lessons", "revoke", "--source", typed, "--dry-run", "--store", store_dir, "--owner", ACME
        )
        assert code == 0 and "matched 3 import records" in err and "would remove 3 lessons" in err, err

    assert cli(capsys, "lessons", "revoke", "--source", str(rows), "--store", store_dir, "--owner", ACME)[0] == 0
    store = open_store(store_dir)
    assert store.get(family="imports", owner=ACME) == {} and len(store.get(family="imports", owner=BETA)) == 3
    close_stores()


def test_revoke_source_with_no_match_is_an_error_naming_the_closest_sources(capsys, tmp_path, rows):
    store_dir = str(tmp_path / "store")
    cli(capsys, "lessons", "import", str(rows), "--store", store_dir, "--owner", ACME)
    code, _, err = cli(
        capsys, "lessons", "revoke", "--source", str(tmp_path / "q.jsonl"), "--store", store_dir, "--owner", ACME
    )
    assert code == 2 and "matched no import records" in err and str(rows) in err and "Traceback" not in err
    code, _, err = cli(capsys, "lessons", "revoke", "--source", str(rows), "--store", store_dir, "--owner", BETA)
    assert code == 2 and f"no lesson of {BETA} was imported from a file" in err
