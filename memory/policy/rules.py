"""The lesson policy's decisions, apart from where lessons are kept: when a lesson retires, and
which go when an owner is over its cap. Pure functions of lessons and counts, so each is tested
alone (tests/test_policy.py) and every backend (memory/storage/) gets the same answers.
"""

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import cast

from pivotal.core.context import Context
from pivotal.core.stats import wilson
from pivotal.memory.lesson import Lesson


def weak(lesson: Lesson, *, floor: float, min_retrievals: int, family_runs: tuple[int, int]) -> str:
    """Why an approved lesson should retire, or "": its utility fell below `floor` after enough
    recalls, or it hurts (`hurts`).
    """
    if lesson.retrievals >= min_retrievals and lesson.utility < floor:
        return f"utility {lesson.utility:.2f} below floor {floor:.2f}"
    return hurts(lesson, min_retrievals=min_retrievals, family_runs=family_runs)


def hurts(lesson: Lesson, *, min_retrievals: int, family_runs: tuple[int, int]) -> str:
    """Why a lesson hurts, or "": the runs that recalled it succeeded clearly less often (the
    top of its 95% interval below) than the family's runs without it. `family_runs`: the
    family's (runs, successes), this lesson's included.
    """
    runs, successes = family_runs
    others = runs - lesson.retrievals
    if lesson.retrievals < min_retrievals or others < min_retrievals:
        return ""
    baseline = (successes - lesson.successes) / others
    upper = wilson(lesson.successes, lesson.retrievals)[1]
    if upper >= baseline:
        return ""
    return (
        f"runs that recalled it succeeded {lesson.successes}/{lesson.retrievals} (at most {upper:.0%}) "
        f"against {baseline:.0%} of the family's {others} other runs"
    )


def over_cap(lessons: Iterable[Lesson], cap: int) -> tuple[list[Lesson], int]:
    """The approved lessons beyond `cap`, lowest utility first (oldest first on ties), each
    retired with its reason; and how many stay approved.
    """
    approved = sorted((lesson for lesson in lessons if lesson.status == "approved"), key=_weakest_first)
    reason = f"store over its cap of {cap} approved lessons (lowest utility)"
    gone = approved[: max(0, len(approved) - cap)]
    return [retired(lesson, reason) for lesson in gone], min(len(approved), cap)


PENDING_SHARE = 4
"""An owner's quarantine holds at most 1/PENDING_SHARE of its cap (`pending_cap`)."""


def pending_cap(cap: int) -> int:
    """Pending lessons an owner may hold beside its `cap` approved ones: a quarter of the cap, at
    least one. Their own cap, not a share of the approved lessons' room: a store full of approved
    lessons still takes in new ones to confirm, and unconfirmed ones never displace confirmed ones.
    """
    return max(1, cap // PENDING_SHARE)


def over_quarantine(lessons: Iterable[Lesson], cap: int) -> tuple[list[Lesson], int]:
    """The pending lessons beyond `pending_cap(cap)`, oldest first, each retired with its reason;
    and how many stay pending. Oldest first: a lesson no independent run confirmed for longest is
    the least likely ever to be, and a flood of new ones (an attacker's, a noisy app's) pushes out
    only lessons as unconfirmed as itself.
    """
    pending = sorted((lesson for lesson in lessons if lesson.status == "pending"), key=_oldest_first)
    room = pending_cap(cap)
    reason = f"quarantine over its cap of {room} pending lessons (oldest unconfirmed)"
    gone = pending[: max(0, len(pending) - room)]
    return [retired(lesson, reason) for lesson in gone], min(len(pending), room)


def _oldest_first(lesson: Lesson) -> tuple[float, str]:
    return lesson.created_at, lesson.id


def retired(lesson: Lesson, reason: str) -> Lesson:
    return lesson.model_copy(update={"status": "retired", "retired_reason": reason})


def _weakest_first(lesson: Lesson) -> tuple[float, float]:
    return lesson.utility, lesson.created_at


# ---- quarantine: a new lesson is recalled only once independent runs agree -----------------
CONFIRMATIONS: dict[str, int] = {
    f.name.removeprefix("confirmations_"): int(cast(int, f.default))
    for f in fields(Context)
    if f.name.startswith("confirmations_")
}
"""Context's defaults, for what has no Context (an import from the shell)."""
NO_QUARANTINE: dict[str, int] = {f"confirmations_{kind}": 1 for kind in CONFIRMATIONS}
"""`Context(**NO_QUARANTINE)`: a lesson is recalled from the next run on, its own run enough (as
before quarantine: for tests of other things, and stores no one else can write)."""
RULE = re.compile(r"\b(always|never|must|mustn't|must not|do not|don't|under no)\b", re.IGNORECASE)
"""A lesson that words a rule: it would change what the critic enforces, like a guardrail. Read
for the evidence it needs only; no wording makes a lesson need less."""


UNTRUSTED_NEEDS = 2
"""The least a lesson with no advice (nothing in it came from a checked action: an import, an
unchecked run, a blamed step that never ran) needs, whatever the Context allows: it starts in
quarantine."""


def needs(lesson: Lesson, confirmations: Mapping[str, int] = CONFIRMATIONS) -> int:
    """Independent confirmations `lesson` needs before it is recalled: its kind's, a guardrail's
    when it words a rule in any of its fields, and never fewer than UNTRUSTED_NEEDS without advice.
    """
    rule = any(RULE.search(text) for text in (lesson.advice, lesson.situation, lesson.text))
    kind = "guardrail" if rule else lesson.kind
    need = max(confirmations.get(kind, 1), confirmations.get(lesson.kind, 1))
    return need if lesson.advice else max(need, UNTRUSTED_NEEDS)


def witness(owner: str, thread: str, task: str) -> str:
    """A run's independence key: runs of one owner, thread and task are one witness, however often
    resumed, retried or forked; another thread, task or owner is another.
    """
    return hashlib.sha256(f"{owner}|{thread}|{task}".encode()).hexdigest()[:16]


def quarantined(lesson: Lesson, *, witness_key: str, confirmations: Mapping[str, int]) -> Lesson:
    """A run's new lesson with its quarantine: its own run is its first witness, and it is
    approved only once enough are (at once where its kind needs one).
    """
    need = needs(lesson, confirmations)
    status = "approved" if need <= 1 and witness_key else "pending"
    return lesson.model_copy(update={"needs": need, "witnesses": witness_key, "status": status})
