"""Turn an application's LangChain tools plus a verifier into a Pivotal environment."""

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from pydantic import ValidationError

from pivotal.environments.base import ActionSpec, StepResult
from pivotal.task import Task

Call = dict[str, Any]
"""One executed call: {"tool", "arguments", "output", "error"}."""
Verifier = Callable[[Task, list[Call]], bool | None]
"""True: task done and succeeded; False: done and failed; None: not done yet."""


class ToolEnvironment:
    """Each action calls one tool; a tool that raises becomes an observation, not a crash.

    There is no snapshot: on a pivot the kept calls are replayed, so tools used with
    pivotal retry should be idempotent or listed in `irreversible` (stricter review).
    """

    def __init__(self, tools: Sequence[BaseTool], verifier: Verifier, *,
                 intro: str = "", irreversible: Sequence[str] = (),
                 max_output_chars: int = 4000) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.verifier = verifier
        self.intro = intro
        self.irreversible = set(irreversible)
        self.max_output_chars = max_output_chars
        self.calls: list[Call] = []
        self.task: Task | None = None

    def reset(self, task: Task) -> str:
        self.task, self.calls = task, []
        return self.intro or f"Tools available: {', '.join(self.tools)}. No calls made yet."

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        call: Call = {"tool": name, "arguments": arguments, "output": "", "error": ""}
        try:
            output = self.tools[name].invoke(arguments)
            call["output"] = _text(output)[: self.max_output_chars]
        except Exception as exc:  # noqa: BLE001 — a tool's failure is information for the agent
            call["error"] = f"{type(exc).__name__}: {exc}"[: self.max_output_chars]
        self.calls.append(call)
        verdict = self.verifier(self.task, self.calls)  # type: ignore[arg-type]
        observation = (f"{name} raised {call['error']}" if call["error"]
                       else f"{name} returned: {call['output']}")
        return StepResult(observation, done=verdict is not None, success=bool(verdict),
                          info={"error": call["error"]} if call["error"] else {})

    def describe_actions(self) -> list[ActionSpec]:
        return [ActionSpec(tool.name, tool.description or tool.name, _parameters(tool),
                           irreversible=tool.name in self.irreversible)
                for tool in self.tools.values()]

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        schema = self.tools[name].args_schema
        if isinstance(schema, type):
            try:
                schema.model_validate(arguments)
            except ValidationError as exc:
                return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return None


def _parameters(tool: BaseTool) -> dict[str, Any]:
    schema = tool.tool_call_schema
    return schema.model_json_schema() if isinstance(schema, type) else dict(schema)


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, default=str)
    except (TypeError, ValueError):
        return str(output)
