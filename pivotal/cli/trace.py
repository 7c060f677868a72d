"""The live trace `pivotal run` prints as each node finishes: what the mechanism did, in order.

A run with the embedded model takes a minute; printed at the end, nothing showed for that minute,
and the proposals the pre-check or critic turned down never showed at all.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from pivotal.core.state import Proposal, Reflection, Step


class Trace:
    """Turns node updates into one short line each; nodes with nothing to say print nothing."""

    def __init__(self, out: TextIO, notice: str = "") -> None:
        self.out = out
        self.notice = notice
        """Said once, under the task's line, when the run has started (`rewind_notices_to`)."""
        self.step = 0
        self.recalled: list[str] = []
        self.lines = {
            "start": self._start,
            "actor": self._recall_and_act,
            "critic": self._critic,
            "human_approval": self._critic,
            "executor": self._executor,
            "reflector": self._reflector,
            "pivot": self._pivot,
            "gate": self._gate,
            "memory_writer": self._memory,
        }

    def say(self, notice: str) -> None:
        """A line for under the task's, once the run has started (the run API's rewind notice)."""
        self.notice = notice

    def __call__(self, node: str, update: dict[str, Any]) -> None:
        line = self.lines.get(node, _nothing)(update)
        if line:
            print(line, file=self.out, flush=True)

    def _start(self, update: dict[str, Any]) -> str:
        task = update.get("task") or {}
        line = f"task {task.get('id', '')} ({task.get('env', '')}): {task.get('goal', '')}"
        notice, self.notice = self.notice, ""
        return f"{line}\n{notice}" if notice else line

    def _recall(self, update: dict[str, Any]) -> str:
        """Only when the lessons in front of the actor change: the same ones each step are noise."""
        lessons = update.get("lessons") or []
        ids = [lesson["id"] for lesson in lessons]
        if not lessons or ids == self.recalled:
            return ""
        self.recalled = ids
        shown = "; ".join(f"[{lesson['kind']}] {_short(lesson['text'], 60)}" for lesson in lessons[:2])
        return f"        recall: {len(lessons)} lesson(s): {shown}"

    def _recall_and_act(self, update: dict[str, Any]) -> str:
        """The actor's entry recalls first when the situation is new (graphs/builder.py `_joined`)."""
        return "\n".join(line for line in (self._recall(update), self._actor(update)) if line)

    def _actor(self, update: dict[str, Any]) -> str:
        proposal: Proposal | None = update.get("proposal")
        if not proposal:
            return ""
        why = f" (reply unusable: {_short(proposal['error'], 60)})" if proposal.get("error") else ""
        undo = f" (undoes step {proposal['compensates']})" if proposal.get("compensates") is not None else ""
        return f"  step {self.step}: actor proposes {_action(proposal)}{undo}{why}"

    def _critic(self, update: dict[str, Any]) -> str:
        critiques = update.get("critiques") or []
        if not critiques:
            return ""
        last = critiques[-1]
        source, decision = last.get("source", "critic"), last.get("decision", "?")
        reason = (last.get("diagnosis") or "").removeprefix("advisory reject:").strip() or last.get("revision") or ""
        if source == "critic-advisory":  # a critic without veto: its reject goes back to the actor
            source, decision = "critic", "reject (advisory: sent back to the actor)"
        who = {"precheck": "pre-check", "human": "person", "critic-fallback": "critic (reply unusable)"}.get(
            source, source
        )
        gave = f": {_short(reason, 90)}" if reason else (": (no reason given)" if who == "critic" else "")
        return f"        {who}: {decision}{gave}"

    def _executor(self, update: dict[str, Any]) -> str:
        trajectory = update.get("trajectory") or []
        if (update.get("counters") or {}).get("sent_back"):  # an unreviewed irreversible action (a fork)
            return f"        {_short((update.get('critiques') or [{}])[-1].get('diagnosis', ''), 110)}"
        if not trajectory:
            return f"        attempt failed: {update['attempt_failed']}" if update.get("attempt_failed") else ""
        step = trajectory[-1]
        self.step = step["index"] + 1
        seen = _short(" ".join(step.get("observation", "").split()), 80)
        circle = " (back where it was: a circle)" if step.get("revisit_of") is not None else ""
        circle = " (changed nothing)" if step.get("no_op") else circle
        failed = f"\n        attempt failed: {update['attempt_failed']}" if update.get("attempt_failed") else ""
        return f"        executed {_action(step)}{circle} → {seen}{failed}"

    def _reflector(self, update: dict[str, Any]) -> str:
        reflections = update.get("reflections") or []
        if not reflections:
            return ""
        return f"  reflection (attempt {reflections[-1].get('attempt', 0)}): {reflection_line(reflections[-1])}"

    def _pivot(self, update: dict[str, Any]) -> str:
        reflection = (update.get("reflections") or [{}])[-1]
        kept = reflection.get("kept_steps", 0)
        self.step = kept
        how = {
            "snapshot": "world restored from the snapshot before it",
            "replay": "world reset and the kept steps replayed",
            "compensate": "abandoned steps will be undone first",
            "forward": "nothing undone: the retry goes on from the real state",
        }.get(reflection.get("rewind", ""), "")
        return f"  pivot: retry from step {kept}, keeping {kept} step(s); {how}"

    def _gate(self, update: dict[str, Any]) -> str:
        approved = update.get("approved_lessons")
        return f"  lessons: {len(approved)} passed the gate" if approved is not None else ""

    def _memory(self, update: dict[str, Any]) -> str:
        counters = update.get("counters") or {}
        if not counters:
            return ""
        return (
            f"  memory: written {counters.get('lessons_written', 0)}, merged {counters.get('lessons_merged', 0)}, "
            f"scored {counters.get('lessons_scored', 0)}, retired {counters.get('lessons_retired', 0)}"
        )


@contextmanager
def rewind_notices_to(say: Callable[[str], None]) -> Iterator[None]:
    """The run API says a retry cannot rewind its environment as a `RewindWarning`, once per
    environment, before the graph starts: the command hands each to `say` (the live trace's line under
    the task, a batch's line above its summary) instead of Python's warning on stderr.
    """
    from pivotal.core.environments.base import RewindWarning

    with warnings.catch_warnings():
        warnings.simplefilter("always", RewindWarning)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001 — warnings' hook
            if issubclass(category, RewindWarning):
                say(str(message))
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def reflection_line(reflection: Reflection) -> str:
    """A small model's reflection can be a fragment ("unknown: O"): say so rather than print it as advice."""
    where = f"pivotal step {reflection['pivotal_step']}"
    if reflection.get("no_return_step", reflection["pivotal_step"]) != reflection["pivotal_step"]:
        where += f" (point of no return: step {reflection['no_return_step']})"
    advice = " ".join(str(reflection.get("advice", "")).split())
    if len(advice.split()) < 3 or reflection.get("error_type") == "unknown" and len(advice) < 20:
        return f"{where}; the model's reflection was unusable ({advice!r}), so the retry goes back there blind"
    kept = f", kept {reflection['kept_steps']} steps" if "kept_steps" in reflection else ""
    return f"{where}{kept}, {reflection['error_type']}: {advice}"


def _action(proposal: Proposal | Step) -> str:
    arguments = proposal.get("arguments") or {}
    return proposal.get("action", "?") + (f" {json.dumps(arguments, ensure_ascii=False)}" if arguments else "")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _nothing(update: dict[str, Any]) -> str:
    return ""
