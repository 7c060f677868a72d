"""Aggregates over benchmark records: rates with 95% Wilson intervals, Pass@k, costs, critic scores, and
paired comparisons of two configurations on the same tasks with bootstrap intervals.
"""

import math
from collections import defaultdict
from typing import Any

import numpy as np

from pivotal.core.stats import wilson


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


def memory_curve(
    records: list[dict[str, Any]], with_memory: str = "critic+pivotal+memory", without: str = "critic+pivotal"
) -> dict[str, dict[str, list[float]]]:
    """Success rate and cost at each position of the stream (over streams, envs, errors), memory on vs off:
    lessons written by earlier tasks can only help later ones, so a gain shows as a rising gap.
    """
    curves: dict[str, dict[str, list[float]]] = {}
    for config in (without, with_memory):
        positions: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in records:
            if row["config"] == config:
                positions[row["index"]].append(row)
        rows = [v for _, v in sorted(positions.items())]
        mean = lambda v, key: round(sum(r[key] for r in v) / len(v), 3)  # noqa: E731
        curves[config] = {
            "success_by_position": [round(sum(r["status"] == "success" for r in v) / len(v), 3) for v in rows],
            "tasks_by_position": [len(v) for v in rows],
            "llm_calls_by_position": [mean(v, "llm_calls") for v in rows],
            "tokens_by_position": [mean(v, "tokens") for v in rows],
        }
    return curves


COSTS = ("executed", "llm_calls", "tokens", "wall_s")
"""Per-task costs a paired comparison reports as the share the new strategy saves."""
RESAMPLES = 5000
MIN_TASKS = 5
"""Below this many paired tasks a bootstrap interval collapses onto the few values there are (one task: a
zero-width interval that would read as certain), so none is given and nothing is called significant."""


def paired(records: list[dict[str, Any]], new: str, baseline: str, seed: int = 0) -> dict[str, dict[str, Any]]:
    """`new` against `baseline` on the same tasks (env, error rate, layout, model seed): per env@error and
    "all". Pairing removes the task-to-task spread both strategies share, so small differences show.
    Intervals: percentile bootstrap over tasks, resampled within each env@error, seeded so a report
    is reproducible.
    """
    pairs = _pairs(records, new, baseline)
    rng = np.random.default_rng(seed)
    out = {group: _compare([rows], rng) for group, rows in pairs.items()}
    if len(pairs) > 1:
        out["all"] = _compare(list(pairs.values()), rng)
    return out


def _pairs(records: list[dict[str, Any]], new: str, baseline: str) -> dict[str, list[tuple[dict, dict]]]:
    by_key: dict[str, dict[tuple, dict[str, Any]]] = defaultdict(dict)
    for row in records:
        if row["config"] in (new, baseline):
            by_key[row["config"]][(row["env"], row["error"], row["stream"], row["index"])] = row
    pairs: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for key, row in by_key[new].items():
        if key in by_key[baseline]:
            pairs[f"{key[0]}@{key[1]}"].append((row, by_key[baseline][key]))
    return dict(pairs)


def _compare(strata: list[list[tuple[dict, dict]]], rng: np.random.Generator) -> dict[str, Any]:
    rows = [pair for stratum in strata for pair in stratum]
    column = lambda side, key: np.array([float(p[side][key]) for p in rows])  # noqa: E731
    resampled = _resample(strata, rng)
    success = [np.array([p[side]["status"] == "success" for p in rows], dtype=float) for side in (0, 1)]
    difference = success[0] - success[1]
    out: dict[str, Any] = {
        "tasks": len(rows),
        "retried": sum(p[0]["attempts"] > 1 or p[1]["attempts"] > 1 for p in rows),
        "success": {
            "new": round(float(success[0].mean()), 3),
            "baseline": round(float(success[1].mean()), 3),
            **_interval(float(difference.mean()), difference[resampled].mean(axis=1), len(rows)),
        },
    }
    for key in COSTS:
        out[key] = _saved(column(0, key), column(1, key), resampled)
    retried = [[p for p in stratum if p[0]["attempts"] > 1 or p[1]["attempts"] > 1] for stratum in strata]
    retried = [stratum for stratum in retried if stratum]
    if retried:
        subset = [pair for stratum in retried for pair in stratum]
        out["retried_executed"] = _saved(
            np.array([float(p[0]["executed"]) for p in subset]),
            np.array([float(p[1]["executed"]) for p in subset]),
            _resample(retried, rng),
        )
    return out


def _saved(new: np.ndarray, base: np.ndarray, resampled: np.ndarray) -> dict[str, Any]:
    """1 − Σnew/Σbase: the share of the baseline's total cost the new configuration did without."""
    with np.errstate(divide="ignore", invalid="ignore"):
        saved = 1 - new[resampled].sum(axis=1) / base[resampled].sum(axis=1)
    point = 1 - new.sum() / base.sum() if base.sum() else float("nan")
    return {
        "new_per_task": round(float(new.mean()), 3),
        "baseline_per_task": round(float(base.mean()), 3),
        **_interval(point, saved, len(new), name="saved"),
    }


def _resample(strata: list[list[Any]], rng: np.random.Generator) -> np.ndarray:
    """Row indices of RESAMPLES bootstrap samples, each stratum resampled within itself (sizes kept)."""
    blocks, offset = [], 0
    for stratum in strata:
        blocks.append(offset + rng.integers(0, len(stratum), size=(RESAMPLES, len(stratum))))
        offset += len(stratum)
    return np.concatenate(blocks, axis=1)


def _interval(point: float, samples: np.ndarray, tasks: int, name: str = "difference") -> dict[str, Any]:
    """The estimate, its 95% interval, and whether the interval leaves zero out (not when it touches it)."""
    finite = samples[np.isfinite(samples)]
    if not np.isfinite(point) or not finite.size:
        return {name: None, "ci95": None, "significant": False}
    if tasks < MIN_TASKS:
        return {name: round(float(point), 4), "ci95": None, "significant": False}
    low, high = (round(float(v), 4) for v in np.percentile(finite, [2.5, 97.5]))
    return {name: round(float(point), 4), "ci95": [low, high], "significant": low > 0 or high < 0}


def comparisons(records: list[dict[str, Any]], pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Every (new, baseline) pair that both ran, paired task by task."""
    ran = {row["config"] for row in records}
    return [
        {"new": new, "baseline": baseline, "groups": paired(records, new, baseline)}
        for new, baseline in pairs
        if new in ran and baseline in ran
    ]


def pivot_accuracy(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per configuration that reflected on failed attempts: how often the reflection's step, its point
    of no return, and the restart the pivot chose matched the environment's true pivotal step
    (pivotal.bench.pivot_truth), top-1 and within one step, with Wilson intervals.
    """
    from pivotal.bench.pivot_truth import accuracy

    scored: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in records:
        if row.get("pivot_scores"):
            scored[row["config"]].extend(row["pivot_scores"])
    return {config: {f: accuracy(rows, f) for f in ("named", "no_return", "kept")} for config, rows in scored.items()}


def sign_test(saved: int, cost: int) -> float:
    """Two-sided exact McNemar p-value for paired outcomes: `saved` tasks won only by the new mode,
    `cost` only by the baseline. Tasks both won or both lost say nothing about the difference, so a
    handful of discordant pairs out of hundreds of tasks reads as what it is, chance or not.
    """
    n = saved + cost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(saved, cost) + 1))
    return min(1.0, 2 * tail / 2**n)
