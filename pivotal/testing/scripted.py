"""A chat model that says what a test scripted, per role: the agent's tool calls in order, and
each structured reply (`Verdict`, `LessonDrafts`, `LessonVerdict`) by its schema's name.

A real `BaseChatModel` (tool binding, structured output through LangChain's own parser), so a
test drives `create_agent` and Pivotal's roles through the same paths a provider's model takes.
"""

import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from pivotal.core.models.choice import ToolChoice, ToolLike
from pivotal.core.models.streaming import as_chunks

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from pivotal.core.environments.tools import ToolEnvironment

AGENT = "agent"
"""The script key for the agent's own replies (whenever it is bound to the agent's tools)."""


class ScriptedChatModel(BaseChatModel):
    """`script[name]`: replies in order, an AIMessage or the arguments of a structured reply;
    `prompts[name]`: the messages each call was given. When a list runs out, the agent answers
    "done" and a structured role repeats its last reply.
    """

    script: dict[str, list[Any]] = Field(default_factory=dict)
    prompts: dict[str, list[list[BaseMessage]]] = Field(default_factory=dict)
    bound: str = AGENT

    @property
    def _llm_type(self) -> str:
        return "pivotal-scripted"

    def bind_tools(self, tools: Sequence[ToolLike], *, tool_choice: ToolChoice = None, **kwargs: Any) -> Any:
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        role = names[0] if len(names) == 1 and names[0] in self.script else AGENT
        twin = self.model_copy(update={"bound": role})
        twin.script, twin.prompts = self.script, self.prompts  # one script and one record for all twins
        return twin

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.prompts.setdefault(self.bound, []).append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self._next())])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """As a provider streams (under `stream_mode="messages"`, `astream_events`): text word by word."""
        self.prompts.setdefault(self.bound, []).append(list(messages))
        yield from as_chunks(self._next())

    def _next(self) -> AIMessage:
        replies = self.script.get(self.bound, [])
        if self.bound == AGENT:
            reply = replies.pop(0) if replies else AIMessage("done")
            return reply.model_copy() if isinstance(reply, AIMessage) else AIMessage(str(reply))
        args = replies.pop(0) if len(replies) > 1 else replies[0]
        call = {"name": self.bound, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}
        return AIMessage(
            "", tool_calls=[call], usage_metadata={"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}
        )


def tool_call(name: str, **args: Any) -> AIMessage:
    """The agent's reply calling one tool."""
    return AIMessage(
        "", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}]
    )


def verdict(decision: str, confidence: float = 0.95, diagnosis: str = "", revision: str = "") -> dict[str, Any]:
    return {"decision": decision, "confidence": confidence, "diagnosis": diagnosis, "revision": revision}


def stepping_tools(env: "ToolEnvironment") -> "list[BaseTool]":
    """A ToolEnvironment's tools as an agent's tools that act through `env.step`, so the
    environment's own record (and the oracle a `sim` model reads) sees every call that ran.
    """
    from langchain_core.tools import StructuredTool

    def stepping(name: str) -> Any:
        return lambda **arguments: env.step(name, arguments).observation

    return [
        StructuredTool.from_function(
            stepping(t.name), name=t.name, description=t.description, args_schema=t.args_schema
        )
        for t in env.tools.values()
    ]
