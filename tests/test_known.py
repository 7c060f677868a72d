"""memory/policy/known.py alone: the lessons a private store keeps as it last read or wrote them."""

from pivotal.memory.lesson import Lesson
from pivotal.memory.policy.known import KnownLessons


def lesson(text: str, **fields) -> Lesson:
    return Lesson(kind="guardrail", situation="in a file", text=text, outcome="failure", family="files", **fields)


def test_a_read_that_a_write_overtook_is_not_kept():
    known, old = KnownLessons(), lesson("Back up first.")
    read_after = known.writes
    known.remember([old.model_copy(update={"status": "retired"})])  # a write lands during the read
    known.remember([old], read_after=read_after)  # the read's older version
    assert known[old.id].status == "retired"


def test_it_starts_over_past_its_limit_and_forgets_what_it_is_told():
    known = KnownLessons(limit=2)
    a, b, c = lesson("a one"), lesson("b two"), lesson("c three")
    known.remember([a, b])
    known.remember([c])
    assert c.id in known and a.id not in known and known.look([a.id, c.id]) == {a.id: None, c.id: c}
    known.forget([c.id])
    assert c.id not in known


def test_coverage_moves_halfway_to_the_share_a_query_found_known():
    known, a = KnownLessons(), lesson("a one")
    known.remember([a])
    known.seen([a.id, "other"])
    assert known.coverage == 0.25
    known.seen([])
    assert known.coverage == 0.25
    known.forget()
    assert known.coverage == 0.0 and a.id not in known and known == {} and len(known) == 0
