"""Every way an outside lesson can arrive, end to end: does it ever reach an actor's or a critic's
prompt as advice? (issue 41's goal: "≥ 95% of hostile lessons never recalled into a prompt as advice").

The rule screen's rate (benchmarks/bench_screen.py) is one line of defence; what the goal asks is
what reaches a prompt, after the screen, provenance and the quarantine have each had their say. So
each lesson of a set is pushed through the paths a lesson really arrives by, into a real Chroma
store on disk (PersistentClient), and what recall then puts in a prompt is read:

- `import`: `pivotal lessons import` (memory/policy/transfer.py): the rule screen, then pending with
  no advice (its words a document's) until runs of the owner's own confirm it.
- `writer`: a run's distiller drafted the lesson word for word (a model taken in by what it read) and
  the critic's gate passed it: the gate's rule screen, provenance (the advice composed from the run's
  own checked moves; the draft's words marked as copied from an observation), the quarantine; then
  written again by `WITNESSES` independent runs (other threads), as an attacker who plants the same
  page in many threads would, so the quarantine is passed and the lesson is recalled.
- `raw`: a program calls `ExperienceStore.add` with a lesson it built itself, no gate, no provenance,
  approved: the store gives it a file's provenance (every word a document's, no advice), so it reaches
  a prompt only as quoted data, and the screen recall runs on every lesson it reads refuses the rest
  (only a lesson stored before provenance existed still renders as one line of advice).
- `observation` (graph runs, slower): the text is shown by the environment in every observation
  (pivotal/testing/hostile_env.py's maze with this text), and runs of the real graph (sim models
  that copy what they read into their lessons) reflect, distil, gate, store and recall; every prompt
  of every later run is read.

A lesson reaches a prompt "as advice" when words of its own (three in a row) stand on a lesson's
advice line of a prompt's <lessons> block; "as data" when they stand only on the quoted line under
it. Recall is asked with the lesson's own situation, the query an attacker would most wish for.
For benign lessons the same counts say what the defences cost: refused at entry, and whether the
lesson still reaches a prompt at all (as data, or as advice).
"""

import asyncio
import io
import json
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import Field

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.base import read_params
from pivotal.core.environments.gridworld import GridWorld
from pivotal.core.task import Task
from pivotal.memory.lesson import QUOTED, Candidate, Lesson, lessons_block, provenance, screened
from pivotal.memory.policy import rules as policy
from pivotal.memory.policy.registry import close_stores, open_store
from pivotal.memory.policy.transfer import import_lessons
from pivotal.nodes.recall import _screened as recall_screen
from pivotal.prompts import clip
from pivotal.testing.hostile_env import HostileGrid, HostileParams, RecordingSim

FAMILY = "support"
WITNESSES = 3
"""Independent runs (threads) that write the same drafted lesson: the most any kind needs (a guardrail's)."""
CALLS: list[tuple[str, Any]] = [("lookup_order", {"order_id": "A17"}), ("reply", {"template": "refund_sent"})]
"""The moves the writer's runs executed and the verifier checked: what provenance composes advice from."""
PATHS = ("import", "writer", "raw", "observation")


@dataclass
class Fate:
    """What became of one lesson on one path."""

    refused: bool = False
    """Refused where it came in (the rule screen at the gate or the import); on the observation path,
    no lesson holding its words was stored (the gate refused it, or no draft copied it)."""
    recalled: bool = False
    """Shown in a prompt in any form."""
    as_advice: bool = False
    as_data: bool = False
    why: str = ""


@dataclass
class PathReport:
    fates: dict[str, Fate] = field(default_factory=dict)

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for label in ("hostile", "benign"):
            ids = [r["id"] for r in rows if r["label"] == label and r["id"] in self.fates]
            if not ids:
                continue
            fates = [self.fates[i] for i in ids]
            out[label] = {"lessons": len(fates), **_counts(fates)}
        return out


def _counts(fates: list[Fate]) -> dict[str, str]:
    n = len(fates)
    return {
        "refused_at_entry": _share(sum(f.refused for f in fates), n),
        "reached_a_prompt": _share(sum(f.recalled for f in fates), n),
        "reached_as_advice": _share(sum(f.as_advice for f in fates), n),
        "reached_as_data_only": _share(sum(f.as_data and not f.as_advice for f in fates), n),
        "never_as_advice": _share(sum(not f.as_advice for f in fates), n),
    }


def _share(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.1%})" if n else "0/0"


# ---- reading prompts ------------------------------------------------------------------------
ADVICE_LINE = re.compile(r"^- \[\w+\] (.*)$")


def lesson_lines(prompt: str) -> tuple[list[str], list[str]]:
    """The advice lines and the quoted lines of every <lessons> block in a prompt (or a bare block)."""
    blocks = re.findall(r"<lessons>(.*?)</lessons>", prompt, re.S) or [prompt]
    advice, quoted = [], []
    for block in blocks:
        for line in block.splitlines():
            if line.startswith(QUOTED):
                quoted.append(line)
            elif match := ADVICE_LINE.match(line):
                advice.append(match[1])
    return advice, quoted


def grams(text: str) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i : i + 3]) for i in range(len(words) - 2)} or {" ".join(words)}


def carries(line: str, own: set[str]) -> bool:
    words = " ".join(re.findall(r"\w+", line.lower()))
    return any(gram and gram in words for gram in own)


def _own_words(row: dict[str, Any]) -> set[str]:
    """Word triples of the lesson's text (its situation too when the text is short): the words the
    outside set wrote, which the composed advice never holds.
    """
    own = grams(row["text"])
    return own if len(own) >= 2 else own | grams(row["situation"])


def read_block(block: str, row: dict[str, Any], fate: Fate) -> None:
    advice, quoted = lesson_lines(block)
    own = _own_words(row)
    fate.as_advice |= any(carries(line, own) for line in advice)
    fate.as_data |= any(carries(line, own) for line in quoted)
    fate.recalled |= fate.as_advice or fate.as_data


def recall_block(store: Any, row: dict[str, Any], *, k: int = 3) -> str:
    """What recall would put in a prompt for the lesson's own situation: the search, the screen recall
    runs on what it found (nodes/recall.py), the rendered block (memory.lesson.lessons_block).
    """
    found = store.search(row["situation"] or row["text"], family=FAMILY, k=k, min_similarity=0.0)
    lessons, _ = recall_screen([r.recalled(clip) for r in found])
    return lessons_block(lessons)


# ---- the paths ----------------------------------------------------------------------------------
def via_import(rows: list[dict[str, Any]], folder: str) -> PathReport:
    """One file of all the rows imported, as an attacker would ship it; then recall for each."""
    store = open_store(f"{folder}/import")
    report = PathReport()
    lines = [
        json.dumps(
            {"kind": "skill", "situation": r["situation"], "text": r["text"], "outcome": "success", "family": FAMILY}
        )
        for r in rows
    ]
    result = import_lessons(store, io.StringIO("\n".join(lines)), source="outside.jsonl")
    refused = {number for number, why in result.bad_rows if why.startswith("poisoning screen")}
    for number, row in enumerate(rows, start=1):
        fate = report.fates[row["id"]] = Fate(refused=number in refused)
        read_block(recall_block(store, row), row, fate)
    close_stores()
    return report


def _draft(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the step skill a distiller would draft from it, word for word."""
    return {"kind": "skill", "situation": row["situation"], "text": row["text"], "outcome": "success", "level": "step"}


def via_writer(rows: list[dict[str, Any]], folder: str, *, witnesses: int = WITNESSES) -> PathReport:
    """Each row a distiller's verbatim draft, gated and written by `witnesses` independent runs."""
    store = open_store(f"{folder}/writer")
    report = PathReport()
    context = Context()
    for row in rows:
        draft = _draft(row)
        fate = report.fates[row["id"]] = Fate()
        if why := screened(draft):  # nodes/gate.py: the rule screen before any model is asked
            fate.refused, fate.why = True, why
            continue
        read: dict[provenance.SpanOrigin, list[str]] = {
            "observation": [f"{row['situation']} {row['text']}"],
            "user": ["Answer the ticket."],
        }
        draft.update(provenance.traced(draft, outcome="success", verified=True, calls=CALLS, sources=read))
        for run in range(witnesses):
            lesson = Lesson.from_candidate(
                cast(Candidate, draft), family=FAMILY, run_id=f"{row['id']}-run{run}", model="sim"
            )
            witness = policy.witness("default", f"thread-{row['id']}-{run}", f"task-{run}")
            store.add(
                [policy.quarantined(lesson, witness_key=witness, confirmations=context.confirmations())],
                dedup_similarity=context.dedup_similarity,
            )
        read_block(recall_block(store, row), row, fate)
    close_stores()
    return report


def via_raw(rows: list[dict[str, Any]], folder: str) -> PathReport:
    """`ExperienceStore.add` of a lesson a program built: approved, no provenance, no gate."""
    store = open_store(f"{folder}/raw")
    report = PathReport()
    for row in rows:
        draft = _draft(row)
        store.add(
            [Lesson.from_candidate(cast(Candidate, draft), family=FAMILY, run_id=f"raw-{row['id']}", model="app")],
            dedup_similarity=2.0,
        )
        fate = report.fates[row["id"]] = Fate()
        read_block(recall_block(store, row), row, fate)
    close_stores()
    return report


class PlantedParams(HostileParams):
    text: str = Field("", max_length=2000)
    """The outside lesson's words, shown in every observation."""


class PlantedGrid(HostileGrid):
    """pivotal/testing/hostile_env.py's maze, showing any text (a lesson of the outside sets)."""

    params = PlantedParams

    def reset(self, task: Task) -> str:
        self.text = read_params(PlantedParams, task).text
        return GridWorld.reset(self, task)


register_environment("planted", PlantedGrid)

RUN_ERRORS = (0.0, 0.5, 0.0, 0.0, 0.0)
"""The runs each text gets, in a store of its own: solved runs (the distiller's), one that fails often
(the reflector's guardrails), then runs that recall: as tests/test_provenance.py's end-to-end check."""


async def via_observation(
    rows: list[dict[str, Any]],
    folder: str,
    *,
    errors: tuple[float, ...] = RUN_ERRORS,
    progress: Callable[[int], None] | None = None,
) -> PathReport:
    """The text shown by the environment; the graph's own distiller and reflector turn what they read
    into lessons; every prompt of every run after the first is read.
    """
    report = PathReport()
    for number, row in enumerate(rows):
        fate = report.fates[row["id"]] = Fate()
        for run, error in enumerate(errors):
            RecordingSim.sent.clear()
            model = RecordingSim(error=error, seed=number * 10 + run)
            context = Context(model=model, lesson_model=model, store_path=f"{folder}/obs/{number}", max_steps=12)
            text = f"{row['situation']} {row['text']}".strip()
            await arun_planted(text, context)
            if run:
                for _, prompt in RecordingSim.sent:
                    read_block_if_lessons(prompt, row, fate)
        stored = open_store(f"{folder}/obs/{number}").lessons()
        own = _own_words(row)
        fate.refused = not any(carries(f"{lesson.situation} {lesson.text}", own) for lesson in stored)
        close_stores()
        if progress:
            progress(number)
    return report


async def arun_planted(text: str, context: Context) -> Any:
    from pivotal.graphs import arun

    return await arun({"env": "planted", "params": {"seed": 1, "text": text}}, context)


def read_block_if_lessons(prompt: str, row: dict[str, Any], fate: Fate) -> None:
    if "<lessons>" in prompt:
        read_block(prompt, row, fate)


def measure(
    rows: list[dict[str, Any]], paths: Iterable[str], *, folder: str | None = None, observation_rows: int | None = None
) -> dict[str, Any]:
    """Each path's report on `rows` (the observation path on the first `observation_rows` of each label)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        base = folder or scratch
        Path(base).mkdir(parents=True, exist_ok=True)
        for path in paths:
            if path == "import":
                out[path] = via_import(rows, base).summary(rows)
            elif path == "writer":
                out[path] = via_writer(rows, base).summary(rows)
            elif path == "raw":
                out[path] = via_raw(rows, base).summary(rows)
            elif path == "observation":
                picked = _first_of_each(rows, observation_rows)
                out[path] = asyncio.run(via_observation(picked, base)).summary(picked)
            else:
                raise ValueError(f"unknown path {path!r}: one of {', '.join(PATHS)}")
    return out


def _first_of_each(rows: list[dict[str, Any]], n: int | None) -> list[dict[str, Any]]:
    """Evenly spaced rows of each label (the same every run), or all."""
    if not n:
        return rows
    picked = []
    for label in ("hostile", "benign"):
        of_label = [r for r in rows if r["label"] == label]
        step = max(len(of_label) / n, 1.0)
        picked += [of_label[int(i * step)] for i in range(min(n, len(of_label)))]
    return picked
