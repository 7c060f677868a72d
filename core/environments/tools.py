"""Turn an application's LangChain tools plus a verifier into a Pivotal environment."""

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import ensure_config
from langchain_core.tools import BaseTool, tool as create_tool
from pydantic import BaseModel, ValidationError

from pivotal.core.environments.base import ActionSpec, StepResult, check_names
from pivotal.core.errors import PivotalError, shown
from pivotal.core.task import Task

Call = dict[str, Any]
"""One executed call: {"tool", "arguments", "output", "error"}."""
Verifier = Callable[[Task, list[Call]], bool | None]
"""True: task done and succeeded; False: done and failed; None: not done yet."""
FINISH = "finish"
FINISH_SPEC = ActionSpec(
    FINISH,
    "end the task with your final answer to the user (only when the task is done or cannot be done)",
    {"type": "object", "properties": {"answer": {"type": "string", "description": "the final answer"}},
     "required": ["answer"]},
    final=True,
)  # fmt: skip
"""Offered when no verifier decides success: the agent ends the task, and the critic reviews the answer."""
Undo = str | Callable[[dict[str, Any]], tuple[str, dict[str, Any]] | None]
"""A compensating tool's name (called with the same arguments), or a function from the original
call's arguments to the compensating call (name, arguments), or None when nothing needs undoing."""


ToolLike = BaseTool | Callable[..., Any]
"""What an application may pass as a tool: a LangChain tool, or a plain function LangChain makes one of."""


def as_tools(tools: Sequence[ToolLike]) -> list[BaseTool]:
    """The tools as LangChain tools, a plain function converted exactly as LangChain's `create_agent`
    does (its ToolNode calls `langchain_core.tools.tool`), so an app's tool list means the same to
    Pivotal as to LangChain; anything else is refused in one line, not met later by an AttributeError.
    """
    if isinstance(tools, BaseTool | str | bytes | Mapping) or callable(tools) or not isinstance(tools, Iterable):
        raise PivotalError(
            f"tools must be a list, not {shown(tools)}; pass [tool, ...], each a LangChain tool or a function"
        )
    return [_as_tool(index, given) for index, given in enumerate(tools)]


def _as_tool(index: int, given: object) -> BaseTool:
    """One tool: a BaseTool as it is, a callable through LangChain's `tool`, whose complaint (no
    docstring, no name) becomes the one line that says which tool and what to do.
    """
    if isinstance(given, BaseTool):
        return given
    if not callable(given):
        raise PivotalError(
            f"tools[{index}] is {shown(given)}, not a tool; pass a LangChain tool (@tool) or a plain function"
        )
    try:
        return create_tool(given)
    except (TypeError, ValueError) as exc:
        name = getattr(given, "__name__", type(given).__name__)
        raise PivotalError(
            f"tools[{index}] ({name}) cannot be made a tool: {' '.join(str(exc).split()).rstrip('.')}; "
            "give the function a name and a docstring, or wrap it with @tool(description=...)"
        ) from None


class ToolEnvironment:
    """Each action calls one tool; a tool that raises becomes an observation, not a crash.

    Tools act on the world, so no tool is ever called again to rebuild state: the adapter's
    own state is its call log, saved with every step (`snapshot`) and restored from the
    checkpoint when a run resumes in another process or is forked in Studio. On a pivot the
    world goes back only through `compensations` (`{"refund": "reverse_refund"}`): the
    compensating calls of the abandoned steps run newest first, each reviewed by the critic.
    Without compensations the retry goes forward from the real state (`rewind = "forward"`).
    An `irreversible` tool runs once per run with the same arguments (or the same `once_keys`
    arguments: `{"refund": ["order_id"]}`), unless it is `repeatable` or the task allows it.

    `verifier(task, calls)` decides when the task is done and whether it succeeded. Without one
    (most application agents have no ground truth) the actor gets a `finish(answer)` action: the
    critic reviews the answer like any action, and the outcome is marked unverified.

    Each call is a LangChain tool run under the run's config (the node's, which LangChain keeps in
    the context the executor's thread inherits): callbacks, `astream_events` and LangSmith see
    `on_tool_start` / `on_tool_end` under the tool's name, one pair per call that runs. A step the
    once-guard takes as done (a replay, a fork) calls no tool and shows none; `finish` is no tool.
    """

    way_back = "pass compensations={tool: its undoing tool} (never a replay: tools act on the world)"
    """The rewind notice's advice: a replay would call the tools again, so only compensations go back."""

    def __init__(
        self,
        tools: Sequence[ToolLike],
        verifier: Verifier | None = None,
        *,
        intro: str = "",
        irreversible: Sequence[str] = (),
        compensations: Mapping[str, Undo] | None = None,
        repeatable: Sequence[str] = (),
        once_keys: Mapping[str, Sequence[str]] | None = None,
        max_output_chars: int = 4000,
    ) -> None:
        self.tools = {tool.name: tool for tool in as_tools(tools)}
        self.verifier = verifier
        self.intro = intro
        self.irreversible = set(irreversible)
        self.compensations = dict(compensations or {})
        self.repeatable = set(repeatable)
        self.once_keys = {name: tuple(keys) for name, keys in (once_keys or {}).items()}
        self._check_names()
        if verifier is None and FINISH in self.tools:
            raise PivotalError(
                f"a tool is named {FINISH!r}, like the action offered when no verifier is given; "
                "rename the tool or pass a verifier"
            )
        self.rewind = "compensate" if self.compensations else "forward"
        self.max_output_chars = max_output_chars
        self.calls: list[Call] = []
        self.task: Task | None = None

    def _check_names(self) -> None:
        """Every safety setting names real tools, and once_keys real arguments of them."""
        check_names("irreversible", sorted(self.irreversible), self.tools)
        check_names("compensations", self.compensations, self.tools)
        check_names("compensations", [u for u in self.compensations.values() if isinstance(u, str)], self.tools)
        check_names("repeatable", sorted(self.repeatable), self.tools)
        check_names("once_keys", self.once_keys, self.tools)
        for name, keys in self.once_keys.items():
            check_names(f"once_keys[{name!r}]", keys, self.tools[name].args, what="argument")

    def reset(self, task: Task) -> str:
        self.task, self.calls = task, []
        return self.intro or f"Tools available: {', '.join(self.tools)}. No calls made yet."

    def step(self, name: str, arguments: dict[str, Any]) -> StepResult:
        if self.verifier is None and name == FINISH:
            return self._finish(str(arguments.get("answer", "")))
        call: Call = {"tool": name, "arguments": arguments, "output": "", "error": ""}
        try:
            output = self.tools[name].invoke(arguments, ensure_config())
            call["output"] = _text(output)[: self.max_output_chars]
        except Exception as exc:  # noqa: BLE001 — a tool's failure is information for the agent
            call["error"] = f"{type(exc).__name__}: {exc}"[: self.max_output_chars]
        return self.record(call)

    def record(self, call: Call) -> StepResult:
        """Log a call and let the verifier judge. An `Idempotent` subclass that recognises a
        repeated key records the first call's outcome here instead of calling the tool again.
        """
        name = call["tool"]
        self.calls.append(call)
        verdict = self.verifier(self.task, self.calls) if self.verifier else None  # type: ignore[arg-type]
        observation = f"{name} raised {call['error']}" if call["error"] else f"{name} returned: {call['output']}"
        return StepResult(
            observation,
            done=verdict is not None,
            success=bool(verdict),
            info={"error": call["error"]} if call["error"] else {},
        )

    def snapshot(self) -> dict[str, Any]:
        return {"calls": [dict(call) for call in self.calls]}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Take back the call log a checkpoint holds; the world the tools changed is not touched."""
        self.calls = [dict(call) for call in snapshot.get("calls", [])]

    def compensation(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        undo = self.compensations.get(name)
        if undo is None:
            return None
        return (undo, dict(arguments)) if isinstance(undo, str) else undo(dict(arguments))

    def _finish(self, answer: str) -> StepResult:
        """Without a verifier the agent decides it is done; its answer was reviewed by the critic first."""
        self.calls.append({"tool": FINISH, "arguments": {"answer": answer}, "output": answer, "error": ""})
        return StepResult(f"final answer: {answer}", done=True, success=True,
                          info={"answer": answer, "verified": False})  # fmt: skip

    def describe_actions(self) -> list[ActionSpec]:
        return [*self._tool_specs(), *([FINISH_SPEC] if self.verifier is None else [])]

    def _tool_specs(self) -> list[ActionSpec]:
        return [
            ActionSpec(
                tool.name,
                tool.description or tool.name,
                _parameters(tool),
                irreversible=tool.name in self.irreversible,
                repeatable=tool.name in self.repeatable,
                once_key=self.once_keys.get(tool.name, ()),
            )
            for tool in self.tools.values()
        ]

    def check(self, name: str, arguments: dict[str, Any]) -> str | None:
        if name not in self.tools:
            return None  # the built-in finish: its schema was checked already
        schema = self.tools[name].args_schema
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            try:
                schema.model_validate(arguments)
            except ValidationError as exc:
                return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return None


def _parameters(tool: BaseTool) -> dict[str, Any]:
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return dict(schema)
    return schema.model_json_schema() if issubclass(schema, BaseModel) else schema.schema()


def _text(output: object) -> str:
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, default=str)
    except (TypeError, ValueError):
        return str(output)
