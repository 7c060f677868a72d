"""Close the turn: reply to a chat caller, record the turn, and let go of the live environment.

The reply is the agent's final answer, or what went wrong, so a chat app (or Studio's chat view)
reads the outcome where it reads everything else; a parent graph that embeds Pivotal reads it in
`pivotal_result` too, never in keys of its own such as `status`; the turn's summary joins the
thread's `turns`, which the next turn's actor and critic read. Releasing the environment here frees it
however the graph was invoked; a later resume or fork rebuilds it from the checkpoint.

The reply is told through a chat model run (`Spoken`), so a UI streaming with `stream_mode="messages"`
or `astream_events` gets it chunk by chunk, tagged `pivotal:answer`, and nothing else: the role
calls before it are tagged `nostream` (`Context.stream_roles` shows them).
"""

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from pivotal.core.context import Context
from pivotal.core.environments.live import release
from pivotal.core.models.streaming import Spoken
from pivotal.core.state import NodeResult, RespondUpdate, State, turn_counts, turn_summary


async def respond(state: State, runtime: Runtime[Context]) -> RespondUpdate:
    release(state["run_id"])
    if state.get("status") == "success":
        said = state.get("answer") or state.get("reason", "")
    else:
        said = f"I could not complete the task: {state.get('reason', '')}"
    result: NodeResult = {
        "status": state.get("status", "failure"),
        "reason": state.get("reason", ""),
        "answer": state.get("answer", ""),
        "verified": state.get("verified", True),
        "run_id": state["run_id"],
        "retries": state.get("retries", 0),
        "actions": [[step["action"], step["arguments"]] for step in state.get("trajectory") or []],
        "usage": turn_counts(state, "usage"),
    }
    reply = await Spoken(text=said).ainvoke([], config=ANSWER_CALL)
    turns = [turn for turn in state.get("turns") or [] if turn.get("run_id") != state["run_id"]]
    return {
        "messages": [reply],
        "turns": [*turns, turn_summary(state)],
        "pivotal_result": result,
    }


ANSWER_CALL: RunnableConfig = {"run_name": "answer", "tags": ["pivotal:answer"], "metadata": {"pivotal_role": "answer"}}
"""How the answer's run is named and tagged: a UI may pick it out by the tag, LangSmith shows it by name."""
