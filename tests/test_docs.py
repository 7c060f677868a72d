"""The README and every page under docs/ are true as written: their Python runs, their links land.

Each page's ```python blocks run in order, in one fresh interpreter per page, offline, against the
installed package only (no checkout on the path), as a user's would. Hosted models are the real
`openai`/`anthropic` SDKs pointed at the loopback provider (their base-URL variables, as a user would
set them); the default model is `sim`, so nothing waits on the embedded one.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pivotal.testing.loopback_provider import loopback

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PIVOTAL = Path(sys.executable).parent / "pivotal"


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", page.read_text(), re.MULTILINE | re.DOTALL)


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The user's environment: temp stores, `sim` by default, and no checkout on the import path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PIVOTAL_MODEL": "sim", "PIVOTAL_STORE_PATH": str(tmp_path / "lessons"),
            "PIVOTAL_CHECKPOINT_PATH": str(tmp_path / "checkpoints.sqlite"), **extra}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.name)
def test_the_python_blocks_of_each_page_run_as_written(page, tmp_path):
    program = "\n\n".join(blocks(page, "python"))
    with loopback() as server:
        keys = {"OPENAI_API_KEY": "docs", "ANTHROPIC_API_KEY": "docs"}
        urls = {"OPENAI_BASE_URL": server.base_url_openai, "ANTHROPIC_BASE_URL": server.base_url_anthropic}
        env = offline_env(tmp_path, **keys, **urls)
        done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    if "openai:" in program:
        assert {"Proposal", "Verdict"} <= {r.schema_name for r in server.requests}  # the hosted models answered


def test_the_readme_and_the_python_page_show_python():
    assert blocks(ROOT / "README.md", "python") and len(blocks(ROOT / "docs" / "python.md", "python")) >= 4


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            slug = anchor(match.group(1))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def links(page: Path) -> list[str]:
    prose = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", prose) if not re.match(r"[a-z]+:", t)]


def test_anchors_follow_githubs_rules():
    assert anchor("Checkpoints: where they go, how big, pruning") == "checkpoints-where-they-go-how-big-pruning"
    assert anchor("The first command's cost") == "the-first-commands-cost"
    assert anchor("`sim` and `local` as LangChain models") == "sim-and-local-as-langchain-models"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_lands_on_a_file_and_heading(page):
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists() or (fragment and fragment not in anchors(goal)):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked


def plugin_commands() -> list[str]:
    lines = [line for page in PAGES for block in blocks(page, "sh") for line in block.splitlines()]
    return [line for line in lines if "--plugin myapp.pivotal_envs" in line]


@pytest.mark.slow
def test_the_plugin_command_lines_run_as_written(tmp_path):
    """`myapp/pivotal_envs.py` is the docs' own-tools block; each command line naming it runs and exits 0."""
    page = (ROOT / "docs" / "python.md").read_text()
    module = blocks_after(page, "## Your own tools as the environment")
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "pivotal_envs.py").write_text(module)
    commands = plugin_commands()
    assert len(commands) >= 3
    for command in commands:
        argv = shlex.split(command, comments=True)
        assert argv[0] == "pivotal", command
        done = subprocess.run([str(PIVOTAL), *argv[1:]], cwd=tmp_path, env=offline_env(tmp_path),
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, (command, done.stderr[-2000:])


def blocks_after(text: str, heading: str) -> str:
    """The first ```python block after a heading."""
    return re.search(r"^```python\n(.*?)^```$", text[text.index(heading) :], re.MULTILINE | re.DOTALL).group(1)
