"""Write the benchmark's results: results.json (everything), report.md (a recommendation, then the tables
behind it), PNG plots. Nothing here names an environment or a configuration: it reports what ran.
"""

import json
from pathlib import Path
from typing import Any

from pivotal.bench.prose import caveat, interval, not_significant, recommendation

COLUMNS = [
    ("success", "success"),
    ("success_ci95", "95% CI"),
    ("pass@1", "P@1"),
    ("pass@2", "P@2"),
    ("pass@3", "P@3"),
    ("executed_steps", "executed"),
    ("replayed_steps", "replayed"),
    ("llm_calls", "LLM calls"),
    ("tokens", "tokens"),
    ("wall_s", "wall s"),
    ("critic_precision", "critic P"),
    ("critic_recall", "critic R"),
    ("success_after_revise", "succ. after revise"),
    ("lessons_written", "lessons w"),
    ("lessons_recalled", "recalled"),
    ("lessons_retired", "retired"),
]
COSTS = [("executed", "executed steps"), ("llm_calls", "LLM calls"), ("tokens", "tokens"), ("wall_s", "seconds")]
LEGEND = (
    "Success: share of tasks solved (95% Wilson interval). P@k: solved within k attempts (k−1 retries). "
    "Executed/replayed: environment steps run on a decision / re-applied to restore state. Critic P/R: "
    "of the proposals the critic layer (pre-check + critic) blocked, the share that were bad, and of the "
    "bad proposals, the share it blocked — judged by the environment's oracle on the final path."
)
PAIRED_LEGEND = (
    "Each task (environment, layout, model seed) ran under both configurations, so each row compares the same "
    "tasks. Δ success: new minus baseline, in percentage points. *Saved*: 1 − new total / baseline total "
    "(negative: the new configuration cost more). Intervals: 95% percentile bootstrap over tasks (5,000 "
    "resamples, within each env@error for *all*). *Retried*: tasks where either configuration retried; the "
    "saving on them is the retries' own. **n.s.** marks an interval that includes zero: no difference "
    "can be claimed at this sample size. Seconds are wall time with several streams sharing the CPU: noisy."
)


def write(out: Path, results: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(results_json(results))
    from pivotal.bench.plots import draw

    plots = draw(out, results)
    (out / "report.md").write_text(markdown(results, [p.name for p in plots]))
    return [out / "results.json", out / "report.md", *plots]


def results_json(results: dict[str, Any]) -> str:
    """The summary indented; each task's record on one line. Indented records made the full run's file 5.3 MB
    (one line per field of 8,640 records); one line each keeps it near 3 MB and diffs by task.
    """
    summary = {key: value for key, value in results.items() if key != "records"}
    if "records" not in results or not summary:
        return json.dumps(results, indent=2)
    lines = ",\n".join("    " + json.dumps(record, separators=(",", ":")) for record in results["records"])
    return f'{json.dumps(summary, indent=2)[:-2]},\n  "records": [\n{lines}\n  ]\n}}'


def markdown(results: dict[str, Any], plots: list[str]) -> str:
    meta = results["meta"]
    lines = [
        "# Pivotal benchmark",
        "",
        f"Command: `{meta['command']}` · {meta['tasks_run']} runs · {meta['wall_s']} s · model `{meta['model']}` "
        f"at error rates {meta['errors']} · {meta['streams']} streams × {meta['tasks']} tasks = "
        f"{meta['streams'] * meta['tasks']} tasks per configuration and environment.",
        "",
        "## Should I turn it on?",
        "",
        recommendation(results),
        "",
        *caveat(meta["model"]),
        "",
        "## Paired comparisons (same tasks, same seeds)",
        "",
        PAIRED_LEGEND,
        "",
        *paired_tables(results["comparisons"], rules=meta.get("rules") or {}),
        *pivot_section(results.get("pivot_accuracy") or {}),
        *_memory_table(results["memory_curve"]),
        "## Per configuration",
        "",
        LEGEND,
        "",
    ]
    for group, configs in results["groups"].items():
        lines += [f"### {group}", "", *config_table(configs), ""]
    if results.get("local"):
        lines += local_section(results["local"])
    lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def paired_tables(
    comparisons: list[dict[str, Any]], level: str = "###", rules: dict[str, str] | None = None
) -> list[str]:
    lines = []
    for comparison in comparisons:
        groups = comparison["groups"]
        new, base = comparison["new"], comparison["baseline"]
        lines += [f"{level} {new} against {base}", ""]
        if rules and new in rules and base in rules:
            said = f"both {rules[new]}" if rules[new] == rules[base] else f"{new}: {rules[new]}; {base}: {rules[base]}"
            lines += [f"Compared under: {said}.", ""]
        lines += [
            "| env@error | tasks | retried | success new / baseline | Δ success (95% CI) | "
            + " | ".join(f"{label} saved (95% CI)" for _, label in COSTS)
            + " | executed saved on retried tasks | per task new / baseline: executed, LLM calls |",
            "|---" * (7 + len(COSTS)) + "|",
        ]
        for group, row in groups.items():
            lines.append(_paired_row("**all**" if group == "all" else group, row))
        lines += ["", not_significant(groups), ""]
    return lines


def _paired_row(label: str, row: dict[str, Any]) -> str:
    success = row["success"]
    cells = [
        label,
        str(row["tasks"]),
        str(row["retried"]),
        f"{success['new']:.0%} / {success['baseline']:.0%}",
        interval(success, "difference", points=True),
        *(interval(row[key], "saved") for key, _ in COSTS),
        interval(row["retried_executed"], "saved") if "retried_executed" in row else "n/a",
        f"{row['executed']['new_per_task']:.1f} / {row['executed']['baseline_per_task']:.1f}, "
        f"{row['llm_calls']['new_per_task']:.1f} / {row['llm_calls']['baseline_per_task']:.1f}",
    ]
    return "| " + " | ".join(cells) + " |"


PIVOT_LEGEND = (
    "Each failed attempt's true pivotal step comes from the environment itself: the first step after which the "
    "cost to go never came back down (out of reach counts as endless). *Reflection*: the reflector's pivotal step; "
    "*no return*: its point of no return; *restart*: the step the pivot chose to redo. Attempts that ended at their "
    "closest state (no step went wrong for good) are not scored. Intervals: 95% Wilson."
)


def pivot_section(found: dict[str, dict[str, Any]]) -> list[str]:
    """How often the reflector named the step that went wrong for good, per configuration."""
    if not found:
        return []
    head = "| config | attempts (scored) | " + " | ".join(
        f"{label} {kind}" for label in ("reflection", "no return", "restart") for kind in ("top-1", "within one")
    )
    lines = ["## Pivot accuracy", "", PIVOT_LEGEND, "", head + " |", "|---" * 8 + "|"]
    for config, fields in found.items():
        cells = [f"{fields['named']['attempts']} ({fields['named']['scored']})"]
        for field in ("named", "no_return", "kept"):
            row = fields[field]
            for kind in ("top1", "within1"):
                value, ci = row[kind], row[f"{kind}_ci95"]
                cells.append("n/a" if value is None else f"{value:.0%} ({ci[0]:.0%}–{ci[1]:.0%})")
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _memory_table(curves: dict[str, dict[str, list[float]]]) -> list[str]:
    if not curves or not any(c["success_by_position"] for c in curves.values()):
        return []
    names = list(curves)
    lines = [
        "## Memory over a stream (by task position, all envs and error rates)",
        "",
        "Tasks of a stream share one lesson store, so only later positions can use lessons.",
        "",
        "| position | "
        + " | ".join(f"success {n}" for n in names)
        + " | "
        + " | ".join(f"calls {n}" for n in names)
        + " |",
        "|---" * (1 + 2 * len(names)) + "|",
    ]
    width = max(len(c["success_by_position"]) for c in curves.values())
    for i in range(width):
        cells = [_at(curves[n], "success_by_position", i) for n in names]
        cells += [_at(curves[n], "llm_calls_by_position", i) for n in names]
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return lines + [""]


def _at(curve: dict[str, list[float]], key: str, i: int) -> str:
    values = curve.get(key, [])
    return str(values[i]) if i < len(values) else ""


def config_table(configs: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| config | " + " | ".join(h for _, h in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for config, row in configs.items():
        lines.append(f"| {config} | " + " | ".join(_cell(row[k]) for k, _ in COLUMNS) + " |")
    return lines


def local_section(local: dict[str, Any]) -> list[str]:
    """The embedded model's runs through the same tables: a real model's errors, not injected ones."""
    lines = [
        f"## Embedded local model ({local['tasks']} tasks per configuration: {local['env']})",
        "",
        "A real (135M-parameter) model's own errors rather than `sim`'s injected ones; few tasks, so wide intervals.",
        "",
        *paired_tables(local["comparisons"], level="####"),
    ]
    for group, configs in local["groups"].items():
        lines += [f"#### {group}", "", *config_table(configs), ""]
    return lines


def _cell(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (list, tuple)):
        return f"{value[0]:.2f}–{value[1]:.2f}"
    return str(value)
