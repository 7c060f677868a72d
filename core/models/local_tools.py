"""How the embedded model calls tools: one JSON grammar for exactly the choices the caller allows.

A grammar can force one schema. A tool the caller names, or the only tool when a call is
required, constrains the whole reply to that tool's arguments: the structured-output path every
Pivotal role takes. Several tools, or `tool_choice="auto"`, become one `anyOf` the model picks
from (a call to one of them, or a text `response` when it may answer), after a system message
listing the tools: the generic format llama.cpp's own server uses for models without a native
tool template. `"none"` leaves the reply free text.
"""

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage

from pivotal.core.models.choice import ToolChoice, forced, named_tool, refused

INSTRUCTIONS = (
    "You can call these tools:\n{tools}\n"
    "Reply in JSON, either with `tool_call` (the tool to call and its arguments){or_response}."
)
OR_RESPONSE = " or with `response` (your answer to the user, when no tool is needed)"


@dataclass(frozen=True)
class ReplyPlan:
    """What the grammar allows: free text, one tool's arguments, or a choice of calls (and text)."""

    direct: dict[str, Any] | None = None
    choices: list[dict[str, Any]] = field(default_factory=list)
    may_answer: bool = True

    @property
    def constrained(self) -> bool:
        return self.direct is not None or bool(self.choices)


def plan_reply(tools: list[dict[str, Any]] | None, tool_choice: ToolChoice) -> ReplyPlan:
    if not tools or refused(tool_choice):
        return ReplyPlan()
    if named := named_tool(tool_choice):
        for tool in tools:
            if tool["function"]["name"] == named:
                return ReplyPlan(direct=tool, may_answer=False)
        raise ValueError(f"tool_choice names {named!r}, which is not among the bound tools")
    must_call = forced(tool_choice)
    if must_call and len(tools) == 1:
        return ReplyPlan(direct=tools[0], may_answer=False)
    return ReplyPlan(choices=list(tools), may_answer=not must_call)


def reply_schema(plan: ReplyPlan) -> dict[str, Any] | None:
    if plan.direct is not None:
        return _parameters(plan.direct)
    if not plan.choices:
        return None
    options = [
        {
            "type": "object",
            "properties": {
                "tool_call": {
                    "type": "object",
                    "properties": {"name": {"const": tool["function"]["name"]}, "arguments": _parameters(tool)},
                    "required": ["name", "arguments"],
                }
            },
            "required": ["tool_call"],
        }
        for tool in plan.choices
    ]
    if plan.may_answer:
        options.append({"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]})
    return {"anyOf": options}


def instructions(plan: ReplyPlan) -> str | None:
    """The system message that shows the model its tools; none when the grammar alone decides."""
    if not plan.choices:
        return None
    listed = "\n".join(
        json.dumps({k: tool["function"].get(k) for k in ("name", "description", "parameters")}, ensure_ascii=False)
        for tool in plan.choices
    )
    return INSTRUCTIONS.format(tools=listed, or_response=OR_RESPONSE if plan.may_answer else "")


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"].get("parameters") or {"type": "object", "properties": {}}


def parse_reply(text: str, plan: ReplyPlan, **fields: Any) -> AIMessage:
    """The reply as LangChain expects it: text, a tool call, or an invalid call when the JSON is cut off."""
    if not plan.constrained:
        return AIMessage(content=text, **fields)
    name = plan.direct["function"]["name"] if plan.direct else None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return _invalid(text, name, f"truncated or invalid JSON ({error.msg} at char {error.pos})", fields)
    if plan.direct is not None:
        if not isinstance(value, dict):
            return _invalid(text, name, "JSON reply is not an object", fields)
        return _call(plan.direct["function"]["name"], value, text, fields)
    if isinstance(value, dict) and isinstance(value.get("response"), str):
        return AIMessage(content=value["response"], **fields)
    call = value.get("tool_call") if isinstance(value, dict) else None
    if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
        return _invalid(text, None, "reply is neither a tool call nor a response", fields)
    return _call(str(call.get("name")), call["arguments"], json.dumps(call["arguments"]), fields)


def _call(name: str, args: dict[str, Any], raw: str, fields: dict[str, Any]) -> AIMessage:
    """The raw call also goes in additional_kwargs["tool_calls"]: LangChain's tool parsers fall back to
    it when tool_calls is empty, which turns a cut-off reply into a `parsing_error`, not a silent None.
    """
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    raw_call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}
    call = {"name": name, "args": args, "id": call_id, "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call], additional_kwargs={"tool_calls": [raw_call]}, **fields)


def _invalid(text: str, name: str | None, problem: str, fields: dict[str, Any]) -> AIMessage:
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    raw_call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
    bad_call = {"name": name, "args": text, "id": call_id, "error": problem, "type": "invalid_tool_call"}
    return AIMessage(content="", invalid_tool_calls=[bad_call], additional_kwargs={"tool_calls": [raw_call]}, **fields)
