"""A finished reply as the chunks a provider would have streamed: for models that stream tool calls
whole, and for the run's final answer.
"""

import json
import re
from collections.abc import Iterator
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult


def as_chunks(message: AIMessage) -> Iterator[ChatGenerationChunk]:
    """Text word by word, each tool call as one chunk, usage and metadata on the last.

    A tool call is useful only whole, so calls are sent once complete. A cut-off call must stay
    an invalid call: joined with other chunks LangChain would complete it with its partial-JSON
    parser, so such a reply is sent as one chunk.
    """
    if message.invalid_tool_calls:
        yield ChatGenerationChunk(
            message=AIMessageChunk(**{**message.model_dump(exclude={"type"}), "chunk_position": "last"})
        )
        return
    words = re.findall(r"\S+\s*|\s+", message.content) if isinstance(message.content, str) else []
    pieces = [AIMessageChunk(content=word) for word in words]
    calls = [
        {"name": c["name"], "args": json.dumps(c["args"], ensure_ascii=False), "id": c["id"], "index": i}
        for i, c in enumerate(message.tool_calls)
    ]
    if calls:
        pieces.append(AIMessageChunk(content="", tool_call_chunks=calls))
    last = AIMessageChunk(
        content="",
        usage_metadata=message.usage_metadata,
        response_metadata=message.response_metadata,
        chunk_position="last",
    )
    for piece in [*pieces, last]:
        yield ChatGenerationChunk(message=piece)


class Spoken(BaseChatModel):
    """Says `text`, streamed as a provider streams a reply: the run's final answer, told to a chat UI.

    The answer was written by the actor (`finish`) and reviewed by the critic before it counts; it
    is not streamed while the actor writes it, since a UI would then show words the critic may still
    reject. Told through a chat model run, it reaches `stream_mode="messages"` and `astream_events`
    chunk by chunk, as the one message a chat app shows, without another provider call.
    """

    text: str
    speaker: str = "pivotal"

    @property
    def _llm_type(self) -> str:
        return "pivotal-answer"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.text, name=self.speaker))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in as_chunks(AIMessage(self.text)):
            chunk.message.name = self.speaker
            yield chunk
