"""Pydantic models for every structured LLM reply.

Decision fields come first and free text is short: small local models fill fields in
order and ramble in free text until the token limit cuts the JSON off.
"""

import functools
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for
from langchain_core.utils.json_schema import dereference_refs
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, create_model, model_validator

from pivotal.core.errors import PivotalError

Decision = Literal["approve", "revise", "reject"]
LessonKind = Literal["strategy", "guardrail", "skill"]
"""guardrail: a mistake to avoid; strategy or skill: something that worked."""
Outcome = Literal["success", "failure"]
LessonLevel = Literal["task", "step"]
"""step lessons come from reflections on one step, task lessons from whole successful runs."""
PivotChoice = Literal["best", "first_mistake", "no_return"]
ReuseMoves = Literal["off", "pivotal", "all"]
"""Which step a pivotal retry redoes: the reflection's first mistake, its point of no return, or per
failure the better of the two ("best")."""


class ProposalReply(BaseModel):
    """The actor's next action."""

    model_config = ConfigDict(title="Proposal")
    """The name the model sees (tool and JSON-schema title) stays `Proposal`: prompts, the loopback
    provider and recorded replies know it by that name; the class is named for the reply so it is not
    mistaken for the `Proposal` that flows in the graph state (`pivotal.core.state`)."""

    def chosen(self) -> dict[str, Any]:
        """{action, arguments, thought}, whichever of `proposal_schema`'s two shapes the reply has."""
        call = getattr(self, "call", self)
        arguments = dict(getattr(call, "arguments", None) or {})
        return {"action": getattr(call, "action", ""), "arguments": arguments, "thought": getattr(self, "thought", "")}


class OneOfActions(ProposalReply):
    """A ProposalReply whose `call` is one member of a union with one member per action."""

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_reply(cls, data: object) -> Any:
        """A reply in the flat shape ({action, arguments, thought}) names the same choice; it is read as
        one and still checked against that action's argument schema.
        """
        if isinstance(data, dict) and "call" not in data and "action" in data:
            call = {key: data[key] for key in ("action", "arguments") if key in data}
            return {"call": call, **{key: value for key, value in data.items() if key not in call}}
        return data


NO_PROPOSAL = ProposalReply()
"""What the actor falls back to when the model gives no valid reply: an empty action the pre-check rejects."""


def proposal_schema(actions: Mapping[str, dict[str, Any]]) -> type[ProposalReply]:
    """A ProposalReply for these actions (name → JSON schema of its arguments) that tells constrained decoding
    and tool-calling providers each action's own arguments: with one free `arguments` object the embedded
    model left a required `text` out.

    Several actions with arguments: `call` is a union with one member per action, in a field because
    providers refuse a union at a tool's top level (Anthropic: no anyOf there; OpenAI: parameters must
    be an object). One action, or none with arguments: that union is one object, so it is sent flat
    (`action`, its `arguments` if any): the nesting cost the embedded model 8 more output tokens and
    ~27% per gridworld actor call.
    """
    return _proposal_schema(tuple((name, json.dumps(schema, sort_keys=True)) for name, schema in actions.items()))


@functools.lru_cache(maxsize=1024)
def _proposal_schema(actions: tuple[tuple[str, str], ...]) -> type[ProposalReply]:
    """Cached per action set: building pydantic models per actor call cost ~1 ms (bench_batch profile)."""
    parsed = [(name, json.loads(schema)) for name, schema in actions]
    if len(parsed) == 1 or not any(schema.get("properties") for _, schema in parsed):
        fields = _call_fields(tuple(name for name, _ in parsed), parsed[0][1] if len(parsed) == 1 else {})
        return create_model(
            "Proposal", __base__=ProposalReply, __doc__=ProposalReply.__doc__, **fields, thought=_thought()
        )
    members = tuple(create_model(name, **_call_fields((name,), schema)) for name, schema in parsed)
    # built at run time, one member per action: typed Any, since no static checker can follow it
    union: Any = Annotated[Union[members], Field(discriminator="action", json_schema_extra=_any_of)]  # noqa: UP007
    call = (union, Field(description="the action to take, with the arguments that action takes"))
    return create_model("Proposal", __base__=OneOfActions, __doc__=ProposalReply.__doc__, call=call, thought=_thought())


def _call_fields(names: tuple[str, ...], schema: dict[str, Any]) -> dict[str, Any]:
    """`action` one of `names`; `arguments` only when `schema` has properties, required when it requires any."""
    fields: dict[str, Any] = {"action": (Literal[names], Field(description="the action to take"))}
    if schema.get("properties"):
        fields["arguments"] = (_arguments_type(names[0], schema), ... if schema.get("required") else {})
    return fields


def _thought() -> Any:
    """Last, and short: small models fill fields in order and ramble in free text."""
    return (str, Field(default="", max_length=300, description="one short sentence: why this action"))


def _arguments_type(name: str, schema: dict[str, Any]) -> Any:
    """The action's own JSON schema, sent as is (references inlined) and checked by a JSON Schema
    validator: pydantic has no JSON-schema-to-model builder, and a hand-written one would drop
    whatever keywords it did not know.
    """
    inline = {key: value for key, value in dereference_refs(schema).items() if key not in ("$defs", "definitions")}
    checker = validator_for(inline)
    try:
        checker.check_schema(inline)
    except SchemaError as error:
        raise PivotalError(
            f"action {name!r} has an invalid parameters schema ({error.message}); fix its ActionSpec.parameters"
        ) from None
    validator = checker(inline)

    def check(arguments: dict[str, Any]) -> dict[str, Any]:
        if problem := best_match(validator.iter_errors(arguments)):
            where = ".".join(map(str, problem.absolute_path))
            raise ValueError(f"arguments of {name}{f'.{where}' if where else ''}: {problem.message}")
        return arguments

    return Annotated[dict[str, Any], AfterValidator(check), WithJsonSchema(inline)]


def _any_of(schema: dict[str, Any]) -> None:
    """`anyOf` without pydantic's `discriminator` mapping: every provider and llama.cpp's grammar accept
    it, and with each member's `action` a constant it admits exactly what `oneOf` would.
    """
    schema["anyOf"] = schema.pop("oneOf")
    schema.pop("discriminator", None)


class Verdict(BaseModel):
    """The critic's judgement of one proposed action, before it runs.

    Judgement (`decision`, `confidence`) is kept apart from advice (`diagnosis`, `revision`)
    so each can be measured on its own.
    """

    decision: Decision = Field(
        description="approve: safe and useful, execute it; revise: could be better, say how; reject: must not run"
    )
    confidence: float = Field(ge=0.0, le=1.0, description="how sure you are of the decision, 0..1")
    diagnosis: str = Field(default="", max_length=400, description="what is right or wrong with the action")
    revision: str = Field(
        default="", max_length=400, description="for revise/reject: the concrete change the actor should make"
    )


ErrorType = Literal[
    "wrong_action",
    "bad_arguments",
    "unsafe_action",
    "premature_stop",
    "looping",
    "no_acceptable_action",
    "misread_observation",
    "environment",
    "unknown",
]


RECIPE = "This sequence of moves reached the goal: "
"""How a solved run's checked moves are worded as a lesson's advice (memory/lesson/provenance.py) and by the
sim distiller; the sim actor follows a recalled lesson that says it."""


class LessonCandidate(BaseModel):
    """A lesson worth keeping across tasks, written as a principle, not a transcript."""

    kind: LessonKind = Field(description="guardrail: a mistake to avoid; strategy or skill: something that worked")
    situation: str = Field(max_length=300, description="when the lesson applies")
    text: str = Field(max_length=400, description="the lesson, one or two sentences")


class ReflectionReply(BaseModel):
    """An observer's account of a failed attempt, naming the first step that doomed it and the step
    after which the goal could no longer be reached (the point of no return), so a retry can go
    back to either: the first is where the attempt went wrong, the second keeps the most progress.
    """

    model_config = ConfigDict(title="Reflection")
    """Seen by the model as `Reflection`, as before; the class is named for the reply, apart from the
    `Reflection` kept in the graph state (`pivotal.core.state`)."""

    pivotal_step: int = Field(ge=0, description="index of the first step whose change would have avoided the failure")
    no_return_step: int = Field(
        ge=0,
        description="index of the first step after which the goal could no longer be reached "
        "(at or after pivotal_step; the last step if the goal stayed reachable throughout)",
    )
    steps_left_at_pivotal: int | None = Field(
        None, ge=0, description="estimated steps still needed to reach the goal from just before pivotal_step"
    )
    steps_left_at_no_return: int | None = Field(
        None, ge=0, description="estimated steps still needed to reach the goal from just before no_return_step"
    )
    error_type: ErrorType
    diagnosis: str = Field(max_length=500, description="what the agent did wrong at that step, and why it mattered")
    advice: str = Field(max_length=400, description="what to do instead at that step")
    lesson_candidates: list[LessonCandidate] = Field(default_factory=list, max_length=3)

    @model_validator(mode="after")
    def _no_return_not_before_mistake(self) -> "ReflectionReply":
        """Success stays reachable until the first mistake at least, so an earlier point of no
        return is a misreading: refused, the model is asked again with this text.
        """
        if self.no_return_step < self.pivotal_step:
            raise ValueError(
                f"no_return_step {self.no_return_step} is before pivotal_step {self.pivotal_step}; "
                "the point of no return is at or after the first mistake"
            )
        return self


def reflection_schema(steps: int) -> type[ReflectionReply]:
    """A ReflectionReply whose step indices must fall within the failed attempt's `steps` steps."""
    return _reflection_schema(max(steps - 1, 0))


@functools.lru_cache(maxsize=256)
def _reflection_schema(last: int) -> type[ReflectionReply]:
    within = f"the last step is {last}"
    return create_model(
        "Reflection",
        __base__=ReflectionReply,
        __doc__=ReflectionReply.__doc__,
        pivotal_step=(int, Field(ge=0, le=last, description=ReflectionReply.model_fields["pivotal_step"].description)),
        no_return_step=(
            int,
            Field(ge=0, le=last, description=f"{ReflectionReply.model_fields['no_return_step'].description}; {within}"),
        ),
    )


class LessonDrafts(BaseModel):
    """Lessons distilled from a finished run."""

    lessons: list[LessonCandidate] = Field(default_factory=list, max_length=3)


class ScreenVerdict(BaseModel):
    """The model screen's reading of one lesson: advice from experience, or an order no task gave.

    `decision` comes first so a small model commits to it before any free text, and "advice"
    first among its values: a model that answers nothing useful refuses nothing.
    """

    decision: Literal["advice", "order"]
    reason: str = Field(default="", max_length=200)


class LessonVerdict(BaseModel):
    """The approval gate's verdict on one lesson candidate."""

    decision: Literal["approve", "reject"]
    reason: str = Field(default="", max_length=300)
