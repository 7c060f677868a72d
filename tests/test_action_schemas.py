"""The actor's structured output is a union with one member per action, each carrying that action's
argument schema, for every model: what the schema says, what crosses the wire to hosted providers,
what the embedded model's grammar makes it write, and that the sim's replies fit it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, ValidationError

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.base import check_action
from pivotal.core.environments.live import open_live, release, run_step
from pivotal.core.environments.tools import ToolEnvironment
from pivotal.core.errors import PivotalError
from pivotal.core.models.factory import make_model
from pivotal.core.models.sim import SimChatModel
from pivotal.core.models.structured import ask
from pivotal.core.models.world import given
from pivotal.core.schemas import NO_PROPOSAL, proposal_schema
from pivotal.core.settings import settings
from pivotal.core.task import Task
from pivotal.graphs import arun
from pivotal.prompts import show
from pivotal.testing.loopback_provider import ANTHROPIC_PATH, OPENAI_PATH, Loopback, generic_responder, loopback

REPLY = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
LOOKUP = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 5},
        "channel": {"enum": ["email", "phone"]},
    },
    "required": ["order_id"],
}
ACTIONS = {"reply": REPLY, "lookup_order": LOOKUP, "wait": {}}


@tool
def reply(text: str) -> str:
    """Send a text reply to the customer."""
    return f"sent: {text}"


@tool
def lookup_order(
    order_id: str, limit: int = Field(default=1, ge=1, le=5), channel: Literal["email", "phone"] = "email"
) -> str:
    """Look up an order by its id."""
    return f"order {order_id}: shipped"


def _replied(task: Task, calls: list[dict[str, Any]]) -> bool | None:
    return True if any(c["tool"] == "reply" and not c["error"] for c in calls) else None


register_environment("schemas-desk", lambda: ToolEnvironment([lookup_order, reply], _replied, intro="Reply."))
DESK_TASK = {"goal": "tell the customer their order shipped", "env": "schemas-desk"}


def _members(wire: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Action name → the `arguments` schema its union member carries ({} for none), as sent."""
    call = wire["properties"]["call"]
    return {m["properties"]["action"]["const"]: m["properties"].get("arguments", {}) for m in call["anyOf"]}


def _essentials(schema: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """What an argument schema constrains: required names and each property's type, enum and bounds."""
    kept = ("type", "enum", "minimum", "maximum")
    properties = {key: {k: v for k, v in sub.items() if k in kept} for key, sub in schema["properties"].items()}
    return sorted(schema.get("required", [])), properties


# --- the schema itself ------------------------------------------------------------------------


def test_each_action_set_gets_its_own_union_and_an_equal_set_reuses_it() -> None:
    both, fewer = proposal_schema(ACTIONS), proposal_schema({"reply": REPLY, "wait": {}})

    assert proposal_schema(dict(ACTIONS)) is both  # cached per action set
    assert set(_members(_inline(both))) == set(ACTIONS)
    assert set(_members(_inline(fewer))) == {"reply", "wait"}
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        fewer.model_validate({"call": {"action": "lookup_order", "arguments": {"order_id": "A1"}}})


def test_one_action_or_none_with_arguments_is_sent_flat() -> None:
    """The union is then one object: nesting it cost the embedded model 8 output tokens per call."""
    moves, only = proposal_schema({"up": {}, "down": {}}), proposal_schema({"reply": REPLY})

    assert _inline(moves)["properties"]["action"]["enum"] == ["up", "down"]
    assert "arguments" not in _inline(moves)["properties"] and "call" not in _inline(moves)["properties"]
    assert _essentials(_inline(only)["properties"]["arguments"]) == _essentials(REPLY)
    assert moves.model_validate({"action": "down"}).chosen() == {"action": "down", "arguments": {}, "thought": ""}
    with pytest.raises(ValidationError, match="'text' is a required property"):
        only.model_validate({"action": "reply", "arguments": {}})
    with pytest.raises(ValidationError, match="'up' or 'down'"):
        moves.model_validate({"action": "left"})


def _inline(schema: type) -> dict[str, Any]:
    """The parameters as LangChain sends them to a provider (and to the embedded model's grammar)."""
    return convert_to_openai_tool(schema)["function"]["parameters"]


def test_each_member_carries_its_actions_argument_schema() -> None:
    members = _members(_inline(proposal_schema(ACTIONS)))

    assert _essentials(members["reply"]) == _essentials(REPLY)
    assert _essentials(members["lookup_order"]) == _essentials(LOOKUP)
    assert members["wait"] == {}  # an action without parameters gets no arguments object


def test_required_arguments_are_required_and_constraints_enforced() -> None:
    schema = proposal_schema(ACTIONS)

    chosen = schema.model_validate({"call": {"action": "reply", "arguments": {"text": "hi"}}}).chosen()
    assert chosen == {"action": "reply", "arguments": {"text": "hi"}, "thought": ""}
    for arguments, complaint in [
        ({}, "'text' is a required property"),
        ({"text": 3}, "3 is not of type 'string'"),
    ]:
        with pytest.raises(ValidationError, match=complaint):
            schema.model_validate({"call": {"action": "reply", "arguments": arguments}})
    with pytest.raises(ValidationError, match="arguments of lookup_order.limit: 9 is greater than the maximum of 5"):
        schema.model_validate({"call": {"action": "lookup_order", "arguments": {"order_id": "A1", "limit": 9}}})
    with pytest.raises(ValidationError, match="'fax' is not one of"):
        schema.model_validate({"call": {"action": "lookup_order", "arguments": {"order_id": "A1", "channel": "fax"}}})
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        schema.model_validate({"call": {"action": "refund", "arguments": {}}})


def test_a_flat_reply_is_read_as_the_same_choice_and_checked_the_same_way() -> None:
    schema = proposal_schema(ACTIONS)

    proposal = schema.model_validate({"action": "reply", "arguments": {"text": "hi"}, "thought": "say it"})
    assert proposal.chosen() == {"action": "reply", "arguments": {"text": "hi"}, "thought": "say it"}
    assert schema.model_validate({"action": "wait", "arguments": {}}).chosen()["arguments"] == {}
    with pytest.raises(ValidationError, match="'text' is a required property"):
        schema.model_validate({"action": "reply", "arguments": {}})


def test_an_invalid_parameters_schema_is_one_line_naming_the_action() -> None:
    with pytest.raises(PivotalError) as error:
        proposal_schema({"broken": {"properties": {"x": {"type": "strng"}}}})

    assert "action 'broken' has an invalid parameters schema" in str(error.value)
    assert "fix its ActionSpec.parameters" in str(error.value) and "\n" not in str(error.value)


def test_references_in_a_tools_schema_are_inlined() -> None:
    """A tool whose arguments nest a model has `$defs`; inside a union member they would point nowhere."""
    nested = {
        "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        "type": "object",
        "properties": {"to": {"$ref": "#/$defs/Address"}},
        "required": ["to"],
    }
    schema = proposal_schema({"ship": nested, "wait": {}})

    assert "$ref" not in json.dumps(_inline(schema))
    assert schema.model_validate({"call": {"action": "ship", "arguments": {"to": {"city": "Oslo"}}}}).chosen()["action"]
    with pytest.raises(ValidationError, match="'city' is a required property"):
        schema.model_validate({"call": {"action": "ship", "arguments": {"to": {}}}})


# --- hosted providers: what crosses the wire ---------------------------------------------------


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    with loopback() as provider:
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url_openai)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.base_url_anthropic)
        monkeypatch.setenv("PIVOTAL_MAX_RETRIES", "0")
        settings.cache_clear()
        make_model.cache_clear()
        yield provider
    settings.cache_clear()
    make_model.cache_clear()


def _desk_clerk(forget_first: bool):
    """Replies in the union's shape; with `forget_first`, the first proposal leaves the required text out."""
    asked = []

    def respond(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
        if schema_name != "Proposal":
            return generic_responder(schema_name, schema, messages)
        asked.append(1)
        arguments = {} if forget_first and len(asked) == 1 else {"text": "your order shipped"}
        return {"call": {"action": "reply", "arguments": arguments}, "thought": "the order shipped"}

    return respond


def _wire_schema(body: dict[str, Any], path: str) -> dict[str, Any]:
    [tool_spec] = body["tools"]
    return tool_spec["function"]["parameters"] if path == OPENAI_PATH else tool_spec["input_schema"]


@pytest.mark.parametrize(
    ("spec", "path"), [("openai:gpt-test", OPENAI_PATH), ("anthropic:claude-test", ANTHROPIC_PATH)]
)
async def test_the_wire_schema_carries_each_actions_argument_schema(server: Loopback, spec: str, path: str) -> None:
    server.responder = _desk_clerk(forget_first=False)
    context = Context(model=spec, memory=False, max_steps=2, max_pivot_retries=0)

    result = await arun(DESK_TASK, context, checkpoint_path=":memory:")

    assert result.status == "success", result.reason
    assert [(s["action"], s["arguments"]) for s in result.trajectory] == [("reply", {"text": "your order shipped"})]
    [asked] = [r for r in server.requests if r.schema_name == "Proposal"]
    members = _members(_wire_schema(asked.body, path))
    specs = {s.name: s.parameters for s in ToolEnvironment([lookup_order, reply], _replied).describe_actions()}
    assert set(members) == set(specs)
    for name, parameters in specs.items():
        assert _essentials(members[name]) == _essentials(parameters), name
    assert _essentials(members["lookup_order"])[1]["limit"] == {"type": "integer", "minimum": 1, "maximum": 5}


async def test_a_provider_reply_missing_a_required_argument_is_reasked_with_the_reason(server: Loopback) -> None:
    server.responder = _desk_clerk(forget_first=True)
    context = Context(model="openai:gpt-test", memory=False, max_steps=2, max_pivot_retries=0)

    result = await arun(DESK_TASK, context, checkpoint_path=":memory:")

    assert result.status == "success", result.reason
    first, second = [r for r in server.requests if r.schema_name == "Proposal"]
    assert "'text' is a required property" in str(second.body["messages"][-1])
    assert result.usage["actor"]["fallbacks"] == 0
    assert result.critic["prechecked"] == 0  # caught at the reply, before any pre-check bounce


# --- the sim --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("env", ["configs", "minesweeper", "gridworld"])  # a union; one action with arguments; none
async def test_sim_replies_fit_the_schema_even_when_wrong(env: str, seed: int) -> None:
    """Wrong picks (error=1) keep to the offered actions and each one's own schema, so no reply needs a
    re-ask; a ruled-out action (the actor drops rejected ones from the schema) is never picked.
    """
    run_id = f"schemas-sim-{env}-{seed}"
    live = open_live(run_id, Task(env=env, goal="win", params={"seed": seed}))
    try:
        for step in range(3):  # configs: read, write, submit; a different expert move each time
            expert, arguments = live.env.expert_action()
            specs = live.env.describe_actions()
            ruled_out = next((s.name for s in specs if s.name != expert), None)
            offered = {s.name: s.parameters for s in specs if s.name != ruled_out}
            for error in (0.0, 1.0):
                with given(live):
                    answer = await ask(
                        SimChatModel(error=error, seed=seed), proposal_schema(offered), [HumanMessage(f"step {step}")],
                        role="actor", fallback=NO_PROPOSAL, retries=0, metadata={},
                    )  # fmt: skip
                assert not answer.fallback, answer.error
                assert answer.value.chosen()["action"] in offered
            run_step(live, expert, arguments, key=f"{run_id}:{step}")
    finally:
        release(run_id)


# --- the embedded model ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.local_llm
def test_embedded_model_fills_a_required_text_argument_through_the_tool_adapter() -> None:
    """The grammar built from the union makes the 135M model write `text`; with a free `arguments`
    object it copied the schema there instead (0 of 5 proposals passed the pre-check, 5 of 5 now).
    """
    from pivotal.core.models.local import LocalChatModel

    env = ToolEnvironment([lookup_order, reply], _replied)
    specs = env.describe_actions()
    user = prompts.render(
        "actor",
        task="Tell the customer their refund has been sent.",
        actions=show.actions(specs),
        history=show.history([]),
        repeats="",
        held_here="",
        earlier_turns="",
        observation="The customer asks: where is my refund?",
        lessons="",
        reflections="",
        critiques="",
    )
    model = LocalChatModel(n_threads=1, max_text_chars=24, max_tokens=96)

    answer = asyncio.run(
        ask(
            model,
            proposal_schema({s.name: s.parameters for s in specs}),
            [SystemMessage(prompts.system("step_system")), HumanMessage(user)],
            role="actor",
            fallback=NO_PROPOSAL,
            retries=0,
            metadata={},
        )
    )

    assert not answer.fallback, answer.error
    chosen = answer.value.chosen()
    assert chosen["action"] == "reply"
    assert isinstance(chosen["arguments"].get("text"), str) and chosen["arguments"]["text"].strip()
    assert check_action(env, chosen["action"], chosen["arguments"]) is None
