"""Ground truth for the critic's scores: replay a finished trajectory in a fresh environment and
ask the environment's oracle whether each proposal the critic saw was a bad action.
"""

from typing import Any

from pivotal.core.environments import Oracle, make_environment
from pivotal.core.task import Task

BLOCKED = {"reject", "revise"}


def judge_trajectory(task: dict[str, Any], trajectory: list[dict[str, Any]]) -> dict[str, int]:
    """Counts over every reviewed proposal on the final path: bad ones blocked / let through,
    good ones blocked / let through. Proposals on paths a pivot cut away are not replayed.
    """
    counts = {"bad_blocked": 0, "bad_passed": 0, "good_blocked": 0, "good_passed": 0}
    parsed = Task.model_validate(task)
    env = make_environment(parsed.env)
    if not isinstance(env, Oracle):
        return counts
    env.reset(parsed)
    for step in trajectory:
        for verdict in step.get("verdicts") or []:
            if verdict.get("source") in ("human", "none"):
                continue
            quality, _ = env.judge(verdict["action"], verdict.get("arguments") or {})
            bad = quality != "good"
            blocked = verdict["decision"] in BLOCKED
            counts[f"{'bad' if bad else 'good'}_{'blocked' if blocked else 'passed'}"] += 1
        env.step(step["action"], step.get("arguments") or {})
    return counts
