"""Conditional edges: each reads the state a node just wrote and names the next node."""

from pivotal.state import State


def after_critic(state: State) -> str:
    return {"execute": "executor", "ask_human": "human_approval", "propose": "actor", "fail": "reflector"}[state["next"]]


def after_human(state: State) -> str:
    return {"execute": "executor", "propose": "actor", "fail": "reflector"}[state["next"]]


def after_executor(state: State) -> str:
    if state.get("status") == "success":
        return "distill"
    return "reflector" if state.get("attempt_failed") else "recall"


def after_reflector(state: State) -> str:
    return "distill" if state.get("status") == "failure" else "pivot"
