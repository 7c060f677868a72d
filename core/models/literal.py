"""What the `sim` model says outside Pivotal's roles: a literal-minded stand-in for a chat model.

Apps test their own tools and agents on `sim` before they pay for a provider, so it must
behave like a chat model there: answer in text, call a tool when asked or when the message
names one, never call one under `tool_choice="none"`, and fill arguments from the words it
was given (numbers and quoted names), the way a careful but unimaginative model would.
It never reads meaning into a message; the answers are deterministic.
"""

import json
import re
import uuid
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from pivotal.core.models.choice import ToolChoice, forced, named_tool, refused

_QUOTED = re.compile(r"(?<!\w)['\"“‘「](.+?)['\"”’」](?!\w)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_WORD = re.compile(r"[^\W_]+")


def literal_reply(
    messages: list[BaseMessage], tools: list[dict[str, Any]] | None, tool_choice: ToolChoice
) -> AIMessage:
    tool = _chosen_tool(messages, tools or [], tool_choice)
    if tool is None:
        return AIMessage(content=_text_answer(messages))
    function = tool["function"]
    args = literal_args(function.get("parameters") or {}, _last_human(messages))
    call = {"name": function["name"], "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call])


def _chosen_tool(messages: list[BaseMessage], tools: list[dict[str, Any]], choice: ToolChoice) -> dict[str, Any] | None:
    """Named → that tool; forced → the best match or the first; auto → the tool the human just named, if any."""
    if not tools or refused(choice):
        return None
    if named := named_tool(choice):
        return next((t for t in tools if t["function"]["name"] == named), None)
    must_call = forced(choice)
    if not must_call and not isinstance(messages[-1] if messages else None, HumanMessage):
        return None  # after a tool result, a model answers
    words = set(_words(_last_human(messages)))
    scored = [(len(words & set(_words(t["function"]["name"]))), -i, t) for i, t in enumerate(tools)]
    score, _, best = max(scored, key=lambda item: item[:2])
    return best if score or must_call else None


def literal_args(schema: dict[str, Any], text: str) -> dict[str, Any]:
    """Required fields from the text: numbers in order, quoted strings in order, else the text itself."""
    numbers = iter(_NUMBER.findall(text))
    quoted = iter(_QUOTED.findall(text))
    args: dict[str, Any] = {}
    properties = schema.get("properties", {})
    for key in schema.get("required", []):
        args[key] = _value(properties.get(key, {}), text, numbers, quoted)
    return args


def _value(prop: dict[str, Any], text: str, numbers, quoted) -> Any:
    if "enum" in prop:
        return next((v for v in prop["enum"] if str(v).lower() in text.lower()), prop["enum"][0])
    if "const" in prop:
        return prop["const"]
    kind = prop.get("type") or next((o.get("type") for o in prop.get("anyOf", []) if o.get("type") != "null"), "")
    if kind in ("integer", "number"):
        number = float(next(numbers, 0))
        return int(number) if kind == "integer" else number
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return literal_args(prop, text)
    return next(quoted, None) or text.strip()[:200] or "ok"


def _text_answer(messages: list[BaseMessage]) -> str:
    """After a tool ran, its result is the answer; otherwise a short acknowledgement."""
    last = messages[-1] if messages else None
    if isinstance(last, ToolMessage):
        content = last.content if isinstance(last.content, str) else json.dumps(last.content, ensure_ascii=False)
        return f"The tool returned: {content}" if content else "The tool returned nothing."
    return "ok"


def _last_human(messages: list[BaseMessage]) -> str:
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    return human.text if human else ""


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if len(w) > 2]
