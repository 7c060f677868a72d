"""The report's plots. Every plot puts cost (LLM calls, tokens, seconds) beside success, because a
success rate alone cannot tell a user whether a switch is worth turning on; the only reference line
drawn is zero, in the paired plot.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pivotal.core.stats import wilson

if TYPE_CHECKING:  # matplotlib loads where a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PER_TASK = [("llm_calls", "LLM calls / task"), ("tokens", "tokens / task"), ("wall_s", "seconds / task")]
PAIRED = [
    ("success", "difference", "Δ success (pp)"),
    ("executed", "saved", "executed steps saved"),
    ("llm_calls", "saved", "LLM calls saved"),
    ("tokens", "saved", "tokens saved"),
    ("wall_s", "saved", "seconds saved"),
]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def draw(out: Path, results: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    paths = [success_and_cost(out / "success_cost.png", results["groups"])]
    if results["comparisons"]:
        paths.append(paired(out / "paired.png", results["comparisons"]))
    if any(c["success_by_position"] for c in results["memory_curve"].values()):
        paths.append(memory(out / "memory_stream.png", results["memory_curve"]))
    return paths


def success_and_cost(path: Path, groups: dict[str, dict[str, Any]]) -> Path:
    """Grouped bars, one colour per configuration: success (95% CI) on top, its costs per task below."""
    import matplotlib.pyplot as plt

    names = list(groups)
    configs = list(dict.fromkeys(c for g in groups.values() for c in g))
    width = 0.8 / len(configs)
    fig, axes = plt.subplots(
        1 + len(PER_TASK), 1, figsize=(max(8, 1.1 * len(names) * max(1, len(configs) / 4)), 11), sharex=True
    )
    for j, config in enumerate(configs):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(names))]
        rows = [groups[g].get(config) for g in names]
        rates = [r["success"] if r else 0.0 for r in rows]
        low = [r["success"] - r["success_ci95"][0] if r else 0.0 for r in rows]
        high = [r["success_ci95"][1] - r["success"] if r else 0.0 for r in rows]
        axes[0].bar(xs, rates, width, yerr=[low, high], capsize=2, label=config, color=f"C{j}")
        for axis, (key, _) in zip(axes[1:], PER_TASK, strict=True):
            axis.bar(xs, [r[_total(key)] / r["tasks"] if r else 0.0 for r in rows], width, color=f"C{j}")
    axes[0].set_ylim(0, 1.05)
    axes[0].set_ylabel("success (95% CI)")
    axes[0].legend(fontsize=7, ncol=min(len(configs), 6), loc="lower center", bbox_to_anchor=(0.5, 1.0))
    for axis, (_, label) in zip(axes[1:], PER_TASK, strict=True):
        axis.set_ylabel(label)
    axes[-1].set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    return _save(fig, path)


def paired(path: Path, comparisons: list[dict[str, Any]]) -> Path:
    """A forest plot: one row per comparison, one column per measure (success first, then costs), one
    point per env@error and overall, filled where the 95% interval excludes zero, hollow where it does not.
    """
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys(g for c in comparisons for g in c["groups"]))
    height = 0.9 + 0.28 * len(cells) * len(comparisons) + 0.6 * len(comparisons)
    fig, axes = plt.subplots(
        len(comparisons),
        len(PAIRED),
        figsize=(3.2 * len(PAIRED), height),
        sharey=True,
        squeeze=False,
    )
    for row, comparison in zip(axes, comparisons, strict=True):
        for axis, (key, value, label) in zip(row, PAIRED, strict=True):
            _forest(axis, comparison["groups"], cells, key, value, points=key == "success")
            axis.set_title(f"{comparison['new']} vs {comparison['baseline']}\n{label}", fontsize=8)
        row[0].set_yticks(range(len(cells)), cells, fontsize=8)
    axes[0][0].invert_yaxis()
    fig.suptitle(
        "new against baseline on the same tasks, 95% bootstrap intervals. Filled: the interval excludes zero; "
        "hollow: not significant at this sample size; black: all env@error cells together",
        fontsize=9,
    )
    return _save(fig, path, top=1 - 0.4 / height)  # room for the title above the first row


def _forest(axis: "Axes", groups: dict[str, Any], cells: list[str], key: str, value: str, points: bool) -> None:
    scale = 100  # both measures are shown in percent: pp and % saved
    for y, cell in enumerate(cells):
        stat = groups.get(cell, {}).get(key)
        if not stat or stat.get("ci95") is None:  # too few tasks for an interval: nothing to draw
            continue
        low, high = stat["ci95"]
        centre = stat[value] * scale
        colour = "black" if cell == "all" else "C0"
        axis.errorbar(
            centre,
            y,
            xerr=[[centre - low * scale], [high * scale - centre]],
            fmt="o",
            color=colour,
            markerfacecolor=colour if stat["significant"] else "white",
            capsize=2,
        )
    axis.axvline(0, color="grey", linewidth=0.8)
    axis.set_xlabel("pp" if points else "% saved (negative: costs more)", fontsize=7)
    axis.tick_params(labelsize=7)


def memory(path: Path, curves: dict[str, dict[str, list[float]]]) -> Path:
    """Success and LLM calls per task by stream position, the lines offset sideways and marked differently so
    that equal values stay visible side by side instead of one line hiding the other.
    """
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    offset = 0.12
    for j, (config, curve) in enumerate(curves.items()):
        shift = (j - (len(curves) - 1) / 2) * offset
        rates = curve["success_by_position"]
        counts = curve.get("tasks_by_position") or [0] * len(rates)
        xs = [i + 1 + shift for i in range(len(rates))]
        bounds = [wilson(round(r * n), int(n)) for r, n in zip(rates, counts, strict=True)]
        style = {"marker": MARKERS[j % len(MARKERS)], "linestyle": ["-", "--", ":"][j % 3], "label": config}
        left.errorbar(
            xs,
            rates,
            yerr=[
                [r - b[0] for r, b in zip(rates, bounds, strict=True)],
                [b[1] - r for r, b in zip(rates, bounds, strict=True)],
            ],
            capsize=2,
            **style,
        )
        right.plot(xs, curve.get("llm_calls_by_position", []), **style)
    left.set_ylim(0, 1.05)
    left.set_ylabel("success (95% CI)")
    right.set_ylabel("LLM calls / task")
    right.set_ylim(bottom=0)
    width = max((len(c["success_by_position"]) for c in curves.values()), default=0)
    for axis in (left, right):
        axis.set_xticks(range(1, width + 1))
        axis.set_xlabel("task position in the stream")
        axis.legend(fontsize=7)
    return _save(fig, path)


def _total(key: str) -> str:
    return {"executed": "executed_steps"}.get(key, key)


def _save(fig: "Figure", path: Path, top: float = 1.0) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
