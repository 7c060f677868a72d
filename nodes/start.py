"""Open a turn: read its goal (a new task, or the newest human message), create and reset the environment.

A thread is a conversation. The first run on it takes the task (or the last human message); a later
run that brings something new (a human message that came after the last turn opened, or a task
that is not the one already worked) opens a new turn: its goal is what came, its step budget,
trajectory, reflections and lessons start afresh, and earlier turns become context. Each turn has
its own run id (the same when the turn is replayed from its input checkpoint), so its environment is
a fresh instance and its idempotency keys are its own: nothing an earlier turn executed runs again
(a reset must never act on the world, see docs/side-effects.md).
A resume (`Command(resume=...)`, `invoke(None)`) never comes here: it continues the turn it paused.
"""

import asyncio
import hashlib
import json
import re
import uuid
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from pivotal.core.context import Context
from pivotal.core.environments.base import Environment, check_names, check_params
from pivotal.core.environments.live import in_env_thread, open_live, release, state_of
from pivotal.core.errors import PivotalError
from pivotal.core.models.reachability import check_models
from pivotal.core.secrets import redact_tree
from pivotal.core.state import State, Turn, turn_summary
from pivotal.core.task import Task, parse_task
from pivotal.memory.policy.registry import check_memory, uses_graph_store
from pivotal.prompts import SEE_MORE, clip

Question = tuple[str, str]
"""A human message's (id, text)."""


async def start(state: State, runtime: Runtime[Context]) -> State:
    await preflight(runtime.context, runtime.store)
    messages = state.get("messages") or []
    blanked = _redacted_messages(messages)
    messages = [blanked.get(id(message), message) for message in messages]
    question = _last_question(messages)
    opened = state.get("turn")
    if opened is None:
        task = parse_task(state.get("task") or (question[1] if question else None), runtime.context.default_env)
        turns = _handed_in(messages, question if not state.get("task") else None)
        run_id = state.get("run_id") or _turn_run(None, messages, task)
    else:
        task = _next_task(state, opened, question, runtime.context.default_env)
        turns = _closed(state, opened)
        release(opened.get("run_id", ""))  # a turn left waiting: its world is not this turn's
        given = state.get("run_id")
        run_id = given if given and given != opened.get("run_id") else _turn_run(opened, messages, task)
    task = Task.model_validate(redact_tree(task.model_dump()))  # a goal or a param can carry a key
    live = await in_env_thread(open_live, run_id, task, timeout=runtime.context.step_timeout, what=f"{task.env}: reset")
    _check_task_names(live.env, task, run_id)
    task.family = _family(task, live.env)
    if not task.goal:
        task.goal = getattr(live.env, "default_goal", "")
    if not task.goal:
        raise PivotalError(f"the task for {task.env} has no goal; give it one (Task(goal=...) or --goal)")
    observation = clip(
        live.first_observation, runtime.context.max_observation_chars, hint=SEE_MORE
    )  # open_live redacted it
    turn: Turn = {
        "goal": task.goal,
        "task_id": task.id,
        "question_id": question[0] if question else "",
        "run_id": run_id,
    }
    if spent := {key: state[key] for key in ("counters", "usage") if state.get(key)}:
        turn["opened_with"] = spent  # the turns before counted these: this turn's budget starts afresh
    return {
        **({"messages": list(blanked.values())} if blanked else {}),  # same ids: the caller's copies are replaced
        "task": task.model_dump(),
        "run_id": run_id,
        "run_settings": runtime.context.saved(),  # the turn's own: a resume anywhere goes on with them
        "turn": turn,
        "turns": turns,
        "status": "running",
        "reason": "",
        "observation": observation,
        "first_observation": observation,
        "instance": _instance(live.env),
        "initial_state": redact_tree(state_of(live.env, live.initial)),
        "trajectory": [],
        "critiques": [],
        "reflections": [],
        "retries": 0,
        "lessons": [],
        "recalled": [],
        "candidates": [],
        "approved_lessons": [],
        "written": [],
        "retired": [],
        "attempt_failed": "",
        "stuck": False,
        "proposal": None,
        "chosen": None,
        "attempt_start": 0,
        "compensations": [],
        "answer": "",
        "verified": True,
    }


def _check_task_names(env: Environment, task: Task, run_id: str) -> None:
    """The task's `allow_repeat` names real actions, before any runs: a misspelt name would leave the
    real action's repeats refused, and say nothing. (`require_approval_for` is checked where an
    agent is built: one context may serve a batch over several environments.) Its `params` name
    parameters the environment reads: the run API checked them already, a direct invoke or Studio not.
    """
    actions = [spec.name for spec in env.describe_actions()]
    try:
        check_names("allow_repeat", [name for name in task.allow_repeat if name != "*"], actions, what="action")
        check_params(env, task)
    except PivotalError:
        release(run_id)
        raise


def _next_task(state: State, opened: Turn, question: Question | None, default_env: str) -> Task:
    """The new turn's task: a task that is not the one already worked, else the new human message
    (in the same environment as the turn before); anything else would run a finished task again.
    """
    given = state.get("task")
    if given and not (isinstance(given, dict) and given.get("id") == opened.get("task_id")):
        return parse_task(given, default_env)
    if question is not None and question[0] != opened.get("question_id"):
        same_world: dict[str, Any] = (
            {key: given[key] for key in ("env", "family", "params") if key in given} if isinstance(given, dict) else {}
        )
        return parse_task({**same_world, "goal": question[1]}, default_env)
    raise PivotalError(
        f"nothing new on this thread: its task {opened.get('goal', '')[:80]!r} was already started; "
        "send a new message or a new task for another turn, or resume the paused one"
    )


def _turn_run(opened: Turn | None, messages: list[AnyMessage], task: Task) -> str:
    """The turn's run id, the same each time this turn is opened from the same checkpoint.

    A replay or fork from a turn's input checkpoint runs `start` again: a fresh id would make it
    another run, whose once guard and executor know nothing of what the turn already did to the
    world, and its refunds and emails would happen again. So the id follows from the thread, the turn
    before (its run id) and what opens this one (the message's place and the task, less its random
    id). Off a thread (no checkpointer) nothing can replay the turn, and each run is new.
    """
    thread = (get_config().get("configurable") or {}).get("thread_id")
    if thread is None:
        return uuid.uuid4().hex
    opening = [str(thread), (opened or {}).get("run_id", ""), len(messages), task.model_dump(exclude={"id"})]
    return hashlib.sha256(json.dumps(opening, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _closed(state: State, opened: Turn) -> list[Turn]:
    """The thread's turns with the one being left: `respond` recorded it if it finished, else it
    was left waiting (for a person, or after a fault) and is recorded as interrupted.
    """
    turns = list(state.get("turns") or [])
    if any(turn.get("run_id") == opened.get("run_id") for turn in turns):
        return turns
    return [*turns, turn_summary(state, "interrupted")]


def _redacted_messages(messages: list[AnyMessage]) -> dict[int, AnyMessage]:
    """Each caller's message that held a secret, blanked, keyed by the original's `id()`: a chat's
    text enters the state (goal, earlier turns) from here. Returned to `add_messages` with their own
    ids, they replace the caller's copies in every later checkpoint.
    """
    blanked = {}
    for message in messages:
        content = redact_tree(message.content)
        if content != message.content:
            blanked[id(message)] = message.model_copy(update={"content": content})
    return blanked


def _handed_in(messages: list[AnyMessage], question: Question | None) -> list[Turn]:
    """Earlier turns of a conversation handed in whole (a parent graph's chat, a chat history):
    each human message before the goal's, with the replies that followed it.
    """
    turns: list[Turn] = []
    for message in messages:
        if question is not None and message.id == question[0]:
            break
        if isinstance(message, HumanMessage):
            turns.append({"goal": str(message.text), "question_id": message.id or "", "status": "", "answer": ""})
        elif isinstance(message, AIMessage) and turns and message.text:
            turns[-1]["answer"] = f"{turns[-1]['answer']}\n{message.text}".strip()
    return turns


def _family(task: Task, env: Environment) -> str:
    """The task's lesson family: the one it names, else its environment's name refined by the
    environment's `family()` hint for this instance (`env/kind`; "" leaves the name alone), else by
    the task's parameters (`_kind_by_params`).

    Under one environment name can sit several kinds of task (text adventures of different games):
    a guardrail learnt in one was recalled in another, and only a `--family` per kind kept them apart.
    """
    hint = getattr(env, "family", None)
    if task.family != task.env:
        return task.family
    if not callable(hint):
        kind = _kind_by_params(task.params)
        return f"{task.env}/{kind}" if kind else task.env
    try:
        kind = hint()
    except Exception as exc:  # noqa: BLE001 — the application's hook: say which and go no further
        raise PivotalError(f"environment {task.env!r}: family() raised {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(kind, str):
        raise PivotalError(f"environment {task.env!r}: family() returned {type(kind).__name__}; return a str")
    kind = "-".join(kind.replace(".", " ").split())  # a LangGraph store's namespace labels refuse "."
    return f"{task.env}/{kind}" if kind else task.env


INSTANCE_PARAMS = frozenset({"seed"})
"""Parameters that pick another instance of the same kind of task (a layout), not another kind."""
KIND_CHARS = 60
"""A longer kind is cut and given a hash of the whole, so two kinds never share a label."""


def _kind_by_params(params: dict[str, Any]) -> str:
    """An environment without `family()`: the kind of task is its parameters other than `seed`
    (`adventure` with `game=zork` -> `adventure/game-zork`), so lessons of one game are never recalled
    in another; tasks that differ only by seed share their lessons. "" without such parameters.
    """
    parts = [f"{name}-{json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value}"
             for name, value in sorted(params.items()) if name not in INSTANCE_PARAMS]  # fmt: skip
    kind = re.sub(r"[^A-Za-z0-9_-]+", "-", "_".join(parts)).strip("-")
    if len(kind) > KIND_CHARS:
        kind = f"{kind[: KIND_CHARS - 17]}-{hashlib.sha256(kind.encode()).hexdigest()[:16]}"
    return kind


def _instance(env: Environment) -> str:
    """A short id of the world the environment's `instance()` describes ("" when it has none)."""
    describe = getattr(env, "instance", None)
    return hashlib.sha256(str(describe()).encode()).hexdigest()[:16] if callable(describe) else ""


def _last_question(messages: list[AnyMessage]) -> Question | None:
    """A chat caller's goal: the last human message, with its id (`add_messages` gives every message one)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, HumanMessage):
            return message.id or f"#{index}", str(message.text)
    return None


async def preflight(context: Context, store: BaseStore | None) -> None:
    """What the run needs after its actions (lesson models, the store, its embedding model), checked
    before the first one: a direct `invoke` has no run API to check it (graphs/checks.py `check_context`).
    Checked once per process and setting: a batch's thousandth task costs no connect and no thread.
    """
    graph_store = context.memory and uses_graph_store(context, store)
    key = (repr(context), graph_store)
    if key in _checked:
        return
    await asyncio.to_thread(_preflight, context, graph_store)
    _checked.add(key)


def _preflight(context: Context, graph_store: bool) -> None:
    check_models(context)
    if context.memory:
        check_memory(context, open_now=not graph_store)


_checked: set[tuple[str, bool]] = set()
