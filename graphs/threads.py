"""What the checkpoints say of a thread, read before a run continues on it: whether it waits for a
person, its saved values (settings, plugins), which of a batch's threads exist, and which step may
have run without its checkpoint.
"""

from typing import Any

from langgraph.pregel import Pregel
from langgraph.types import StateSnapshot

from pivotal.core.environments import Idempotent, make_environment
from pivotal.core.environments.once import irreversible
from pivotal.core.errors import PivotalError
from pivotal.core.secrets import redact_tree
from pivotal.core.task import Task
from pivotal.graphs.checkpointer import graph_over, open_checkpointer


async def paused_run(graph: Pregel[Any, Any, Any, Any], thread_id: str) -> dict[str, Any]:
    """The values of a thread that waits for approval; one clear line when it does not."""
    saved = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    if not any(task.interrupts for task in saved.tasks):
        raise PivotalError(
            f"thread {thread_id!r} is not waiting for approval; nothing to resume (check the thread id and the "
            f"checkpointer it ran with: --thread-id and --checkpoints on the command line)"
        )
    return saved.values


async def saved_values(thread_id: str, checkpoint_path: str | None = None) -> dict[str, Any]:
    """A thread's last saved values ({} for none): the CLI reads its plugins and settings first."""
    async with graph_over(None, checkpoint_path) as graph:
        saved = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    return dict(saved.values or {})


async def held_threads(checkpoint_path: str | None, thread_ids: list[str]) -> set[str]:
    """Which of these threads the checkpoints hold at least one checkpoint of."""
    async with open_checkpointer(checkpoint_path) as saver:
        found = [await saver.aget_tuple({"configurable": {"thread_id": thread}}) for thread in thread_ids]
    return {thread for thread, saved in zip(thread_ids, found, strict=True) if saved is not None}


def in_flight_step(saved: StateSnapshot, task: Task) -> list[int]:
    """The step an earlier process may have executed without checkpointing it, when the
    environment cannot tell a repeat (no `step_once`): that one step is at-least-once.
    """
    env = make_environment(task.env)
    if "executor" not in saved.next or isinstance(env, Idempotent):
        return []
    if irreversible(env, (saved.values.get("chosen") or {}).get("action")):
        return []  # noted before its tool ran: taken as run, never run again (core/environments/once.py)
    return [len(saved.values.get("trajectory") or [])]


def refuse_another_task(saved: StateSnapshot, task: Task, thread_id: str) -> None:
    """A thread with a turn not finished (paused for a person, or cut short by a crash) goes on only with
    that turn's task: another one given there would have been met with the old turn's pause or steps.
    """
    turn = saved.values.get("task") or {}
    if asks_again(task, turn):
        return
    waiting = " waits for a person to approve an action" if any(t.interrupts for t in saved.tasks) else " is unfinished"
    raise PivotalError(
        f"thread {thread_id!r}{waiting} in its turn {str(turn.get('goal', ''))[:80]!r}; finish that turn first "
        "(resume the approval, or run that same task again) or run this task on another thread"
    )


def asks_again(task: Task, done: dict[str, Any]) -> bool:
    """Whether a thread's task (its saved dict) is this one asked again: a batch run again after a
    crash, a goal submitted twice. A finished one is then read back, never run again; any other task on
    that thread is a new turn. Ids are drawn per call unless given, so the work is compared: the
    environment, its parameters and the goal as saved (secrets blanked; an empty goal is the
    environment's default).
    """
    if done.get("id") == task.id:
        return True
    asked = redact_tree(task.model_dump())
    same_goal = not asked["goal"] or asked["goal"] == done.get("goal")
    return same_goal and asked["env"] == done.get("env") and asked["params"] == done.get("params", {})
