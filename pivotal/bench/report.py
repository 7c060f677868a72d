"""Write the benchmark's results: results.json (everything), report.md (tables), PNG plots."""

import json
from pathlib import Path
from typing import Any

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


def write(out: Path, results: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    plots = _plots(out, results)
    (out / "report.md").write_text(markdown(results, [p.name for p in plots]))
    return [out / "results.json", out / "report.md", *plots]


def markdown(results: dict[str, Any], plots: list[str]) -> str:
    meta = results["meta"]
    lines = [
        "# Pivotal benchmark",
        "",
        f"Command: `{meta['command']}` · {meta['tasks_run']} runs · {meta['wall_s']} s · "
        f"model `{meta['model']}` at error rates {meta['errors']} · {meta['streams']} streams × "
        f"{meta['tasks']} tasks per configuration and environment.",
        "",
        "Success: share of tasks solved (95% Wilson interval). P@k: solved within k attempts (k−1 retries). "
        "Executed/replayed: environment steps run on a decision / re-applied to restore state. Critic P/R: "
        "of the proposals the critic layer (pre-check + critic) blocked, the share that were bad, and of the "
        "bad proposals, the share it blocked — judged by the environment's oracle on the final path.",
        "",
    ]
    lines += [
        "## Pivotal retry against full retry (same seeds, critic on)",
        "",
        "| env@error | full success | pivotal success | executed steps saved | LLM calls saved | "
        "tasks retried | executed saved on them | calls saved on them |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for group, row in results["pivotal_vs_full"].items():
        lines.append(
            f"| {group} | {row['full_success']} | {row['pivotal_success']} | {_pct(row['executed_reduction'])} "
            f"| {_pct(row['llm_call_reduction'])} | {row['retried_tasks']} | "
            f"{_pct(row['retried_executed_reduction'])} | {_pct(row['retried_llm_call_reduction'])} |"
        )
    curves = results["memory_curve"]
    lines += [
        "",
        "## Memory over a stream (success by task position, all envs and error rates)",
        "",
        "| position | " + " | ".join(curves) + " |",
        "|---" * (len(curves) + 1) + "|",
    ]
    width = max(len(c["success_by_position"]) for c in curves.values())
    for i in range(width):
        lines.append(
            f"| {i + 1} | "
            + " | ".join(
                str(c["success_by_position"][i]) if i < len(c["success_by_position"]) else "" for c in curves.values()
            )
            + " |"
        )
    for group, configs in results["groups"].items():
        lines += [
            "",
            f"## {group}",
            "",
            "| config | " + " | ".join(h for _, h in COLUMNS) + " |",
            "|---" * (len(COLUMNS) + 1) + "|",
        ]
        for config, row in configs.items():
            lines.append(f"| {config} | " + " | ".join(_cell(row[k]) for k, _ in COLUMNS) + " |")
    if results.get("local"):
        local = results["local"]
        lines += [
            "",
            f"## Embedded local model ({local['tasks']} tasks per configuration, {local['env']})",
            "",
            "| config | " + " | ".join(h for _, h in COLUMNS) + " |",
            "|---" * (len(COLUMNS) + 1) + "|",
        ]
        for config, row in local["configs"].items():
            lines.append(f"| {config} | " + " | ".join(_cell(row[k]) for k, _ in COLUMNS) + " |")
    lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def _plots(out: Path, results: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    groups = results["groups"]
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 4), squeeze=False)
    for axis, (group, configs) in zip(axes[0], groups.items(), strict=False):
        names = list(configs)
        rates = [configs[c]["success"] for c in names]
        errors = [
            [r - configs[c]["success_ci95"][0] for c, r in zip(names, rates, strict=False)],
            [configs[c]["success_ci95"][1] - r for c, r in zip(names, rates, strict=False)],
        ]
        axis.bar(range(len(names)), rates, yerr=errors, capsize=3)
        axis.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        axis.set_ylim(0, 1.05)
        axis.set_title(group, fontsize=9)
    axes[0][0].set_ylabel("success (95% CI)")
    paths.append(_save(fig, out / "success.png"))

    comparison = results["pivotal_vs_full"]
    fig, axis = plt.subplots(figsize=(max(5, 1.2 * len(comparison)), 4))
    names = list(comparison)
    axis.bar(
        [i - 0.2 for i in range(len(names))],
        [_num(comparison[g]["executed_reduction"]) for g in names],
        0.4,
        label="executed steps saved",
    )
    axis.bar(
        [i + 0.2 for i in range(len(names))],
        [_num(comparison[g]["llm_call_reduction"]) for g in names],
        0.4,
        label="LLM calls saved",
    )
    axis.axhline(0.4, linestyle="--", color="grey", label="goal 40%")
    axis.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
    axis.set_ylabel("saved by pivotal vs full retry")
    axis.legend(fontsize=7)
    paths.append(_save(fig, out / "pivotal_vs_full.png"))

    fig, axis = plt.subplots(figsize=(5, 4))
    for config, curve in results["memory_curve"].items():
        points = curve["success_by_position"]
        axis.plot(range(1, len(points) + 1), points, marker="o", label=config)
    axis.set_xlabel("task position in the stream")
    axis.set_ylabel("success rate")
    axis.set_ylim(0, 1.05)
    axis.legend(fontsize=7)
    paths.append(_save(fig, out / "memory_stream.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _num(value: float | None) -> float:
    return value if value is not None else 0.0


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (list, tuple)):
        return f"{value[0]:.2f}–{value[1]:.2f}"
    return str(value)
