"""Pydantic models for every structured LLM reply.

Decision fields come first and free text is short: small local models fill fields in
order and ramble in free text until the token limit cuts the JSON off.
"""

import functools
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model, model_validator

Decision = Literal["approve", "revise", "reject"]
LessonKind = Literal["strategy", "guardrail", "skill"]
"""guardrail: a mistake to avoid; strategy or skill: something that worked."""
Outcome = Literal["success", "failure"]
LessonLevel = Literal["task", "step"]
"""step lessons come from reflections on one step, task lessons from whole successful runs."""
PivotChoice = Literal["first_mistake", "no_return"]
"""Which step a pivotal retry redoes: the reflection's first mistake, or its point of no return."""


class Proposal(BaseModel):
    """The actor's next action."""

    action: str = Field(description="name of one available action")
    arguments: dict[str, Any] = Field(default_factory=dict, description="arguments of the action, as a JSON object")
    thought: str = Field(default="", max_length=300, description="one short sentence: why this action")


def proposal_schema(action_names: list[str], takes_arguments: bool) -> type[Proposal]:
    """A Proposal whose `action` is an enum of the environment's actions, so constrained decoding can't invent one."""
    return _proposal_schema(tuple(action_names), takes_arguments)


@functools.lru_cache(maxsize=1024)
def _proposal_schema(action_names: tuple[str, ...], takes_arguments: bool) -> type[Proposal]:
    """Cached: building a pydantic model per actor call cost ~1 ms (bench_batch profile)."""
    fields: dict[str, Any] = {"action": (Literal[action_names], Field(description="the action to take"))}
    if not takes_arguments:
        fields["arguments"] = (
            dict[str, Any],
            Field(default_factory=dict, exclude=True, json_schema_extra={"hidden": True}),
        )
    model = create_model("Proposal", __base__=Proposal, __doc__=Proposal.__doc__, **fields)
    if not takes_arguments:
        model.model_config["json_schema_extra"] = _drop_arguments
    return model


def _drop_arguments(schema: dict[str, Any]) -> None:
    schema.get("properties", {}).pop("arguments", None)


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


class LessonCandidate(BaseModel):
    """A lesson worth keeping across tasks, written as a principle, not a transcript."""

    kind: LessonKind = Field(description="guardrail: a mistake to avoid; strategy or skill: something that worked")
    situation: str = Field(max_length=300, description="when the lesson applies")
    text: str = Field(max_length=400, description="the lesson, one or two sentences")


class Reflection(BaseModel):
    """An observer's account of a failed attempt, naming the first step that doomed it and the step
    after which the goal could no longer be reached (the point of no return), so a retry can go
    back to either: the first is where the attempt went wrong, the second keeps the most progress.
    """

    pivotal_step: int = Field(ge=0, description="index of the first step whose change would have avoided the failure")
    no_return_step: int = Field(
        ge=0,
        description="index of the first step after which the goal could no longer be reached "
        "(at or after pivotal_step; the last step if the goal stayed reachable throughout)",
    )
    error_type: ErrorType
    diagnosis: str = Field(max_length=500, description="what the agent did wrong at that step, and why it mattered")
    advice: str = Field(max_length=400, description="what to do instead at that step")
    lesson_candidates: list[LessonCandidate] = Field(default_factory=list, max_length=3)

    @model_validator(mode="after")
    def _no_return_not_before_mistake(self) -> "Reflection":
        """Success stays reachable until the first mistake at least, so an earlier point of no
        return is a misreading: refused, the model is asked again with this text.
        """
        if self.no_return_step < self.pivotal_step:
            raise ValueError(
                f"no_return_step {self.no_return_step} is before pivotal_step {self.pivotal_step}; "
                "the point of no return is at or after the first mistake"
            )
        return self


def reflection_schema(steps: int) -> type[Reflection]:
    """A Reflection whose step indices must fall within the failed attempt's `steps` steps."""
    return _reflection_schema(max(steps - 1, 0))


@functools.lru_cache(maxsize=256)
def _reflection_schema(last: int) -> type[Reflection]:
    within = f"the last step is {last}"
    return create_model(
        "Reflection",
        __base__=Reflection,
        __doc__=Reflection.__doc__,
        pivotal_step=(int, Field(ge=0, le=last, description=Reflection.model_fields["pivotal_step"].description)),
        no_return_step=(
            int,
            Field(ge=0, le=last, description=f"{Reflection.model_fields['no_return_step'].description}; {within}"),
        ),
    )


class LessonDrafts(BaseModel):
    """Lessons distilled from a finished run."""

    lessons: list[LessonCandidate] = Field(default_factory=list, max_length=3)


class LessonVerdict(BaseModel):
    """The approval gate's verdict on one lesson candidate."""

    decision: Literal["approve", "reject"]
    reason: str = Field(default="", max_length=300)
