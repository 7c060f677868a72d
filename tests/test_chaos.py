"""The reliability suite in its reduced form (benchmarks/chaos.py --small): its goals are asserted.

The suite runs as a program, the way docs/reliability.md tells a user to run it; its figures come back
as the JSON file it writes.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # every test reads one run of the suite: ~90 s


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    out = tmp_path_factory.mktemp("chaos") / "figures.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--small", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_provider_faults_never_crash_a_task_and_every_task_has_an_outcome(figures):
    chaotic = figures["provider_chaos"]["chaos"]
    assert chaotic["crashed"] == 0
    assert chaotic["completed"] + chaotic["failed_with_reason"] == chaotic["tasks"]
    assert sum(chaotic["faults_injected"].values()) > 0 and chaotic["retries_made"] > 0


def test_kills_and_resumes_execute_no_action_twice_and_lose_no_lesson(figures):
    crash = figures["crash_and_resume"]
    assert crash["kills"] >= 5 and crash["final_exit"] == 0, crash.get("final_stderr")
    assert crash["tasks_finished"] == crash["results_lines"] == crash["tasks"]
    assert crash["actions_executed_twice"] == 0
    assert crash["evidence_lost"] == crash["evidence_duplicated"] == 0 and crash["evidence_stored"] > 0


def test_the_store_under_contention_loses_and_duplicates_nothing(figures):
    for part in figures["store_contention"].values():
        assert part["lessons_lost"] == part["lessons_duplicated"] == 0
        assert part["evidence_stored"] == part["evidence_expected"] > 0


def test_hostile_tool_output_is_contained(figures):
    hostile = figures["hostile_input"]
    assert hostile["crashed"] == 0 and hostile["probe_lessons_stored"] == 0
    assert hostile["probe_candidates"] >= hostile["probes"]  # every probe reached the gate, and none got in


def test_a_planted_key_is_in_no_artefact(figures):
    assert figures["secrets"]["artefacts_scanned"] > 5 and figures["secrets"]["artefacts_with_the_key"] == []


def test_every_bad_input_gets_its_one_line_error_and_the_docs_list_them_all(figures):
    failed = [row for row in figures["bad_configuration"] if not row["ok"]]
    assert not failed, failed
    table = (ROOT / "docs" / "bad-input.md").read_text()
    listed = set(re.findall(r"^\| `(pivotal [^`]+)` \| 2 \|", table, re.MULTILINE))
    assert listed == {row["command"] for row in figures["bad_configuration"]}


def test_no_refund_runs_twice_across_retries_kills_and_resumed_approvals(figures):
    effects = figures["side_effects"]
    parts = [*effects["retries"].values(), effects["kills"], effects["approvals"]]
    assert all(part["refunds_executed_twice"] == 0 for part in parts)
    assert all(part["refunds_in_ledgers"] == part["refund_decisions"] > 0 for part in parts)
    assert all(part["successes_with_wrong_net_amount"] == 0 and part["succeeded"] > 0 for part in parts)
    kills = effects["kills"]
    assert kills["kills"] >= 1 and kills["results_lines"] == kills["tasks"], kills.get("final_stderr")


def test_batch_faults_lose_nothing_and_run_nothing_twice(figures):
    faults = figures["batch_faults"]
    hung = faults["hung_tools"]
    assert (
        hung["hung_recorded_as_timed_out"] == hung["hung"] and hung["healthy_succeeded"] == hung["tasks"] - hung["hung"]
    )
    exits = faults["tools_raising_system_exit"]
    assert exits["results"] == exits["tasks"] and exits["errors_on_raising_tasks"] == exits["raising"]
    assert exits["healthy_succeeded"] == exits["tasks"] - exits["raising"]
    second = faults["second_batch_on_the_same_results"]
    assert second["first_batch_ran_throughout"], second.get("final_stderr")
    assert second["second_batches_refused"] == 2
    full = faults["disk_full_mid_batch"]
    for part in (second, *(() if "skipped" in full else (full,))):
        assert part["tasks_lost"] == part["duplicate_lines"] == part["refunds_executed_twice"] == 0
        assert part["refunds_in_ledgers"] == part["refund_decisions"] == part["tasks"]
    if "skipped" not in full:
        assert full["stopped_exit"] == 2 and full["stop_message_lines"] == 1
        assert full["errors_recorded_for_the_fault"] == 0 and full["resume_exit"] == 0
    slow = faults["trickling_provider"]
    assert slow["run_wall_s"] < 10 * slow["call_deadline_s"]
