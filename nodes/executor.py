"""Run the chosen action in the environment and record the step."""

from typing import Any

from langgraph.config import get_config
from langgraph.runtime import Runtime

from pivotal.context import Context
from pivotal.environments.live import attach, in_env_thread, run_step
from pivotal.state import State, Step
from pivotal.task import Task
from prompts.data import clip


async def executor(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    task = Task.model_validate(state["task"])
    live, replayed = await attach(state["run_id"], task, state["trajectory"], context.step_timeout)
    chosen = state["chosen"] or {}
    key = f"{state['run_id']}:{state.get('retries', 0)}:{len(state['trajectory'])}"
    arguments = chosen.get("arguments") or {}
    what = f"{task.env}: step {chosen['action']}"
    result, snapshot = await in_env_thread(
        run_step, live, chosen["action"], arguments, key, timeout=context.step_timeout, what=what
    )
    observation = clip(result.observation, context.max_observation_chars)  # run_step redacted it
    step: Step = {
        "index": len(state["trajectory"]),
        "action": chosen["action"],
        "arguments": chosen.get("arguments") or {},
        "thought": chosen.get("thought", ""),
        "verdicts": [
            {k: c.get(k) for k in ("action", "arguments", "decision", "confidence", "diagnosis", "source")}
            for c in state.get("critiques", [])
        ],
        "observation": observation,
        "done": result.done,
        "success": result.success,
        "snapshot": snapshot,
        "checkpoint_id": _checkpoint_id(),
        "lessons": [lesson["id"] for lesson in state.get("lessons", [])],
        "error": bool(result.info.get("error")),
        "compensates": chosen.get("compensates"),
    }
    trajectory = [*state["trajectory"], step]
    update: dict[str, Any] = {
        "trajectory": trajectory,
        "observation": observation,
        "proposal": None,
        "chosen": None,
        "critiques": [],
        "counters": {"executed": 1, "replayed": replayed},
    }
    if "answer" in result.info:
        update["answer"] = str(result.info["answer"])
    if result.success:
        verified = result.info.get("verified", True) is not False
        update.update(status="success", verified=verified, reason=f"goal reached in {len(trajectory)} steps"
                      if verified else f"the agent answered after {len(trajectory)} steps (not verified)")  # fmt: skip
    elif result.done:
        update["attempt_failed"] = f"the environment ended the task at step {step['index']}: {_first_line(observation)}"
    elif len(trajectory) - state.get("attempt_start", 0) >= context.max_steps:
        update["attempt_failed"] = f"step budget of {context.max_steps} spent without reaching the goal"
    return update


def _checkpoint_id() -> str | None:
    """The checkpoint this node started from: forking from it re-decides this step."""
    try:
        return get_config()["configurable"].get("checkpoint_map", {}).get("")
    except RuntimeError:
        return None


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0][:200]
