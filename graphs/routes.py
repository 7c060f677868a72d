"""Conditional edges: the one place that turns what a node wrote into the next node's name."""

from pivotal.state import State


def after_review(state: State) -> str:
    """After the critic or a person: reflect on a failed attempt, propose again, ask a person, or execute."""
    if state.get("attempt_failed"):
        return "reflector"
    chosen = state.get("chosen")
    if not chosen:
        return "actor"
    return "human_approval" if chosen.get("needs_approval") else "executor"


def after_executor(state: State) -> str:
    if state.get("status") == "success":
        return "distill"
    return "reflector" if state.get("attempt_failed") else "recall"


def after_reflector(state: State) -> str:
    return "distill" if state.get("status") == "failure" else "pivot"
