"""The hard stop of a `create_agent` agent under `PivotalCritic`: its own loop would ask the model
again after every refusal, for as long as the model keeps calling tools (one trial made ~1,700
model calls in 11 minutes). So a turn (everything since the user's last message) ends once it has
made `max_model_calls_per_turn` model calls or had `max_refusals_per_turn` tool calls turned down.
"""

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

from pivotal.core.context import Context


def turn_stop(state: Mapping[str, Any], context: Context) -> dict[str, Any] | None:
    """The update that ends the agent before its next model call (a final message, the reason kept
    in `pivotal_stop`, a jump to the end), or None while the turn is within its bounds.
    """
    turn = _this_turn(state.get("messages") or [])
    calls = [m for m in turn if isinstance(m, AIMessage)]
    asked = {call["id"] for m in calls for call in m.tool_calls}
    reviews = state.get("pivotal_reviews") or []
    refused = [r for r in reviews if r.get("tool_call_id") in asked and not r.get("executed")]
    if len(refused) >= context.refusals_allowed():
        last = next((r for r in reversed(refused) if r.get("source") != "none"), refused[-1])  # a reviewer's words
        reason = (
            f"{len(refused)} tool calls were turned down in this turn (max_refusals_per_turn "
            f"{context.refusals_allowed()}); the last, {last.get('action')}: {last.get('diagnosis')}"
        )
    elif len(calls) >= context.max_model_calls_per_turn:
        reason = f"{len(calls)} model calls in this turn (max_model_calls_per_turn {context.max_model_calls_per_turn})"
    else:
        return None
    text = f"I stopped here: {reason}. Nothing more was run; tell me how to go on."
    return {"jump_to": "end", "messages": [AIMessage(text)], "pivotal_stop": reason}


def _this_turn(messages: list[AnyMessage]) -> list[AnyMessage]:
    start = next((i for i in reversed(range(len(messages))) if isinstance(messages[i], HumanMessage)), -1)
    return messages[start + 1 :]
