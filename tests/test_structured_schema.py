"""The schema a structured call shows a trace is converted once per model and schema, not on every call.

LangChain turns `with_structured_output`'s pydantic class into JSON schema for the trace's metadata
(`ls_structured_output_format`) on every call, 0.3-0.5 ms of CPU each: ~8% of a step with `sim`
models. `ask` hands it the JSON schema made once; a trace must read exactly as before.
"""

import asyncio

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models.chat_models import _format_ls_structured_output
from langchain_core.messages import HumanMessage
from langchain_core.utils import function_calling
from langchain_openai import ChatOpenAI

from pivotal.core.models.factory import make_model
from pivotal.core.models.structured import _structured, ask
from pivotal.core.schemas import LessonDrafts, Verdict, proposal_schema

SCHEMAS = [Verdict, LessonDrafts, proposal_schema({"move": {"direction": {"enum": ["up", "down"]}}})]
MODELS = {
    "sim": lambda: make_model("sim"),
    "openai": lambda: ChatOpenAI(model="gpt-4o-mini", api_key="sk-test", base_url="http://127.0.0.1:9/v1"),
    "anthropic": lambda: ChatAnthropic(model="claude-sonnet-4-5", api_key="sk-test", base_url="http://127.0.0.1:9"),
}


def _shown(runnable):
    """The `ls_structured_output_format` of the model binding inside a structured runnable."""
    found = [runnable]
    while found:
        part = found.pop()
        kwargs = getattr(part, "kwargs", None)
        if isinstance(kwargs, dict) and "ls_structured_output_format" in kwargs:
            return kwargs["ls_structured_output_format"]
        found.extend(getattr(part, "steps", None) or [])
        found.extend((getattr(part, "steps__", None) or {}).values())
        found.extend(x for x in (getattr(part, "bound", None),) if x is not None)
    raise AssertionError("no ls_structured_output_format in the structured runnable")


@pytest.mark.parametrize("provider", MODELS)
@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_a_trace_shows_the_same_schema_as_langchain_would(provider, schema):
    model = MODELS[provider]()
    converted = _shown(_structured(model, schema))
    assert isinstance(converted["schema"], dict)
    as_langchain = {**converted, "schema": schema}  # what with_structured_output binds
    assert _format_ls_structured_output(converted) == _format_ls_structured_output(as_langchain)


def test_the_schema_is_converted_once_not_on_every_call(monkeypatch):
    conversions = []
    convert = function_calling._convert_pydantic_to_openai_function

    def counted(*args, **kwargs):
        conversions.append(args[0])
        return convert(*args, **kwargs)

    monkeypatch.setattr(function_calling, "_convert_pydantic_to_openai_function", counted)
    model = make_model("sim")

    async def review() -> None:
        answer = await ask(
            model,
            Verdict,
            [HumanMessage("Review the move.")],
            role="critic",
            fallback=Verdict(decision="approve", confidence=0.5),
            retries=0,
            metadata={},
        )
        assert not answer.fallback, answer.error

    asyncio.run(review())
    built = len(conversions)
    for _ in range(3):
        asyncio.run(review())
    assert len(conversions) == built, "LangChain converted the schema again on a later call"
