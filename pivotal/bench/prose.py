"""The report's sentences, written from the paired comparisons so that every claim carries its interval
and a difference that could be zero is called not significant instead of being read as a result.
"""

from typing import Any

PIVOTAL_VS_FULL = ("critic+pivotal", "critic+full")
RETRIES_VS_NONE = [("critic+pivotal", "critic"), ("critic+full", "critic")]
CRITIC_VS_NONE = ("critic", "actor")
MEMORY_VS_NONE = ("critic+pivotal+memory", "critic+pivotal")
COST_NAMES = {"executed": "executed steps", "llm_calls": "LLM calls", "tokens": "tokens", "wall_s": "seconds"}


def interval(stat: dict[str, Any], name: str, points: bool = False) -> str:
    """`+4.2 pp (-1.0 pp to +9.5 pp) n.s.` or `12% (5% to 19%)`: the estimate, its interval, and the flag."""
    if stat.get(name) is None:
        return "n/a"
    fmt = (lambda v: f"{v * 100:+.1f} pp") if points else (lambda v: f"{v:.0%}")
    if stat["ci95"] is None:
        return f"{fmt(stat[name])} (too few tasks for an interval)"
    low, high = stat["ci95"]
    if low == high == stat[name] == 0:
        return "none (same on every task)"
    text = f"{fmt(stat[name])} ({fmt(low)} to {fmt(high)})"
    return text if stat["significant"] else text + " n.s."


def caveat(model: str) -> list[str]:
    if not model.startswith("sim"):
        return [f"> Model `{model}`: a real model's own errors."]
    return [
        "> **`sim` caveat: the errors are synthetic.** These runs use `sim` models, scripted from each environment's "
        "oracle (the expert's move, the true verdict, the true first mistake) and wrong at the injected error rate "
        "shown with each row (`env@rate`), by a seeded random draw. They are not a real model: the numbers show what "
        "each mechanism does with errors of that rate and kind, not how a given LLM will do. The embedded-model "
        "section (`pivotal bench --local N`), where present, is the real-model check."
    ]


def recommendation(results: dict[str, Any]) -> str:
    """The answer first (what to turn on, and when), then one line of evidence per comparison."""
    meta = results["meta"]
    found = {(c["new"], c["baseline"]): c["groups"] for c in results["comparisons"]}
    if not found:
        return "No two configurations ran on the same tasks, so there is nothing to compare."
    tasks = max(_headline(groups)["tasks"] for groups in found.values())
    lead = (
        f"On {', '.join(meta['envs'])} at `{meta['model']}` error rates {', '.join(map(str, meta['errors']))} "
        f"({tasks} tasks per configuration, every task run under every configuration at equal seeds): "
    )
    evidence = [f"- {_effect(pair, groups)}" for pair, groups in found.items()]
    return "\n".join([lead + " ".join(_advice(found)), "", *evidence])


def _headline(groups: dict[str, Any]) -> dict[str, Any]:
    return groups.get("all") or next(iter(groups.values()))


def _effect(pair: tuple[str, str], groups: dict[str, Any]) -> str:
    """One pair's effect on success and on the costs that matter for it."""
    row = _headline(groups)
    costs = ["executed", "llm_calls"] if pair == PIVOTAL_VS_FULL else ["llm_calls", "tokens"]
    text = (
        f"**{pair[0]}** against **{pair[1]}**: success {_success(row['success'])}; "
        + "; ".join(f"{COST_NAMES[key]} {_saved(row[key])}" for key in costs)
        + "."
    )
    if pair == PIVOTAL_VS_FULL and len(groups) > 1:
        text += " " + _where(groups, "executed")
    return text


def _success(stat: dict[str, Any]) -> str:
    if stat["ci95"] is None:
        return interval(stat, "difference", points=True)
    low, high = (f"{v * 100:+.1f}" for v in stat["ci95"])
    span = f"{stat['difference'] * 100:+.1f} pp, 95% CI {low} to {high} pp"
    if stat["significant"]:
        return span
    return f"equal within the noise ({span}: not significant at this sample size)"


def _saved(stat: dict[str, Any]) -> str:
    """`12% fewer (95% CI 5% to 19% fewer)`, `33% more (…)`, or a span across zero marked not significant."""
    if stat.get("saved") is None:
        return "n/a"
    if stat["ci95"] is None:
        return f"{abs(stat['saved']):.0%} {'fewer' if stat['saved'] >= 0 else 'more'} (too few tasks for an interval)"
    low, high = stat["ci95"]
    if low >= 0:
        span = f"{low:.0%} to {high:.0%} fewer"
    elif high <= 0:
        span = f"{-high:.0%} to {-low:.0%} more"
    else:
        span = f"{-low:.0%} more to {high:.0%} fewer"
    text = f"{abs(stat['saved']):.0%} {'fewer' if stat['saved'] >= 0 else 'more'} (95% CI {span}"
    return text + (")" if stat["significant"] else ", not significant)")


def _where(groups: dict[str, Any], key: str) -> str:
    cells = [g for g in groups if g != "all"]
    paying = [g for g in cells if groups[g][key]["significant"] and groups[g][key]["saved"] > 0]
    costing = [g for g in cells if groups[g][key]["significant"] and groups[g][key]["saved"] < 0]
    text = f"The {COST_NAMES[key]} saving is significant on its own in {len(paying)} of {len(cells)} env@error cells"
    text += f" ({', '.join(paying)})" if paying else ""
    text += f"; it cost more in {', '.join(costing)}" if costing else ""
    return text + "."


def _advice(found: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    advice = []
    if PIVOTAL_VS_FULL in found:
        advice.append(_pivotal_advice(_headline(found[PIVOTAL_VS_FULL])))
    for pair in RETRIES_VS_NONE:
        if pair in found:
            advice.append(_retry_advice(pair, _headline(found[pair])))
            break
    if MEMORY_VS_NONE in found:
        advice.append(_memory_advice(_headline(found[MEMORY_VS_NONE])))
    return advice


def _pivotal_advice(row: dict[str, Any]) -> str:
    success, executed = row["success"], row["executed"]
    if success["significant"] and success["difference"] < 0:
        return "**Prefer full retry here**: pivotal retry solved fewer tasks."
    if executed["significant"] and executed["saved"] > 0:
        outcome = "with higher success" if success["significant"] else "for the same success"
        return (
            "**Turn pivotal retry on in place of full retry** when your environment can go back (snapshot/restore, "
            f"declared replay or compensation): here it cost less {outcome}, and it saves most where "
            "attempts fail after a correct prefix (the *retried* column counts the tasks where a retry happened)."
        )
    return (
        "Pivotal retry did no worse than full retry, but a saving is **not established at this sample size**; it "
        "can only save where attempts fail after a correct prefix."
    )


def _retry_advice(pair: tuple[str, str], row: dict[str, Any]) -> str:
    success, calls = row["success"], row["llm_calls"]
    if not (success["significant"] and success["difference"] > 0):
        return f"Retrying ({pair[0]}) did not raise success significantly over no retry here."
    extra = calls["new_per_task"] - calls["baseline_per_task"]
    per_win = extra / success["difference"]
    return (
        f"**Turn retry on** when a solved task is worth more than about {per_win:.0f} LLM calls: that is what each "
        f"extra task solved cost ({pair[0]} against {pair[1]})."
    )


def _memory_advice(row: dict[str, Any]) -> str:
    success = row["success"]
    if success["significant"] and success["difference"] > 0:
        return "**Turn memory on** for streams of similar tasks: it raised success."
    if success["significant"]:
        return "**Leave memory off** for tasks like these: it lowered success."
    return (
        f"Memory's effect on success is **not established at this sample size**, with tokens {_saved(row['tokens'])}"
        ": leave it off unless your tasks repeat more closely than these streams."
    )


def not_significant(groups: dict[str, Any]) -> str:
    """The plain statement under a paired table: which differences could be zero."""
    cells = list(groups)
    few = [g for g in cells if groups[g]["success"]["ci95"] is None]
    parts = (
        [f"too few tasks for an interval in {'every row' if len(few) == len(cells) else ', '.join(few)}"] if few else []
    )
    for key, name in (("success", "success"), *COST_NAMES.items()):
        flat = [g for g in cells if groups[g][key].get("ci95") is not None and not groups[g][key]["significant"]]
        if flat:
            parts.append(f"{name} in {'every row' if len(flat) == len(cells) else ', '.join(flat)}")
    if not parts:
        return "Every difference above is significant (no interval includes zero)."
    return (
        "Not significant at this sample size (the 95% interval includes zero, or there is none): "
        + "; ".join(parts)
        + "."
    )
