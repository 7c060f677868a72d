"""The lesson policy's decisions, apart from where lessons are kept: when a lesson retires, and
which go when an owner is over its cap. Pure functions of lessons and counts, so each is tested
alone (tests/test_policy.py) and every backend (memory/storage/) gets the same answers.
"""

from collections.abc import Iterable

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


def retired(lesson: Lesson, reason: str) -> Lesson:
    return lesson.model_copy(update={"status": "retired", "retired_reason": reason})


def _weakest_first(lesson: Lesson) -> tuple[float, float]:
    return lesson.utility, lesson.created_at
