"""Aggregates over benchmark records: rates with 95% Wilson intervals, Pass@k, costs, critic scores."""

import math
from collections import defaultdict
from typing import Any

Z95 = 1.959964


def wilson(successes: int, total: int) -> tuple[float, float]:
    """95% interval for a success rate; honest at small n and at 0% / 100%, unlike p ± 2·se."""
    if total == 0:
        return 0.0, 0.0
    p = successes / total
    centre = (p + Z95**2 / (2 * total)) / (1 + Z95**2 / total)
    half = Z95 * math.sqrt(p * (1 - p) / total + Z95**2 / (4 * total**2)) / (1 + Z95**2 / total)
    return round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration on one environment and error rate."""
    n = len(rows)
    wins = sum(r["status"] == "success" for r in rows)
    bad = sum(r["bad_blocked"] + r["bad_passed"] for r in rows)
    blocked = sum(r["bad_blocked"] + r["good_blocked"] for r in rows)
    revised = [r for r in rows if r["revised"]]
    total = lambda key: sum(r[key] for r in rows)  # noqa: E731
    return {
        "tasks": n,
        "success": round(wins / n, 3) if n else 0.0,
        "success_ci95": wilson(wins, n),
        **{
            f"pass@{k}": round(sum(r["status"] == "success" and r["attempts"] <= k for r in rows) / n, 3) if n else 0.0
            for k in (1, 2, 3)
        },
        "executed_steps": total("executed"),
        "replayed_steps": total("replayed"),
        "llm_calls": total("llm_calls"),
        "tokens": total("tokens"),
        "wall_s": round(total("wall_s"), 2),
        "critic_precision": round(total("bad_blocked") / blocked, 3) if blocked else None,
        "critic_recall": round(total("bad_blocked") / bad, 3) if bad else None,
        "success_after_revise": round(sum(r["status"] == "success" for r in revised) / len(revised), 3)
        if revised
        else None,
        **{f"lessons_{k}": sum(r["lessons"].get(k, 0) for r in rows) for k in ("written", "recalled", "retired")},
    }


def by_group(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{"env@error": {config: summary}}."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in records:
        groups[f"{row['env']}@{row['error']}"][row["config"]].append(row)
    return {group: {config: summarise(rows) for config, rows in configs.items()} for group, configs in groups.items()}


def pivotal_vs_full(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Same seeds, same critic: how much executing and asking pivotal retry saves over full retry."""
    out = {}
    for group, configs in by_group(records).items():
        full, pivotal = configs.get("critic+full"), configs.get("critic+pivotal")
        if not full or not pivotal:
            continue
        out[group] = {
            "full_success": full["success"],
            "pivotal_success": pivotal["success"],
            "executed_reduction": _reduction(full["executed_steps"], pivotal["executed_steps"]),
            "llm_call_reduction": _reduction(full["llm_calls"], pivotal["llm_calls"]),
            **_retried_only(records, group),
        }
    return out


def _retried_only(records: list[dict[str, Any]], group: str) -> dict[str, Any]:
    """The same comparison on the tasks where either strategy actually retried: the retries' own cost."""
    env, error = group.split("@")
    key = lambda r: (r["stream"], r["index"])  # noqa: E731
    rows = {
        c: {key(r): r for r in records if r["env"] == env and str(r["error"]) == error and r["config"] == c}
        for c in ("critic+full", "critic+pivotal")
    }
    both = [
        k
        for k in rows["critic+full"]
        if k in rows["critic+pivotal"]
        and (rows["critic+full"][k]["attempts"] > 1 or rows["critic+pivotal"][k]["attempts"] > 1)
    ]
    cost = lambda c, f: sum(rows[c][k][f] for k in both)  # noqa: E731
    return {
        "retried_tasks": len(both),
        "retried_executed_reduction": _reduction(cost("critic+full", "executed"), cost("critic+pivotal", "executed")),
        "retried_llm_call_reduction": _reduction(cost("critic+full", "llm_calls"), cost("critic+pivotal", "llm_calls")),
    }


def memory_curve(
    records: list[dict[str, Any]], with_memory: str = "critic+pivotal+memory", without: str = "critic+pivotal"
) -> dict[str, dict[str, list[float]]]:
    """Success rate at each position of the stream (over streams, envs, errors), memory on vs off."""
    curves: dict[str, dict[str, list[float]]] = {}
    for config in (without, with_memory):
        positions: dict[int, list[bool]] = defaultdict(list)
        for row in records:
            if row["config"] == config:
                positions[row["index"]].append(row["status"] == "success")
        curves[config] = {"success_by_position": [round(sum(v) / len(v), 3) for _, v in sorted(positions.items())]}
    return curves


def _reduction(baseline: float, new: float) -> float | None:
    return round(1 - new / baseline, 3) if baseline else None
