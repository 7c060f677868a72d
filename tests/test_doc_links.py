"""Every pointer to a document resolves: a reader who follows one lands on a page and a section that exist.

Docstrings and comments cite `docs/<page>.md` (sometimes with a quoted section); the README and the
docs link each other with markdown links, some to a heading's anchor.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("core", "graphs", "nodes", "memory", "middleware", "prompts", "pivotal", "benchmarks", "examples", "tests")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CITED = re.compile(r"(docs/[\w.-]+\.md)(?:#([\w-]+))?(?:, \"([^\"\n]+)\")?")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def _citations() -> list[tuple[str, str, str | None, str | None]]:
    found = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts:
                continue
            for page, anchor, section in CITED.findall(path.read_text()):
                found.append((str(path.relative_to(ROOT)), page, anchor or None, section or None))
    return found


def _links() -> list[tuple[str, str]]:
    return [
        (str(page.relative_to(ROOT)), target)
        for page in PAGES
        for target in LINK.findall(page.read_text())
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


@pytest.mark.parametrize("source, page, anchor, section", _citations())
def test_a_cited_page_and_section_exist(source, page, anchor, section):
    assert (ROOT / page).is_file(), f"{source} cites {page}, which does not exist"
    if anchor:
        assert anchor in _anchors(ROOT / page), f"{source} cites {page}#{anchor}: no such heading"
    if section:
        assert section in (ROOT / page).read_text(), f'{source} cites {page} "{section}", not in that page'


@pytest.mark.parametrize("page, target", _links())
def test_a_markdown_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    destination = (ROOT / page).parent / path if path else ROOT / page
    assert destination.exists(), f"{page} links {target}: no such file"
    if anchor and destination.suffix == ".md":
        assert anchor in _anchors(destination), f"{page} links {target}: no such heading in {path or page}"


def test_the_checks_find_what_they_check():
    assert len(_citations()) >= 10 and len(_links()) >= 10
