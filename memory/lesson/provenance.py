"""Where each span of a lesson came from, and the advice composed from the trusted spans only.

Why by construction and not by phrasing: a screen that reads a lesson for hostile wording learns its
tests' wording (issue 41: 0 of 20 new attacks refused), and a model that drafts a lesson has read
the run's observations, tool output and the user's text, so nothing it writes can be told apart
from what it was shown. So the words a later run is given as a lesson's advice are composed here,
by code, from what the agent itself did and what was checked: the names of the actions it executed,
argument values too plain to carry a sentence (names, numbers, short tokens), and the outcome the
environment's verifier gave. Nothing a model drafted or an observation held reaches the advice.

The draft's situation and text stay what they were: the retrieval key (recall embeds them) and a
note shown, if at all, as quoted JSON data after the advice (`memory.lesson.rendered`). Their
spans are marked too, copied from an observation or the user's text, or the drafting model's own
words, so `pivotal lessons show` says which part of a lesson came from where.
"""

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

from pivotal.core.schemas import RECIPE

SpanOrigin = Literal["action", "outcome", "observation", "user", "model", "document"]
"""action, outcome: the agent's own executed actions and the verifier's outcome (trusted).
observation (tool output too), user (the task's goal, a human message), document (an import
file), model (a drafting model's own words, written after reading all of these): untrusted."""
TRUSTED: tuple[SpanOrigin, ...] = ("action", "outcome")

ADVICE_CHARS = 600
"""The advice is cut at a whole action when longer (a long run's recipe): a recipe without its
final period reads as cut short, and is followed only as far as it goes."""
COPIED_WORDS = 3
"""A run of this many words or more found verbatim in an observation or the goal is marked as
copied from it; shorter runs are common words."""
PLAIN = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
"""An argument value shown in advice: a name, a number, a short token. Anything longer or with
spaces, dots, slashes or @ (a sentence, a URL, an address) is shown as PLACEHOLDER: the actor that
chose it had read the observations, and a value can carry an order or a destination for data."""
PLACEHOLDER = "<text>"
FAILED = "Avoid {call} here: the attempt that took it failed (checked)."


class Span(BaseModel):
    """One piece of a lesson and where it came from."""

    field: Literal["advice", "situation", "text"]
    origin: SpanOrigin
    text: str

    @property
    def trusted(self) -> bool:
        return self.origin in TRUSTED


_SPANS = TypeAdapter(list[Span])


def dumps(spans: Iterable[Span]) -> str:
    """As a lesson's `provenance` field (Chroma keeps scalars only)."""
    return json.dumps([span.model_dump() for span in spans], ensure_ascii=False)


def loads(provenance: str) -> list[Span]:
    return _SPANS.validate_json(provenance) if provenance else []


def composed(
    *,
    outcome: str,
    verified: bool,
    calls: list[tuple[str, Any]],
    failed_at: int | None = None,
) -> tuple[str, list[Span]]:
    """The advice and its spans, from the run's executed `calls` ([action, arguments]) and its
    checked outcome only. A success's advice is the moves that reached the goal; a failure's, the
    move at the step the reflection blamed (`failed_at`), to avoid there. An outcome nothing
    checked gives no advice: the lesson is then only ever shown as quoted data.
    """
    if not verified or not calls:
        return "", []
    if outcome == "success":
        return _recipe(calls)
    if failed_at is None or not 0 <= failed_at < len(calls):
        return "", []  # the blamed step was turned down, not executed: no action of the agent's to name
    call = shown_call(*calls[failed_at])
    head, tail = FAILED.split("{call}")
    advice = f"{head}{call}{tail}"
    return advice, [
        Span(field="advice", origin="outcome", text=head),
        Span(field="advice", origin="action", text=call),
        Span(field="advice", origin="outcome", text=tail),
    ]


def _recipe(calls: list[tuple[str, Any]]) -> tuple[str, list[Span]]:
    """Worded as the sim distiller words a solved run (`RECIPE`), which its actor reads back."""
    moves: list[str] = []
    for name, arguments in calls:
        move = shown_call(name, arguments)
        if len(RECIPE) + len(", ".join([*moves, move])) + 1 > ADVICE_CHARS:
            text = f"{RECIPE}{', '.join(moves)}"  # cut short: no final period
            return text, _recipe_spans(moves, cut=True)
        moves.append(move)
    return f"{RECIPE}{', '.join(moves)}.", _recipe_spans(moves, cut=False)


def off_the_recipe(lesson: Mapping[str, Any], calls: list[tuple[str, Any]]) -> bool:
    """Whether a solved run's recipe (advice worded `RECIPE`; a lesson stored before provenance holds it
    in its text) no longer says what to do next: the run's
    executed `calls` ([action, arguments]) are not its first moves, or are all of them. Any other
    advice says nothing about the path, so it never is.

    Why it matters (issue 42): a recipe is a path from the task's start. A run that left it, by one
    revised step or by a retry that restarts at a state the recipe never passed, is shown the move the
    recipe took at this step number from another state; following it walked a FrozenLake retry back
    into the very hole its attempt had fallen into, three attempts in a row.
    """
    advice = str(lesson.get("advice") or lesson.get("text") or "")
    if not advice.startswith(RECIPE) or not calls:
        return False
    done = ", ".join(shown_call(name, arguments) for name, arguments in calls)
    moves = advice[len(RECIPE) :]
    return not (moves.startswith(done) and moves[len(done) :].startswith(", "))


def _recipe_spans(moves: list[str], *, cut: bool) -> list[Span]:
    spans = [Span(field="advice", origin="outcome", text=RECIPE)]
    spans += [Span(field="advice", origin="action", text=move) for move in moves]
    return spans if cut else [*spans, Span(field="advice", origin="outcome", text=".")]


def shown_call(name: str, arguments: Any) -> str:
    """`name` or `name({json})`, each argument value kept only when plain (`PLAIN`)."""
    shown = _plain(arguments) if arguments else {}
    return f"{name}({json.dumps(shown)})" if shown else str(name)


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, str):
        return value if PLAIN.match(value) else PLACEHOLDER
    if isinstance(value, Mapping):
        return {str(key) if PLAIN.match(str(key)) else PLACEHOLDER: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return PLACEHOLDER


def marked(field: Literal["situation", "text"], text: str, sources: Mapping[SpanOrigin, Iterable[str]]) -> list[Span]:
    """`text` cut into spans: runs of at least COPIED_WORDS words found verbatim (case and spacing
    aside) in one of `sources` take that source's origin, the rest is the drafting model's own.
    """
    words = text.split()
    if not words:
        return []
    grams = {origin: _grams(" ".join(texts)) for origin, texts in sources.items()}
    origins: list[SpanOrigin] = ["model"] * len(words)
    for start in range(len(words) - COPIED_WORDS + 1):
        gram = " ".join(_norm(w) for w in words[start : start + COPIED_WORDS])
        found = next((origin for origin, known in grams.items() if gram in known), None)
        if found is not None:
            origins[start : start + COPIED_WORDS] = [found] * COPIED_WORDS
    if len(words) < COPIED_WORDS:
        whole = " ".join(_norm(w) for w in words)
        for origin, texts in sources.items():
            if any(whole in _normed(t) for t in texts):
                origins = [origin] * len(words)
                break
    spans: list[Span] = []
    for word, origin in zip(words, origins, strict=True):
        if spans and spans[-1].origin == origin:
            spans[-1] = Span(field=field, origin=origin, text=f"{spans[-1].text} {word}")
        else:
            spans.append(Span(field=field, origin=origin, text=word))
    return spans


def _norm(word: str) -> str:
    """A word as compared: case and the punctuation around it aside."""
    return word.lower().strip(".,;:!?\"'()[]{}«»“”‘’")


@lru_cache(maxsize=16)
def _grams(text: str) -> frozenset[str]:
    """Kept per joined source text: a run's drafts (each with a situation and a text) are marked
    against the same observations, whose word runs cost ~2 ms per lesson to cut again.
    """
    words = _normed(text).split(" ")
    return frozenset(" ".join(words[i : i + COPIED_WORDS]) for i in range(len(words) - COPIED_WORDS + 1))


@lru_cache(maxsize=256)
def _normed(text: str) -> str:
    return " ".join(_norm(w) for w in text.split())


def traced(
    draft: Mapping[str, Any],
    *,
    outcome: str,
    verified: bool,
    calls: list[tuple[str, Any]],
    sources: Mapping[SpanOrigin, Iterable[str]],
    failed_at: int | None = None,
) -> dict[str, str]:
    """The `advice` and `provenance` fields of a drafted lesson: the advice composed from the run's
    trusted record, the draft's own situation and text marked by where their words came from.
    """
    advice, spans = composed(outcome=outcome, verified=verified, calls=calls, failed_at=failed_at)
    sources = {origin: list(texts) for origin, texts in sources.items()}
    spans += marked("situation", str(draft.get("situation", "")), sources)
    spans += marked("text", str(draft.get("text", "")), sources)
    return {"advice": advice, "provenance": dumps(spans)}


def untraced(draft: Mapping[str, Any]) -> dict[str, str]:
    """For a draft that reached the writer without provenance: no advice, every word the model's."""
    spans = [
        Span(field=name, origin="model", text=str(draft.get(name, "")))
        for name in ("situation", "text")
        if draft.get(name)
    ]
    return {"advice": "", "provenance": dumps(spans)}


def documented(lesson: Mapping[str, Any]) -> dict[str, str]:
    """An imported row: a file wrote every word of it, so it gives no advice until a run's own
    lesson, composed from that run's trusted record, merges into it.
    """
    spans = [
        Span(field=name, origin="document", text=str(lesson.get(name, "")))
        for name in ("situation", "text")
        if lesson.get(name)
    ]
    return {"advice": "", "provenance": dumps(spans)}


def run_sources(goal: str, observations: Iterable[str]) -> dict[SpanOrigin, list[str]]:
    """What a run read that no one checked: its goal (the user's words) and every observation."""
    return {"user": [goal], "observation": [o for o in observations if o]}


def with_advice(kept: str, giver: str) -> str:
    """`kept`'s situation and text spans with `giver`'s advice spans: the advice a run's trusted
    record gave a lesson whose own words came from elsewhere (an import, an unchecked run).
    """
    spans = [span for span in loads(giver) if span.field == "advice"]
    return dumps([*spans, *(span for span in loads(kept) if span.field != "advice")])


def run_record(state: Mapping[str, Any], goal: str) -> dict[str, Any]:
    """A run's state as `traced` reads it: the calls the agent executed (trusted, with their
    checked outcome) and what it read that no one checked (the goal, every observation).
    """
    steps = list(state.get("trajectory", []))  # every executed step: a reflection names one by its index
    observations = [str(state.get("first_observation", "")), *(str(s.get("observation", "")) for s in steps)]
    return {
        "calls": [(str(s.get("action", "")), s.get("arguments")) for s in steps],
        "sources": run_sources(goal, observations),
    }
