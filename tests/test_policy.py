"""The lesson policy alone (memory/policy/rules.py) and the ledger's fold (memory/lesson/ledger.py): no store."""

from pivotal.memory.lesson import Lesson
from pivotal.memory.lesson.ledger import Record, carried, evidence, family_runs, fold
from pivotal.memory.policy import rules as policy


def lesson(text: str = "Check the file exists before reading it.", **fields) -> Lesson:
    return Lesson(kind="guardrail", situation="files", text=text, outcome="failure", family="f", **fields)


def test_a_lesson_below_the_floor_after_enough_recalls_is_weak_and_not_before():
    low = lesson(retrievals=5, utility=0.1)
    assert policy.weak(low, floor=0.2, min_retrievals=5, family_runs=(0, 0)) == "utility 0.10 below floor 0.20"
    assert policy.weak(low, floor=0.2, min_retrievals=6, family_runs=(0, 0)) == ""


def test_a_lesson_whose_runs_fail_clearly_more_than_the_familys_others_hurts():
    bad = lesson(retrievals=6, successes=0)
    assert policy.hurts(bad, min_retrievals=3, family_runs=(16, 10)).startswith("runs that recalled it succeeded 0/6")
    assert policy.hurts(lesson(retrievals=6, successes=3), min_retrievals=3, family_runs=(16, 8)) == ""


def test_over_cap_retires_the_lowest_utility_oldest_first_and_counts_what_stays():
    kept, low, older = (
        lesson("a", utility=0.9),
        lesson("b", utility=0.2, created_at=2),
        lesson("c", utility=0.2, created_at=1),
    )
    gone, left = policy.over_cap([kept, low, older, lesson("d", status="retired")], cap=1)
    assert [g.id for g in gone] == [older.id, low.id] and left == 1
    assert all(g.status == "retired" and "cap of 1" in g.retired_reason for g in gone)


def test_over_quarantine_retires_the_oldest_pending_beyond_a_quarter_of_the_cap_and_no_approved():
    pending = [lesson(f"p{i}", status="pending", created_at=10 - i) for i in range(5)]  # p4 oldest
    approved = [lesson(f"a{i}", utility=0.1) for i in range(3)]
    gone, left = policy.over_quarantine([*approved, *pending, lesson("r", status="retired")], cap=8)
    assert policy.pending_cap(8) == 2 and left == 2
    assert [g.text for g in gone] == ["p4", "p3", "p2"]
    assert all(g.status == "retired" and "2 pending" in g.retired_reason for g in gone)
    assert policy.pending_cap(1) == 1 and policy.over_quarantine(pending[:1], cap=1) == ([], 1)


def test_a_pending_lesson_settles_as_approved_only_with_enough_witnesses():
    waiting = lesson(status="pending", needs=3, witnesses="a b")
    assert waiting.settled().status == "pending"
    assert waiting.model_copy(update={"witnesses": "a b a"}).settled().status == "pending"  # one witness twice
    assert waiting.model_copy(update={"witnesses": "a b c"}).settled().status == "approved"
    # an import stored before quarantine (needs 0) still waits for a run's witness
    assert lesson(status="pending", needs=0).settled().status == "pending"
    assert lesson(status="retired", needs=1, witnesses="a b").settled().status == "retired"


def test_the_fold_counts_each_record_once_whatever_the_order():
    stored = lesson(run_id="r1")
    records = [
        evidence(stored, stored.id),
        evidence(lesson("Check that the file exists first, always.", run_id="r2"), stored.id),
        Record(kind="recall", lesson=stored.id, family="f", run="r3", recalls=1, successes=1, steps=2, approved=1),
    ]
    counts = fold([*records, *reversed(records)])[stored.id].fields()
    assert (counts["evidence"], counts["retrievals"], counts["successes"], counts["step_approvals"]) == (2, 1, 1, 1)
    assert set(counts["source_runs"].split()) == {"r1", "r2"} and counts["scored_runs"] == "r3"


def test_a_pre_ledger_lessons_counts_are_carried_in_one_record():
    old = lesson(run_id="r1", evidence=5, retrievals=3, successes=2, ledgered=False)
    assert carried(old).id == carried(old.model_copy()).id  # two writers carry it as one record
    assert fold([carried(old)])[old.id].fields()["evidence"] == 5


def test_a_familys_runs_are_counted_once_per_run():
    run = Record(kind="run", family="f", run="r1", successes=1)
    assert family_runs([run, run.model_copy(), Record(kind="run", family="f", run="r2")]) == (2, 1)
