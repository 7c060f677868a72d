"""Cut the trajectory back to just before the pivotal step and put the environment there.

`full` retry cuts back to step 0 instead. The environment follows the trajectory on the next
attach (restore from snapshot, or reset and replay the kept actions — no LLM calls).
"""

from typing import Any

from langgraph.runtime import Runtime

from pivotal.context import Context
from pivotal.environments.live import attach
from pivotal.state import State
from pivotal.task import Task


async def pivot(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    reflection = state["reflections"][-1]
    keep = reflection["pivotal_step"] if runtime.context.retry == "pivotal" else 0
    trajectory = state["trajectory"][:keep]
    task = Task.model_validate(state["task"])
    _, replayed = await attach(state["run_id"], task, trajectory)
    observation = trajectory[-1]["observation"] if trajectory else state["first_observation"]
    return {"trajectory": trajectory, "observation": observation, "attempt_failed": "",
            "retries": state.get("retries", 0) + 1, "proposal": None, "chosen": None,
            "critiques": [], "counters": {"replayed": replayed, "kept_steps": keep}}
