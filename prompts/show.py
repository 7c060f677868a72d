"""State rendered as the data blocks of the prompts (the instructions live in the .md files).

Recalled lessons are rendered by `memory.lesson.lessons_block`, beside the lesson record.
"""

import json
from collections.abc import Sequence
from typing import Any, Protocol

from pivotal.core.state import Critique, Reflection, State, Step, Turn, state_before
from pivotal.prompts import SEE_MORE, clip


class Action(Protocol):
    """What the actions block shows of an action (an environment's `ActionSpec` has it all; read-only,
    as that frozen dataclass's fields are).
    """

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> dict[str, Any]: ...
    @property
    def irreversible(self) -> bool: ...


HISTORY_STEPS = 8
EARLIER_TURNS = 6
"""Earlier turns of a conversation shown in full; older ones are counted, not shown."""
TURN_CHARS = 600
"""The most of an earlier turn's goal or answer that is shown."""
PAST = {"approve": "approved", "revise": "sent back for revision", "reject": "rejected"}


def actions(specs: Sequence[Action]) -> str:
    lines = []
    for spec in specs:
        params = spec.parameters.get("properties") if spec.parameters else None
        line = f"- {spec.name}: {spec.description}"
        if params:
            line += f" arguments: {json.dumps(params)}"
        if spec.irreversible:
            line += " (IRREVERSIBLE)"
        lines.append(line)
    return "\n".join(lines)


def history(trajectory: list[Step]) -> str:
    """A short running summary (macro-action history) rather than the raw transcript."""
    if not trajectory:
        return "No steps taken yet."
    recent = trajectory[-HISTORY_STEPS:]
    done = ", ".join(f"{s['index']}:{call(s['action'], s['arguments'])}{_back(s)}" for s in recent)
    skipped = len(trajectory) - len(recent)
    return f"{len(trajectory)} steps taken" + (f" ({skipped} earlier omitted)" if skipped else "") + f": {done}"


def repeats(state: State, loops: bool) -> str:
    """The repeats block of the actor's and critic's prompts (with `loops`): the calls already tried
    from the current state that changed nothing or led back. A block of its own beside the progress,
    so the `sim` models, which do not read it, draw the same dice with loop detection on and off.
    """
    return loops_here(state).lstrip("\n") if loops else ""


def loops_here(state: State) -> str:
    """One line per call of this attempt, made from the state the agent is in now, that changed nothing
    or led back to where it was ("step 7 `examine antique trunk` changed nothing; it was also step 5"):
    the repeat no single observation shows, said before it is made again. Without states, the calls
    that saw the same as an earlier identical call.
    """
    trajectory = state["trajectory"]
    start = state.get("attempt_start", 0)
    now = state_before(state, len(trajectory))
    tried: dict[str, list[Step]] = {}
    for step in trajectory[start:]:
        here = now is None or state_before(state, step["index"]) == now
        if here and (step.get("no_op") or step.get("revisit_of") is not None):
            tried.setdefault(call(step["action"], step["arguments"]), []).append(step)
    return "".join(f"\n{_tried(name, steps)}" for name, steps in tried.items())


def _tried(name: str, steps: list[Step]) -> str:
    *earlier, last = steps
    said = "changed nothing" if last.get("no_op") else _led_back(last.get("revisit_of"))
    also = f"; it was also step {', '.join(str(s['index']) for s in earlier)}" if earlier else ""
    return f"step {last['index']} `{name}` {said}{also}"


def _led_back(back: int | None) -> str:
    return "led back to where you started" if back == -1 else f"led back to where you were after step {back}"


def _back(step: Step) -> str:
    """A return to an earlier state, said where actor and critic read the progress: going in circles
    is the one mistake no single step shows.
    """
    back = step.get("revisit_of")
    if back is None:
        return ""
    return " (back where you started: a circle)" if back < 0 else f" (back where you were after step {back}: a circle)"


def steps(trajectory: list[Step], limit: int) -> str:
    """Each step with what it did at once (its observation's first line), the last step whole.

    The step that doomed an attempt shows in the actions and their immediate results; the whole
    state after each (a gridworld's map) repeated per step was half the reflector's prompt, and
    the state it ended in is still shown whole.
    """
    if not trajectory:
        return "(no steps executed)"
    *earlier, last = trajectory
    shown = [(s, _first_line(s["observation"], limit)) for s in earlier] + [
        (last, _as_step(last["observation"], limit))
    ]
    return "\n".join(f"step {s['index']}: {call(s['action'], s['arguments'])} -> {seen}" for s, seen in shown)


def turned_down(index: int, items: list[Critique]) -> str:
    """The step an attempt could not take: what was proposed for it and why each was turned down."""
    if not items:
        return ""
    return f"step {index} (not executed):\n{critiques(items)}"


def _first_line(observation: str, limit: int) -> str:
    """An earlier step's observation in `steps`: its first line, a sixteenth of the limit at most,
    and how many lines were left out, so the cut is visible.
    """
    first, _, rest = observation.strip().partition("\n")
    left_out = len(rest.strip().splitlines())
    return clip(first, limit // 16, hint=SEE_MORE) + (f" [{left_out} more lines]" if left_out else "")


def _as_step(observation: str, limit: int) -> str:
    """A step's observation in `steps`: a quarter of the limit each, so many steps fit."""
    return clip(observation, limit // 4, hint=SEE_MORE)


def final_observation(trajectory: list[Step], observation: str, limit: int) -> str:
    """The observation after the last step, or "" when `steps` already shows it whole.

    It usually is the last step's observation: shown twice, it was ~100 of the reflector's ~1,000
    prompt tokens. It differs after a reset or a pivot, or when `steps` had to clip it.
    """
    if trajectory and _as_step(trajectory[-1]["observation"], limit) == observation:
        return ""
    return observation


def call(action: str, arguments: dict[str, Any]) -> str:
    return f"{action}({json.dumps(arguments)})" if arguments else action


def held(state: State, reuse: str, retry: str) -> str:
    """The `<held_here>` block of the actor's and critic's prompts (`Context.reuse_moves`: "off", only
    for pivotal retries, or for all), "" when off.
    """
    if reuse == "off" or (reuse == "pivotal" and retry != "pivotal"):
        return ""
    return held_here(state.get("reflections", []), state_before(state, len(state["trajectory"])))


def held_here(reflections: list[Reflection], here: Any) -> str:
    """The move an earlier attempt made from the very state the agent is in now and that held there
    (`Reflection.held_moves`: the world changed, the critic approved it where it judged it, that attempt
    never came back here), the latest attempt's first; none that a reflection named as the mistake or
    that a pivot redid. The call comes first on its line, so a model that follows it can read it off.
    """
    if here is None:
        return ""
    here = _key(here)
    for reflection in reversed(reflections):
        wrong = {reflection.get("pivotal_step"), reflection.get("no_return_step")}
        wrong.add(reflection.get("kept_steps") or None)
        for index, before, action, arguments in reflection.get("held_moves") or []:
            if _key(before) == here and index not in wrong and not _named_wrong(reflections, here, action, arguments):
                return (
                    f"{call(action, arguments)}\nAn earlier attempt stood in this same state, took that call, and "
                    "it held (the world changed, the critic did not object, that attempt never came back here)."
                )
    return ""


def _key(world_state: Any) -> str:
    """A reported state as one comparable text (a checkpoint may turn its tuples into lists)."""
    return json.dumps(world_state, sort_keys=True, default=str)


def _named_wrong(reflections: list[Reflection], here: Any, action: str, arguments: dict[str, Any]) -> bool:
    """Whether a reflection named this call from this state as the step that went wrong."""
    for reflection in reflections:
        for index, before, name, args in reflection.get("held_moves") or []:
            wrong = index in (reflection.get("pivotal_step"), reflection.get("no_return_step"))
            if wrong and _key(before) == here and name == action and args == arguments:
                return True
    return False


def reflections(items: list[Reflection]) -> str:
    if not items:
        return ""
    return "\n".join(
        f"- attempt {r['attempt']}: step {r['pivotal_step']} was the mistake "
        f"({r['error_type']}): {r['diagnosis']} Advice: {r['advice']}{_rewind(r)}"
        for r in items
    )


def _rewind(reflection: Reflection) -> str:
    """What the retry could not take back: the actor must treat those steps as done."""
    mode, stayed = reflection.get("rewind"), reflection.get("not_undone") or []
    if mode in ("forward", "compensate") and stayed:
        return (
            f" The world could not be rewound: steps {', '.join(map(str, stayed))} stay done; "
            "go on from the current state and do not repeat what already succeeded."
        )
    if mode == "compensate":
        return " The abandoned steps are being undone by their compensating actions."
    return ""


def critiques(items: list[Critique]) -> str:
    if not items:
        return ""
    return "\n".join(
        f"- {call(c['action'], c['arguments'])} was {PAST[c['decision']]} by the "
        f"{c['source']}: {'; '.join(part for part in (c['diagnosis'].strip(), c['revision'].strip()) if part)}"
        for c in items
    )


def earlier_turns(turns: list[Turn]) -> str:
    """The conversation before the current turn: what each turn asked, did and answered.

    Only what the turns said and did, kept short: the current turn's own goal and progress are in
    their own blocks, and an earlier turn's actions are done (they are never run again).
    """
    if not turns:
        return ""
    recent = turns[-EARLIER_TURNS:]
    first = len(turns) - len(recent)
    lines = [f"({first} earlier turns omitted)"] if first else []
    for number, turn in enumerate(recent, start=first + 1):
        line = f"- turn {number}: asked: {clip(turn.get('goal', ''), TURN_CHARS)}"
        if turn.get("actions"):
            done = ", ".join(call(action, arguments) for action, arguments in turn["actions"][-HISTORY_STEPS:])
            line += f"\n  did: {clip(done, TURN_CHARS)}"
        outcome = {"success": "answered", "failure": "failed", "interrupted": "left waiting"}.get(
            turn.get("status", ""), "replied"
        )
        if turn.get("answer"):
            line += f"\n  {outcome}: {clip(turn['answer'], TURN_CHARS)}"
        lines.append(line)
    return "\n".join(lines)
