"""What a `tool_choice` value asks of a chat model, read one way by both of Pivotal's own models.

LangChain passes it on as given: None or "auto" (the model decides), "none", "any"/"required"
or True (some tool must be called), a tool's name, or an OpenAI-style {"function": {"name": …}}.
"""

from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool

ToolLike = dict[str, Any] | type | Callable[..., Any] | BaseTool
"""A tool as `bind_tools` takes it."""
ToolChoice = str | dict[str, Any] | bool | None
"""A `tool_choice` in any of the forms above."""

FORCED = ("any", "required")


def named_tool(choice: ToolChoice) -> str | None:
    if isinstance(choice, dict):
        return choice.get("function", {}).get("name") or choice.get("name")
    if isinstance(choice, str) and choice not in (*FORCED, "auto", "none"):
        return choice
    return None


def forced(choice: ToolChoice) -> bool:
    return choice in FORCED or choice is True


def refused(choice: ToolChoice) -> bool:
    return choice in ("none", False)
