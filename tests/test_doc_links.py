"""Every pointer from the code to a document resolves: a reader who follows one lands on a page and a
section that exist. Docstrings, comments and messages cite `docs/<page>.md`, with a `#anchor` or a quoted
section; the README's and the docs' own markdown links are checked by tests/test_docs.py.
"""

import re
from pathlib import Path

import pytest
from test_docs import anchors

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("core", "graphs", "nodes", "memory", "middleware", "prompts", "pivotal", "benchmarks", "examples", "tests")
CITED = re.compile(r"(docs/[\w.-]+\.md)(?:#([\w-]+))?(?:, \"([^\"\n]+)\")?")


def _citations() -> list[tuple[str, str, str | None, str | None]]:
    found = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts:
                continue
            for page, anchor, section in CITED.findall(path.read_text()):
                found.append((str(path.relative_to(ROOT)), page, anchor or None, section or None))
    return found


@pytest.mark.parametrize("source, page, anchor, section", _citations())
def test_a_cited_page_and_section_exist(source, page, anchor, section):
    assert (ROOT / page).is_file(), f"{source} cites {page}, which does not exist"
    if anchor:
        assert anchor in anchors(ROOT / page), f"{source} cites {page}#{anchor}: no such heading"
    if section:
        assert section in (ROOT / page).read_text(), f'{source} cites {page} "{section}", not in that page'


def test_the_checks_find_what_they_check():
    assert len(_citations()) >= 10
