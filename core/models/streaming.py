"""A finished reply as the chunks a provider would have streamed, for models that stream tool calls whole."""

import json
import re
from collections.abc import Iterator

from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk


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
