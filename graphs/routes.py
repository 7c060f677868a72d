"""Conditional edges: the one place that turns what a node wrote into the next node's name.

A node with nothing to do is not entered: each step through the graph costs a checkpoint, so
the lesson nodes are passed by when memory is off, the gate when nothing was distilled (recall
and dedup are no nodes of their own: the actor's entry recalls first, when the situation is new,
and distill's matches its candidates against the store, graphs/builder.py `_joined`). The
Context is None outside a run (a Studio edit `as_node`): then every node is entered and checks
for itself, as each one does.
"""

from pivotal.core.context import Context
from pivotal.core.state import State


def after_review(state: State, context: Context | None) -> str:
    """After the critic or a person: reflect on a failed attempt, propose again, ask a person, or execute."""
    if state.get("attempt_failed"):
        return "reflector"
    chosen = state.get("chosen")
    if not chosen:
        return "actor"
    return "human_approval" if chosen.get("needs_approval") else "executor"


def after_executor(state: State, context: Context | None) -> str:
    """Finish, reflect or go on; back to the critic when the executor sent its action back unrun."""
    if state.get("proposal") and not state.get("chosen"):
        return "critic"
    if state.get("status") == "success":
        return finish(context)
    return "reflector" if state.get("attempt_failed") else "actor"


def after_reflector(state: State, context: Context | None) -> str:
    return finish(context) if state.get("status") == "failure" else "pivot"


def after_distill(state: State, context: Context | None) -> str:
    """Candidates (matched against the store in distill's own entry, graphs/builder.py `_joined`) are
    gated; a run that left none (a distiller that found nothing to teach) goes straight to the
    writer, which still scores the lessons it recalled and counts the run in its family's record:
    the gate would do nothing, at a checkpoint.
    """
    return "gate" if context is None or state.get("candidates") else "memory_writer"


def finish(context: Context | None) -> str:
    """Lessons are distilled, matched, gated and written only when the run keeps a memory."""
    return "distill" if context is None or context.memory else "respond"
